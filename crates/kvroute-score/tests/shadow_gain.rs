//! `projected_time` in shadow mode: the counterfactual's worker, overlap and projected
//! seconds, and the dispatched worker's projected seconds under the same model, against
//! figures worked out by hand from the formula in `src/cost.rs`:
//! `projected = max(queued/π, wait) + n·uncached/π + (2n − 1)·out/δ + barrier` (processor
//! sharing: no step base), `n` lifted to the fleet's mean batch + 1 while the batch has room (no occupancy known
//! here: each worker's batch counted as its requests),
//! `barrier = 0.15·k/(1 − k)`, `least_load = (queued + decode)/π + barrier`.

mod common;

use common::{both_out, cfg};
use kvroute_score::{Fleet, Policy, ProjectedMode, Reason, SlotFigures};

const SHADOW: Policy = Policy::ProjectedTime {
    mode: ProjectedMode::Shadow,
};

/// A 2,048-token prompt (128 blocks of 16) expecting 200 output tokens; every worker
/// prefills at π = 4,000 and decodes at δ = 2,000 tokens/s, so `out/δ` = 0.1 s, and holds
/// no active decode tokens.
fn worker(overlap: f32, requests: f32, queued: f32, kv: f32) -> Option<SlotFigures> {
    Some(SlotFigures {
        overlap_blocks: overlap,
        requests,
        queued_tokens: queued,
        kv_usage: kv,
        occupancy: Some(requests / 64.0),
        prefill_tps: 4_000.0,
        decode_tps: 2_000.0,
        decode_step_base_s: 0.0,
        ..SlotFigures::idle()
    })
}

/// * Slot 0 holds 120 blocks (1,920 tokens; 128 uncached), 1 request (n = 2), 400 queued
///   tokens, KV 0.2 (barrier 0.15 × 0.2/0.8 = 0.0375 s): projected 400/4,000 +
///   2 × 128/4,000 + 3 × 0.1 + 0.0375 = 0.1 + 0.064 + 0.3 + 0.0375 = 0.5015 s;
///   least_load 0.1 + 0.0375 = 0.1375 s.
/// * Slot 1 is idle and holds nothing: projected 2,048/4,000 + 0.1 = 0.612 s; least_load
///   0 s.
/// * Slot 2 holds 64 blocks (1,024 uncached), 2 requests (n = 3), 1,200 queued: projected
///   0.3 + 3 × 0.256 + 5 × 0.1 = 1.568 s; least_load 0.3 s.
///
/// Shadow dispatches slot 1 (least `least_load`); enforce would take slot 0 (cache hold;
/// its `least_load` gap to slot 1, 0.1375 s, is far below the 2 s escape margin): 120
/// blocks, 0.5015 s, against 0.612 s for slot 1, a gain of 0.1105 s.
#[test]
fn shadow_reports_the_counterfactual_and_the_gain_by_hand() {
    let f = Fleet::from_slots(&[
        worker(120.0, 1.0, 400.0, 0.2),
        worker(0.0, 0.0, 0.0, 0.0),
        worker(64.0, 2.0, 1_200.0, 0.0),
    ]);
    let c = both_out(&f, 2_048, 200, &cfg(SHADOW), 0);
    assert_eq!(
        (c.slot.map(|s| s.0), c.reason),
        (Some(1), Reason::LeastLoad)
    );
    assert_eq!(c.cost, 0.0);
    let cf = c.shadow.expect("shadow mode records a counterfactual");
    assert_eq!(
        (cf.slot.map(|s| s.0), cf.reason),
        (Some(0), Reason::CacheHold)
    );
    assert_eq!(cf.overlap_blocks, 120.0);
    assert!((cf.cost - 0.5015).abs() < 1e-6, "{cf:?}");
    assert!((cf.dispatched_cost - 0.612).abs() < 1e-6, "{cf:?}");
    assert!((cf.gain() - 0.1105).abs() < 1e-6, "{cf:?}");
}

/// Without the idle slot, `least_load` dispatches slot 0 (0.1375 s against 0.3 s), which
/// is also enforce's choice. The fleet's mean batch is now 1.5 requests, so slot 0's batch
/// is lifted to the mean + 1 = 2.5 (module docs of `src/cost.rs`): 0.1 + 2.5 × 0.032 +
/// 4 × 0.1 + 0.0375 = 0.6175 s (slot 2 keeps n = 3: 1.568 s). The dispatched cost is the
/// counterfactual's and the gain is 0.
#[test]
fn shadow_agreeing_with_dispatch_gains_nothing() {
    let f = Fleet::from_slots(&[
        worker(120.0, 1.0, 400.0, 0.2),
        worker(64.0, 2.0, 1_200.0, 0.0),
    ]);
    let c = both_out(&f, 2_048, 200, &cfg(SHADOW), 0);
    assert_eq!(
        (c.slot.map(|s| s.0), c.reason),
        (Some(0), Reason::LeastLoad)
    );
    assert!((c.cost - 0.1375).abs() < 1e-6, "{c:?}");
    let cf = c.shadow.expect("shadow mode records a counterfactual");
    assert_eq!((cf.slot, cf.reason), (c.slot, Reason::CacheHold));
    assert_eq!(cf.overlap_blocks, 120.0);
    assert!((cf.cost - 0.6175).abs() < 1e-6, "{cf:?}");
    assert_eq!(cf.dispatched_cost.to_bits(), cf.cost.to_bits());
    assert_eq!(cf.gain(), 0.0);
}

/// Slot 2 never reported (missing; no throughput known, so the defaults π = 8,000 and
/// δ = 1,000 tokens/s apply): idle as far as is known, projected 2,048/8,000 + 200/1,000 =
/// 0.456 s, least_load 0 s. Shadow's plain `least_load` ties slots 1 and 2 at 0 s and, at
/// cursor 0, dispatches slot 1.
/// * Scoped (one slot of three not fresh, under the 0.5 share): enforce costs slot 2 from
///   what is known of it (0.456 s, no cache credit to lose), but never below just above the
///   best fresh cost, slot 0's 0.5015 s: slot 0 keeps its hold; the dispatched slot 1
///   costs 0.612 s under the same model: gain 0.1105 s.
/// * Fleet-wide (`fallback_fraction` 0): enforce falls back to `least_load` over every slot
///   (slot 2 is not excluded): slots 1 and 2 tie at 0 s, the cursor takes slot 1, the
///   dispatched one: gain 0.
#[test]
fn a_fallback_counterfactual_is_costed_by_the_fallback() {
    use kvroute_score::FallbackCause;
    let missing = SlotFigures {
        validity: kvroute_load::Validity::Missing,
        ..SlotFigures::idle()
    };
    let f = Fleet::from_slots(&[
        worker(120.0, 1.0, 400.0, 0.2),
        worker(0.0, 0.0, 0.0, 0.0),
        Some(missing),
    ]);
    let c = both_out(&f, 2_048, 200, &cfg(SHADOW), 0);
    assert_eq!(
        (c.slot.map(|s| s.0), c.reason),
        (Some(1), Reason::LeastLoad)
    );
    let cf = c.shadow.expect("shadow mode records a counterfactual");
    assert_eq!(
        (cf.slot.map(|s| s.0), cf.reason, cf.overlap_blocks),
        (Some(0), Reason::CacheHold, 120.0)
    );
    assert!((cf.cost - 0.5015).abs() < 1e-6, "{cf:?}");
    assert!((cf.dispatched_cost - 0.612).abs() < 1e-6, "{cf:?}");
    assert!((cf.gain() - 0.1105).abs() < 1e-6, "{cf:?}");

    let mut fleet_wide = cfg(SHADOW);
    fleet_wide.fallback_fraction = 0.0;
    let c = both_out(&f, 2_048, 200, &fleet_wide, 0);
    let cf = c.shadow.expect("shadow mode records a counterfactual");
    assert_eq!(
        (c.slot.map(|s| s.0), cf.slot.map(|s| s.0), cf.reason),
        (Some(1), Some(1), Reason::Fallback(FallbackCause::Missing))
    );
    assert_eq!((cf.cost, cf.dispatched_cost, cf.gain()), (0.0, 0.0, 0.0));
}
