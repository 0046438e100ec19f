//! Scheduled faults: what can go wrong between an engine and the router.

/// One fault on the schedule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fault {
    /// When it starts (seconds of virtual time).
    pub at_s: f64,
    /// The engine it hits.
    pub engine: u32,
    /// What happens.
    pub kind: FaultKind,
}

/// Kinds of fault.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FaultKind {
    /// The engine restarts: its cache is wiped, its running and waiting requests are
    /// re-queued from scratch, and its event sequence starts over at 0.
    Restart,
    /// The event and telemetry channels are cut for `duration_s`; events published
    /// meanwhile are lost (the router sees a sequence gap on reconnect).
    Disconnect {
        /// Seconds.
        duration_s: f64,
    },
    /// Load telemetry stops for `duration_s` (events still flow).
    TelemetryBlackout {
        /// Seconds.
        duration_s: f64,
    },
    /// Each event batch is lost with probability `loss` for `duration_s`.
    EventLoss {
        /// Seconds.
        duration_s: f64,
        /// Probability of losing one batch, 0..=1.
        loss: f64,
    },
}
