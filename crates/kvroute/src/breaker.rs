//! Request outcomes and the per-worker breaker they feed.
//!
//! Telemetry says how loaded a worker is, not whether its requests succeed: an engine that
//! fails every request at once reports 0 running and 0 waiting, so every load-weighing
//! policy sends it more. A decision therefore ends with an [`Outcome`]
//! ([`Router::finish`](crate::Router::finish)), and failures feed a breaker per worker:
//!
//! * **closed** (the normal state): outcomes are counted; the breaker opens after
//!   [`BreakerConfig::consecutive_failures`] failures in a row, or when at least
//!   [`BreakerConfig::min_outcomes`] of the last [`BreakerConfig::window`] outcomes are
//!   known and their failure rate reaches [`BreakerConfig::failure_rate`];
//! * **open**: the worker is no candidate (the load snapshot marks it excluded, the scorer
//!   treats it as a vacant slot) for the cooldown, on the router's clock (the latest
//!   `publish` time); the first cooldown is [`BreakerConfig::cooldown`], each re-opening
//!   doubles it up to [`BreakerConfig::max_cooldown`];
//! * **half-open**, from the first publication past the cooldown: the worker is a candidate
//!   again, and the next outcome of a request routed since decides (one routed before, a
//!   slow request still running when the breaker opened, is no probe): a completion closes
//!   the breaker (and resets the cooldown), a failure opens it again (within the cap
//!   below; refused, it stays half-open).
//!
//! Cancelled requests (the client went away) say nothing about the worker and are only
//! counted. A breaker never opens when that would leave more than
//! [`BreakerConfig::max_open_fraction`] of the registered workers open (at least one may
//! always open): failures of every worker at once are more likely the requests' fault
//! than the fleet's, and routing somewhere beats rejecting everything. For the same reason
//! the fleet fails open: when every registered worker is open (a fleet of one, or the
//! closed ones removed since), the scorer ignores the exclusions. The rule follows
//! the usual gateway practice (consecutive-error ejection with a growing ejection time and
//! a cap on the ejected share, as in Envoy's outlier detection).
//!
//! # Orderings
//! Breaker state sits under one mutex per slot. The atomics are `Relaxed` tallies, and
//! `open`, the count of open breakers, is also read `Relaxed` as a hint: `due` skips its
//! scan when it reads 0 (an opening it misses is due one cooldown later anyway, at a later
//! publication), and the open-share cap may be exceeded by the openings of outcomes
//! recorded at the same instant on different slots (each reads the count before the
//! others add to it).
//!
//! A breaker belongs to a tenancy: a worker added (or added back) starts closed, and an
//! outcome of a decision made under another tenancy is counted as stale and ignored.

use kvroute_core::sync::Mutex;
use kvroute_core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use kvroute_core::{Bounds, Nanos, OutOfRange, Slot, SlotGeneration};

/// Valid [`BreakerConfig::consecutive_failures`] and [`BreakerConfig::min_outcomes`]:
/// `1..=64`.
pub const BREAKER_COUNT: Bounds = Bounds::ints(1, 64, "outcomes");
/// Valid [`BreakerConfig::failure_rate`]: `0.01..=1.0` (a rate of 0 would open on any
/// window).
pub const BREAKER_RATE: Bounds = Bounds::floats(0.01, 1.0, "");
/// Valid [`BreakerConfig::max_open_fraction`]: `0.0..=1.0`.
pub const BREAKER_FRACTION: Bounds = Bounds::floats(0.0, 1.0, "");
/// Longest cooldown: 1 hour (ns).
const COOLDOWN_MAX_NS: u64 = 3_600_000_000_000;
/// Valid cooldowns: 1 ms to 1 hour.
pub const BREAKER_COOLDOWN: Bounds = Bounds::ints(1_000_000, COOLDOWN_MAX_NS, "ns");

/// How a routed request ended, as the gateway saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// The engine served it (any response the engine produced, errors of the request's own
    /// making included, such as a prompt too long).
    Completed,
    /// The engine failed it: connection refused or reset, a 5xx, a timeout.
    Failed,
    /// The client cancelled it; says nothing about the worker.
    Cancelled,
}

/// The per-worker breaker's settings (module docs). `None` in
/// [`RouterConfig::breaker`](crate::RouterConfig::breaker) disables it.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct BreakerConfig {
    /// Failures in a row that open the breaker, [`BREAKER_COUNT`]. Default 5.
    pub consecutive_failures: u32,
    /// Outcomes the failure rate is taken over (the most recent), `min_outcomes..=64`.
    /// Default 32.
    pub window: u32,
    /// Known outcomes in the window before the rate may open the breaker,
    /// [`BREAKER_COUNT`]. Default 16.
    pub min_outcomes: u32,
    /// Failure rate over the window that opens the breaker, [`BREAKER_RATE`]. Default 0.5.
    pub failure_rate: f32,
    /// First open period (router clock), [`BREAKER_COOLDOWN`]. Default 5 s.
    pub cooldown: Nanos,
    /// Longest open period after repeated re-openings, [`BREAKER_COOLDOWN`], at least
    /// `cooldown`. Default 60 s.
    pub max_cooldown: Nanos,
    /// Largest share of the registered workers open at once, [`BREAKER_FRACTION`] (one
    /// may always open). Default 0.5.
    pub max_open_fraction: f32,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            consecutive_failures: 5,
            window: 32,
            min_outcomes: 16,
            failure_rate: 0.5,
            cooldown: Nanos::from_secs(5),
            max_cooldown: Nanos::from_secs(60),
            max_open_fraction: 0.5,
        }
    }
}

impl BreakerConfig {
    /// Checks every setting against its bounds.
    ///
    /// # Errors
    /// [`OutOfRange`] naming the first setting out of range (`breaker.` prefixed).
    pub fn validate(&self) -> Result<(), OutOfRange> {
        BREAKER_COUNT.check_int(
            "breaker.consecutive_failures",
            u64::from(self.consecutive_failures),
        )?;
        BREAKER_COUNT.check_int("breaker.min_outcomes", u64::from(self.min_outcomes))?;
        Bounds::ints(u64::from(self.min_outcomes), 64, "outcomes")
            .check_int("breaker.window", u64::from(self.window))?;
        BREAKER_RATE.check_f32("breaker.failure_rate", self.failure_rate)?;
        BREAKER_FRACTION.check_f32("breaker.max_open_fraction", self.max_open_fraction)?;
        BREAKER_COOLDOWN.check_int("breaker.cooldown", self.cooldown.0)?;
        Bounds::ints(self.cooldown.0, COOLDOWN_MAX_NS, "ns")
            .check_int("breaker.max_cooldown", self.max_cooldown.0)?;
        Ok(())
    }
}

/// Outcome and breaker counters (monotonic, but `open_now`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BreakerStats {
    /// Outcomes recorded as completed.
    pub completed: u64,
    /// Outcomes recorded as failed.
    pub failed: u64,
    /// Outcomes recorded as cancelled.
    pub cancelled: u64,
    /// Outcomes of a tenancy no longer registered (the worker was removed): ignored.
    pub stale_outcomes: u64,
    /// Times a closed breaker opened.
    pub opened: u64,
    /// Times a half-open breaker's probe failed and it opened again.
    pub reopened: u64,
    /// Times a breaker went half-open after its cooldown.
    pub half_opened: u64,
    /// Times a half-open breaker's probe completed and it closed.
    pub closed: u64,
    /// Openings refused by [`BreakerConfig::max_open_fraction`].
    pub open_refused: u64,
    /// Breakers open now (a gauge).
    pub open_now: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum State {
    #[default]
    Closed,
    Open {
        until: Nanos,
    },
    /// Since the router's clock read this.
    HalfOpen {
        since: Nanos,
    },
}

/// One slot's breaker, for one tenancy.
#[derive(Debug, Default)]
struct Breaker {
    generation: u64,
    state: State,
    consecutive: u32,
    /// The last outcomes, newest in bit 0 (1 = failed).
    failures: u64,
    /// Known outcomes in `failures` (at most the window).
    known: u32,
    /// The next open period.
    cooldown: Nanos,
}

/// What an outcome did to its worker's breaker: the router acts on openings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transition {
    None,
    /// The breaker opened: exclude the worker.
    Opened,
}

/// Every slot's breaker; outcomes lock only their own slot.
pub(crate) struct Breakers {
    config: Option<BreakerConfig>,
    /// The router's clock (the latest `publish` time, ns), for outcomes.
    clock: AtomicU64,
    slots: Vec<Mutex<Breaker>>,
    /// Open breakers now (also the fast check of `due`).
    open: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    cancelled: AtomicU64,
    stale: AtomicU64,
    opened: AtomicU64,
    reopened: AtomicU64,
    half_opened: AtomicU64,
    closed: AtomicU64,
    open_refused: AtomicU64,
}

impl Breakers {
    /// Breakers for `slots` slots (`None`: disabled, outcomes only counted).
    pub fn new(slots: usize, config: Option<BreakerConfig>) -> Self {
        let z = || AtomicU64::new(0);
        Self {
            config,
            clock: z(),
            slots: (0..slots).map(|_| Mutex::new(Breaker::default())).collect(),
            open: z(),
            completed: z(),
            failed: z(),
            cancelled: z(),
            stale: z(),
            opened: z(),
            reopened: z(),
            half_opened: z(),
            closed: z(),
            open_refused: z(),
        }
    }

    fn lock(&self, slot: Slot) -> Option<kvroute_core::sync::MutexGuard<'_, Breaker>> {
        let m = self.slots.get(slot.index())?;
        Some(m.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Starts (or ends, with generation 0) the tenancy of `slot`: closed, nothing counted.
    pub fn reset(&self, slot: Slot, generation: SlotGeneration) {
        if let Some(mut b) = self.lock(slot) {
            if matches!(b.state, State::Open { .. }) {
                self.open.fetch_sub(1, Relaxed);
            }
            *b = Breaker {
                generation: generation.0,
                cooldown: self.config.map_or(Nanos::ZERO, |c| c.cooldown),
                ..Breaker::default()
            };
        }
    }

    /// Records `outcome` of a decision on `slot` under `generation` (`None`: the worker is
    /// no longer registered), made at `decided_at` (the request's time; `None`: unknown,
    /// taken as now), with `registered` workers in the fleet, at the router's clock.
    pub fn record(
        &self,
        slot: Option<Slot>,
        generation: SlotGeneration,
        outcome: Outcome,
        decided_at: Option<Nanos>,
        registered: usize,
    ) -> Transition {
        let now = Nanos(self.clock.load(Relaxed));
        let counter = match outcome {
            Outcome::Completed => &self.completed,
            Outcome::Failed => &self.failed,
            Outcome::Cancelled => &self.cancelled,
        };
        let current = slot.and_then(|s| self.lock(s));
        let Some(mut b) = current.filter(|b| b.generation == generation.0) else {
            self.stale.fetch_add(1, Relaxed);
            return Transition::None;
        };
        counter.fetch_add(1, Relaxed);
        let Some(cfg) = self.config else {
            return Transition::None;
        };
        let failed = match outcome {
            Outcome::Completed => false,
            Outcome::Failed => true,
            Outcome::Cancelled => return Transition::None,
        };
        match b.state {
            // Outcomes of requests routed before the breaker opened: no news.
            State::Open { .. } => Transition::None,
            // A request routed before the breaker went half-open is no probe.
            State::HalfOpen { since } if decided_at.is_some_and(|t| t < since) => Transition::None,
            State::HalfOpen { .. } if failed => {
                // Reopening is opening: the same cap on the share open (a half-open breaker
                // is not counted open), else the breaker stays half-open.
                if !self.may_open(cfg, registered) {
                    return Transition::None;
                }
                self.reopened.fetch_add(1, Relaxed);
                self.open_now(&mut b, cfg, now);
                Transition::Opened
            }
            State::HalfOpen { .. } => {
                self.closed.fetch_add(1, Relaxed);
                *b = Breaker {
                    generation: b.generation,
                    cooldown: cfg.cooldown,
                    ..Breaker::default()
                };
                Transition::None
            }
            State::Closed => {
                let window_mask = if cfg.window >= 64 {
                    u64::MAX
                } else {
                    (1u64 << cfg.window) - 1
                };
                b.failures = ((b.failures << 1) | u64::from(failed)) & window_mask;
                b.known = (b.known + 1).min(cfg.window);
                b.consecutive = if failed { b.consecutive + 1 } else { 0 };
                let rate = f64::from(b.failures.count_ones()) / f64::from(b.known.max(1));
                let trips = b.consecutive >= cfg.consecutive_failures
                    || (b.known >= cfg.min_outcomes && rate >= f64::from(cfg.failure_rate));
                if !trips {
                    return Transition::None;
                }
                if !self.may_open(cfg, registered) {
                    return Transition::None;
                }
                self.opened.fetch_add(1, Relaxed);
                self.open_now(&mut b, cfg, now);
                Transition::Opened
            }
        }
    }

    /// Whether one more breaker may open: one always may; past that, at most the configured
    /// share of the registered workers. A refusal is counted.
    fn may_open(&self, cfg: BreakerConfig, registered: usize) -> bool {
        let open = self.open.load(Relaxed);
        let cap = (registered as f64 * f64::from(cfg.max_open_fraction)).floor() as u64;
        if open >= cap.max(1) {
            self.open_refused.fetch_add(1, Relaxed);
            return false;
        }
        true
    }

    fn open_now(&self, b: &mut Breaker, cfg: BreakerConfig, now: Nanos) {
        let period = if b.cooldown.0 == 0 {
            cfg.cooldown
        } else {
            b.cooldown
        };
        b.state = State::Open {
            until: now.saturating_add(period),
        };
        b.cooldown = Nanos(period.0.saturating_mul(2).min(cfg.max_cooldown.0));
        b.consecutive = 0;
        b.failures = 0;
        b.known = 0;
        self.open.fetch_add(1, Relaxed);
    }

    /// Advances the clock to `now` (a publication's time) and returns the slots whose
    /// cooldown ended by then, turned half-open (the router includes their workers again).
    /// Cheap when no breaker is open.
    pub fn due(&self, now: Nanos) -> Vec<Slot> {
        self.clock.fetch_max(now.0, Relaxed);
        let now = Nanos(self.clock.load(Relaxed));
        if self.open.load(Relaxed) == 0 {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (i, m) in self.slots.iter().enumerate() {
            let mut b = m.lock().unwrap_or_else(|p| p.into_inner());
            if let State::Open { until } = b.state {
                if now >= until {
                    b.state = State::HalfOpen { since: now };
                    self.open.fetch_sub(1, Relaxed);
                    self.half_opened.fetch_add(1, Relaxed);
                    out.push(Slot(i as u32));
                }
            }
        }
        out
    }

    /// The counters now.
    pub fn stats(&self) -> BreakerStats {
        let r = |a: &AtomicU64| a.load(Relaxed);
        BreakerStats {
            completed: r(&self.completed),
            failed: r(&self.failed),
            cancelled: r(&self.cancelled),
            stale_outcomes: r(&self.stale),
            opened: r(&self.opened),
            reopened: r(&self.reopened),
            half_opened: r(&self.half_opened),
            closed: r(&self.closed),
            open_refused: r(&self.open_refused),
            open_now: r(&self.open),
        }
    }
}
