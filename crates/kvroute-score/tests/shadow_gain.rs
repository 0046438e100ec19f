//! `projected_time` in shadow mode: the counterfactual's worker, overlap and projected
//! seconds, and the dispatched worker's projected seconds under the same model, against
//! figures worked out by hand from the formula in `src/cost.rs`:
//! `projected = max(queued/π, wait) + n·uncached/π + (2n − 1)·out/δ + barrier`,
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
/// is also enforce's choice: the dispatched cost is the counterfactual's, 0.5015 s, and the
/// gain is 0.
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
    assert!((cf.cost - 0.5015).abs() < 1e-6, "{cf:?}");
    assert_eq!(cf.dispatched_cost.to_bits(), cf.cost.to_bits());
    assert_eq!(cf.gain(), 0.0);
}

/// When enforce itself falls back (slot 2 never reported), the counterfactual is the
/// fallback's: `least_load` over the trusted slots, and the dispatched cost is under that
/// model too. Slot 2 reads idle (least_load 0 s), so shadow's plain `least_load` dispatches
/// it; the fallback excludes it (+inf) and picks slot 1 (0 s) over slot 0 (0.1375 s).
#[test]
fn a_fallback_counterfactual_is_costed_by_the_fallback() {
    let missing = SlotFigures {
        validity: kvroute_load::Validity::Missing,
        ..SlotFigures::idle()
    };
    let f = Fleet::from_slots(&[
        worker(120.0, 1.0, 400.0, 0.2),
        worker(0.0, 0.0, 0.0, 0.0),
        Some(missing),
    ]);
    // Cursor 1: the two 0 s slots (1 and 2) tie; the rotation takes the (1 mod 2)-th of
    // them in slot order, slot 2.
    let c = both_out(&f, 2_048, 200, &cfg(SHADOW), 1);
    assert_eq!(
        (c.slot.map(|s| s.0), c.reason),
        (Some(2), Reason::LeastLoad)
    );
    let cf = c.shadow.expect("shadow mode records a counterfactual");
    assert_eq!(
        (cf.slot.map(|s| s.0), cf.reason),
        (
            Some(1),
            Reason::Fallback(kvroute_score::FallbackCause::Missing)
        )
    );
    assert_eq!((cf.cost, cf.overlap_blocks), (0.0, 0.0));
    assert_eq!(cf.dispatched_cost, f32::INFINITY);
}
