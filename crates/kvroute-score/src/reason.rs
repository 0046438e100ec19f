//! What a decision returns: the chosen slot, its reason code, and the counterfactual.

use core::fmt;
use core::str::FromStr;

use kvroute_core::Slot;
use kvroute_load::Validity;

/// Which telemetry was bad when a decision fell back (the worst among occupied slots).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FallbackCause {
    /// A worker has never reported.
    Missing,
    /// A worker's latest report was rejected (NaN, negative, zero cap, …).
    Invalid,
    /// A worker's last good report is older than the configured age.
    Stale,
    /// A worker's engine has DP ranks that are not current (incomplete sums).
    Partial,
}

impl FallbackCause {
    /// Every cause, in declaration order (`ALL[c.index()] == c`).
    pub const ALL: [FallbackCause; 4] = [
        FallbackCause::Missing,
        FallbackCause::Invalid,
        FallbackCause::Stale,
        FallbackCause::Partial,
    ];

    /// Number of causes (`ALL.len()`).
    pub const COUNT: usize = Self::ALL.len();

    /// The position in [`ALL`](Self::ALL), `0..COUNT`.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// A short stable name: `"missing"`, `"invalid"`, `"stale"` or `"partial"`.
    pub const fn name(self) -> &'static str {
        match self {
            FallbackCause::Missing => "missing",
            FallbackCause::Invalid => "invalid",
            FallbackCause::Stale => "stale",
            FallbackCause::Partial => "partial",
        }
    }

    /// The cause for a non-fresh validity; `None` for `Fresh` and `Vacant`.
    pub fn from_validity(v: Validity) -> Option<Self> {
        match v {
            Validity::Missing => Some(Self::Missing),
            Validity::Invalid => Some(Self::Invalid),
            Validity::Stale => Some(Self::Stale),
            Validity::Partial => Some(Self::Partial),
            Validity::Fresh | Validity::Vacant => None,
        }
    }
}

/// Why a worker was chosen (or none was). Every decision carries exactly one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// `round_robin`'s rotation.
    RoundRobin,
    /// Chosen by load-only cost (`least_load`, `projected_time` off or shadow).
    LeastLoad,
    /// The chosen worker holds the deepest cached prefix of the request and won. The
    /// prefix is the one the scorer was given: with the router's predicted residency on,
    /// a prompt routed there whose KV events have not arrived counts too (the router's
    /// `Decision::predicted_blocks` says how much of it was credited, `overlap_blocks`
    /// how much the index knows), so a decision held by a credit alone is counted here.
    CacheHold,
    /// No worker holds any block of the request's prefix; chosen by cost.
    CacheMiss,
    /// A worker that does not hold the deepest prefix won on cost: load beat affinity
    /// (cost models), or `owner_pressure` spilled off a pressured owner.
    Spill,
    /// A hard load rule overrode the cache winner: `projected_time`'s escape margin, or
    /// `cache_aware`'s imbalance gate.
    LoadEscape,
    /// `owner_pressure`: every owner is pressured and no peer is a safe spill, so the
    /// least-pressured owner keeps the request.
    NoSafeSpillHold,
    /// The policy needs telemetry that was not fresh; chosen by `least_load` instead.
    Fallback(FallbackCause),
    /// No occupied slot with a finite cost (empty fleet, all vacant, all NaN).
    NoEligibleWorker,
    /// `projected_time` with the fleet KV-bound (its mean KV usage at least
    /// [`ScoreConfig::kv_bound_usage`](crate::ScoreConfig::kv_bound_usage)): chosen by the
    /// blocks cost, which balances the workers' KV work with the cached prefix credited.
    KvBound,
}

impl Reason {
    /// Every reason, in [`index`](Self::index) order (`ALL[r.index()] == r`): declaration
    /// order, [`Reason::Fallback`] once per [`FallbackCause`] in [`FallbackCause::ALL`]
    /// order.
    pub const ALL: [Reason; 13] = [
        Reason::RoundRobin,
        Reason::LeastLoad,
        Reason::CacheHold,
        Reason::CacheMiss,
        Reason::Spill,
        Reason::LoadEscape,
        Reason::NoSafeSpillHold,
        Reason::Fallback(FallbackCause::Missing),
        Reason::Fallback(FallbackCause::Invalid),
        Reason::Fallback(FallbackCause::Stale),
        Reason::Fallback(FallbackCause::Partial),
        Reason::NoEligibleWorker,
        Reason::KvBound,
    ];

    /// Number of reasons (`ALL.len()`), fallbacks counted once per cause.
    pub const COUNT: usize = Self::ALL.len();

    /// The position in [`ALL`](Self::ALL), `0..COUNT`: dense, for per-reason arrays.
    pub const fn index(self) -> usize {
        const FALLBACK: usize = 7;
        match self {
            Reason::RoundRobin => 0,
            Reason::LeastLoad => 1,
            Reason::CacheHold => 2,
            Reason::CacheMiss => 3,
            Reason::Spill => 4,
            Reason::LoadEscape => 5,
            Reason::NoSafeSpillHold => 6,
            Reason::Fallback(c) => FALLBACK + c.index(),
            Reason::NoEligibleWorker => FALLBACK + FallbackCause::COUNT,
            Reason::KvBound => FALLBACK + FallbackCause::COUNT + 1,
        }
    }

    /// A short stable name for counters (`"cache_hold"`, `"fallback_stale"`, …).
    pub const fn name(&self) -> &'static str {
        match self {
            Reason::RoundRobin => "round_robin",
            Reason::LeastLoad => "least_load",
            Reason::CacheHold => "cache_hold",
            Reason::CacheMiss => "cache_miss",
            Reason::Spill => "spill",
            Reason::LoadEscape => "load_escape",
            Reason::NoSafeSpillHold => "no_safe_spill_hold",
            Reason::Fallback(FallbackCause::Missing) => "fallback_missing",
            Reason::Fallback(FallbackCause::Invalid) => "fallback_invalid",
            Reason::Fallback(FallbackCause::Stale) => "fallback_stale",
            Reason::Fallback(FallbackCause::Partial) => "fallback_partial",
            Reason::NoEligibleWorker => "no_eligible_worker",
            Reason::KvBound => "kv_bound",
        }
    }
}

impl fmt::Display for Reason {
    /// Writes [`name`](Reason::name).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Reason {
    type Err = ParseReasonError;

    /// The reason whose [`name`](Reason::name) is exactly `s`.
    ///
    /// # Errors
    /// [`ParseReasonError`] for any other string.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| ParseReasonError(s.to_owned()))
    }
}

/// A string that is no [`Reason::name`] (holds the string). Its
/// [`Display`](fmt::Display) lists the names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseReasonError(pub String);

impl fmt::Display for ParseReasonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown reason `{}`; accepted: ", self.0)?;
        for (i, r) in Reason::ALL.into_iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(r.name())?;
        }
        Ok(())
    }
}

impl std::error::Error for ParseReasonError {}

/// What `projected_time` in `enforce` mode would have chosen (recorded in `shadow` mode),
/// with what it would gain: both costs are under the model that made the counterfactual
/// choice, so [`gain`](Self::gain) = `dispatched_cost − cost` is the latency enforce
/// expects to save on this request.
///
/// That model is `enforce`'s projected seconds; on a KV-bound fleet
/// ([`Reason::KvBound`] as the counterfactual's reason,
/// [`ScoreConfig::kv_bound_usage`](crate::ScoreConfig::kv_bound_usage)) the blocks cost,
/// in blocks, so that both costs and the gain are blocks then; or, when `enforce` itself
/// falls back ([`Reason::Fallback`] as the counterfactual's reason), the fallback's
/// `least_load` seconds over the trusted slots (+inf for a slot the fallback excludes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Counterfactual {
    /// The slot it would have chosen.
    pub slot: Option<Slot>,
    /// Its reason.
    pub reason: Reason,
    /// Its cost under the model (seconds; blocks when the reason is
    /// [`Reason::KvBound`]; NaN when no slot).
    pub cost: f32,
    /// Its overlap (blocks; 0 when no slot).
    pub overlap_blocks: f32,
    /// The dispatched slot's cost under the same model (the unit of `cost`; NaN when
    /// nothing was dispatched; may be non-finite for a slot that model cannot cost).
    pub dispatched_cost: f32,
}

impl Counterfactual {
    /// What enforce expects to save on this request, `dispatched_cost − cost`, in the
    /// model's unit (seconds; blocks of KV work when the reason is [`Reason::KvBound`]):
    /// positive when the counterfactual is cheaper, 0 when it is the dispatched slot, NaN
    /// or infinite when either cost is.
    pub fn gain(&self) -> f32 {
        self.dispatched_cost - self.cost
    }
}

/// The scorer's decision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Choice {
    /// The chosen slot, `None` only with [`Reason::NoEligibleWorker`].
    pub slot: Option<Slot>,
    /// Why.
    pub reason: Reason,
    /// The chosen slot's cost under the model that decided (its unit is the model's:
    /// seconds, blocks, ratio, …; NaN when no slot).
    pub cost: f32,
    /// The chosen slot's overlap (blocks; 0 when no slot).
    pub overlap_blocks: f32,
    /// Set when telemetry forced a fallback (also for `owner_pressure`'s old-pressure
    /// fallback, whose reason stays the pressure rule's).
    pub fallback: Option<FallbackCause>,
    /// `projected_time` shadow mode: what enforce would have done.
    pub shadow: Option<Counterfactual>,
}

impl Choice {
    /// Whether two choices are the same decision: slot, reason, fallback, the
    /// counterfactual's slot and reason, and every cost and overlap (the choice's and the
    /// counterfactual's, its dispatched cost included) equal bit for bit, or both NaN (a
    /// NaN's sign and payload are not specified by IEEE 754 propagation: a scalar and a
    /// vector instruction may return different ones for the same operands).
    pub fn same_as(&self, o: &Choice) -> bool {
        let bits = |x: f32| {
            if x.is_nan() {
                f32::NAN.to_bits()
            } else {
                x.to_bits()
            }
        };
        let cf = |c: &Option<Counterfactual>| {
            c.map(|c| {
                (
                    c.slot,
                    c.reason,
                    bits(c.cost),
                    bits(c.overlap_blocks),
                    bits(c.dispatched_cost),
                )
            })
        };
        self.slot == o.slot
            && self.reason == o.reason
            && self.fallback == o.fallback
            && bits(self.cost) == bits(o.cost)
            && bits(self.overlap_blocks) == bits(o.overlap_blocks)
            && cf(&self.shadow) == cf(&o.shadow)
    }
}
