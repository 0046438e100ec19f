//! The discrete-event loop: one policy over one workload.
//!
//! [`run`] builds a real [`kvroute::Router`] (one worker per engine, DP rank 0, the block
//! size of the engines), simulated engines ([`crate::engine`]) and the channels between
//! them ([`crate::net`]), then processes events in virtual time (nanoseconds; ties broken
//! deterministically, so a seed gives one result):
//!
//! * **Arrival.** A request reaches the gateway at its `arrival_s`, or `think_s` after its
//!   parent's last token ([`FollowUp`](crate::request::FollowUp)). Pinned requests go
//!   straight to their engine. Others are routed with [`kvroute::Router::route`], given the
//!   prompt's chained block hashes (computed once per run, or once for many runs with
//!   [`PromptHashes`]) and the output length as the
//!   expected output; the request joins the chosen engine's queue at once. A
//!   [`kvroute::RouteError`] (admission rejection, or no eligible worker) is counted in
//!   [`RunResult::rejections`] and the request tries again `retry_backoff_s` later, up to
//!   `max_retries` times, then is given up ([`RunResult::rejected_for_good`]).
//! * **Reservations.** The request keeps its [`kvroute::Decision`] while it is on the
//!   engine: [`kvroute::Reservation::first_token`] is called when the engine produces its
//!   first token (prefill done), and the decision is dropped (reservation released) when
//!   it finishes, is refused, or is lost to a restart. A completed run ends with no
//!   reservation held ([`RunResult::reservations_at_end`]).
//! * **Engine steps.** An engine with work runs back-to-back steps; each step's KV events
//!   are published at its end as one msgpack batch through the event channel, decoded by
//!   `kvroute-wire` and applied with [`kvroute::Router::ingest`] on arrival.
//! * **Telemetry.** Every `telemetry_interval_s` (on its own seeded phase by default) each
//!   engine's load is observed and delivered ([`crate::net`]); the router publishes a snapshot on each delivery. At time 0
//!   every engine reports idle and the router publishes, so the fleet starts routable.
//! * **Periodic work.** [`kvroute::Router::sweep`] every `sweep_interval_s`; engine samples
//!   every `sample_interval_s`; probes at the requested times.
//! * **Faults** ([`crate::fault`]) and **replays** ([`crate::net`]).
//!
//! The run ends when every request has completed, been given up, been refused or can no
//! longer arrive, or at the horizon.

mod queue;
mod sim;

use std::sync::Arc;

use kvroute::{AdmissionConfig, BreakerConfig, Policy, PredictedConfig, ScoreConfig};

use crate::engine::Catalog;

use crate::result::RunResult;
use crate::workload::Workload;

/// How to run one policy over one workload.
#[derive(Clone)]
pub struct RunOptions<'a> {
    /// Seed of every random draw of the run: the channels' loss and delay jitter
    /// ([`crate::net`]), the order in which the engines register with the router (which
    /// decides the router's exact tie-breaks, that rotate over the tied slots in slot
    /// order) and the router's near-tie draws (`RouterConfig::near_tie_seed`, used when
    /// the scorer's `near_tie_band` is positive). The same seed gives the same result.
    pub seed: u64,
    /// Interval of [`EngineSample`](crate::EngineSample)s (seconds); 0 records none.
    pub sample_interval_s: f64,
    /// Admission control of the router; `None` admits every request.
    pub admission: Option<AdmissionConfig>,
    /// The router's per-worker breaker, fed by the outcomes the driver reports (completed,
    /// or failed by a [`FaultKind::FailFast`](crate::fault::FaultKind::FailFast) engine); `None` disables it.
    pub breaker: Option<BreakerConfig>,
    /// Delay before a rejected request tries again (seconds), >= 0.
    pub retry_backoff_s: f64,
    /// Retries after rejections before a request is given up.
    pub max_retries: u32,
    /// Stop at this virtual time (seconds) even if requests are unfinished.
    pub horizon_s: Option<f64>,
    /// Interval of the reservation sweeper (seconds), > 0.
    pub sweep_interval_s: f64,
    /// Scorer knobs (the policy field is replaced by the run's policy); `None`: defaults.
    pub score: Option<ScoreConfig>,
    /// The router's predicted residency of routed, not yet stored prompts
    /// (`RouterConfig::predicted`); `None` (the router's default) disables it.
    pub predicted: Option<PredictedConfig>,
    /// Which load figures every engine reports for the whole run, in place of the
    /// workload's channels' [`TelemetryMode`](crate::net::TelemetryMode) and of its
    /// [`FaultKind::PartialTelemetry`](crate::fault::FaultKind::PartialTelemetry) faults
    /// (so `Full` turns a partial-telemetry scenario into full telemetry); `None`: the
    /// workload's.
    pub telemetry: Option<crate::net::TelemetryMode>,
    /// Times (seconds) at which to record [`Probe`](crate::result::Probe)s of every
    /// engine's cache against the router's index.
    pub probes: Vec<f64>,
    /// Called with the fraction of requests done (0..=1) as the run progresses (at most
    /// about 100 times, and once with 1.0 at the end).
    pub progress: Option<&'a (dyn Fn(f64) + Sync)>,
    /// The chained block hashes of the workload's prompts, computed once for several runs
    /// ([`PromptHashes::of`]); `None`: the run computes its own. A run whose requests are
    /// not the ones they were computed for fails with [`RunError::PromptHashes`].
    pub prompt_hashes: Option<&'a PromptHashes>,
}

/// The chained block hashes of every prompt of a workload (blocks of the fleet's block
/// size), with each request's id, prompt and output length: what every run of the
/// workload computes first, the same way whatever the policy, the seed or the arrival
/// times. Computing them once and passing them in [`RunOptions::prompt_hashes`] spares each
/// further run the hashing (on the conversation trace, 9 million blocks; about a tenth of
/// a run). Cheap to share between threads (`Sync`; cloning shares them).
#[derive(Clone, Debug)]
pub struct PromptHashes {
    cat: Arc<Catalog>,
}

impl PromptHashes {
    /// Hashes every prompt of `workload`, in blocks of its engines' block size.
    pub fn of(workload: &Workload) -> Self {
        let block_size = workload.fleet.engine.block_size;
        Self {
            cat: Arc::new(Catalog::new(&workload.requests, block_size)),
        }
    }

    /// Whether these are the hashes of `workload`'s requests: the same block size, and the
    /// same ids, prompts and output lengths in the same order (arrivals, follow-ups,
    /// pinning and the fleet's other settings may differ). Linear in the requests and
    /// their prompts' lengths (trace blocks or token ids), with no hashing.
    pub fn fit(&self, workload: &Workload) -> bool {
        self.cat
            .fits(&workload.requests, workload.fleet.engine.block_size)
    }
}

impl Default for RunOptions<'_> {
    /// Seed 0, samples every second, no admission control, the default breaker, 1 s backoff, 3 retries, no
    /// horizon, sweeps every 5 s, default scorer knobs, no predicted residency, no probes,
    /// no progress callback.
    fn default() -> Self {
        Self {
            seed: 0,
            sample_interval_s: 1.0,
            admission: None,
            breaker: Some(BreakerConfig::default()),
            retry_backoff_s: 1.0,
            max_retries: 3,
            horizon_s: None,
            sweep_interval_s: 5.0,
            score: None,
            predicted: None,
            telemetry: None,
            probes: Vec::new(),
            progress: None,
            prompt_hashes: None,
        }
    }
}

impl core::fmt::Debug for RunOptions<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RunOptions")
            .field("seed", &self.seed)
            .field("sample_interval_s", &self.sample_interval_s)
            .field("admission", &self.admission)
            .field("breaker", &self.breaker)
            .field("retry_backoff_s", &self.retry_backoff_s)
            .field("max_retries", &self.max_retries)
            .field("horizon_s", &self.horizon_s)
            .field("sweep_interval_s", &self.sweep_interval_s)
            .field("score", &self.score)
            .field("probes", &self.probes)
            .field("progress", &self.progress.is_some())
            .field("prompt_hashes", &self.prompt_hashes.is_some())
            .finish()
    }
}

/// Why a run could not start.
#[derive(Clone, Debug, PartialEq)]
pub enum RunError {
    /// The fleet has no engine.
    NoEngines,
    /// An engine configuration field is out of range.
    Engine(crate::engine::ConfigError),
    /// A channel setting is out of range (field, valid range).
    Channel(&'static str, &'static str),
    /// An option is out of range (field, valid range).
    Option(&'static str, &'static str),
    /// Fault number `index` is invalid (what is wrong).
    Fault {
        /// Position in the workload's faults.
        index: usize,
        /// What is wrong.
        why: &'static str,
    },
    /// Request number `index` is invalid (what is wrong).
    Request {
        /// Position in the workload's requests.
        index: usize,
        /// What is wrong.
        why: &'static str,
    },
    /// The router rejected its configuration or a worker (a bug).
    Router(String),
    /// [`RunOptions::prompt_hashes`] were computed for other requests or another block
    /// size ([`PromptHashes::fit`]).
    PromptHashes,
}

impl core::fmt::Display for RunError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NoEngines => f.write_str("the fleet has no engine"),
            Self::Engine(e) => write!(f, "{e}"),
            Self::Channel(field, range) => write!(f, "channel: {field} must be {range}"),
            Self::Option(field, range) => write!(f, "run options: {field} must be {range}"),
            Self::Fault { index, why } => write!(f, "fault {index}: {why}"),
            Self::Request { index, why } => write!(f, "request {index}: {why}"),
            Self::Router(e) => write!(f, "router: {e}"),
            Self::PromptHashes => f.write_str(
                "run options: the prompt hashes were computed for other requests or another \
                 block size",
            ),
        }
    }
}

impl std::error::Error for RunError {}

/// Runs `policy` over `workload`; never panics. An invalid workload or option gives a
/// result whose [`RunResult::error`] says why (see [`try_run`] for the typed error).
pub fn run(workload: &Workload, policy: Policy, opts: &RunOptions<'_>) -> RunResult {
    try_run(workload, policy, opts).unwrap_or_else(|e| RunResult {
        workload: workload.name.clone(),
        policy: policy.to_string(),
        engines: workload.fleet.engines,
        error: Some(e.to_string()),
        ..RunResult::default()
    })
}

/// Runs `policy` over `workload`.
///
/// # Errors
/// [`RunError`] naming the first invalid part of the workload or options; nothing runs.
pub fn try_run(
    workload: &Workload,
    policy: Policy,
    opts: &RunOptions<'_>,
) -> Result<RunResult, RunError> {
    let started = std::time::Instant::now();
    let mut sim = sim::Sim::new(workload, policy, opts)?;
    sim.run();
    let mut result = sim.finish();
    result.policy = policy.to_string();
    result.wall_s = started.elapsed().as_secs_f64();
    Ok(result)
}
