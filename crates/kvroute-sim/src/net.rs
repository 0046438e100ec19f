//! The channels between engines and the router: KV event batches and load telemetry, each
//! with a delay, a loss probability and reordering.

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
        }
    }
}
