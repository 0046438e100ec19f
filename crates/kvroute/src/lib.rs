//! kvroute's [`Router`]: the facade an LLM gateway embeds to choose, for every request,
//! which inference engine (worker) serves it.
//!
//! ```text
//! KV events ──► Router::store / remove_blocks / clear_blocks ──► prefix index
//! telemetry ──► Router::update_load … ──► Router::publish(now) ──► load snapshot
//! request  ──► Router::route: hash → match → snapshot → score → reserve ──► Decision
//! request done / failed / cancelled ──► Router::finish(decision, outcome) ──► breaker
//! ```
//!
//! * Workers are DP ranks ([`WorkerId`]); [`Router::add_worker`] / [`Router::remove_worker`]
//!   manage them (a re-added worker inherits no residency and no reservation guard; the
//!   same worker id added back within a reservation TTL keeps the work its engine still
//!   has, until its own telemetry replaces it).
//! * A decision ends with [`Router::finish`] and its [`Outcome`]: failures feed a
//!   per-worker breaker that takes a worker whose requests fail out of the candidates
//!   ([`BreakerConfig`]); dropping a decision releases its work but records no outcome.
//! * [`Router::route`] returns a [`Decision`]: the worker, its overlap, the cost, the
//!   [`Reason`], the shadow counterfactual and the [`Reservation`] guard. Concurrent identical
//!   requests spread through the reservations ([`Router::route`], "Concurrent identical
//!   requests"), admission is coupled to the
//!   decision ([`AdmissionConfig`]), and every outcome is counted ([`Router::stats`]).
//! * Time is the caller's ([`Nanos`]); kvroute reads no clock, does no I/O and needs no
//!   async runtime.
//!
//! With the cargo feature `metrics`, `Router::export_metrics` records every counter into
//! the process's `metrics` recorder (names in the module docs of `kvroute::metrics`, a
//! module built with that feature: `cargo doc --features metrics`);
//! without it, export [`RouterStats`] and [`IngestStats`] yourself.
//!
//! # Embedding in an afternoon
//! ```
//! use kvroute::{
//!     BlockStore, EngineHash, HashNamespace, LoadSample, Nanos, Outcome, RouteRequest,
//!     Router, RouterConfig, WorkerId,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // 8 worker slots, engines paging their KV cache in blocks of 4 tokens.
//! let router = Router::new(RouterConfig::new(8, 4))?;
//! let (a, b) = (WorkerId::new(1, 0), WorkerId::new(2, 0));
//! router.add_worker(a)?;
//! router.add_worker(b)?;
//!
//! // Engine `a` reports it stored an 8-token prompt (2 blocks; its own block hashes are
//! // opaque to kvroute, which re-hashes the token ids).
//! let prompt: Vec<u32> = (100..108).collect();
//! router.store(
//!     a,
//!     &BlockStore {
//!         parent: None,
//!         block_hashes: &[EngineHash(0xa1), EngineHash(0xa2)],
//!         token_ids: &prompt,
//!         block_size: 4,
//!         namespace: HashNamespace::DEFAULT,
//!     },
//! )?;
//!
//! // The telemetry thread: both engines idle (cap 32 running), published at t = 1 s.
//! let now = Nanos::from_secs(1);
//! for w in [a, b] {
//!     router.update_load(w, LoadSample::idle(32), now)?;
//! }
//! router.publish(now)?;
//!
//! // A request continuing that prompt goes to its cache owner: projected prefill of the
//! // 2 uncached tokens on `a` (2/8,000 s) beats all 10 tokens on `b` (10/8,000 s); the
//! // 64 output tokens cost both the same (64/1,000 s at the default decode throughput).
//! let mut tokens = prompt.clone();
//! tokens.extend([7, 8]);
//! let decision = router.route(&RouteRequest::tokens(&tokens, 64, now))?;
//! assert_eq!(decision.worker, a);
//! assert_eq!(decision.overlap_blocks, 2);
//! assert_eq!(router.reserved(a).map(|r| r.requests), Some(1));
//!
//! // The request completes: finishing the decision releases its work and tells the
//! // worker's breaker it served it.
//! router.finish(decision, Outcome::Completed);
//! assert_eq!(router.reserved(a).map(|r| r.requests), Some(0));
//! assert_eq!(router.stats().total_decisions(), 1);
//! assert_eq!(router.stats().breaker.completed, 1);
//! # Ok(())
//! # }
//! ```
//!
//! # Connecting real engines
//! The example above feeds typed events. A real engine DP rank publishes its KV events on a
//! ZMQ PUB socket as `[topic, 8-byte big-endian sequence number, msgpack batch]`: pass the
//! frames to [`decode_message`] and the [`KvMessage`] to [`Router::ingest`]; decode load
//! telemetry with [`parse_vllm_metrics`], [`parse_sglang_loads`] and [`decode_load_stat`] (vLLM Prometheus text, SGLang JSON and
//! `LoadStat` frames). The formats are described in `docs/WIRE-FORMAT.md`; the example
//! `examples/engine_events.rs` runs the whole path for two emulated vLLM engines.
//!
//! * **A lost batch switches off cache affinity for that worker**: after a gap in its
//!   sequence numbers, `route` counts the worker's cached blocks as zero until the batches
//!   listed by [`Router::replay_requests`] are replayed into [`Router::ingest`] (with
//!   [`Channel::Replay`], end marker included) or [`Router::skip_replay`] is called, which
//!   clears the worker's residency and trusts it again.
//! * **Call [`Router::publish`] on a timer**, even when no telemetry arrived: staleness is
//!   evaluated when a snapshot is published.

mod admission;
mod breaker;
mod carry;
mod config;
mod decision;
mod error;
mod extra_keys;
pub mod ingest;
#[cfg(test)]
mod loom_models;
#[cfg(feature = "metrics")]
pub mod metrics;
mod predicted;
mod request;
mod rescore;
mod route;
mod router;
mod scratch;
mod stats;
mod tally;
mod tick;

pub use breaker::{BreakerConfig, BreakerStats, Outcome};
pub use carry::{CarryStats, MAX_CARRIED};
pub use config::{AdmissionConfig, PredictedConfig, RouterConfig, RouterConfigError};

/// The valid range of every bounded setting, as the validation checks it (and as
/// [`OutOfRange`] reports it).
pub mod bounds {
    pub use crate::breaker::{BREAKER_COOLDOWN, BREAKER_COUNT, BREAKER_FRACTION, BREAKER_RATE};
    pub use crate::config::{
        MAX_MODEL_LEN, MAX_OUTSTANDING_REQUESTS, MAX_RESCORES, PREDICTED_ENTRIES,
        PREDICTED_MIN_TOKENS, PREDICTED_TTL,
    };
    pub use kvroute_index::index::{
        BLOCK_SIZE, EXPECTED_BLOCKS, MAX_BLOCKS_PER_WORKER, WORKER_SLOTS,
    };
    pub use kvroute_load::reserve::TTL as RESERVATION_TTL;
    pub use kvroute_load::{
        BUFFERS, DP_SIZE, ENGINE_TPS, MAX_AGE, MAX_CLOCK_LEAD, MAX_RUNNING_PER_RANK,
    };
    /// The scorer's knobs ([`ScoreConfig`](crate::ScoreConfig)).
    pub use kvroute_score::bounds as score;
}
pub use decision::{AdmissionRedirect, Decision, Shadow};
pub use error::{EventError, RouteError, WorkerError};
pub use extra_keys::{block_extra_keys, extra_keys_digest};
pub use ingest::{Channel, IngestError, IngestReport, IngestStats, ReplayRequest};
pub use predicted::PredictionStats;
pub use request::{Prompt, RouteRequest};
pub use router::Router;
pub use stats::{DecisionCount, FallbackCounts, RejectionCounts, RouterStats, WorkerDecisions};
pub use tick::TickReport;

// The vocabulary (kvroute-core).
pub use kvroute_core::{
    BlockExtraKeys, Bounds, EngineHash, EngineId, ExtraKeysDigest, ExtraKeysHasher, Fields,
    HashNamespace, LoadSample, Nanos, Number, OutOfRange, RankReport, SequenceHash, Slot,
    SlotGeneration, UpdateError, WorkerId,
};
// The prefix index: `RunIndex`, as `Router::index` exposes it for inspection (gauges, direct
// matching), its vocabulary, and the node-per-block `PrefixIndex` for direct use.
pub use kvroute_index::hash::ExtraKeysOrderError;
pub use kvroute_index::index::{
    BlockStore, IndexConfig, IndexError, IndexStats, OverlapParts, Overlaps, PrefixIndex,
    RemoveOutcome, StoreOutcome, TAIL_SLOTS,
};
pub use kvroute_index::runs::{RunIndex, RunIndexStats};
pub use kvroute_index::{BlockHasher, LocalBlockHash};
// The load view: what `Router::load_reader` reads and `configure_engine` takes.
pub use kvroute_load::{
    EngineConfig, EngineLoad, LoadConfig, LoadReader, LoadSnapshot, LoadStats, PinnedGuard,
    PinnedReader, PublishError, Reservation, ReservationStats, Reserved, SlotLoad, SnapshotGuard,
    SweepReport, Validity, Work,
};
// The scorer's configuration and what a decision reports.
pub use kvroute_score::{
    FallbackCause, ParsePolicyError, ParseReasonError, Policy, PolicyKind, ProjectedMode, Reason,
    ScoreConfig,
};
// The engines' wire formats: frames, event batches and load telemetry.
pub use kvroute_wire::{
    BlockRemoved, BlockStored, DecodePath, END_OF_REPLAY_SEQ, ErrorCounts, ErrorKind,
    EventEncoding, ExtraKey, KvEvent, KvEventBatch, KvMessage, Medium, SglangLoadStat,
    SglangRankLoad, VllmLoadUpdate, VllmRankLoad, WireCounters, WireError, WireStats,
    decode_load_stat, decode_message, parse_sglang_loads, parse_vllm_metrics,
};
