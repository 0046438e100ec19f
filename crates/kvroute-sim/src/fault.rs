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
//! * [`FaultKind::Slowdown`]: for `duration_s` every step of the engine lasts `factor`
//!   times its modelled time (a throttled or degraded GPU, a noisy neighbour), while its
//!   reports keep the nominal throughputs: only its queue and running counts show it.
//! * [`FaultKind::PartialTelemetry`]: for `duration_s` the engine's load reports carry only
//!   vLLM's Prometheus gauges (running, waiting, KV usage: [`crate::net::TelemetryMode`]),
//!   not the token counts and throughputs, as an engine without the richer endpoint (or an
//!   older version) reports in a fleet where the others have it.
//!
//! A scenario schedules its own faults; a user's schedule of them is read from JSON and
//! added to any workload by [`crate::workload::faults`] (`kvroute-sim --faults FILE`).

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
    /// Every step lasts `factor` times longer for `duration_s` (module docs).
    Slowdown {
        /// Seconds.
        duration_s: f64,
        /// Step time multiplier, `1.0..=`[`MAX_SLOWDOWN`].
        factor: f64,
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
        if !(self.at_s.is_finite() && (0.0..=MAX_FAULT_S).contains(&self.at_s)) {
            return Err("at_s must be in 0..=1e9 seconds");
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
            FaultKind::Slowdown { duration_s, factor } => {
                if !(factor.is_finite() && (1.0..=MAX_SLOWDOWN).contains(&factor)) {
                    return Err("factor must be in 1..=1000");
                }
                duration_s
            }
            FaultKind::Flap {
                duration_s,
                period_s,
                down_s,
            } => {
                if !(period_s.is_finite() && period_s > 0.0 && period_s <= MAX_FAULT_S) {
                    return Err("period_s must be > 0 and at most 1e9 seconds");
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
        if !(duration.is_finite() && (0.0..=MAX_FAULT_S).contains(&duration)) {
            return Err("duration_s must be in 0..=1e9 seconds");
        }
        Ok(())
    }

    /// The window `[start, end)` in nanoseconds of virtual time.
    fn window(&self, duration_s: f64) -> (u64, u64) {
        let start = secs_to_ns(self.at_s);
        (start, start.saturating_add(secs_to_ns(duration_s)))
    }
}

/// Largest fault time, duration or flap period (seconds): 10^9 s, well inside the
/// nanoseconds of virtual time a `u64` holds (about 1.8·10^10 s), so no window saturates.
pub const MAX_FAULT_S: f64 = 1e9;

/// Largest slowdown factor: a step of the 8B engine (6.9 ms) then lasts 6.9 s. A larger
/// one models an engine that has stopped, which a disconnect or a fail-fast fault models
/// without stretching the run's virtual time past every report and timer (a factor of
/// 10^9 made a 200-request replay run for minutes).
pub const MAX_SLOWDOWN: f64 = 1000.0;

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
    slow: Vec<Vec<(u64, u64, f64)>>,
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
            slow: vec![Vec::new(); n],
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
                FaultKind::Slowdown { duration_s, factor } => {
                    let (a, b) = f.window(duration_s);
                    w.slow[e].push((a, b, factor));
                }
            }
        }
        w
    }

    /// Whether engine `e` is disconnected at `t` (ns).
    pub(crate) fn disconnected(&self, e: u32, t: u64) -> bool {
        active(&self.disconnect[e as usize], t)
            || self.flap[e as usize]
                .iter()
                .any(|&(a, b, period, down)| a <= t && t < b && (t - a) % period < down)
    }

    /// The step time multiplier of engine `e` at `t` (ns): the largest active slowdown's, else 1.
    pub(crate) fn slowdown(&self, e: u32, t: u64) -> f64 {
        largest_active(&self.slow[e as usize], t, 1.0)
    }

    /// Whether engine `e`'s load reports observed at `t` (ns) carry only vLLM's gauges.
    pub(crate) fn gauges_only(&self, e: u32, t: u64) -> bool {
        active(&self.partial[e as usize], t)
    }

    /// Whether engine `e` fails every request at `t` (ns).
    pub(crate) fn failing(&self, e: u32, t: u64) -> bool {
        active(&self.failing[e as usize], t)
    }

    /// Whether engine `e`'s telemetry is blacked out (or disconnected) at `t` (ns).
    pub(crate) fn telemetry_down(&self, e: u32, t: u64) -> bool {
        self.disconnected(e, t) || active(&self.blackout[e as usize], t)
    }

    /// The burst loss probability of engine `e`'s events at `t` (ns): the largest active.
    pub(crate) fn burst_loss(&self, e: u32, t: u64) -> f64 {
        largest_active(&self.loss[e as usize], t, 0.0)
    }
}

/// Whether one of the windows `[a, b)` (ns) holds `t`.
fn active(windows: &[(u64, u64)], t: u64) -> bool {
    windows.iter().any(|&(a, b)| a <= t && t < b)
}

/// The largest value of the windows `[a, b)` (ns) that hold `t`, and `base` if larger.
fn largest_active(windows: &[(u64, u64, f64)], t: u64, base: f64) -> f64 {
    windows
        .iter()
        .filter(|&&(a, b, _)| a <= t && t < b)
        .map(|&(_, _, v)| v)
        .fold(base, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flap of engine `engine` from `at_s` for `duration_s`, cut `down_s` every `period_s`.
    fn flap(engine: u32, at_s: f64, duration_s: f64, period_s: f64, down_s: f64) -> Fault {
        Fault {
            at_s,
            engine,
            kind: FaultKind::Flap {
                duration_s,
                period_s,
                down_s,
            },
        }
    }

    /// `check` rejects a flap whose period is 0, negative, NaN or infinite, or whose cut is
    /// negative, NaN or longer than the period, naming the bad field; it accepts a cut of the
    /// whole period and a cut of 0.
    #[test]
    fn check_rejects_bad_flap_periods_and_cuts() {
        for period_s in [0.0, -1.0, -0.5, f64::NAN, f64::INFINITY] {
            let err = flap(0, 1.0, 10.0, period_s, 0.0).check(2).unwrap_err();
            assert!(err.contains("period_s"), "period {period_s}: {err}");
        }
        for down_s in [3.5, 3.000_001, -1.0, -1e-9, f64::NAN, f64::INFINITY] {
            let err = flap(0, 1.0, 10.0, 3.0, down_s).check(2).unwrap_err();
            assert!(err.contains("down_s"), "down {down_s}: {err}");
        }
        assert_eq!(flap(1, 1.0, 10.0, 3.0, 3.0).check(2), Ok(()));
        assert_eq!(flap(1, 1.0, 10.0, 3.0, 0.0).check(2), Ok(()));
        assert_eq!(flap(1, 0.0, 10.0, 3.0, 1.0).check(2), Ok(()));
        // The fields every fault has are still checked.
        assert!(flap(2, 1.0, 10.0, 3.0, 1.0).check(2).is_err());
        assert!(flap(0, 1.0, -1.0, 3.0, 1.0).check(2).is_err());
        assert!(flap(0, -1.0, 10.0, 3.0, 1.0).check(2).is_err());
    }

    /// `check` rejects a partial-telemetry window of negative or NaN length and accepts 0.
    #[test]
    fn check_partial_telemetry_duration() {
        let partial = |duration_s| Fault {
            at_s: 0.0,
            engine: 0,
            kind: FaultKind::PartialTelemetry { duration_s },
        };
        assert!(partial(-1.0).check(1).is_err());
        assert!(partial(f64::NAN).check(1).is_err());
        assert_eq!(partial(0.0).check(1), Ok(()));
        assert_eq!(partial(1e6).check(1), Ok(()));
    }

    /// A flap from 10 s for 20 s (window [10 s, 30 s)) cut 1 s every 3 s: the cuts are
    /// [10, 11), [13, 14), …, [28, 29). Disconnected at 10 s, 10.999 s, 13 s, 28.5 s;
    /// connected at 9.999 s, 11 s, 12.5 s, 30 s (the end is exclusive) and 31 s. The other
    /// engine, without faults, is never disconnected; telemetry is down exactly when the
    /// connection is.
    #[test]
    fn flap_cuts_the_start_of_every_period() {
        let w = FaultWindows::new(&[flap(1, 10.0, 20.0, 3.0, 1.0)], 2);
        let ns = secs_to_ns;
        for s in [10.0, 10.999, 13.0, 13.5, 16.0, 19.999, 28.0, 28.5, 28.999] {
            assert!(w.disconnected(1, ns(s)), "{s} s");
            assert!(w.telemetry_down(1, ns(s)), "{s} s");
        }
        for s in [
            0.0, 9.999, 11.0, 12.5, 12.999, 14.0, 29.0, 29.999, 30.0, 31.0, 1e5,
        ] {
            assert!(!w.disconnected(1, ns(s)), "{s} s");
            assert!(!w.telemetry_down(1, ns(s)), "{s} s");
        }
        // One nanosecond either side of the first cut.
        assert!(!w.disconnected(1, 10_000_000_000 - 1));
        assert!(w.disconnected(1, 11_000_000_000 - 1));
        assert!(!w.disconnected(1, 11_000_000_000));
        // In [10 s, 30 s), sampled every 100 ms: cut a third of the time, 7 cuts of 10
        // samples each = 70 of 200.
        let down = (100..300)
            .filter(|&k| w.disconnected(1, k * 100_000_000))
            .count();
        assert_eq!(down, 70);
        // Engine 0 has no fault: never disconnected, never down, never gauges-only.
        for k in 0..400 {
            let t = k * 100_000_000;
            assert!(!w.disconnected(0, t));
            assert!(!w.telemetry_down(0, t));
            assert!(!w.gauges_only(0, t));
            assert!(!w.gauges_only(1, t));
        }
    }

    /// A cut as long as the period disconnects the whole window; a cut of 0 never does.
    #[test]
    fn flap_cut_of_the_whole_period_or_none() {
        let w = FaultWindows::new(
            &[flap(0, 2.0, 6.0, 2.0, 2.0), flap(1, 2.0, 6.0, 2.0, 0.0)],
            2,
        );
        for k in 0..100u64 {
            let t = k * 100_000_000;
            let inside = (2_000_000_000..8_000_000_000).contains(&t);
            assert_eq!(w.disconnected(0, t), inside, "{t} ns");
            assert!(!w.disconnected(1, t), "{t} ns");
        }
    }

    /// Partial telemetry of engine 1 from 5 s for 10 s: gauges only in [5 s, 15 s), not
    /// before, not at the end, not on engine 0; it cuts nothing.
    #[test]
    fn gauges_only_inside_the_partial_window() {
        let f = Fault {
            at_s: 5.0,
            engine: 1,
            kind: FaultKind::PartialTelemetry { duration_s: 10.0 },
        };
        let w = FaultWindows::new(&[f], 2);
        let ns = secs_to_ns;
        for s in [5.0, 5.5, 10.0, 14.999] {
            assert!(w.gauges_only(1, ns(s)), "{s} s");
        }
        for s in [0.0, 4.999, 15.0, 16.0] {
            assert!(!w.gauges_only(1, ns(s)), "{s} s");
        }
        assert!(!w.gauges_only(1, 5_000_000_000 - 1));
        assert!(w.gauges_only(1, 15_000_000_000 - 1));
        for s in [0.0, 5.0, 10.0, 15.0] {
            assert!(!w.gauges_only(0, ns(s)));
            assert!(!w.disconnected(1, ns(s)));
            assert!(!w.telemetry_down(1, ns(s)));
        }
    }

    /// A slowdown multiplies step times by its factor inside its window only (3 from 10 s
    /// for 5 s: 1 at 9.999 s, 3 at 10 s and 14.999 s, 1 at 15 s), the larger of two that
    /// overlap, and never on another engine; a factor below 1 or not finite is refused.
    #[test]
    fn slowdown_scales_steps_inside_its_window() {
        let slow = |at_s, factor| Fault {
            at_s,
            engine: 2,
            kind: FaultKind::Slowdown {
                duration_s: 5.0,
                factor,
            },
        };
        let w = FaultWindows::new(&[slow(10.0, 3.0), slow(12.0, 4.0)], 4);
        let ns = |s: f64| secs_to_ns(s);
        assert_eq!(w.slowdown(2, ns(9.999)), 1.0);
        assert_eq!(w.slowdown(2, ns(10.0)), 3.0);
        assert_eq!(w.slowdown(2, ns(11.999)), 3.0);
        assert_eq!(w.slowdown(2, ns(12.0)), 4.0);
        assert_eq!(w.slowdown(2, ns(14.999)), 4.0);
        assert_eq!(w.slowdown(2, ns(16.999)), 4.0);
        assert_eq!(w.slowdown(2, ns(17.0)), 1.0);
        assert_eq!(w.slowdown(1, ns(12.0)), 1.0);
        assert!(slow(0.0, 0.5).check(4).is_err());
        assert!(slow(0.0, f64::NAN).check(4).is_err());
        assert!(slow(0.0, f64::INFINITY).check(4).is_err());
        assert!(slow(0.0, 1.0).check(4).is_ok());
        assert!(slow(0.0, 1000.0).check(4).is_ok());
        assert!(slow(0.0, 1000.5).check(4).is_err());
    }

    /// Times, durations and flap periods above 10^9 s are refused (their nanoseconds would
    /// come near the `u64` limit); 10^9 s itself is taken.
    #[test]
    fn fault_times_are_bounded() {
        let blackout = |at_s, duration_s| Fault {
            at_s,
            engine: 0,
            kind: FaultKind::TelemetryBlackout { duration_s },
        };
        assert!(blackout(1e9, 1e9).check(1).is_ok());
        assert_eq!(
            blackout(1.5e9, 1.0).check(1),
            Err("at_s must be in 0..=1e9 seconds")
        );
        assert_eq!(
            blackout(0.0, 1e300).check(1),
            Err("duration_s must be in 0..=1e9 seconds")
        );
        let flap = Fault {
            at_s: 0.0,
            engine: 0,
            kind: FaultKind::Flap {
                duration_s: 10.0,
                period_s: 2e9,
                down_s: 1.0,
            },
        };
        assert_eq!(
            flap.check(1),
            Err("period_s must be > 0 and at most 1e9 seconds")
        );
    }
}
