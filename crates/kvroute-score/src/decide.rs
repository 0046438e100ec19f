//! The policies: each one a configuration of the pass (cost kind, mask, tie rule) plus the
//! few scalar rules around it. Formulas of the cost kinds are in [`crate::cost`].
//!
//! * `round_robin`: cost 0, ties broken by the rotating cursor only.
//! * `least_load` (peers, the gateway): least `(queued + decode)/tps + barrier` seconds.
//! * `kv_aware` (pure affinity, the control): deepest overlap exactly, then fewest
//!   requests, then the cursor. Never falls back.
//! * `kv_aware_first` (pure affinity as the original router describes it, a control): the
//!   first slot holding the deepest prefix, however busy; a miss to the fewest requests,
//!   then the cursor. Never falls back.
//! * `load_aware { beta }`: least negated score (hit rate less the load penalty).
//! * `owner_pressure`: owners are the slots holding the deepest prefix.
//!   pressure = `max(k, util, occ)`, `occ` summed over DP ranks. The least-pressured owner
//!   keeps the request while its pressure is below `watermark` (0.9) and its prefix is worth
//!   keeping ([`Reason::CacheHold`]): with `s` the share of the prompt it holds and `ρ` a
//!   pressure clamped to `[0, 0.999]`, `(1 − s)·(1 − ρ_best) ≤ 1 − ρ_owner`, `best` the
//!   least-pressured slot fleet-wide. That is "the prefill left to do on the owner finishes
//!   no later than the whole prefill on `best`" in a processor-sharing engine, where work
//!   `w` on a server busy `ρ` of the time takes `w/(1 − ρ)` (the M/G/1-PS response time;
//!   Kleinrock, *Queueing Systems* vol. 2, §4.4): a one-block system prompt before 512
//!   unique tokens (`s` = 3 %) holds only while the owner is at most about 3 % busier, a
//!   4,096-token prefix of a 4,160-token prompt (`s` = 98 %) up to the watermark. A prefix
//!   not worth keeping goes to `best` ([`Reason::Spill`]). Past the watermark, the
//!   least-pressured slot fleet-wide takes it if its pressure is below the
//!   watermark and at least `owner_slack` (0.1) below the owner's ([`Reason::Spill`]);
//!   otherwise the owner holds ([`Reason::NoSafeSpillHold`]). No owner: least pressure
//!   ([`Reason::CacheMiss`]). If any occupied slot's occupancy is unknown (caps missing,
//!   partial or stale), every slot uses the old pressure `max(k, util)` and the choice
//!   records the fallback cause.
//! * `projected_time`: `off` = `least_load`; `shadow` = `least_load` with the
//!   enforce choice as counterfactual; `enforce` = least projected seconds (the latency the
//!   request adds, [`crate::cost`]), unless that winner's `least_load` seconds exceed the
//!   `least_load` winner's by more than `escape_margin_s` and by more than
//!   `escape_margin_s + escape_margin_rel · mean`, `mean` the mean `least_load` seconds of
//!   the other occupied slots (then the latter, [`Reason::LoadEscape`]). While the fleet
//!   is KV-bound (the occupied slots' mean KV usage,
//!   [`Aggregates::mean_kv_usage`](crate::Aggregates::mean_kv_usage), at least
//!   [`ScoreConfig::kv_bound_usage`], 0.9), enforce and shadow's counterfactual decide by
//!   `dynamo_cost`'s blocks cost instead, with its telemetry rules
//!   ([`Reason::KvBound`]; a fallback keeps its own reason): projected seconds model a
//!   batch limited by running slots, and once KV limits every batch an engine's backlog
//!   drains at its KV's turnover, which the blocks cost balances (`docs/RESULTS.md`, "The
//!   trace on the H100-sized engine"). The sparse decision never runs then.
//! * `dynamo_cost`, `lmetric`: least cost of their formulas.
//! * `cache_aware` (the gateway): if `max − min > imbalance_abs` and
//!   `max > min · imbalance_rel` (requests), the fewest requests ([`Reason::LoadEscape`]);
//!   else if the best match rate `min(deepest·bs, prompt)/prompt` exceeds
//!   `cache_threshold`, the deepest holder with fewest requests ([`Reason::CacheHold`]);
//!   else the fewest requests.
//!
//! Telemetry, for every policy that weighs load against cache (`load_aware`,
//! `projected_time` enforce, the peers' models `dynamo_cost` and `lmetric`):
//! * **scoped** while at most `fallback_fraction` (0.5) of the occupied slots are not fresh
//!   (missing, stale, invalid or partial): each such slot loses its cache credit (its cost
//!   is computed with no overlap) and is costed from what is known of it: its last figures
//!   whatever their age, less the requests they counted that this router has seen end
//!   since (beyond the reservations their publication absorbed), plus every request routed
//!   to it since (the reservations; the lanes hold both,
//!   `kvroute_load::Reserved::finished`). Unless its figures are stale and the router is
//!   the only one routing to it (`router_replicas` 1, the default: then what is known is
//!   the whole change since the report), or stale and below that report (each replica only
//!   replaces requests it saw end, so the replicas together never lift it above its
//!   report), that cost is conservative too: never below just above the best fresh slot's
//!   cost and its tie band, so it takes requests only when no fresh slot can. Missing,
//!   invalid and partial figures always get that floor (there is no whole report to start
//!   from). The escape follows the same rule: a slot with that floor is no escape target
//!   and not part of the escape's mean (its unknown load would read as none), while any
//!   fresh slot is eligible. The fresh slots keep their cache credit, so one restarting
//!   engine does not switch a whole fleet to load-only routing. A decision that lands on
//!   such a slot carries [`Reason::Fallback`] and the slot's own cause.
//! * **fleet-wide** past that share: `least_load` over every occupied slot from what is
//!   known of each (the same figures: a worker whose telemetry is missing or stale is not
//!   excluded, so the last worker still reporting, saturated, does not take every request),
//!   with [`Reason::Fallback`] naming the worst validity.
//!
//! `cache_aware` (a peer's rule) and `owner_pressure` (its own fleet-wide rule for
//! scheduler caps) keep their own fallbacks.

use kvroute_core::Slot;
use kvroute_load::Validity;

use crate::config::{Policy, ProjectedMode, ScoreConfig};
use crate::cost::{CostKind, LaneIn, Params, cost};
use crate::fleet::Fleet;
use crate::path::SimdPath;
use crate::reason::{Choice, Counterfactual, FallbackCause, Reason};
use crate::select::{Engine, Escape, Mask, Scalar, Simd, TieRule, lane_at};

/// The request as the scorer sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScoreRequest {
    /// Prompt length (tokens).
    pub prompt_tokens: u32,
    /// Block size of the overlaps (tokens per block, > 0; 0 is treated as 1).
    pub block_size: u32,
    /// Expected output length (tokens), the decode work `projected_time` charges; 0 =
    /// unknown, [`ScoreConfig::tokens_per_request`] is assumed.
    pub expected_output_tokens: u32,
}

/// The per-decision tie-breaking inputs the caller owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TieInput {
    /// The rotating cursor (the caller advances it per decision).
    pub cursor: u32,
    /// A fresh random draw, used only when `near_tie_band > 0` (see [`crate::NearTieRng`]).
    pub random: Option<u64>,
}

/// Reusable scratch of the pass (cost lanes); one per thread. Never allocates once sized.
#[derive(Clone, Debug, Default)]
pub struct Scorer {
    costs: Vec<f32>,
    aux: Vec<f32>,
    sparse: crate::sparse::Scratch,
    /// Whether the last `enforce` decided sparsely (so `costs` was not written).
    pub(crate) sparse_decided: bool,
    /// Set by `score_matched` when its sparse attempt left the fleet to the pass, so that
    /// the `enforce` it runs next does not make the same attempt again; cleared there.
    sparse_declined: bool,
}

struct Ctx<'a> {
    fleet: &'a Fleet,
    cfg: &'a ScoreConfig,
    p: Params,
    rule: TieRule,
}

impl Scorer {
    /// Empty scratch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decides with the fastest pass this process runs ([`SimdPath::active`]: AVX2 where
    /// the CPU has it, else the portable SIMD pass, unless `KVROUTE_SIMD` forced one).
    /// Never panics; an empty or all-ineligible fleet yields [`Reason::NoEligibleWorker`].
    #[inline]
    pub fn score(
        &mut self,
        fleet: &Fleet,
        req: ScoreRequest,
        cfg: &ScoreConfig,
        tie: TieInput,
    ) -> Choice {
        self.score_with(SimdPath::active(), fleet, req, cfg, tie)
    }

    /// Decides with the pass `path`, for tests and benches that compare the paths; the same
    /// decision as [`score`](Self::score) and [`score_reference`](Self::score_reference)
    /// whichever path runs. A path that is not available here
    /// ([`SimdPath::is_available`]) runs the portable pass instead. Never panics.
    pub fn score_with(
        &mut self,
        path: SimdPath,
        fleet: &Fleet,
        req: ScoreRequest,
        cfg: &ScoreConfig,
        tie: TieInput,
    ) -> Choice {
        if fleet.lane_deferred {
            // A fleet filled by `fill_with_matched` whose lane was not converted: decide on
            // a converted copy (the same values; `score_matched` avoids the copy).
            let mut converted = fleet.clone();
            converted.convert_lane();
            return self.score_with(path, &converted, req, cfg, tie);
        }
        match path {
            SimdPath::Scalar => decide::<Scalar>(self, fleet, req, cfg, tie),
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            // `Avx2` checks the CPU itself and runs the portable pass where it lacks AVX2.
            SimdPath::Avx2 => decide::<crate::avx2::Avx2>(self, fleet, req, cfg, tie),
            _ => decide::<Simd>(self, fleet, req, cfg, tie),
        }
    }

    /// Decides with the scalar reference; the same decision as [`score`](Self::score).
    pub fn score_reference(
        &mut self,
        fleet: &Fleet,
        req: ScoreRequest,
        cfg: &ScoreConfig,
        tie: TieInput,
    ) -> Choice {
        self.score_with(SimdPath::Scalar, fleet, req, cfg, tie)
    }

    /// [`score`](Self::score) for a fleet filled with
    /// [`Fleet::fill_with_matched`]: the same decision, without converting the fleet's
    /// overlaps when the sparse `projected_time` decision decides (enforce, every occupied
    /// slot fresh, the fleet in the sparse decision's shape); otherwise the overlap lane is
    /// converted in place ([`Fleet::convert_lane`]) and the pass decides as `score` does.
    /// On a fleet filled otherwise it is `score`. Never panics.
    pub fn score_matched(
        &mut self,
        fleet: &mut Fleet,
        req: ScoreRequest,
        cfg: &ScoreConfig,
        tie: TieInput,
    ) -> Choice {
        let path = SimdPath::active();
        self.sparse_declined = false;
        if fleet.lane_deferred {
            if let Some(c) = self.try_sparse(path, fleet, req, cfg, tie) {
                return c;
            }
            fleet.convert_lane();
        }
        self.score_with(path, fleet, req, cfg, tie)
    }

    /// The sparse decision alone, where `score_with(path, ..)` would make it (the
    /// `projected_time` enforce policy with every occupied slot fresh, on a path that
    /// decides sparsely), reading the overlaps through [`Fleet::overlap_at`]; `None` where
    /// the pass would decide instead.
    fn try_sparse(
        &mut self,
        path: SimdPath,
        fleet: &Fleet,
        req: ScoreRequest,
        cfg: &ScoreConfig,
        tie: TieInput,
    ) -> Option<Choice> {
        let enforce = matches!(
            cfg.policy,
            Policy::ProjectedTime {
                mode: ProjectedMode::Enforce
            }
        );
        if !enforce || path == SimdPath::Scalar {
            return None;
        }
        let (p, rule) = inputs(fleet, req, cfg, tie);
        let ctx = Ctx {
            fleet,
            cfg,
            p,
            rule,
        };
        // `enforce`'s order: the KV-bound switch, the fleet-wide rule, then the scoped one,
        // all dense.
        if ctx.kv_bound() || ctx.fallback_cause().is_some() {
            return None;
        }
        self.sparse_decided = true;
        let sparse = match path {
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            SimdPath::Avx2 => crate::avx2::sparse_enforce,
            _ => crate::sparse::enforce,
        };
        match sparse(
            fleet,
            &ctx.p,
            &ctx.rule,
            cfg.escape_margin_s,
            &mut self.sparse,
        ) {
            crate::sparse::Outcome::Pick(p, c) => {
                Some(ctx.scoped(ctx.choice(p, ctx.classify(p), c)))
            }
            crate::sparse::Outcome::NoneEligible => Some(none()),
            crate::sparse::Outcome::Dense => {
                self.sparse_decided = false;
                self.sparse_declined = true;
                None
            }
        }
    }
}

fn none() -> Choice {
    Choice {
        slot: None,
        reason: Reason::NoEligibleWorker,
        cost: f32::NAN,
        overlap_blocks: 0.0,
        fallback: None,
        shadow: None,
    }
}

impl Ctx<'_> {
    fn choice(&self, i: usize, reason: Reason, cost: f32) -> Choice {
        Choice {
            slot: Some(Slot(i as u32)),
            reason,
            cost,
            overlap_blocks: self.fleet.overlap(i),
            fallback: None,
            shadow: None,
        }
    }

    fn classify(&self, i: usize) -> Reason {
        let deepest = self.fleet.aggregates().deepest;
        if deepest <= 0.0 {
            Reason::CacheMiss
        } else if self.fleet.overlap(i) >= deepest {
            Reason::CacheHold
        } else {
            Reason::Spill
        }
    }

    fn run<E: Engine>(
        &self,
        buf: &mut Vec<f32>,
        kind: CostKind,
        mask: Mask,
        rule: &TieRule,
    ) -> Option<(usize, f32)> {
        E::costs(kind, &self.p, self.fleet, buf);
        E::select(self.fleet, buf, mask, rule).map(|i| (i, buf[i]))
    }

    fn least_load<E: Engine>(&self, s: &mut Scorer, reason: Reason) -> Choice {
        match self.run::<E>(&mut s.costs, CostKind::LeastLoad, Mask::ALL, &self.rule) {
            Some((i, c)) => self.choice(i, reason, c),
            None => none(),
        }
    }

    /// The worst validity of the occupied slots, when it is not fresh.
    fn fallback_cause(&self) -> Option<FallbackCause> {
        FallbackCause::from_validity(self.fleet.aggregates().worst_validity)
    }

    /// The cause of the fleet-wide fallback, when more than `fallback_fraction` of the
    /// occupied slots are not fresh (module docs).
    fn fleet_wide(&self) -> Option<FallbackCause> {
        let cause = self.fallback_cause()?;
        let f = self.fleet;
        let (mut occupied, mut unfresh) = (0u32, 0u32);
        for i in 0..f.len {
            if f.occupied[i] > 0.0 {
                occupied += 1;
                unfresh += u32::from(f.validity[i] != Validity::Fresh);
            }
        }
        (unfresh as f32 > self.cfg.fallback_fraction * occupied as f32).then_some(cause)
    }

    /// The scoped rule: each occupied slot that is not fresh gets the cost of `kind` with
    /// no cache credit (overlap 0), from its own lanes, and, when finite and the slot is
    /// not [`unfloored`](Self::unfloored), never less than just above the tie band of the
    /// best fresh slot's cost. Scalar per slot, for both engines alike.
    fn uncredit(&self, kind: CostKind, costs: &mut [f32]) {
        let f = self.fleet;
        let best_fresh = costs[..f.len]
            .iter()
            .enumerate()
            .filter(|&(i, _)| self.fresh(i))
            .fold(f32::INFINITY, |m, (_, &c)| if c < m { c } else { m });
        let floor = if best_fresh.is_finite() {
            just_above(best_fresh + self.rule.band * best_fresh.abs())
        } else {
            f32::NEG_INFINITY
        };
        for (i, c) in costs[..f.len].iter_mut().enumerate() {
            if f.occupied[i] > 0.0 && !self.fresh(i) {
                let x = LaneIn {
                    overlap: 0.0,
                    ..lane_at(f, i)
                };
                let own = cost::<f32>(kind, &self.p, &x);
                // A cost that is not finite stays so (the slot stays ineligible): the floor
                // raises a low cost, it does not turn −∞ into a candidate. An unfloored slot
                // keeps the cost of what is known of it.
                *c = if own.is_finite() && own < floor && !self.unfloored(i) {
                    floor
                } else {
                    own
                };
            }
        }
    }

    /// Whether slot `i` is occupied with fresh telemetry.
    fn fresh(&self, i: usize) -> bool {
        self.fleet.occupied[i] > 0.0 && self.fleet.validity[i] == Validity::Fresh
    }

    /// Whether a slot that is not fresh keeps its own cost under the scoped rule: its
    /// telemetry is stale (it has a last report) and either this router is the only one
    /// routing to it, or its load is below that report (module docs).
    fn unfloored(&self, i: usize) -> bool {
        let f = self.fleet;
        f.validity[i] == Validity::Stale && (self.cfg.router_replicas <= 1 || f.below_report[i])
    }

    /// A choice under the scoped rule: one on a slot that is not fresh was costed without
    /// its cache, so it records the slot's own cause as its reason and fallback.
    fn scoped(&self, mut c: Choice) -> Choice {
        let Some(slot) = c.slot else {
            return c;
        };
        if let Some(cause) = FallbackCause::from_validity(self.fleet.validity[slot.index()]) {
            c.reason = Reason::Fallback(cause);
            c.fallback = Some(cause);
        }
        c
    }

    /// A cost model with the telemetry rules (module docs).
    fn model<E: Engine>(&self, s: &mut Scorer, kind: CostKind) -> Choice {
        if let Some(cause) = self.fleet_wide() {
            let mut c = self.least_load::<E>(s, Reason::Fallback(cause));
            c.fallback = Some(cause);
            return c;
        }
        E::costs(kind, &self.p, self.fleet, &mut s.costs);
        if self.fallback_cause().is_some() {
            self.uncredit(kind, &mut s.costs);
        }
        match E::select(self.fleet, &s.costs, Mask::ALL, &self.rule) {
            Some(i) => self.scoped(self.choice(i, self.classify(i), s.costs[i])),
            None => none(),
        }
    }

    /// Whether `projected_time` decides by the blocks cost: the occupied slots' mean KV
    /// usage is at least [`ScoreConfig::kv_bound_usage`] less one of the mean's units of
    /// 2⁻²⁰ (so a fleet reporting exactly the threshold everywhere switches; never with
    /// no occupied slot).
    fn kv_bound(&self) -> bool {
        // Read in place (`aggregates` copies the whole struct).
        self.fleet.agg.as_ref().is_some_and(|a| {
            a.occupied > 0 && a.mean_kv_usage >= self.cfg.kv_bound_usage - crate::fleet::KV_UNIT
        })
    }

    /// `projected_time` enforce: [`enforce`](Self::enforce), or, when the fleet is KV-bound
    /// ([`kv_bound`](Self::kv_bound)), the blocks cost (`dynamo_cost`'s model, its
    /// telemetry fallbacks included) with the reason [`Reason::KvBound`] wherever that cost
    /// chose (a fallback keeps its own reason).
    fn enforce_or_kv_bound<E: Engine>(&self, s: &mut Scorer) -> Choice {
        if !self.kv_bound() {
            return self.enforce::<E>(s);
        }
        s.sparse_decided = false;
        s.sparse_declined = false;
        let mut c = self.model::<E>(s, CostKind::Dynamo);
        if matches!(
            c.reason,
            Reason::CacheHold | Reason::CacheMiss | Reason::Spill
        ) {
            c.reason = Reason::KvBound;
        }
        c
    }

    fn enforce<E: Engine>(&self, s: &mut Scorer) -> Choice {
        s.sparse_decided = false;
        let declined = core::mem::take(&mut s.sparse_declined);
        if self.fleet_wide().is_some() {
            return self.model::<E>(s, CostKind::Projected);
        }
        let (p, escape) = if self.fallback_cause().is_some() {
            // Scoped: the projected costs without the cache credit of the slots that are not
            // fresh (`least_load` takes no cache into account).
            E::costs(CostKind::Projected, &self.p, self.fleet, &mut s.costs);
            self.uncredit(CostKind::Projected, &mut s.costs);
            E::costs(CostKind::LeastLoad, &self.p, self.fleet, &mut s.aux);
            // The escape follows the same rule: a slot whose figures are floored (not
            // fresh, not unfloored) is no escape target, nor part of the others' mean (its
            // unknown load would read as none), so it cannot take a fresh owner's request
            // through the escape when the rule keeps it from taking it through its cost.
            // (Only while some fresh slot is eligible, as the floor itself: with none, the
            // slots that are not fresh keep their own costs in both lanes.)
            let f = self.fleet;
            if (0..f.len).any(|i| self.fresh(i) && s.costs[i].is_finite()) {
                for (i, c) in s.aux[..f.len].iter_mut().enumerate() {
                    if f.occupied[i] > 0.0 && !self.fresh(i) && !self.unfloored(i) {
                        *c = f32::INFINITY;
                    }
                }
            }
            let l = E::select(self.fleet, &s.aux, Mask::ALL, &self.rule);
            (
                E::select(self.fleet, &s.costs, Mask::ALL, &self.rule),
                // No escape target left: no escape (the pick stands).
                l.map_or(Escape::Within, Escape::Pick),
            )
        } else {
            s.sparse_decided = E::SPARSE && !declined;
            if s.sparse_decided {
                match crate::sparse::enforce(
                    self.fleet,
                    &self.p,
                    &self.rule,
                    self.cfg.escape_margin_s,
                    &mut s.sparse,
                ) {
                    crate::sparse::Outcome::Pick(p, c) => {
                        return self.scoped(self.choice(p, self.classify(p), c));
                    }
                    crate::sparse::Outcome::NoneEligible => return none(),
                    crate::sparse::Outcome::Dense => s.sparse_decided = false,
                }
            }
            // The least-load pick's cost is at least the least one, so the gap to it is at
            // most `aux[p] − least` (subtraction is monotone in its operands, rounding
            // included): within the margin there is no escape, whichever slot the tie rule
            // would pick, and the pass does not select on that lane.
            E::costs2_select_escape(
                [CostKind::Projected, CostKind::LeastLoad],
                &self.p,
                self.fleet,
                [&mut s.costs, &mut s.aux],
                &self.rule,
                self.cfg.escape_margin_s,
            )
        };
        let Some(p) = p else {
            return none();
        };
        let pc = s.costs[p];
        let l = match escape {
            Escape::NoneEligible => return none(),
            Escape::Within => return self.scoped(self.choice(p, self.classify(p), pc)),
            Escape::Pick(l) => l,
        };
        let lc = s.aux[l];
        let gap = s.aux[p] - lc;
        // The others' mean is only needed (one vector pass, the same for every engine) when
        // the absolute part alone is exceeded.
        if gap > self.cfg.escape_margin_s
            && gap
                > self.cfg.escape_margin_s
                    + self.cfg.escape_margin_rel * self.mean_except::<E>(&s.aux, p)
        {
            self.scoped(self.choice(l, Reason::LoadEscape, s.costs[l]))
        } else {
            self.scoped(self.choice(p, self.classify(p), pc))
        }
    }

    /// Mean of `costs` over the occupied slots other than `skip` whose cost is finite (0
    /// when there is none): the sum over all of them, less `skip`'s cost when it counts,
    /// over their number. The sum and count are [`Engine::occupied_sums`]: one eight-lane
    /// pass (slot `i` into lane `i mod 8`), the lanes then added in order, the same
    /// result for every engine.
    fn mean_except<E: Engine>(&self, costs: &[f32], skip: usize) -> f32 {
        let f = self.fleet;
        let (mut sum, mut k) = E::occupied_sums(f, costs);
        let c = costs[skip];
        if f.occupied[skip] > 0.0 && c.is_finite() {
            sum -= c;
            k -= 1.0;
        }
        if k > 0.0 { sum / k } else { 0.0 }
    }

    fn owner_pressure<E: Engine>(&self, s: &mut Scorer) -> Choice {
        let agg = self.fleet.aggregates();
        let (kind, fallback) = match agg.occupancy_unknown {
            Some(v) => (
                CostKind::OldPressure,
                Some(FallbackCause::from_validity(v).unwrap_or(FallbackCause::Partial)),
            ),
            None => (CostKind::Pressure, None),
        };
        let mut c = self.pressure_rule::<E>(s, kind, agg.deepest);
        c.fallback = fallback;
        c
    }

    fn pressure_rule<E: Engine>(&self, s: &mut Scorer, kind: CostKind, deepest: f32) -> Choice {
        let Some((best, bc)) = self.run::<E>(&mut s.costs, kind, Mask::ALL, &self.rule) else {
            return none();
        };
        if deepest.is_nan() || deepest <= 0.0 {
            return self.choice(best, Reason::CacheMiss, bc);
        }
        let owners = Mask {
            min_overlap: Some(deepest),
        };
        let Some(o) = E::select(self.fleet, &s.costs, owners, &self.rule) else {
            return self.choice(best, Reason::CacheMiss, bc);
        };
        let oc = s.costs[o];
        let wm = self.cfg.watermark;
        let below = oc < wm;
        if below && self.worth_keeping(deepest, oc, bc) {
            self.choice(o, Reason::CacheHold, oc)
        } else if below || (bc < wm && bc + self.cfg.owner_slack <= oc) {
            // Below the watermark, the prefix is not worth keeping; above it, a safe spill.
            self.choice(best, Reason::Spill, bc)
        } else {
            self.choice(o, Reason::NoSafeSpillHold, oc)
        }
    }

    /// Whether an owner holding `deepest` blocks at pressure `owner` is worth keeping
    /// against the least pressure `best` (module docs: the prefill left on the owner ends
    /// no later than the whole prefill on `best`, processor sharing).
    fn worth_keeping(&self, deepest: f32, owner: f32, best: f32) -> bool {
        let share = (deepest * self.p.block_size).min(self.p.prompt) / self.p.prompt.max(1.0);
        let busy = |rho: f32| {
            if rho.is_nan() {
                0.999
            } else {
                rho.clamp(0.0, 0.999)
            }
        };
        (1.0 - share) * (1.0 - busy(best)) <= 1.0 - busy(owner)
    }

    fn cache_aware<E: Engine>(&self, s: &mut Scorer) -> Choice {
        if self.fallback_cause().is_some() {
            return self.model::<E>(s, CostKind::Requests);
        }
        let agg = self.fleet.aggregates();
        let cfg = self.cfg;
        let imbalanced = agg.max_load - agg.min_load > cfg.imbalance_abs
            && agg.max_load > agg.min_load * cfg.imbalance_rel;
        let (mask, reason) = if imbalanced {
            (Mask::ALL, Some(Reason::LoadEscape))
        } else {
            let rate =
                (agg.deepest * self.p.block_size).min(self.p.prompt) / self.p.prompt.max(1.0);
            if rate > cfg.cache_threshold {
                (
                    Mask {
                        min_overlap: Some(agg.deepest),
                    },
                    Some(Reason::CacheHold),
                )
            } else {
                (Mask::ALL, None)
            }
        };
        match self.run::<E>(&mut s.costs, CostKind::Requests, mask, &self.rule) {
            Some((i, c)) => self.choice(i, reason.unwrap_or_else(|| self.classify(i)), c),
            None => none(),
        }
    }
}

/// The least `f32` above finite `v` to within one ulp (an increment of `v`'s relative
/// precision, or the least positive normal at 0).
fn just_above(v: f32) -> f32 {
    let up = v + v.abs() * f32::EPSILON;
    if up > v { up } else { v + f32::MIN_POSITIVE }
}

/// The cost parameters and the tie rule of a decision on `fleet` for `req` under `cfg`.
pub(crate) fn inputs(
    fleet: &Fleet,
    req: ScoreRequest,
    cfg: &ScoreConfig,
    tie: TieInput,
) -> (Params, TieRule) {
    let agg = fleet.aggregates();
    let beta = match cfg.policy {
        Policy::LoadAware { beta } => beta,
        _ => 0.0,
    };
    let random = tie.random.filter(|_| cfg.near_tie_band > 0.0);
    let p = Params {
        prompt: req.prompt_tokens as f32,
        block_size: req.block_size.max(1) as f32,
        // `projected_time` lifts a batch with room to the fleet's mean batch (each worker
        // counted at most at its cap); `load_aware` weighs requests against their mean.
        mean_load: match cfg.policy {
            Policy::ProjectedTime { .. } => agg.mean_batch,
            _ => agg.mean_load,
        },
        beta,
        least_load_tps: cfg.least_load_tps,
        default_prefill_tps: cfg.default_prefill_tps,
        default_decode_tps: cfg.default_decode_tps,
        kv_barrier_s: cfg.kv_barrier_s,
        dynamo_weight: cfg.dynamo_overlap_weight,
        output: if req.expected_output_tokens > 0 {
            req.expected_output_tokens as f32
        } else {
            cfg.tokens_per_request as f32
        },
        typical_output: cfg.tokens_per_request as f32,
    };
    let rule = TieRule {
        band: if random.is_some() {
            cfg.tie_epsilon.max(cfg.near_tie_band)
        } else {
            cfg.tie_epsilon
        },
        load: true,
        overlap: true,
        cursor: tie.cursor,
        random,
    };
    (p, rule)
}

fn decide<E: Engine>(
    s: &mut Scorer,
    fleet: &Fleet,
    req: ScoreRequest,
    cfg: &ScoreConfig,
    tie: TieInput,
) -> Choice {
    let (p, rule) = inputs(fleet, req, cfg, tie);
    let agg = fleet.aggregates();
    let ctx = Ctx {
        fleet,
        cfg,
        p,
        rule,
    };
    match cfg.policy {
        Policy::RoundRobin => {
            let rule = TieRule {
                band: 0.0,
                load: false,
                overlap: false,
                cursor: tie.cursor,
                random: None,
            };
            match ctx.run::<E>(&mut s.costs, CostKind::Zero, Mask::ALL, &rule) {
                Some((i, c)) => ctx.choice(i, Reason::RoundRobin, c),
                None => none(),
            }
        }
        Policy::LeastLoad => ctx.least_load::<E>(s, Reason::LeastLoad),
        Policy::KvAware => {
            let rule = TieRule {
                band: 0.0,
                overlap: false,
                random: None,
                ..ctx.rule
            };
            match ctx.run::<E>(&mut s.costs, CostKind::Overlap, Mask::ALL, &rule) {
                Some((i, c)) => ctx.choice(i, ctx.classify(i), c),
                None => none(),
            }
        }
        Policy::KvAwareFirst => {
            if agg.deepest > 0.0 {
                // The first holder of the deepest prefix in slot order: exact ties, no
                // load, the 0th tied slot.
                let rule = TieRule {
                    band: 0.0,
                    load: false,
                    overlap: false,
                    cursor: 0,
                    random: None,
                };
                match ctx.run::<E>(&mut s.costs, CostKind::Overlap, Mask::ALL, &rule) {
                    Some((i, c)) => ctx.choice(i, Reason::CacheHold, c),
                    None => none(),
                }
            } else {
                match ctx.run::<E>(&mut s.costs, CostKind::Requests, Mask::ALL, &ctx.rule) {
                    Some((i, c)) => ctx.choice(i, Reason::CacheMiss, c),
                    None => none(),
                }
            }
        }
        Policy::LoadAware { .. } => ctx.model::<E>(s, CostKind::LoadAware),
        Policy::OwnerPressure => ctx.owner_pressure::<E>(s),
        Policy::ProjectedTime { mode } => match mode {
            ProjectedMode::Off => ctx.least_load::<E>(s, Reason::LeastLoad),
            ProjectedMode::Enforce => ctx.enforce_or_kv_bound::<E>(s),
            ProjectedMode::Shadow => {
                let mut c = ctx.least_load::<E>(s, Reason::LeastLoad);
                // `enforce` leaves the costs of the model that chose in `s.costs`
                // (projected seconds, the blocks cost when KV-bound, or its fallback's): the
                // dispatched slot's is read there, or computed alone after a sparse decision
                // (the same bits).
                let cf = ctx.enforce_or_kv_bound::<E>(s);
                let dispatched_cost = c.slot.map_or(f32::NAN, |d| {
                    if s.sparse_decided {
                        crate::sparse::cost_of(&ctx.p, fleet, d.index())
                    } else {
                        s.costs[d.index()]
                    }
                });
                c.shadow = Some(Counterfactual {
                    slot: cf.slot,
                    reason: cf.reason,
                    cost: cf.cost,
                    overlap_blocks: cf.overlap_blocks,
                    dispatched_cost,
                });
                c
            }
        },
        Policy::DynamoCost => ctx.model::<E>(s, CostKind::Dynamo),
        Policy::LMetric => ctx.model::<E>(s, CostKind::LMetric),
        Policy::CacheAware => ctx.cache_aware::<E>(s),
    }
}
