//! The channels between engines and the router: KV event batches and load telemetry, each
//! with a delay, a loss probability and reordering.
//!
//! * **Events.** Each engine publishes one msgpack batch per step that produced events
//!   (module [`crate::engine`]). A batch reaches the router `event_delay_s` later, plus a
//!   uniform jitter in `0..event_jitter_s` (a jitter larger than the gap between two batches
//!   reorders them), or is lost with probability `event_loss` (and always while the engine
//!   is disconnected, see [`crate::fault`]). The router decodes it with `kvroute-wire` and
//!   applies it with [`kvroute::Router::ingest`], whose per-publisher sequence tracking
//!   detects the gaps, reorderings and restarts.
//! * **Replay.** With `replay` on, each engine keeps its last `replay_buffer_batches`
//!   batches (vLLM's `buffer_steps`, default 10,000) and answers a replay request as a real
//!   engine's ROUTER socket does: every buffered batch from the requested sequence number,
//!   then the end marker, over a reliable connection (`event_delay_s` each way, no loss, no
//!   jitter). The driver asks as soon as [`kvroute::Router::replay_requests`] lists the
//!   worker, and asks again one second later if the engine was unreachable. With `replay`
//!   off the driver calls [`kvroute::Router::skip_replay`] instead (the worker is cleared
//!   and trusted again). Engines only buffer when a gap is possible (loss, jitter or
//!   faults).
//! * **Telemetry.** Every `telemetry_interval_s` each engine's load is observed and reaches
//!   the router `telemetry_delay_s` later (or is lost with probability `telemetry_loss`,
//!   or not sent during a blackout or disconnect); the driver applies it and calls
//!   [`kvroute::Router::publish`] on arrival. [`TelemetryMode`] says which figures.

/// Which load figures the engines report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TelemetryMode {
    /// Exact figures through [`kvroute::Router::update_load`]: running, waiting, cap, KV
    /// usage, prompt tokens not yet computed of waiting and prefilling requests (a waiting
    /// request's whole prompt: its prefix hit is only known at admission), KV tokens of
    /// running requests, the engine's prefill throughput and its nominal decode throughput
    /// at the current batch (`EngineConfig::decode_tps`), roughly what SGLang's
    /// `/v1/loads` reports.
    #[default]
    Full,
    /// vLLM's Prometheus gauges only, through [`kvroute::Router::update_vllm_load`]:
    /// running, waiting and KV usage (the cap comes from the engine's configuration).
    VllmMetrics,
}

/// Channel settings for one fleet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChannelConfig {
    /// Delay of a KV event batch from engine to router (seconds).
    pub event_delay_s: f64,
    /// Probability that one event batch is lost, 0..=1.
    pub event_loss: f64,
    /// Extra uniform jitter added to each batch's delay (seconds); jitter larger than the
    /// gap between batches reorders them.
    pub event_jitter_s: f64,
    /// Load telemetry interval (seconds).
    pub telemetry_interval_s: f64,
    /// Delay of a load report (seconds).
    pub telemetry_delay_s: f64,
    /// Probability that one load report is lost, 0..=1.
    pub telemetry_loss: f64,
    /// Which load figures are reported.
    pub telemetry: TelemetryMode,
    /// Whether engines offer a replay socket that the router's ingest uses after a gap
    /// (otherwise the driver gives the replay up: `skip_replay`).
    pub replay: bool,
    /// Batches each engine keeps for replay (vLLM's default `buffer_steps`: 10,000).
    pub replay_buffer_batches: u32,
}

impl Default for ChannelConfig {
    fn default() -> Self {
        Self {
            event_delay_s: 0.005,
            event_loss: 0.0,
            event_jitter_s: 0.0,
            telemetry_interval_s: 0.5,
            telemetry_delay_s: 0.01,
            telemetry_loss: 0.0,
            telemetry: TelemetryMode::Full,
            replay: true,
            replay_buffer_batches: 10_000,
        }
    }
}

impl ChannelConfig {
    /// Checks every field's range; returns the first bad field's name and range.
    pub fn validate(&self) -> Result<(), (&'static str, &'static str)> {
        let secs = [
            ("event_delay_s", self.event_delay_s),
            ("event_jitter_s", self.event_jitter_s),
            ("telemetry_delay_s", self.telemetry_delay_s),
        ];
        for (f, v) in secs {
            if !(v.is_finite() && v >= 0.0) {
                return Err((f, "finite and >= 0 seconds"));
            }
        }
        if !(self.telemetry_interval_s.is_finite() && self.telemetry_interval_s > 0.0) {
            return Err(("telemetry_interval_s", "finite and > 0 seconds"));
        }
        for (f, v) in [
            ("event_loss", self.event_loss),
            ("telemetry_loss", self.telemetry_loss),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err((f, "a probability in 0..=1"));
            }
        }
        Ok(())
    }
}
