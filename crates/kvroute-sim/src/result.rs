//! What one run of one policy over one workload records; [`crate::report`] turns it into
//! metrics, tables, JSON and plots.

use std::collections::BTreeMap;

use serde::Serialize;

/// One request's life (all times in seconds of virtual time).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RequestRecord {
    /// The request's id.
    pub id: u64,
    /// The engine that served it (`None` if it never got one).
    pub engine: Option<u32>,
    /// Whether it was pinned by the scenario (excluded from policy metrics).
    pub pinned: bool,
    /// Arrival time.
    pub arrival_s: f64,
    /// Time of the first output token (`None` if not reached by the end of the run).
    pub first_token_s: Option<f64>,
    /// Time of the last output token (`None` if not finished).
    pub finish_s: Option<f64>,
    /// Prompt length (tokens).
    pub prompt_tokens: u32,
    /// Prompt tokens the serving engine's own prefix cache held at admission (tokens).
    pub cached_tokens: u32,
    /// Overlap the router predicted for the chosen engine, capped at what an engine can
    /// reuse of the prompt, `(prompt − 1)/block_size` full blocks (the last token is
    /// always recomputed) (tokens).
    pub predicted_cached_tokens: u32,
    /// Output tokens (tokens): what the serving engine generates, the trace's requested
    /// length capped by the engine's context (`max_model_len − prompt`, or the usable
    /// cache's tokens − prompt where the cache holds less than `max_model_len`); the requested
    /// length for a request no engine served (refused, rejected or never placed).
    pub output_tokens: u32,
    /// Times admission rejected it before it was placed.
    pub rejections: u32,
    /// The router's reason for the final placement (`"pinned"` for pinned requests).
    pub reason: String,
}

/// One engine's state at one sampling instant.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct EngineSample {
    /// Sample time (seconds).
    pub t_s: f64,
    /// Engine index.
    pub engine: u32,
    /// Running requests.
    pub running: u32,
    /// Waiting (queued) requests.
    pub waiting: u32,
    /// KV usage (fraction of the engine's blocks in use, 0..=1).
    pub kv_usage: f32,
}

/// Everything one run records.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunResult {
    /// Workload name.
    pub workload: String,
    /// The policy as `kvroute::Policy`'s `Display` writes it, with its parameter
    /// (`load_aware:0.5`, `projected_time:shadow`, `projected_time` for enforce).
    pub policy: String,
    /// Number of engines.
    pub engines: u32,
    /// Virtual time when the run ended (seconds).
    pub end_s: f64,
    /// Every request, in id order.
    pub requests: Vec<RequestRecord>,
    /// Per-engine samples at the run's sampling interval, in time order.
    pub samples: Vec<EngineSample>,
    /// Output tokens generated per engine (tokens; index = engine), pinned included.
    pub generated_tokens: Vec<u64>,
    /// Routing decisions by reason name.
    pub decisions_by_reason: BTreeMap<String, u64>,
    /// Fallbacks by cause name.
    pub fallbacks: BTreeMap<String, u64>,
    /// Admission rejections (events; one request may be rejected several times).
    pub rejections: u64,
    /// Requests still in flight (arrived, not finished) when the run ended.
    pub in_flight_at_end: u64,
    /// The workload's faults (their positions in its fault list) that start after the run
    /// ended (every request had finished, or the horizon passed): never applied, so the
    /// run says nothing about them. The command line prints a note for each.
    pub faults_after_end: Vec<usize>,
    /// Reservations (requests) still held in the router when the run ended: 0 after a run
    /// that completed; at most the requests in flight when a horizon stopped it.
    pub reservations_at_end: u64,
    /// Wall-clock time of the run (seconds).
    pub wall_s: f64,
    /// Requests that produced their last output token.
    pub completed: u64,
    /// Requests given up after `max_retries` admission rejections (or routing errors).
    pub rejected_for_good: u64,
    /// Requests the chosen engine refused: the prompt does not fit its context length or
    /// its KV cache (they never get a first token).
    pub refused: u64,
    /// Follow-ups that never arrived because their parent did not complete.
    pub never_arrived: u64,
    /// Requests that had not arrived yet when the run stopped at its horizon.
    /// `completed + rejected_for_good + refused + in_flight_at_end` are the requests that
    /// arrived; with `never_arrived` and this, every request of the workload.
    pub pending_at_end: u64,
    /// Requests lost to an engine restart and routed again (counted once per loss).
    pub restarted_requests: u64,
    /// Attempts an engine failed at once ([`FaultKind::FailFast`](crate::fault::FaultKind::FailFast)), each
    /// tried again or, past the retries, given up.
    pub failed_attempts: u64,
    /// Requests preempted by their engine (recompute) for lack of KV blocks.
    pub preemptions: u64,
    /// What went through the event and telemetry channels.
    pub channel: ChannelStats,
    /// The requested probes ([`RunOptions::probes`](crate::driver::RunOptions)), in time
    /// order, one per engine and probe time.
    pub probes: Vec<Probe>,
    /// Why the run could not start (invalid workload or options); every other field is
    /// then empty. `None` for a run that ran.
    pub error: Option<String>,
}

/// One engine's cache against the router's view of it at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Probe {
    /// Probe time (nanoseconds of virtual time).
    pub t_ns: u64,
    /// Engine index.
    pub engine: u32,
    /// Distinct block hashes the engine's cache holds (blocks).
    pub engine_blocks: u64,
    /// Engine block hashes the router's index holds for it (`PrefixIndex::worker_blocks`).
    pub indexed_blocks: u64,
    /// Whether the router credits the engine's overlap (`Router::is_trusted`).
    pub trusted: bool,
}

/// Counts of the event and telemetry channels and of the router's ingest over one run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ChannelStats {
    /// Event batches the engines published.
    pub batches_published: u64,
    /// Event batches lost on the way (loss, bursts, disconnects).
    pub batches_lost: u64,
    /// Live event batches the router ingested.
    pub batches_delivered: u64,
    /// Replays the driver asked engines for.
    pub replays_requested: u64,
    /// Replayed batches the router ingested.
    pub batches_replayed: u64,
    /// Pending replays given up (`skip_replay`: replay off, or nothing to replay).
    pub replays_skipped: u64,
    /// Sequence gaps the router detected (`IngestStats::gaps` + `gaps_cleared`).
    pub gaps: u64,
    /// Engine restarts the router detected from sequence numbers.
    pub resets: u64,
    /// Batches `kvroute-wire` could not decode (0 unless the encoder is wrong).
    pub decode_errors: u64,
    /// Batches `Router::ingest` returned an error for (0 unless the events are wrong).
    pub ingest_errors: u64,
    /// Load reports sent.
    pub telemetry_sent: u64,
    /// Load reports lost (loss; blackouts and disconnects send none).
    pub telemetry_lost: u64,
    /// Load reports the router rejected.
    pub telemetry_rejected: u64,
}
