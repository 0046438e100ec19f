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
//!   and trusted again). Engines only buffer when a gap is possible: loss, faults, or an
//!   event jitter longer than the engine's fixed step cost (`step_base_s`, the least time
//!   between two of its batches), which can reorder them.
//! * **Telemetry.** Every `telemetry_interval_s` each engine's load is observed (on the
//!   engine's own phase with `telemetry_stagger`) and reaches the router
//!   `telemetry_delay_s` later, plus a uniform jitter in `0..telemetry_jitter_s` (or is
//!   lost with probability `telemetry_loss`, or not sent during a blackout or disconnect);
//!   the driver applies it and calls [`kvroute::Router::publish`] on arrival.
//!   [`TelemetryMode`] says which figures.
//!
//! # Default jitter
//! The default channels are not perfectly regular, so that the run's seed matters without
//! faults, as it does for a real gateway:
//!
//! * **Telemetry phases** (`telemetry_stagger`): each engine reports every interval on its
//!   own clock, its first report at a seeded uniform time in `(0, interval]`. Engines start
//!   at different times and their metrics pollers are not synchronised; reporting all at
//!   one instant is the special case. This is the draw that changes decisions: a request
//!   meets some engines' figures fresh and others up to an interval old.
//! * **Delay jitter**: KV event batches by up to [`DEFAULT_EVENT_JITTER_S`] (2 ms on the
//!   5 ms delay), load reports by up to [`DEFAULT_TELEMETRY_JITTER_S`] (5 ms on the 10 ms
//!   delay): the network's queueing and the receiving event loop spread deliveries by
//!   milliseconds. The values are chosen, not measured: small against the delays, and the
//!   event jitter below the shortest step of the built-in engines (6.9 ms), so one
//!   engine's batches still arrive in order (an engine publishes at most one batch per
//!   step) and nothing needs a replay buffer. Alone (without the stagger) they change
//!   almost no decision: on the first 1,000 requests of the conversation trace at 4x,
//!   seeds 1 and 2 gave the same metrics.
//!
//! [`ChannelConfig::without_jitter`] turns all three off.

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
    /// Extra uniform jitter added to each load report's delay (seconds); a jitter larger
    /// than the interval reorders one engine's reports.
    pub telemetry_jitter_s: f64,
    /// Whether each engine reports on its own phase (its first report at a seeded uniform
    /// time in `(0, telemetry_interval_s]`, then every interval) rather than every engine
    /// at the same instants (module docs, "Default jitter").
    pub telemetry_stagger: bool,
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

/// The default channels' KV event jitter (seconds): see the module docs, "Default jitter".
pub const DEFAULT_EVENT_JITTER_S: f64 = 0.002;

/// The default channels' load report jitter (seconds): see the module docs, "Default
/// jitter".
pub const DEFAULT_TELEMETRY_JITTER_S: f64 = 0.005;

impl Default for ChannelConfig {
    /// 5 ms event delay with [`DEFAULT_EVENT_JITTER_S`], no loss; telemetry every 500 ms,
    /// 10 ms delay with [`DEFAULT_TELEMETRY_JITTER_S`], no loss, full figures; replay on
    /// with vLLM's 10,000-batch buffer.
    fn default() -> Self {
        Self {
            event_delay_s: 0.005,
            event_loss: 0.0,
            event_jitter_s: DEFAULT_EVENT_JITTER_S,
            telemetry_interval_s: 0.5,
            telemetry_delay_s: 0.01,
            telemetry_jitter_s: DEFAULT_TELEMETRY_JITTER_S,
            telemetry_stagger: true,
            telemetry_loss: 0.0,
            telemetry: TelemetryMode::Full,
            replay: true,
            replay_buffer_batches: 10_000,
        }
    }
}

impl ChannelConfig {
    /// The same channels without jitter or stagger: every batch and report takes exactly
    /// its delay, and every engine reports at the same instants.
    pub fn without_jitter(self) -> Self {
        Self {
            event_jitter_s: 0.0,
            telemetry_jitter_s: 0.0,
            telemetry_stagger: false,
            ..self
        }
    }

    /// Checks every field's range; returns the first bad field's name and range.
    pub fn validate(&self) -> Result<(), (&'static str, &'static str)> {
        let secs = [
            ("event_delay_s", self.event_delay_s),
            ("event_jitter_s", self.event_jitter_s),
            ("telemetry_delay_s", self.telemetry_delay_s),
            ("telemetry_jitter_s", self.telemetry_jitter_s),
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
