//! Counters a gateway exports, and their plain snapshot [`RouterStats`].
//!
//! Every counter is a monotonic `Relaxed` atomic tally (no data is published through them);
//! a snapshot reads each on its own, so counters of decisions still in flight may be
//! partly included.
//!
//! Decisions are counted in arrays indexed by the scorer's dense indices
//! ([`Policy::label_index`], [`Reason::index`], [`FallbackCause::index`]): recording one is
//! a few array increments, with no name lookup. The count by policy and reason goes to the
//! deciding thread's own tally (`tally.rs`), which a snapshot sums with the others.
//!
//! # Per worker
//! Each slot has one counter per reason, for the tenancy (the [`SlotGeneration`]) that
//! holds it. A counter packs the low [`TAG_BITS`] bits of the generation it counts for
//! above its count: [`Router::add_worker`](crate::Router::add_worker) resets the slot's
//! counters to the new generation before any decision can reserve under it, and a decision
//! increments a counter only while its tag is the decision's generation (compare and
//! swap), so a decision of a removed worker that finishes late is not counted for the
//! slot's next tenant. A counter saturates at `2^40 − 1` decisions. Two tenancies `2^24`
//! generations apart share a tag; a decision would have to stay in flight across that many
//! re-additions of its slot to be miscounted.

use core::fmt;

use kvroute_core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use kvroute_core::{Slot, SlotGeneration, WorkerId};
use kvroute_load::{ReservationStats, Reserved};
use kvroute_score::{FallbackCause, Policy, Reason};

use crate::breaker::BreakerStats;
use crate::carry::CarryStats;
use crate::error::RouteError;
use crate::predicted::PredictionStats;
use crate::tally::{COUNTERS, Tallies, Tally};
use kvroute_core::sync::Arc;

/// Bits of a per-worker counter holding the generation tag (the rest hold the count).
const TAG_BITS: u32 = 24;
/// Bits of a per-worker counter holding the count.
const COUNT_BITS: u32 = 64 - TAG_BITS;
/// The count part of a per-worker counter (and the count it saturates at).
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

/// The tag of `generation`, in place above the count.
fn tag(generation: SlotGeneration) -> u64 {
    (generation.0 & ((1 << TAG_BITS) - 1)) << COUNT_BITS
}

/// Decisions made under one policy label with one reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecisionCount {
    /// The policy's label ([`Policy::label`]): its name, and `projected_time`'s mode
    /// (`"projected_time:shadow"`); one of [`Policy::LABELED`]'s.
    pub policy: &'static str,
    /// The reason.
    pub reason: Reason,
    /// Decisions (monotonic).
    pub count: u64,
}

/// Decisions that went to one registered worker since it was (last) added, by reason.
///
/// A decision counts for the worker it returned (the admission redirect's target when
/// admission moved it), under its final reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerDecisions {
    /// The worker.
    pub worker: WorkerId,
    /// Its slot.
    pub slot: Slot,
    /// Its tenancy of the slot; the counts are this tenancy's only.
    pub generation: SlotGeneration,
    /// Decisions by reason, indexed by [`Reason::index`] (monotonic during the tenancy).
    pub by_reason: [u64; Reason::COUNT],
}

impl WorkerDecisions {
    /// All its decisions (sum of [`by_reason`](Self::by_reason)).
    pub fn total(&self) -> u64 {
        self.by_reason.iter().sum()
    }

    /// Its decisions with reason `reason`.
    pub fn with_reason(&self, reason: Reason) -> u64 {
        self.by_reason[reason.index()]
    }
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

impl FallbackCounts {
    /// The count of `cause`.
    pub fn get(&self, cause: FallbackCause) -> u64 {
        // In `FallbackCause::ALL` order.
        let all = [self.missing, self.invalid, self.stale, self.partial];
        all.get(cause.index()).copied().unwrap_or(0)
    }
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

impl RejectionCounts {
    /// Every kind with its name (`"invalid_request"`, `"no_eligible_worker"`,
    /// `"over_bound"`, `"contended"`, `"saturated"`), in that order.
    pub fn named(&self) -> [(&'static str, u64); 5] {
        [
            ("invalid_request", self.invalid_request),
            ("no_eligible_worker", self.no_eligible_worker),
            ("over_bound", self.over_bound),
            ("contended", self.contended),
            ("saturated", self.saturated),
        ]
    }
}

/// A plain copy of the router's counters at one moment. Its [`Display`](fmt::Display) is a
/// multi-line summary for logs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RouterStats {
    /// Decisions by policy label and reason; only non-zero entries, in a fixed order
    /// (labels in [`Policy::LABELED`] order, then reasons in [`Reason::ALL`] order).
    pub decisions: Vec<DecisionCount>,
    /// Decisions by registered worker, every registered worker in slot order (zeros
    /// included). A removed worker's decisions leave this list (they stay in
    /// [`decisions`](Self::decisions)); a re-added worker starts from zero.
    pub workers: Vec<WorkerDecisions>,
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
    /// Route calls whose expected output was cut to what the engines' context leaves after
    /// the prompt ([`RouterConfig::max_model_len`](crate::RouterConfig::max_model_len)),
    /// counted whatever the request's outcome.
    pub outputs_capped: u64,
    /// Errors returned by `route`.
    pub rejections: RejectionCounts,
    /// Work released by the TTL sweeper (requests and tokens).
    pub reservations_swept: Reserved,
    /// The reservation table's own counters (stale, saturated and contended refusals,
    /// reconciled and removed amounts).
    pub reservations: ReservationStats,
    /// Work carried into workers added back soon after their removal
    /// ([`Router::add_worker`](crate::Router::add_worker)).
    pub carried: CarryStats,
    /// Request outcomes and the per-worker breaker
    /// ([`Router::finish`](crate::Router::finish)).
    pub breaker: BreakerStats,
    /// Predicted residency ([`PredictedConfig`](crate::PredictedConfig)); zeros when it is
    /// disabled.
    pub predictions: PredictionStats,
}

impl RouterStats {
    /// Total decisions (sum of [`decisions`](Self::decisions)).
    pub fn total_decisions(&self) -> u64 {
        self.decisions.iter().map(|d| d.count).sum()
    }

    /// Decisions with reason `reason` under any policy.
    pub fn with_reason(&self, reason: Reason) -> u64 {
        self.decisions
            .iter()
            .filter(|d| d.reason == reason)
            .map(|d| d.count)
            .sum()
    }

    /// The decisions of `worker`, if it is registered.
    pub fn worker(&self, worker: WorkerId) -> Option<&WorkerDecisions> {
        self.workers.iter().find(|w| w.worker == worker)
    }
}

/// `n requests, n prefill tokens, n decode tokens`.
struct Work<'a>(&'a Reserved);

impl fmt::Display for Work<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.0;
        write!(
            f,
            "{} requests, {} prefill tokens, {} decode tokens",
            r.requests, r.prefill_tokens, r.decode_tokens
        )
    }
}

/// ` reason n, reason n` for the non-zero reasons of `by_reason`.
struct Reasons<'a>(&'a [u64; Reason::COUNT]);

impl fmt::Display for Reasons<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        for r in Reason::ALL {
            let n = self.0[r.index()];
            if n > 0 {
                write!(f, "{sep}{r} {n}")?;
                sep = ", ";
            }
        }
        Ok(())
    }
}

impl fmt::Display for RouterStats {
    /// One line per decision count and per worker, then one per group of counters:
    ///
    /// ```text
    /// decisions: 3
    ///   projected_time cache_hold: 2
    ///   projected_time fallback_missing: 1
    /// decisions by worker (since each was added):
    ///   1:0 (slot 0): 2 (cache_hold 2)
    ///   2:0 (slot 1): 1 (fallback_missing 1)
    /// shadow disagreements: 0
    /// fallbacks: missing 1, invalid 0, stale 0, partial 0
    /// rescores: 0, unchecked reserves: 0, admission redirects: 0, outputs capped: 0
    /// rejections: invalid_request 0, no_eligible_worker 0, over_bound 0, contended 0, saturated 0
    /// reservations refused: stale 0, saturated 0, contended 0; underflows clamped: 0; token amounts saturated: 0
    /// reservations swept: 0 requests, 0 prefill tokens, 0 decode tokens
    /// reservations reconciled: 0 requests, 0 prefill tokens, 0 decode tokens
    /// reservations removed: 0 requests, 0 prefill tokens, 0 decode tokens
    /// carried into re-added workers: 0 re-additions, 0 reports, 0 requests, 0 prefill tokens, 0 decode tokens; 0 requests not carried
    /// carried work returned by the router: 0 requests, 0 prefill tokens, 0 decode tokens
    /// outcomes: completed 0, failed 0, cancelled 0, stale 0; breakers: opened 0, reopened 0, half-opened 0, closed 0, refused 0, open now 0
    /// predictions: recorded 0, contended 0, credited 0, retired 0
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "decisions: {}", self.total_decisions())?;
        for d in &self.decisions {
            writeln!(f, "  {} {}: {}", d.policy, d.reason, d.count)?;
        }
        writeln!(f, "decisions by worker (since each was added):")?;
        for w in &self.workers {
            write!(f, "  {} (slot {}): {}", w.worker, w.slot.0, w.total())?;
            if w.total() > 0 {
                write!(f, " ({})", Reasons(&w.by_reason))?;
            }
            writeln!(f)?;
        }
        writeln!(f, "shadow disagreements: {}", self.shadow_disagreements)?;
        f.write_str("fallbacks:")?;
        for (i, c) in FallbackCause::ALL.into_iter().enumerate() {
            let sep = if i == 0 { " " } else { ", " };
            write!(f, "{sep}{} {}", c.name(), self.fallbacks.get(c))?;
        }
        writeln!(
            f,
            "\nrescores: {}, unchecked reserves: {}, admission redirects: {}, outputs capped: {}",
            self.rescores, self.unchecked_reserves, self.admission_redirects, self.outputs_capped
        )?;
        f.write_str("rejections:")?;
        for (i, (kind, n)) in self.rejections.named().into_iter().enumerate() {
            let sep = if i == 0 { " " } else { ", " };
            write!(f, "{sep}{kind} {n}")?;
        }
        let t = &self.reservations;
        writeln!(
            f,
            "\nreservations refused: stale {}, saturated {}, contended {}; underflows \
             clamped: {}; token amounts saturated: {}",
            t.rejected_stale,
            t.rejected_saturated,
            t.rejected_contended,
            t.underflow_clamped,
            t.saturated_tokens
        )?;
        writeln!(f, "reservations swept: {}", Work(&self.reservations_swept))?;
        writeln!(f, "reservations reconciled: {}", Work(&t.reconciled))?;
        writeln!(f, "reservations removed: {}", Work(&t.removed))?;
        let c = &self.carried;
        writeln!(
            f,
            "carried into re-added workers: {} re-additions, {} reports, {}; {} requests not \
             carried",
            c.readditions,
            c.reports,
            Work(&c.reserved),
            c.dropped_requests
        )?;
        writeln!(
            f,
            "carried work returned by the router: {}",
            Work(&c.returned)
        )?;
        let b = &self.breaker;
        writeln!(
            f,
            "outcomes: completed {}, failed {}, cancelled {}, stale {}; breakers: opened {}, \
             reopened {}, half-opened {}, closed {}, refused {}, open now {}",
            b.completed,
            b.failed,
            b.cancelled,
            b.stale_outcomes,
            b.opened,
            b.reopened,
            b.half_opened,
            b.closed,
            b.open_refused,
            b.open_now
        )?;
        let p = &self.predictions;
        writeln!(
            f,
            "predictions: recorded {}, contended {}, credited {}, retired {}",
            p.recorded, p.contended, p.credited, p.retired
        )
    }
}

/// The live counters.
#[derive(Debug)]
pub(crate) struct Counters {
    /// By policy label and reason: `label_index · Reason::COUNT + reason index`. Decisions
    /// made with a one-off buffer set, and the folded tallies (`tally.rs`); the rest are
    /// in `tallies`.
    decisions: [AtomicU64; COUNTERS],
    /// The per-thread tallies of the same counts (`tally.rs`).
    tallies: Tallies,
    /// By slot and reason, tagged with the tenancy (module docs): `slot · Reason::COUNT +
    /// reason index`.
    by_slot: Box<[AtomicU64]>,
    shadow_disagreements: AtomicU64,
    fallbacks: [AtomicU64; FallbackCause::COUNT],
    rescores: AtomicU64,
    unchecked: AtomicU64,
    redirects: AtomicU64,
    rejections: [AtomicU64; 5],
    outputs_capped: AtomicU64,
}

fn bump(a: &AtomicU64, by: u64) {
    a.fetch_add(by, Relaxed);
}

/// Adds one to the per-worker counter `a` if it counts for the tenancy tagged `tag` and is
/// not saturated.
fn bump_tenancy(a: &AtomicU64, tag: u64) {
    let mut cur = a.load(Relaxed);
    while cur & !COUNT_MASK == tag && cur & COUNT_MASK != COUNT_MASK {
        match a.compare_exchange_weak(cur, cur + 1, Relaxed, Relaxed) {
            Ok(_) => return,
            Err(now) => cur = now,
        }
    }
}

/// One decision, as [`Counters::decision`] records it.
pub(crate) struct Record<'a> {
    pub policy: &'a Policy,
    pub reason: Reason,
    pub fallback: Option<FallbackCause>,
    pub shadow_disagrees: bool,
    pub redirected: bool,
    /// Where the decision reserved.
    pub slot: Slot,
    pub generation: SlotGeneration,
}

impl Counters {
    /// Counters for a router of `worker_slots` slots.
    pub(crate) fn new(worker_slots: usize) -> Self {
        Self {
            decisions: core::array::from_fn(|_| AtomicU64::new(0)),
            tallies: Tallies::default(),
            by_slot: (0..worker_slots * Reason::COUNT)
                .map(|_| AtomicU64::new(0))
                .collect(),
            shadow_disagreements: AtomicU64::new(0),
            fallbacks: core::array::from_fn(|_| AtomicU64::new(0)),
            rescores: AtomicU64::new(0),
            unchecked: AtomicU64::new(0),
            redirects: AtomicU64::new(0),
            rejections: core::array::from_fn(|_| AtomicU64::new(0)),
            outputs_capped: AtomicU64::new(0),
        }
    }

    /// The per-reason counters of `slot` (empty for a slot out of range).
    fn slot_counters(&self, slot: Slot) -> &[AtomicU64] {
        let start = slot.index() * Reason::COUNT;
        self.by_slot
            .get(start..start + Reason::COUNT)
            .unwrap_or(&[])
    }

    /// Starts the per-worker counts of the tenancy `generation` of `slot` at zero. Call it
    /// when the tenancy begins, before any decision can reserve under it.
    pub(crate) fn start_tenancy(&self, slot: Slot, generation: SlotGeneration) {
        for a in self.slot_counters(slot) {
            a.store(tag(generation), Relaxed);
        }
    }

    /// A tally for one thread's buffer set, registered with these counters (`tally.rs`).
    pub(crate) fn new_tally(&self) -> Arc<Tally> {
        self.tallies.register(&self.decisions)
    }

    /// Records one decision, by policy and reason on `tally` (the deciding buffer set's
    /// own, no read-modify-write) or, without one, on the shared counters.
    #[inline(always)]
    pub(crate) fn decision(&self, d: &Record<'_>, tally: Option<&Tally>) {
        let r = d.reason.index();
        let i = d.policy.label_index() * Reason::COUNT + r;
        match tally {
            Some(t) => t.add_one(i),
            None => bump(&self.decisions[i], 1),
        }
        if let Some(a) = self.slot_counters(d.slot).get(r) {
            bump_tenancy(a, tag(d.generation));
        }
        if let Some(c) = d.fallback {
            bump(&self.fallbacks[c.index()], 1);
        }
        if d.shadow_disagrees {
            bump(&self.shadow_disagreements, 1);
        }
        if d.redirected {
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

    pub(crate) fn output_capped(&self) {
        bump(&self.outputs_capped, 1);
    }

    pub(crate) fn rejection(&self, e: &RouteError) {
        let i = match e {
            RouteError::PromptLengthMismatch { .. }
            | RouteError::EmptyPrompt
            | RouteError::TooManyHashes { .. }
            | RouteError::ExtraKeysOutOfOrder { .. } => 0,
            RouteError::NotPublished | RouteError::NoEligibleWorker => 1,
            RouteError::Rejected { .. } => 2,
            RouteError::Contended { .. } => 3,
            RouteError::Saturated { .. } => 4,
        };
        bump(&self.rejections[i], 1);
    }

    /// The decisions of the tenancy `generation` of `slot`, held by `worker` (zeros when
    /// the slot's counters have not been started for it yet).
    fn worker(&self, slot: Slot, worker: WorkerId, generation: SlotGeneration) -> WorkerDecisions {
        let mut by_reason = [0; Reason::COUNT];
        for (n, a) in by_reason.iter_mut().zip(self.slot_counters(slot)) {
            let v = a.load(Relaxed);
            if v & !COUNT_MASK == tag(generation) {
                *n = v & COUNT_MASK;
            }
        }
        WorkerDecisions {
            worker,
            slot,
            generation,
            by_reason,
        }
    }

    /// A snapshot, with `tenants` (the registered workers with their slot and tenancy, in
    /// slot order) for the per-worker counts.
    pub(crate) fn snapshot(
        &self,
        reservations: ReservationStats,
        tenants: impl IntoIterator<Item = (Slot, WorkerId, SlotGeneration)>,
    ) -> RouterStats {
        let r = |a: &AtomicU64| a.load(Relaxed);
        let by_label = self.tallies.sum(&self.decisions);
        let mut decisions = Vec::new();
        for policy in &Policy::LABELED {
            for reason in Reason::ALL {
                let count = by_label[policy.label_index() * Reason::COUNT + reason.index()];
                if count > 0 {
                    decisions.push(DecisionCount {
                        policy: policy.label(),
                        reason,
                        count,
                    });
                }
            }
        }
        let workers = tenants
            .into_iter()
            .map(|(slot, worker, generation)| self.worker(slot, worker, generation))
            .collect();
        let [missing, invalid, stale, partial] =
            FallbackCause::ALL.map(|c| r(&self.fallbacks[c.index()]));
        let [
            invalid_request,
            no_eligible_worker,
            over_bound,
            contended,
            saturated,
        ] = &self.rejections;
        RouterStats {
            decisions,
            workers,
            shadow_disagreements: r(&self.shadow_disagreements),
            fallbacks: FallbackCounts {
                missing,
                invalid,
                stale,
                partial,
            },
            rescores: r(&self.rescores),
            unchecked_reserves: r(&self.unchecked),
            admission_redirects: r(&self.redirects),
            outputs_capped: r(&self.outputs_capped),
            rejections: RejectionCounts {
                invalid_request: r(invalid_request),
                no_eligible_worker: r(no_eligible_worker),
                over_bound: r(over_bound),
                contended: r(contended),
                saturated: r(saturated),
            },
            reservations_swept: reservations.swept,
            reservations,
            // Filled in by the router, which keeps it under its load lock.
            carried: CarryStats::default(),
            breaker: BreakerStats::default(),
            predictions: PredictionStats::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The per-worker counter of a tenancy counts only that tenancy's decisions: a late
    /// decision of the previous tenant, recorded after the slot was re-tenanted, is not
    /// counted; it also saturates instead of spilling into the tag.
    #[test]
    fn per_slot_counts_belong_to_one_tenancy() {
        let c = Counters::new(2);
        let (old, new) = (SlotGeneration(1), SlotGeneration(2));
        let w = WorkerId::new(7, 0);
        let rec = |generation, reason| Record {
            policy: &Policy::LeastLoad,
            reason,
            fallback: None,
            shadow_disagrees: false,
            redirected: false,
            slot: Slot(1),
            generation,
        };
        c.start_tenancy(Slot(1), old);
        c.decision(&rec(old, Reason::LeastLoad), None);
        c.decision(&rec(old, Reason::LeastLoad), None);
        assert_eq!(c.worker(Slot(1), w, old).with_reason(Reason::LeastLoad), 2);
        c.start_tenancy(Slot(1), new);
        c.decision(&rec(old, Reason::LeastLoad), None);
        c.decision(&rec(new, Reason::CacheHold), None);
        let now = c.worker(Slot(1), w, new);
        assert_eq!((now.total(), now.with_reason(Reason::CacheHold)), (1, 1));
        // The old tenancy reads as nothing once the slot is re-tenanted, and a slot whose
        // counters were never started reads as nothing.
        assert_eq!(c.worker(Slot(1), w, old).total(), 0);
        assert_eq!(c.worker(Slot(0), w, old).total(), 0);
        // All four decisions count by policy.
        let s = c.snapshot(ReservationStats::default(), []);
        assert_eq!(s.total_decisions(), 4);

        let i = Reason::CacheHold.index();
        c.by_slot[Reason::COUNT + i].store(tag(new) | (COUNT_MASK - 1), Relaxed);
        c.decision(&rec(new, Reason::CacheHold), None);
        c.decision(&rec(new, Reason::CacheHold), None);
        assert_eq!(
            c.by_slot[Reason::COUNT + i].load(Relaxed),
            tag(new) | COUNT_MASK
        );
        assert_eq!(
            c.worker(Slot(1), w, new).with_reason(Reason::CacheHold),
            (1 << 40) - 1
        );
    }

    /// Generations 2^24 apart share a tag (the documented limit); neighbours never do.
    #[test]
    fn tags_wrap_after_2_pow_24_generations() {
        assert_ne!(tag(SlotGeneration(1)), tag(SlotGeneration(2)));
        assert_eq!(tag(SlotGeneration(3)), tag(SlotGeneration(3 + (1 << 24))));
        assert_eq!(tag(SlotGeneration(1)) & COUNT_MASK, 0);
    }
}
