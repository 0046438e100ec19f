//! What a decision returns: the chosen slot, its reason code, and the counterfactual.

use kvroute_core::Slot;
use kvroute_load::Validity;

/// Which telemetry was bad when a decision fell back (the worst among occupied slots).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
pub enum Reason {
    /// `round_robin`'s rotation.
    RoundRobin,
    /// Chosen by load-only cost (`least_load`, `projected_time` off or shadow).
    LeastLoad,
    /// The chosen worker holds the deepest cached prefix of the request and won.
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
    /// least-pressured owner keeps the request (incident B).
    NoSafeSpillHold,
    /// The policy needs telemetry that was not fresh; chosen by `least_load` instead.
    Fallback(FallbackCause),
    /// No occupied slot with a finite cost (empty fleet, all vacant, all NaN).
    NoEligibleWorker,
}

impl Reason {
    /// A short stable name for counters (`"cache_hold"`, `"fallback_stale"`, …).
    pub fn name(&self) -> &'static str {
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
        }
    }
}

/// What `projected_time` in `enforce` mode would have chosen (recorded in `shadow` mode).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Counterfactual {
    /// The slot it would have chosen.
    pub slot: Option<Slot>,
    /// Its reason.
    pub reason: Reason,
    /// Its projected cost (seconds; NaN when no slot).
    pub cost: f32,
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
    /// Whether two choices are the same decision: slot, reason, fallback, counterfactual slot
    /// and reason, and costs equal bit for bit.
    pub fn same_as(&self, o: &Choice) -> bool {
        let cf = |c: &Option<Counterfactual>| c.map(|c| (c.slot, c.reason, c.cost.to_bits()));
        self.slot == o.slot
            && self.reason == o.reason
            && self.fallback == o.fallback
            && self.cost.to_bits() == o.cost.to_bits()
            && self.overlap_blocks.to_bits() == o.overlap_blocks.to_bits()
            && cf(&self.shadow) == cf(&o.shadow)
    }
}
