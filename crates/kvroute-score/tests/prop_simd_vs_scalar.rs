//! Every available SIMD pass (the portable `wide` one and, on a CPU with AVX2, the AVX2
//! one; `SimdPath`) and the scalar reference choose the same slot, reason and cost on
//! random fleets of sizes 0, 1, 7, 8, 9, 64, 65, 1000 and 1024, with NaN, ±inf, vacant
//! slots and every validity, under every policy; in shadow mode they record the same
//! counterfactual (slot, reason, overlap, its cost and the dispatched slot's), which is
//! enforce's own choice, with the dispatched slot's cost as enforce's model gives it.

mod common;

use kvroute_load::Validity;
use kvroute_score::{
    Fleet, NearTieRng, Policy, ProjectedMode, Reason, ScoreConfig, ScoreRequest, Scorer, SimdPath,
    SlotFigures, TieInput,
};
use proptest::prelude::*;

const SIZES: [usize; 9] = [0, 1, 7, 8, 9, 64, 65, 1000, 1024];

/// Every policy label once (`load_aware` with beta 0.5, each `projected_time` mode).
fn policies() -> Vec<Policy> {
    Policy::LABELED.to_vec()
}

/// A value drawn from a mix that makes ties and special values common.
fn val(r: &mut NearTieRng, scale: f32, specials: bool) -> f32 {
    match r.next_u64() % 16 {
        0 if specials => f32::NAN,
        1 if specials => f32::INFINITY,
        2 if specials => f32::NEG_INFINITY,
        3..=6 => 0.0,
        7..=9 => (r.next_u64() % 4) as f32,
        _ => (r.next_u64() % 10_000) as f32 / 10_000.0 * scale,
    }
}

fn slots(
    n: usize,
    seed: u64,
    specials: bool,
    vacancy: u64,
    fresh: bool,
) -> Vec<Option<SlotFigures>> {
    let mut r = NearTieRng::new(seed);
    let validities = [
        Validity::Fresh,
        Validity::Fresh,
        Validity::Fresh,
        Validity::Partial,
        Validity::Stale,
        Validity::Invalid,
        Validity::Missing,
    ];
    let slots: Vec<Option<SlotFigures>> = (0..n)
        .map(|_| {
            if r.next_u64() % 100 < vacancy {
                return None;
            }
            let sp = specials && r.next_u64() % 4 == 0;
            let validity = if !fresh && r.next_u64() % 3 == 0 {
                validities[(r.next_u64() % 7) as usize]
            } else {
                Validity::Fresh
            };
            Some(SlotFigures {
                validity,
                overlap_blocks: (r.next_u64() % 5) as f32,
                requests: val(&mut r, 200.0, sp),
                queued_tokens: val(&mut r, 50_000.0, sp),
                decode_tokens: val(&mut r, 50_000.0, sp),
                kv_usage: val(&mut r, 1.0, sp),
                utilization: val(&mut r, 1.5, sp),
                occupancy: (r.next_u64() % 8 != 0).then(|| val(&mut r, 2.0, sp)),
                prefill_tps: val(&mut r, 20_000.0, sp),
                decode_tps: val(&mut r, 3_000.0, sp),
                decode_step_base_s: val(&mut r, 0.02, sp),
                below_report: r.next_u64() % 4 == 0,
            })
        })
        .collect();
    slots
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn simd_and_scalar_choose_the_same(
        size in 0usize..SIZES.len(),
        seed in any::<u64>(),
        specials in any::<bool>(),
        vacancy in prop_oneof![Just(0u64), Just(30), Just(100)],
        prompt in prop_oneof![Just(0u32), Just(16), 1u32..5_000],
        cursor in any::<u32>(),
        draw in proptest::option::of(any::<u64>()),
        near in prop_oneof![Just(0.0f32), Just(0.05)],
        eps in prop_oneof![Just(0.0f32), Just(1e-3), Just(0.2)],
        output in prop_oneof![Just(0u32), 1u32..4_000],
        rel in prop_oneof![Just(0.0f32), Just(2.0), Just(0.5)],
        fresh in any::<bool>(),
    ) {
        // `fresh`: every slot's telemetry fresh, where `projected_time` enforce takes no
        // scoped fallback (its least-load selection then runs only where an escape is
        // possible).
        let figures = slots(SIZES[size], seed, specials, vacancy, fresh);
        let lanes_only = Fleet::from_slots(&figures);
        // The same fleet with the cost coefficients of the default knobs (which every
        // `cfg` below keeps): the SIMD passes compute from them, the reference never does.
        let mut prepared = Fleet::from_slots(&figures);
        prepared.prepare_costs(&ScoreConfig::default());
        let req = ScoreRequest { prompt_tokens: prompt, block_size: 16, expected_output_tokens: output };
        let tie = TieInput { cursor, random: draw };
        let mut s = Scorer::new();
        for (f, policy) in [&lanes_only, &prepared].into_iter().flat_map(|f| policies().into_iter().map(move |p| (f, p))) {
            let cfg = { let mut c = ScoreConfig::default(); c.policy = policy; c.near_tie_band = near; c.tie_epsilon = eps; c.escape_margin_rel = rel; c.router_replicas = 1 + (seed % 3) as u32; c };
            let b = s.score_reference(f, req, &cfg, tie);
            for path in common::vector_paths() {
                let a = s.score_with(path, f, req, &cfg, tie);
                prop_assert!(a.same_as(&b), "{policy:?}: {path} {a:?} scalar {b:?}");
                prop_assert_eq!(a.slot.is_none(), a.reason == Reason::NoEligibleWorker);
                if let Some(sl) = a.slot {
                    prop_assert!(sl.index() < f.len());
                }
                prop_assert_eq!(a.shadow.is_some(), policy == SHADOW, "{:?}", policy);
                if let Some(cf) = a.shadow {
                    let enforce = { let mut c = cfg; c.policy = ENFORCE; c };
                    check_counterfactual(&mut s, path, &figures, f, req, &enforce, tie, &a, &cf)?;
                }
            }
            // `score` runs one of them.
            prop_assert!(SimdPath::active().is_available());
            prop_assert!(s.score(f, req, &cfg, tie).same_as(&b));
        }
    }
}

const SHADOW: Policy = Policy::ProjectedTime {
    mode: ProjectedMode::Shadow,
};
const ENFORCE: Policy = Policy::ProjectedTime {
    mode: ProjectedMode::Enforce,
};

/// The counterfactual of shadow's `choice` is enforce's own choice on the same fleet (slot,
/// reason, cost, overlap). Where enforce did not fall back, every occupied slot is fresh and
/// the dispatched slot's cost is its projected seconds, which enforce gives on a fleet of
/// that slot alone (one slot: no escape, no tie); where it did, the dispatched slot's cost
/// is the fallback's, which for the counterfactual's own slot is the counterfactual's cost.
#[allow(clippy::too_many_arguments)]
fn check_counterfactual(
    s: &mut Scorer,
    path: SimdPath,
    figures: &[Option<SlotFigures>],
    f: &Fleet,
    req: ScoreRequest,
    enforce: &ScoreConfig,
    tie: TieInput,
    choice: &kvroute_score::Choice,
    cf: &kvroute_score::Counterfactual,
) -> Result<(), TestCaseError> {
    let en = s.score_with(path, f, req, enforce, tie);
    prop_assert_eq!(
        (
            cf.slot,
            cf.reason,
            cf.cost.to_bits(),
            cf.overlap_blocks.to_bits()
        ),
        (
            en.slot,
            en.reason,
            en.cost.to_bits(),
            en.overlap_blocks.to_bits()
        ),
        "{:?} vs enforce {:?}",
        cf,
        en
    );
    if let Some(sl) = cf.slot {
        prop_assert_eq!(cf.overlap_blocks.to_bits(), f.overlap(sl.index()).to_bits());
    }
    let Some(d) = choice.slot else {
        prop_assert!(cf.dispatched_cost.is_nan(), "{:?}", cf);
        return Ok(());
    };
    if cf.slot == Some(d) {
        prop_assert_eq!(cf.dispatched_cost.to_bits(), cf.cost.to_bits());
        // `gain` is NaN when the cost is (documented): a load escape onto a slot whose
        // projected cost is NaN.
        if cf.cost.is_finite() {
            prop_assert_eq!(cf.gain(), 0.0, "{:?} {:?}", cf, choice);
        }
    }
    if matches!(cf.reason, Reason::Fallback(_)) {
        return Ok(());
    }
    // Alone, the slot's cost is the one it had in the fleet; a slot that is not fresh was
    // costed there without its cache credit (the scoped telemetry rule), as a fresh slot
    // holding nothing is alone, and raised to just above the best fresh cost when below it.
    // Where the slot's batch has room and the fleet's mean batch is above its own load, the
    // projected batch is lifted to that mean (`src/cost.rs`), which a fleet of the slot
    // alone does not have: that case is checked by hand in `tests/projected_time.rs` and
    // `tests/shadow_gain.rs`, not here.
    let mut own_figures = figures[d.index()];
    // A KV-bound fleet (its mean KV usage at least `kv_bound_usage`) was costed by the
    // blocks cost, which reads no fleet aggregate: alone, the slot has the same blocks cost
    // under `dynamo_cost`.
    let kv_bound = cf.reason == Reason::KvBound;
    let mean = f.aggregates().mean_batch;
    let lifted = !kv_bound
        && own_figures.is_some_and(|fg| {
            let occ = fg.occupancy.unwrap_or(0.0);
            // Room (occupancy below 1, or NaN) and a mean above its own load (or NaN).
            let room = occ.partial_cmp(&1.0) != Some(core::cmp::Ordering::Greater)
                && occ.partial_cmp(&1.0) != Some(core::cmp::Ordering::Equal);
            let below_mean = mean.partial_cmp(&fg.requests) == Some(core::cmp::Ordering::Greater)
                || mean.is_nan()
                || fg.requests.is_nan();
            room && below_mean
        });
    if lifted {
        return Ok(());
    }
    let unfresh = own_figures.is_some_and(|fg| fg.validity != Validity::Fresh);
    if let Some(fg) = own_figures.as_mut().filter(|_| unfresh) {
        fg.overlap_blocks = 0.0;
        fg.validity = Validity::Fresh;
    }
    let alone = Fleet::from_slots(&[own_figures]);
    // Otherwise the projected seconds, alone as in the fleet (a slot alone whose own KV
    // usage reaches the switch would switch: not here).
    let mut model = *enforce;
    if kv_bound {
        model.policy = Policy::DynamoCost;
    } else {
        model.kv_bound_usage = 2.0;
    }
    let own = s.score_reference(&alone, req, &model, TieInput::default());
    if own.slot.is_some() && unfresh {
        prop_assert!(cf.dispatched_cost >= own.cost, "{:?} alone {:?}", cf, own);
    } else if own.slot.is_some() {
        prop_assert_eq!(cf.dispatched_cost.to_bits(), own.cost.to_bits(), "{:?}", cf);
    } else {
        prop_assert!(!cf.dispatched_cost.is_finite(), "{:?}", cf);
    }
    Ok(())
}

#[test]
fn empty_fleet_has_no_eligible_worker() {
    let f = Fleet::from_slots(&[]);
    for policy in policies() {
        let c = common::both(&f, 100, &common::cfg(policy), 3);
        assert_eq!(c.reason, Reason::NoEligibleWorker, "{policy:?}");
        assert_eq!(c.slot, None);
    }
}

#[test]
fn all_vacant_or_all_nan_fleet_has_no_eligible_worker() {
    let vacant = Fleet::from_slots(&[None; 9]);
    let nan = SlotFigures {
        requests: f32::NAN,
        queued_tokens: f32::NAN,
        decode_tokens: f32::NAN,
        kv_usage: f32::NAN,
        utilization: f32::NAN,
        occupancy: Some(f32::NAN),
        ..SlotFigures::idle()
    };
    let nans = Fleet::from_slots(&[Some(nan); 9]);
    for policy in [
        Policy::LeastLoad,
        Policy::OwnerPressure,
        Policy::ProjectedTime {
            mode: ProjectedMode::Enforce,
        },
        Policy::LMetric,
    ] {
        for f in [&vacant, &nans] {
            let c = common::both(f, 100, &common::cfg(policy), 0);
            assert_eq!(c.reason, Reason::NoEligibleWorker, "{policy:?}");
        }
    }
}

/// A prepared fleet, every slot fresh: a slot above the least cost but inside its tie band
/// ties with the least. Two idle workers with KV usage 0.5
/// (barrier 0.15 s, `kv_barrier_s` 0.15), an empty prompt and one output token (0.001 s
/// at the default 1,000 tokens/s): slot 0 costs 0.151 s, slot 1 holds 400 queued tokens
/// (0.05 s at the default 8,000 tokens/s): 0.201 s. With a tie band of 0.5 both tie
/// (0.201 <= 0.151 · 1.5), so cursor 1 picks slot 1.
#[test]
fn a_slot_inside_the_tie_band_above_the_least_cost_ties() {
    let idle = |queued: f32| SlotFigures {
        kv_usage: 0.5,
        queued_tokens: queued,
        ..SlotFigures::idle()
    };
    let figures = [Some(idle(0.0)), Some(idle(400.0))];
    let mut cfg = ScoreConfig::default();
    cfg.policy = ENFORCE;
    cfg.tie_epsilon = 0.5;
    let req = ScoreRequest {
        prompt_tokens: 0,
        block_size: 16,
        expected_output_tokens: 1,
    };
    let mut prepared = Fleet::from_slots(&figures);
    prepared.prepare_costs(&cfg);
    let mut s = Scorer::new();
    let tie = TieInput {
        cursor: 1,
        random: None,
    };
    let reference = s.score_reference(&prepared, req, &cfg, tie);
    assert_eq!(reference.slot.map(|x| x.index()), Some(1), "{reference:?}");
    for path in common::vector_paths() {
        let got = s.score_with(path, &prepared, req, &cfg, tie);
        assert!(got.same_as(&reference), "{path}: {got:?} vs {reference:?}");
    }
}
