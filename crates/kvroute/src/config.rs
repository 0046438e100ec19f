//! The router's construction-time configuration, its defaults and its validation.

use core::fmt;

use kvroute_index::HashNamespace;
use kvroute_index::index::{IndexConfig, IndexConfigError};
use kvroute_load::{LoadConfig, Nanos, ReservationTable};
use kvroute_score::ScoreConfig;

/// Admission control coupled to the decision: an idle peer can still get a request that a
/// gate in front of the decision would have rejected.
///
/// A worker *can take* a request while its outstanding requests, as the decision scored
/// them (reported running + waiting + live reservations), are below
/// `max_outstanding_requests`. With admission enabled, `route` keeps the scorer's pick when
/// it can take the request, otherwise moves the request to the best worker that can (deepest
/// overlap, then fewest outstanding, then the rotating cursor), and rejects only when no
/// occupied worker, cached or not, can take it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Per-worker bound on outstanding requests (requests), `1..=1_000_000`.
    pub max_outstanding_requests: u32,
}

/// Everything [`Router::new`](crate::Router::new) needs.
///
/// `worker_slots` and `block_size` are the router's; `index.worker_slots`,
/// `index.block_size` and `load.capacity` must equal them ([`RouterConfig::new`] builds a
/// consistent value), or construction fails naming the field.
#[derive(Clone, Debug, PartialEq)]
pub struct RouterConfig {
    /// Worker slots (DP ranks the router can hold at once), `1..=4096`. Default 1,024.
    pub worker_slots: usize,
    /// Tokens per KV block, as the engines page their cache (tokens), `1..=1_048_576`.
    /// Default 16.
    pub block_size: usize,
    /// Namespace (LoRA / cache salt seed) of requests that do not name their own. Default:
    /// the base model.
    pub namespace: HashNamespace,
    /// The prefix index's settings.
    pub index: IndexConfig,
    /// The load publisher's settings (staleness age, snapshot buffers).
    pub load: LoadConfig,
    /// The scorer's knobs at start; change them later with
    /// [`Router::set_score_config`](crate::Router::set_score_config).
    pub score: ScoreConfig,
    /// Reservation TTL: the sweeper drops a reservation no earlier than this after it was
    /// made (caller's clock, > 0). Default 60 s.
    pub reservation_ttl: Nanos,
    /// Re-scores allowed when a concurrent decision reserved the chosen slot between this
    /// decision's read and its reservation, or when the chosen worker was removed
    /// meanwhile, `0..=64`. Default 8.
    pub max_rescores: u32,
    /// Admission control; `None` (default) admits every request that has a worker.
    pub admission: Option<AdmissionConfig>,
    /// Seed of the near-tie randomisation draws (used only when
    /// `score.near_tie_band > 0`); give each router replica its own. Default 0.
    pub near_tie_seed: u64,
}

impl RouterConfig {
    /// Default re-score bound.
    pub const DEFAULT_MAX_RESCORES: u32 = 8;

    /// A consistent configuration for `worker_slots` slots and blocks of `block_size`
    /// tokens, every other setting at its default. Not validated until
    /// [`Router::new`](crate::Router::new).
    pub fn new(worker_slots: usize, block_size: usize) -> Self {
        Self {
            worker_slots,
            block_size,
            namespace: HashNamespace::DEFAULT,
            index: IndexConfig {
                worker_slots,
                block_size,
                ..IndexConfig::default()
            },
            load: LoadConfig::new(worker_slots),
            score: ScoreConfig::default(),
            reservation_ttl: ReservationTable::DEFAULT_TTL,
            max_rescores: Self::DEFAULT_MAX_RESCORES,
            admission: None,
            near_tie_seed: 0,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), RouterConfigError> {
        let field = |field, range, value: u64| RouterConfigError::Field {
            field,
            range,
            value,
        };
        if !(1..=kvroute_index::index::MAX_WORKER_SLOTS).contains(&self.worker_slots) {
            return Err(field("worker_slots", "1..=4096", self.worker_slots as u64));
        }
        if !(1..=1 << 20).contains(&self.block_size) {
            return Err(field(
                "block_size",
                "1..=1048576 tokens",
                self.block_size as u64,
            ));
        }
        if self.index.worker_slots != self.worker_slots {
            return Err(RouterConfigError::Mismatch("index.worker_slots"));
        }
        if self.index.block_size != self.block_size {
            return Err(RouterConfigError::Mismatch("index.block_size"));
        }
        if self.load.capacity != self.worker_slots {
            return Err(RouterConfigError::Mismatch("load.capacity"));
        }
        if self.reservation_ttl == Nanos::ZERO {
            return Err(field("reservation_ttl", "> 0 ns", 0));
        }
        if self.max_rescores > 64 {
            return Err(field(
                "max_rescores",
                "0..=64",
                u64::from(self.max_rescores),
            ));
        }
        if let Some(a) = self.admission {
            if !(1..=1_000_000).contains(&a.max_outstanding_requests) {
                return Err(field(
                    "admission.max_outstanding_requests",
                    "1..=1000000 requests",
                    u64::from(a.max_outstanding_requests),
                ));
            }
        }
        self.score.validate().map_err(RouterConfigError::Score)
    }
}

impl Default for RouterConfig {
    /// 1,024 slots of 16-token blocks.
    fn default() -> Self {
        Self::new(1024, 16)
    }
}

/// A rejected [`RouterConfig`]. Out-of-range values are rejected, never clamped.
#[derive(Clone, Debug, PartialEq)]
pub enum RouterConfigError {
    /// A router field outside its range.
    Field {
        /// The field.
        field: &'static str,
        /// Its valid range, in words.
        range: &'static str,
        /// The value given.
        value: u64,
    },
    /// A sub-configuration disagrees with the router's `worker_slots` or `block_size`;
    /// names the field.
    Mismatch(&'static str),
    /// The index rejected its configuration.
    Index(IndexConfigError),
    /// The load publisher rejected its configuration.
    Load(kvroute_load::ConfigError),
    /// A scorer knob is out of range.
    Score(kvroute_score::ConfigError),
}

impl fmt::Display for RouterConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Field {
                field,
                range,
                value,
            } => write!(f, "{field} = {value} is out of range {range}"),
            Self::Mismatch(field) => {
                write!(f, "{field} differs from the router's own setting")
            }
            Self::Index(e) => write!(f, "index: {e}"),
            Self::Load(e) => write!(f, "load: {e}"),
            Self::Score(e) => write!(f, "score: {e}"),
        }
    }
}

impl std::error::Error for RouterConfigError {}
