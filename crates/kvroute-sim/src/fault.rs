//! Scheduled faults: what can go wrong between an engine and the router.
//!
//! * [`FaultKind::Restart`]: the engine process restarts instantly with an empty cache. Its
//!   batch sequence starts again at 0 with an `AllBlocksCleared` batch, so the router,
//!   seeing the sequence go back, clears the worker one event delay later. Every request on
//!   it is lost to the engine and handled as a gateway handles a reset connection: its
//!   reservation is released and it is routed again at once (pinned requests go back to
//!   their engine); its first-token time, prefix hit and prediction are those of the new
//!   attempt. The record counts it in [`RunResult::restarted_requests`](crate::RunResult).
//! * [`FaultKind::Disconnect`]: for `duration_s` every event batch and load report of the
//!   engine is lost (the engine keeps serving); after reconnection the next batch shows the
//!   router a sequence gap, recovered by replay or by giving it up (module [`crate::net`]);
//!   the router's load figures of the engine go stale meanwhile.
//! * [`FaultKind::TelemetryBlackout`]: load reports stop for `duration_s`; events flow.
//! * [`FaultKind::EventLoss`]: each batch is lost with probability `loss` for `duration_s`
//!   (on top of the channel's own loss).
//! * [`FaultKind::FailFast`]: for `duration_s` the engine fails every request routed to it
//!   at once (a broken model server behind a healthy metrics endpoint): nothing is queued,
//!   so its telemetry keeps reading idle. The gateway reports the failure to the router
//!   (`Router::finish` with `Outcome::Failed`) and tries the request again
//!   [`FAILOVER_DELAY_S`] later, counted in [`RunResult::failed_attempts`](crate::RunResult::failed_attempts),
//!   up to the run's `max_retries` together with its rejections, after which it is given up.
//! * [`FaultKind::Flap`]: the engine's connection to the router flaps: for `duration_s`,
//!   every `period_s` starts with `down_s` of disconnect (as [`FaultKind::Disconnect`]:
//!   batches and load reports lost, a sequence gap at each reconnection), a link or a
//!   metrics endpoint that keeps dropping and coming back.
//! * [`FaultKind::PartialTelemetry`]: for `duration_s` the engine's load reports carry only
//!   vLLM's Prometheus gauges (running, waiting, KV usage: [`crate::net::TelemetryMode`]),
//!   not the token counts and throughputs, as an engine without the richer endpoint (or an
//!   older version) reports in a fleet where the others have it.

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
    /// routed again, and its event sequence starts over at 0 (module docs).
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
    /// Every request routed to the engine fails at once for `duration_s` (module docs).
    FailFast {
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
    /// The connection flaps for `duration_s`: `down_s` of disconnect at the start of every
    /// `period_s` (module docs).
    Flap {
        /// Seconds.
        duration_s: f64,
        /// Seconds from one cut to the next, > 0.
        period_s: f64,
        /// Seconds of each cut, 0..=`period_s`.
        down_s: f64,
    },
    /// Load reports carry only vLLM's gauges for `duration_s` (module docs).
    PartialTelemetry {
        /// Seconds.
        duration_s: f64,
    },
}

impl Fault {
    /// Checks the fault against a fleet of `engines`; returns what is wrong, in words.
    pub fn check(&self, engines: u32) -> Result<(), &'static str> {
        if !(self.at_s.is_finite() && self.at_s >= 0.0) {
            return Err("at_s must be finite and >= 0 seconds");
        }
        if self.engine >= engines {
            return Err("engine is not in the fleet");
        }
        let duration = match self.kind {
            FaultKind::Restart => 0.0,
            FaultKind::Disconnect { duration_s }
            | FaultKind::TelemetryBlackout { duration_s }
            | FaultKind::FailFast { duration_s }
            | FaultKind::PartialTelemetry { duration_s } => duration_s,
            FaultKind::Flap {
                duration_s,
                period_s,
                down_s,
            } => {
                if !(period_s.is_finite() && period_s > 0.0) {
                    return Err("period_s must be finite and > 0 seconds");
                }
                if !(down_s.is_finite() && (0.0..=period_s).contains(&down_s)) {
                    return Err("down_s must be in 0..=period_s seconds");
                }
                duration_s
            }
            FaultKind::EventLoss { duration_s, loss } => {
                if !(0.0..=1.0).contains(&loss) {
                    return Err("loss must be a probability in 0..=1");
                }
                duration_s
            }
        };
        if !(duration.is_finite() && duration >= 0.0) {
            return Err("duration_s must be finite and >= 0 seconds");
        }
        Ok(())
    }

    /// The window `[start, end)` in nanoseconds of virtual time.
    fn window(&self, duration_s: f64) -> (u64, u64) {
        let start = secs_to_ns(self.at_s);
        (start, start.saturating_add(secs_to_ns(duration_s)))
    }
}

/// How long a gateway takes to see a failed attempt and try the request again (seconds):
/// one refused connection or error response, a round trip inside a data centre.
pub const FAILOVER_DELAY_S: f64 = 0.01;

/// Seconds to nanoseconds of virtual time (rounded; negative and NaN as 0).
pub(crate) fn secs_to_ns(s: f64) -> u64 {
    if s.is_finite() && s > 0.0 {
        (s * 1e9).round() as u64
    } else {
        0
    }
}

/// The windows of every engine, for the channel's questions.
#[derive(Debug, Default)]
pub(crate) struct FaultWindows {
    disconnect: Vec<Vec<(u64, u64)>>,
    blackout: Vec<Vec<(u64, u64)>>,
    failing: Vec<Vec<(u64, u64)>>,
    loss: Vec<Vec<(u64, u64, f64)>>,
    /// Per engine: `(start, end, period, down)` of each flap (ns).
    flap: Vec<Vec<(u64, u64, u64, u64)>>,
    partial: Vec<Vec<(u64, u64)>>,
}

impl FaultWindows {
    /// The windows of `faults` (already checked) on `engines` engines.
    pub(crate) fn new(faults: &[Fault], engines: u32) -> Self {
        let n = engines as usize;
        let mut w = Self {
            disconnect: vec![Vec::new(); n],
            blackout: vec![Vec::new(); n],
            failing: vec![Vec::new(); n],
            loss: vec![Vec::new(); n],
            flap: vec![Vec::new(); n],
            partial: vec![Vec::new(); n],
        };
        for f in faults {
            let e = f.engine as usize;
            match f.kind {
                FaultKind::Restart => {}
                FaultKind::Disconnect { duration_s } => w.disconnect[e].push(f.window(duration_s)),
                FaultKind::TelemetryBlackout { duration_s } => {
                    w.blackout[e].push(f.window(duration_s));
                }
                FaultKind::FailFast { duration_s } => w.failing[e].push(f.window(duration_s)),
                FaultKind::EventLoss { duration_s, loss } => {
                    let (a, b) = f.window(duration_s);
                    w.loss[e].push((a, b, loss));
                }
                FaultKind::Flap {
                    duration_s,
                    period_s,
                    down_s,
                } => {
                    let (a, b) = f.window(duration_s);
                    let period = secs_to_ns(period_s).max(1);
                    w.flap[e].push((a, b, period, secs_to_ns(down_s)));
                }
                FaultKind::PartialTelemetry { duration_s } => {
                    w.partial[e].push(f.window(duration_s));
                }
            }
        }
        w
    }

    /// Whether engine `e` is disconnected at `t` (ns).
    pub(crate) fn disconnected(&self, e: u32, t: u64) -> bool {
        self.disconnect[e as usize]
            .iter()
            .any(|&(a, b)| a <= t && t < b)
            || self.flap[e as usize]
                .iter()
                .any(|&(a, b, period, down)| a <= t && t < b && (t - a) % period < down)
    }

    /// Whether engine `e`'s load reports observed at `t` (ns) carry only vLLM's gauges.
    pub(crate) fn gauges_only(&self, e: u32, t: u64) -> bool {
        self.partial[e as usize]
            .iter()
            .any(|&(a, b)| a <= t && t < b)
    }

    /// Whether engine `e` fails every request at `t` (ns).
    pub(crate) fn failing(&self, e: u32, t: u64) -> bool {
        self.failing[e as usize]
            .iter()
            .any(|&(a, b)| a <= t && t < b)
    }

    /// Whether engine `e`'s telemetry is blacked out (or disconnected) at `t` (ns).
    pub(crate) fn telemetry_down(&self, e: u32, t: u64) -> bool {
        self.disconnected(e, t)
            || self.blackout[e as usize]
                .iter()
                .any(|&(a, b)| a <= t && t < b)
    }

    /// The burst loss probability of engine `e`'s events at `t` (ns): the largest active.
    pub(crate) fn burst_loss(&self, e: u32, t: u64) -> f64 {
        self.loss[e as usize]
            .iter()
            .filter(|&&(a, b, _)| a <= t && t < b)
            .map(|&(_, _, p)| p)
            .fold(0.0, f64::max)
    }
}
