//! One load table for both sides of the decision rows.
//!
//! Worker `w` runs `w % 7` requests and queues `w % 3`, the same fresh, varied load kvroute's
//! `route` bench publishes (so no fallback and no tie dominates). kvroute receives it as a
//! [`LoadSample`] (published into its snapshot); the peer as a `WorkerLoadProjection`, the
//! per-worker input its selector reads (what its active-sequence tracker would project).

use dynamo_kv_router::WorkerLoadProjection;
use kvroute::LoadSample;
use kvroute_bench::BLOCK_SIZE;

/// Unscheduled prompt tokens per queued request (tokens).
pub const PREFILL_TOKENS_PER_WAITING: u32 = 1_000;
/// KV tokens held per running request (tokens).
pub const DECODE_TOKENS_PER_RUNNING: u32 = 2_300;
/// The scheduler's cap on running requests (requests).
pub const MAX_RUNNING: u32 = 64;
/// Decode throughput every worker reports to kvroute (tokens/s).
pub const DECODE_TPS: f32 = 1_000.0;
/// Prefill throughput every worker reports to kvroute (tokens/s).
pub const PREFILL_TPS: f32 = 8_000.0;

/// The load of one worker.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorkerLoad {
    /// Running requests (requests).
    pub running: u32,
    /// Queued requests (requests).
    pub waiting: u32,
    /// KV-cache usage, `0.0..=0.45`.
    pub kv_usage: f32,
}

impl WorkerLoad {
    /// The load of worker `w`.
    pub fn of(w: usize) -> Self {
        Self {
            running: (w % 7) as u32,
            waiting: (w % 3) as u32,
            kv_usage: (w % 10) as f32 / 20.0,
        }
    }

    /// Queued prefill work (tokens).
    pub fn prefill_tokens(&self) -> u32 {
        self.waiting * PREFILL_TOKENS_PER_WAITING
    }

    /// KV held by running requests (tokens).
    pub fn decode_tokens(&self) -> u32 {
        self.running * DECODE_TOKENS_PER_RUNNING
    }

    /// The load as kvroute's telemetry sample (the same sample its `route` bench uses).
    pub fn kvroute_sample(&self) -> LoadSample {
        {
            let mut c = LoadSample::new(self.running, self.waiting, MAX_RUNNING, self.kv_usage);
            c.waiting_prefill_tokens = Some(self.prefill_tokens());
            c.active_decode_tokens = Some(self.decode_tokens());
            c.decode_tps = Some(DECODE_TPS);
            c.prefill_tps = Some(PREFILL_TPS);
            c.utilization = None;
            c
        }
    }

    /// The load as the peer's projection: queued prefill tokens, decode KV in blocks
    /// (rounded up), running + queued requests. `additional_active_blocks` (the request's
    /// own not-yet-active blocks, which the peer's tracker computes per request) is 0: loads
    /// are precomputed once, as kvroute's snapshot is.
    pub fn peer_projection(&self) -> WorkerLoadProjection {
        WorkerLoadProjection {
            active_prefill_tokens: self.prefill_tokens() as usize,
            active_decode_blocks: (self.decode_tokens() as usize).div_ceil(BLOCK_SIZE),
            active_requests: (self.running + self.waiting) as usize,
            additional_active_blocks: 0,
        }
    }
}
