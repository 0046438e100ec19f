//! The router's construction-time configuration: each value stored once, each range written
//! once (beside the setting it bounds, in the crate that owns it), one out-of-range error.

use core::fmt;

use kvroute_core::{Bounds, HashNamespace, Nanos, OutOfRange};
use kvroute_index::index::{
    BLOCK_SIZE, EXPECTED_BLOCKS, IndexConfig, MAX_BLOCKS_PER_WORKER, WORKER_SLOTS,
};
use kvroute_load::{BUFFERS, LoadConfig, MAX_AGE, ReservationTable};
use kvroute_score::ScoreConfig;

use crate::breaker::BreakerConfig;

/// Valid [`RouterConfig::max_rescores`]: `0..=64`.
pub const MAX_RESCORES: Bounds = Bounds::ints(0, 64, "");
/// Valid [`AdmissionConfig::max_outstanding_requests`]: `1..=1_000_000` requests.
pub const MAX_OUTSTANDING_REQUESTS: Bounds = Bounds::ints(1, 1_000_000, "requests");

/// Valid [`RouterConfig::max_model_len`]: 1 to 2^30 tokens.
pub const MAX_MODEL_LEN: Bounds = Bounds::ints(1, 1 << 30, "tokens");

/// Valid [`PredictedConfig::ttl`]: 1 ms to 600 s (nanoseconds).
pub const PREDICTED_TTL: Bounds = Bounds::ints(1_000_000, 600_000_000_000, "ns");
/// Valid [`PredictedConfig::entries`]: 8 (one bucket) to 2^22 entries.
pub const PREDICTED_ENTRIES: Bounds = Bounds::ints(8, 1 << 22, "entries");
/// Valid [`PredictedConfig::min_tokens`]: 1 to 1,048,576 tokens.
pub const PREDICTED_MIN_TOKENS: Bounds = Bounds::ints(1, 1 << 20, "tokens");

/// Predicted residency: each decision credits its worker, for the next decisions, with the
/// routed prompt's blocks until the worker's own KV events show them, its TTL passes or its
/// slot changes tenant (the design: `kvroute`'s `predicted` module docs). A burst of
/// requests sharing a prompt then sees the worker already computing the prefix, and the
/// cost decides between joining it and recomputing elsewhere; without it every sibling
/// routed before the first one's events arrive sees no holder. Credits never enter the
/// index: [`Decision::overlap_blocks`](crate::Decision::overlap_blocks) stays exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct PredictedConfig {
    /// How long a credit lasts after the first decision that made it (caller's clock,
    /// nanoseconds; siblings routed on the credit do not extend it),
    /// [`PREDICTED_TTL`](crate::bounds::PREDICTED_TTL). Default 10 s: a routed request
    /// may wait seconds in an overloaded engine's queue before its prefill stores
    /// anything, and a credit the index already covers is retired at the next lookup.
    pub ttl: Nanos,
    /// Table entries (rounded up to a power of two; each routed prompt takes about
    /// `log2(blocks / min_blocks) + 1`, and a full bucket evicts its earliest expiry),
    /// [`PREDICTED_ENTRIES`](crate::bounds::PREDICTED_ENTRIES). Default 16,384 (640 KiB).
    pub entries: usize,
    /// Shortest prefix credited (tokens, rounded up to whole blocks): shorter ones cost
    /// little to recompute, [`PREDICTED_MIN_TOKENS`](crate::bounds::PREDICTED_MIN_TOKENS).
    /// Default 256.
    pub min_tokens: u32,
}

impl PredictedConfig {
    /// Default TTL.
    pub const DEFAULT_TTL: Nanos = Nanos::from_secs(10);
    /// Default table entries.
    pub const DEFAULT_ENTRIES: usize = 16_384;
    /// Default shortest credited prefix (tokens).
    pub const DEFAULT_MIN_TOKENS: u32 = 256;

    fn validate(&self) -> Result<(), OutOfRange> {
        PREDICTED_TTL.check_int("predicted.ttl", self.ttl.0)?;
        PREDICTED_ENTRIES.check_usize("predicted.entries", self.entries)?;
        PREDICTED_MIN_TOKENS.check_int("predicted.min_tokens", u64::from(self.min_tokens))?;
        Ok(())
    }
}

impl Default for PredictedConfig {
    fn default() -> Self {
        Self {
            ttl: Self::DEFAULT_TTL,
            entries: Self::DEFAULT_ENTRIES,
            min_tokens: Self::DEFAULT_MIN_TOKENS,
        }
    }
}

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
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct AdmissionConfig {
    /// Per-worker bound on outstanding requests (requests), [`MAX_OUTSTANDING_REQUESTS`](crate::bounds::MAX_OUTSTANDING_REQUESTS).
    pub max_outstanding_requests: u32,
}

impl AdmissionConfig {
    /// Admission with at most `max_outstanding_requests` per worker (validated by
    /// [`Router::new`](crate::Router::new)).
    pub const fn new(max_outstanding_requests: u32) -> Self {
        Self {
            max_outstanding_requests,
        }
    }
}

/// Everything [`Router::new`](crate::Router::new) needs; every value in one place.
///
/// Build it with [`RouterConfig::new`] (or [`Default`]) and change fields, or read it from
/// text with the `serde` feature (every field is optional there, defaulting as below;
/// durations are integer nanoseconds, the scorer's policy a string such as
/// `"projected_time:shadow"`).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct RouterConfig {
    /// Worker slots: DP ranks the router can hold at once, [`WORKER_SLOTS`](crate::bounds::WORKER_SLOTS). Default 1,024.
    pub worker_slots: usize,
    /// Tokens per KV block, as the engines page their cache, [`BLOCK_SIZE`](crate::bounds::BLOCK_SIZE). Default 16.
    pub block_size: usize,
    /// Namespace (LoRA / cache salt seed) of requests that do not name their own. Default:
    /// the base model. Not read from text (name LoRA adapters per request).
    #[cfg_attr(feature = "serde", serde(skip))]
    pub namespace: HashNamespace,
    /// Distinct blocks the prefix index is first sized for (it grows and shrinks with the
    /// blocks held), [`EXPECTED_BLOCKS`](crate::bounds::EXPECTED_BLOCKS). Default 16,384.
    pub expected_blocks: usize,
    /// Cap on the blocks one worker may have indexed (a store past it evicts that worker's
    /// least recently stored blocks), [`MAX_BLOCKS_PER_WORKER`](crate::bounds::MAX_BLOCKS_PER_WORKER). Default 2^20.
    pub max_blocks_per_worker: usize,
    /// A worker whose last good load report is older than this is stale at the next
    /// [`publish`](crate::Router::publish) (caller's clock), [`MAX_AGE`](crate::bounds::MAX_AGE). Default 2 s.
    pub max_load_age: Nanos,
    /// Load snapshot buffers (one current, the rest let publication proceed while readers
    /// hold older snapshots), [`BUFFERS`](crate::bounds::BUFFERS). Default 4.
    pub snapshot_buffers: usize,
    /// How far ahead of the router's clock (the latest `publish` time) a load report or a
    /// publication may be, [`MAX_CLOCK_LEAD`](crate::bounds::MAX_CLOCK_LEAD): one further
    /// ahead is refused and counted, never taken as the new time (caller's clock). The
    /// first `publish` sets the clock. Default 60 s.
    pub max_clock_lead: Nanos,
    /// The scorer's knobs at start; change them later with
    /// [`Router::update_score_config`](crate::Router::update_score_config).
    pub score: ScoreConfig,
    /// Reservation TTL: the sweeper drops a reservation no earlier than this after it was
    /// made (caller's clock), [`RESERVATION_TTL`](crate::bounds::RESERVATION_TTL). Default 60 s.
    pub reservation_ttl: Nanos,
    /// Re-scores allowed when a concurrent decision reserved the chosen slot between this
    /// decision's read and its reservation, or when the chosen worker was removed
    /// meanwhile, [`MAX_RESCORES`](crate::bounds::MAX_RESCORES). Default 8.
    pub max_rescores: u32,
    /// Admission control; `None` (default) admits every request that has a worker.
    pub admission: Option<AdmissionConfig>,
    /// The per-worker breaker fed by request outcomes
    /// ([`Router::finish`](crate::Router::finish)); `None` disables it (outcomes are still
    /// counted). Default: [`BreakerConfig::default`].
    pub breaker: Option<BreakerConfig>,
    /// Seed of the near-tie randomisation draws (used only when
    /// `score.near_tie_band > 0`); give each router replica its own. Default 0.
    pub near_tie_seed: u64,
    /// Predicted residency of routed, not yet stored prompts; `None` (the default)
    /// disables it. Off by default: on the simulator's matrix it changed nothing for
    /// `projected_time` and made the hit-rate-driven policies pile a burst onto its first
    /// workers (`docs/RESULTS.md`, "Predicted residency").
    pub predicted: Option<PredictedConfig>,
    /// The engines' context length (tokens, prompt and output together: vLLM's
    /// `max_model_len`, SGLang's `context_length`),
    /// [`MAX_MODEL_LEN`](crate::bounds::MAX_MODEL_LEN). When set, a request's expected
    /// output is taken as at most `max_model_len − prompt_tokens` (0 when the prompt alone
    /// reaches it), in its cost and in the decode tokens it reserves, and each route call
    /// so cut is counted ([`RouterStats::outputs_capped`](crate::RouterStats::outputs_capped)):
    /// an engine stops generating there, so a caller's "no limit" (`u32::MAX`) reserves
    /// what the engine can generate instead of saturating the worker's decode figures
    /// until the request ends or the reservation is swept. `None` (default): outputs are
    /// taken as given.
    pub max_model_len: Option<u32>,
}

impl RouterConfig {
    /// Default re-score bound.
    pub const DEFAULT_MAX_RESCORES: u32 = 8;

    /// `worker_slots` slots and blocks of `block_size` tokens, every other setting at its
    /// default. Not validated until [`Router::new`](crate::Router::new).
    pub fn new(worker_slots: usize, block_size: usize) -> Self {
        let index = IndexConfig::default();
        Self {
            worker_slots,
            block_size,
            namespace: HashNamespace::DEFAULT,
            expected_blocks: index.expected_blocks,
            max_blocks_per_worker: index.max_blocks_per_worker,
            max_load_age: LoadConfig::DEFAULT_MAX_AGE,
            snapshot_buffers: LoadConfig::DEFAULT_BUFFERS,
            max_clock_lead: LoadConfig::DEFAULT_MAX_CLOCK_LEAD,
            score: ScoreConfig::default(),
            reservation_ttl: ReservationTable::DEFAULT_TTL,
            max_rescores: Self::DEFAULT_MAX_RESCORES,
            admission: None,
            breaker: Some(BreakerConfig::default()),
            near_tie_seed: 0,
            predicted: None,
            max_model_len: None,
        }
    }

    /// The prefix index's configuration these settings describe.
    pub fn index_config(&self) -> IndexConfig {
        let mut c = IndexConfig::new(self.worker_slots, self.block_size);
        c.expected_blocks = self.expected_blocks;
        c.max_blocks_per_worker = self.max_blocks_per_worker;
        c
    }

    /// The load publisher's configuration these settings describe.
    pub fn load_config(&self) -> LoadConfig {
        let mut c = LoadConfig::new(self.worker_slots);
        c.max_age = self.max_load_age;
        c.buffers = self.snapshot_buffers;
        c.max_clock_lead = self.max_clock_lead;
        c
    }

    /// Checks every setting against its bounds.
    ///
    /// # Errors
    /// [`RouterConfigError::OutOfRange`] naming the first router setting out of range, or
    /// [`RouterConfigError::Score`] naming the first scorer knob out of range.
    pub fn validate(&self) -> Result<(), RouterConfigError> {
        let range = RouterConfigError::OutOfRange;
        WORKER_SLOTS
            .check_usize("worker_slots", self.worker_slots)
            .map_err(range)?;
        BLOCK_SIZE
            .check_usize("block_size", self.block_size)
            .map_err(range)?;
        EXPECTED_BLOCKS
            .check_usize("expected_blocks", self.expected_blocks)
            .map_err(range)?;
        MAX_BLOCKS_PER_WORKER
            .check_usize("max_blocks_per_worker", self.max_blocks_per_worker)
            .map_err(range)?;
        MAX_AGE
            .check_int("max_load_age", self.max_load_age.0)
            .map_err(range)?;
        BUFFERS
            .check_usize("snapshot_buffers", self.snapshot_buffers)
            .map_err(range)?;
        kvroute_load::MAX_CLOCK_LEAD
            .check_int("max_clock_lead", self.max_clock_lead.0)
            .map_err(range)?;
        kvroute_load::reserve::TTL
            .check_int("reservation_ttl", self.reservation_ttl.0)
            .map_err(range)?;
        MAX_RESCORES
            .check_int("max_rescores", u64::from(self.max_rescores))
            .map_err(range)?;
        if let Some(a) = self.admission {
            MAX_OUTSTANDING_REQUESTS
                .check_int(
                    "admission.max_outstanding_requests",
                    u64::from(a.max_outstanding_requests),
                )
                .map_err(range)?;
        }
        if let Some(b) = self.breaker {
            b.validate().map_err(range)?;
        }
        if let Some(p) = self.predicted {
            p.validate().map_err(range)?;
        }
        if let Some(l) = self.max_model_len {
            MAX_MODEL_LEN
                .check_int("max_model_len", u64::from(l))
                .map_err(range)?;
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

/// A rejected [`RouterConfig`]. Out-of-range values are rejected, never clamped; nothing
/// is built.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum RouterConfigError {
    /// A router setting outside its bounds (the field as [`RouterConfig`] names it).
    OutOfRange(OutOfRange),
    /// A scorer knob outside its bounds (the knob as [`ScoreConfig`] names it).
    Score(OutOfRange),
}

impl fmt::Display for RouterConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfRange(e) => e.fmt(f),
            Self::Score(e) => write!(f, "score.{e}"),
        }
    }
}

impl std::error::Error for RouterConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::OutOfRange(e) | Self::Score(e) => Some(e),
        }
    }
}
