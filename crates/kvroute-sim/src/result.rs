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
    /// Overlap the router predicted for the chosen engine (tokens).
    pub predicted_cached_tokens: u32,
    /// Output length (tokens).
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
    /// Policy name (as in `kvroute::Policy::name`, with its parameters).
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
    /// Reservations still held when the run ended (0 in a correct run).
    pub reservations_at_end: u64,
    /// Wall-clock time of the run (seconds).
    pub wall_s: f64,
}
