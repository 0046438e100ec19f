//! Counters a gateway exports, and their plain snapshot [`RouterStats`].
//!
//! Every counter is a monotonic `Relaxed` atomic tally (no data is published through them);
//! a snapshot reads each on its own, so counters of decisions still in flight may be
//! partly included.

use kvroute_core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use kvroute_load::{ReservationStats, Reserved};
use kvroute_score::{FallbackCause, Policy, Reason};

use crate::error::RouteError;

const POLICIES: [&str; 9] = [
    "round_robin",
    "least_load",
    "kv_aware",
    "load_aware",
    "owner_pressure",
    "projected_time",
    "dynamo_cost",
    "lmetric",
    "cache_aware",
];

const REASONS: [&str; 12] = [
    "round_robin",
    "least_load",
    "cache_hold",
    "cache_miss",
    "spill",
    "load_escape",
    "no_safe_spill_hold",
    "fallback_missing",
    "fallback_invalid",
    "fallback_stale",
    "fallback_partial",
    "no_eligible_worker",
];

fn policy_index(p: &Policy) -> usize {
    POLICIES.iter().position(|n| *n == p.name()).unwrap_or(0)
}

fn reason_index(r: &Reason) -> usize {
    REASONS.iter().position(|n| *n == r.name()).unwrap_or(0)
}

fn cause_index(c: FallbackCause) -> usize {
    match c {
        FallbackCause::Missing => 0,
        FallbackCause::Invalid => 1,
        FallbackCause::Stale => 2,
        FallbackCause::Partial => 3,
    }
}

/// Decisions made under one policy with one reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecisionCount {
    /// The policy's name ([`Policy::name`]).
    pub policy: &'static str,
    /// The reason's name ([`Reason::name`]).
    pub reason: &'static str,
    /// Decisions (monotonic).
    pub count: u64,
}

/// Decisions whose scorer fell back to load-only, by the telemetry that forced it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FallbackCounts {
    /// A worker had never reported.
    pub missing: u64,
    /// A worker's latest report was rejected.
    pub invalid: u64,
    /// A worker's report was older than the configured age.
    pub stale: u64,
    /// An engine's DP ranks were not all current.
    pub partial: u64,
}

/// `route` calls that returned an error, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RejectionCounts {
    /// Malformed requests (length mismatches).
    pub invalid_request: u64,
    /// No eligible worker.
    pub no_eligible_worker: u64,
    /// Admission: every worker over the bound.
    pub over_bound: u64,
    /// Re-scores ran out.
    pub contended: u64,
    /// Reservation counters saturated.
    pub saturated: u64,
}

/// A plain copy of the router's counters at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RouterStats {
    /// Decisions by policy and reason; only non-zero entries, in a fixed order (policies,
    /// then reasons, as declared).
    pub decisions: Vec<DecisionCount>,
    /// Shadow-mode decisions whose counterfactual chose another worker than the dispatch.
    pub shadow_disagreements: u64,
    /// Fallbacks by cause.
    pub fallbacks: FallbackCounts,
    /// Re-scores after a concurrent sibling took the chosen slot or the worker was removed,
    /// counted whatever the request's outcome (a decision or an error).
    pub rescores: u64,
    /// Decisions that reserved without the sibling check because re-scores ran out.
    pub unchecked_reserves: u64,
    /// Decisions admission moved off the scorer's pick.
    pub admission_redirects: u64,
    /// Errors returned by `route`.
    pub rejections: RejectionCounts,
    /// Work released by the TTL sweeper (requests and tokens).
    pub reservations_swept: Reserved,
    /// The reservation table's own counters (stale, saturated and contended refusals,
    /// reconciled and removed amounts).
    pub reservations: ReservationStats,
}

impl RouterStats {
    /// Total decisions (sum of [`decisions`](Self::decisions)).
    pub fn total_decisions(&self) -> u64 {
        self.decisions.iter().map(|d| d.count).sum()
    }

    /// Decisions with reason `reason` (by [`Reason::name`]) under any policy.
    pub fn with_reason(&self, reason: &str) -> u64 {
        self.decisions
            .iter()
            .filter(|d| d.reason == reason)
            .map(|d| d.count)
            .sum()
    }
}

/// The live counters.
#[derive(Debug)]
pub(crate) struct Counters {
    decisions: Box<[AtomicU64]>,
    shadow_disagreements: AtomicU64,
    fallbacks: [AtomicU64; 4],
    rescores: AtomicU64,
    unchecked: AtomicU64,
    redirects: AtomicU64,
    rejections: [AtomicU64; 5],
}

fn bump(a: &AtomicU64, by: u64) {
    a.fetch_add(by, Relaxed);
}

impl Counters {
    pub(crate) fn new() -> Self {
        Self {
            decisions: (0..POLICIES.len() * REASONS.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            shadow_disagreements: AtomicU64::new(0),
            fallbacks: core::array::from_fn(|_| AtomicU64::new(0)),
            rescores: AtomicU64::new(0),
            unchecked: AtomicU64::new(0),
            redirects: AtomicU64::new(0),
            rejections: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Records one decision.
    pub(crate) fn decision(
        &self,
        policy: &Policy,
        reason: &Reason,
        fallback: Option<FallbackCause>,
        shadow_disagrees: bool,
        redirected: bool,
    ) {
        bump(
            &self.decisions[policy_index(policy) * REASONS.len() + reason_index(reason)],
            1,
        );
        if let Some(c) = fallback {
            bump(&self.fallbacks[cause_index(c)], 1);
        }
        if shadow_disagrees {
            bump(&self.shadow_disagreements, 1);
        }
        if redirected {
            bump(&self.redirects, 1);
        }
    }

    pub(crate) fn rescores(&self, n: u32) {
        if n > 0 {
            bump(&self.rescores, u64::from(n));
        }
    }

    pub(crate) fn unchecked(&self) {
        bump(&self.unchecked, 1);
    }

    pub(crate) fn rejection(&self, e: &RouteError) {
        let i = match e {
            RouteError::PromptLengthMismatch { .. } | RouteError::TooManyHashes { .. } => 0,
            RouteError::NotPublished | RouteError::NoEligibleWorker => 1,
            RouteError::Rejected { .. } => 2,
            RouteError::Contended { .. } => 3,
            RouteError::Saturated { .. } => 4,
        };
        bump(&self.rejections[i], 1);
    }

    pub(crate) fn snapshot(&self, reservations: ReservationStats) -> RouterStats {
        let r = |a: &AtomicU64| a.load(Relaxed);
        let mut decisions = Vec::new();
        for (p, policy) in POLICIES.iter().enumerate() {
            for (q, reason) in REASONS.iter().enumerate() {
                let count = r(&self.decisions[p * REASONS.len() + q]);
                if count > 0 {
                    decisions.push(DecisionCount {
                        policy,
                        reason,
                        count,
                    });
                }
            }
        }
        let [missing, invalid, stale, partial] = &self.fallbacks;
        let [
            invalid_request,
            no_eligible_worker,
            over_bound,
            contended,
            saturated,
        ] = &self.rejections;
        RouterStats {
            decisions,
            shadow_disagreements: r(&self.shadow_disagreements),
            fallbacks: FallbackCounts {
                missing: r(missing),
                invalid: r(invalid),
                stale: r(stale),
                partial: r(partial),
            },
            rescores: r(&self.rescores),
            unchecked_reserves: r(&self.unchecked),
            admission_redirects: r(&self.redirects),
            rejections: RejectionCounts {
                invalid_request: r(invalid_request),
                no_eligible_worker: r(no_eligible_worker),
                over_bound: r(over_bound),
                contended: r(contended),
                saturated: r(saturated),
            },
            reservations_swept: reservations.swept,
            reservations,
        }
    }
}
