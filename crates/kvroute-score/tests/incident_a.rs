//! Incident A's acceptance list, items 1–9 (item 3 at the scorer level: reservations are
//! modelled by adding each pick's work to its lanes; item 10 belongs to the simulator).
//! Every expected value is computed by hand in the comments, with the default knobs:
//! prefill 8,000 tokens/s and decode 1,000 tokens/s when not reported, `least_load`
//! 2,000 tokens/s, barrier 0.15 s · k/(1−k), escape margin 2 s, block size 16.

mod common;

use common::{both, cfg, slot};
use kvroute_load::Validity;
use kvroute_score::{
    FallbackCause, Fleet, Policy, ProjectedMode, Reason, ScoreConfig, ScoreRequest, Scorer,
    SlotFigures, TieInput,
};
use proptest::prelude::*;

const ENFORCE: Policy = Policy::ProjectedTime {
    mode: ProjectedMode::Enforce,
};

fn fig(overlap: f32, requests: f32, queued: f32, decode: f32, kv: f32) -> SlotFigures {
    SlotFigures {
        overlap_blocks: overlap,
        requests,
        queued_tokens: queued,
        decode_tokens: decode,
        kv_usage: kv,
        prefill_tps: 8_000.0,
        decode_tps: 1_000.0,
        ..SlotFigures::idle()
    }
}

/// Item 1. Slot 0 owns the 4,096-token prefix (256 blocks) of 4,160-token prompts, with
/// 109 waiting and 38 running: queued 109 × 64 = 6,976 tokens, decode 38 × 4,200 =
/// 159,600 tokens, KV 0.6. Projected: 6,976/8,000 + 159,600/1,000 + 64/8,000 +
/// 0.15·0.6/0.4 = 0.872 + 159.6 + 0.008 + 0.225 = 160.705 s. Slot 50 is lightly loaded (2
/// running: decode 8,400 tokens, KV 0.05): 8.4 + 0.52 + 0.0079 = 8.928 s. The 49 idle
/// peers: 4,160/8,000 = 0.52 s. Each pick reserves 4,160 prefill + 256 decode tokens, which
/// lifts its peer to 0.52 + 0.52 + 0.256 = 1.296 s, so 49 new hot-prefix requests go to
/// the 49 idle peers, one each, and none to the owner or the light worker.
#[test]
fn incident_a_1_deterministic_51_worker_regression() {
    let mut slots = vec![Some(fig(0.0, 0.0, 0.0, 0.0, 0.0)); 51];
    slots[0] = Some(fig(256.0, 147.0, 6_976.0, 159_600.0, 0.6));
    slots[50] = Some(fig(0.0, 2.0, 0.0, 8_400.0, 0.05));
    let mut seen = [0u32; 51];
    for cursor in 0..49u32 {
        let c = both(&Fleet::from_slots(&slots), 4_160, &cfg(ENFORCE), cursor);
        let s = slot(&c) as usize;
        assert!((1..50).contains(&s), "request {cursor} went to {s}: {c:?}");
        assert_eq!(c.reason, Reason::Spill);
        assert!((c.cost - 0.52).abs() < 1e-6, "{c:?}");
        seen[s] += 1;
        let f = slots[s].as_mut().unwrap();
        f.requests += 1.0;
        f.queued_tokens += 4_160.0;
        f.decode_tokens += 256.0;
    }
    assert!(seen[1..50].iter().all(|&n| n == 1), "{seen:?}");
}

/// Item 2, both sides of the crossover. Slot 0 holds the whole 1,600-token prompt (100
/// blocks) and has `q` queued tokens: q/8,000 s. Slot 1 is idle: 1,600/8,000 = 0.2 s. The
/// crossover is q = 1,600. q = 1,200: 0.15 s < 0.2 s, the owner keeps it. q = 2,000:
/// 0.25 s > 0.2 s, the peer takes it. Neither is an escape (load-only gaps of 0.15
/// s and 0.25 s of `least_load` seconds, both below the 2 s margin).
#[test]
fn incident_a_2_affinity_preferred_when_saved_prefill_exceeds_load_penalty() {
    let at = |q: f32| {
        let f = Fleet::from_slots(&[
            Some(fig(100.0, 3.0, q, 0.0, 0.0)),
            Some(fig(0.0, 0.0, 0.0, 0.0, 0.0)),
        ]);
        both(&f, 1_600, &cfg(ENFORCE), 1)
    };
    let below = at(1_200.0);
    assert_eq!((slot(&below), below.reason), (0, Reason::CacheHold));
    assert!((below.cost - 0.15).abs() < 1e-6);
    let above = at(2_000.0);
    assert_eq!((slot(&above), above.reason), (1, Reason::Spill));
    assert!((above.cost - 0.2).abs() < 1e-6);
}

/// Item 3 at the scorer level: 8 identical requests on 4 idle workers, each pick's work
/// added to its lanes before the next decision (what a reservation does), all with the
/// same cursor: 2 per worker.
#[test]
fn incident_a_3_simultaneous_identical_requests_spread_through_reservations() {
    let mut slots = vec![Some(fig(0.0, 0.0, 0.0, 0.0, 0.0)); 4];
    let mut seen = [0u32; 4];
    for _ in 0..8 {
        let c = both(&Fleet::from_slots(&slots), 1_000, &cfg(ENFORCE), 0);
        let s = slot(&c) as usize;
        seen[s] += 1;
        let f = slots[s].as_mut().unwrap();
        f.requests += 1.0;
        f.queued_tokens += 1_000.0;
        f.decode_tokens += 100.0;
    }
    assert_eq!(seen, [2, 2, 2, 2]);
}

/// Item 4. Slot 0 holds the 1,600-token prompt, nothing queued, `d` active decode tokens:
/// d/1,000 s. Slot 1 idle: 0.2 s. d = 100: 0.1 s, the owner; d = 300: 0.3 s, the peer.
#[test]
fn incident_a_4_active_decode_occupancy_changes_the_winner() {
    let at = |d: f32| {
        let f = Fleet::from_slots(&[
            Some(fig(100.0, 1.0, 0.0, d, 0.0)),
            Some(fig(0.0, 0.0, 0.0, 0.0, 0.0)),
        ]);
        both(&f, 1_600, &cfg(ENFORCE), 1)
    };
    assert_eq!(slot(&at(100.0)), 0);
    let c = at(300.0);
    assert_eq!(slot(&c), 1);
    assert!((c.cost - 0.2).abs() < 1e-6);
}

/// Item 4 with `decode_full_batch_only`: slot 0 holds the 1,600-token prompt with 300
/// active decode tokens. With a full batch (occupancy 1) its decode counts, 300/1,000 =
/// 0.3 s > the idle slot 1's 1,600/8,000 = 0.2 s: the peer. With room in the batch
/// (occupancy 0.5) the decode term is 0: the owner at 0 s. Without the knob the owner pays
/// 0.3 s at either occupancy.
#[test]
fn incident_a_4_decode_counts_only_for_a_full_batch_when_configured() {
    let at = |occupancy: f32, full_only: bool| {
        let owner = SlotFigures {
            occupancy: Some(occupancy),
            ..fig(100.0, 1.0, 0.0, 300.0, 0.0)
        };
        let f = Fleet::from_slots(&[Some(owner), Some(fig(0.0, 0.0, 0.0, 0.0, 0.0))]);
        let cfg = ScoreConfig {
            decode_full_batch_only: full_only,
            ..cfg(ENFORCE)
        };
        both(&f, 1_600, &cfg, 1)
    };
    let c = at(1.0, true);
    assert_eq!(slot(&c), 1);
    assert!((c.cost - 0.2).abs() < 1e-6, "{c:?}");
    let c = at(0.5, true);
    assert_eq!(slot(&c), 0);
    assert!(c.cost.abs() < 1e-6, "{c:?}");
    let c = at(0.5, false);
    assert_eq!(slot(&c), 1);
    assert!((c.cost - 0.2).abs() < 1e-6, "{c:?}");
}

/// Item 5. Slot 0 holds the 1,600-token prompt with 1,000 queued tokens: projected 0.125 s
/// beats the idle slot 1's 0.2 s, but `least_load` gives slot 0 1,000/8,000 = 0.125 s and
/// slot 1 0 s. With any slot not fresh, the decision is `least_load`'s, with the reason
/// naming the cause, among the slots whose own figures are trusted (fresh or partial): a
/// missing, stale or invalid slot 1 reads as idle but is not eligible, so slot 0 wins at
/// 0.125 s; a partial slot 1 (its own figures current) wins at 0 s, as does a fresh slot 1
/// when slot 0 is the bad one.
#[test]
fn incident_a_5_bad_telemetry_falls_back_to_load_only() {
    for (v, cause) in [
        (Validity::Missing, FallbackCause::Missing),
        (Validity::Stale, FallbackCause::Stale),
        (Validity::Partial, FallbackCause::Partial),
        (Validity::Invalid, FallbackCause::Invalid),
    ] {
        for bad in 0..2 {
            let mut slots = [
                fig(100.0, 2.0, 1_000.0, 0.0, 0.0),
                fig(0.0, 0.0, 0.0, 0.0, 0.0),
            ];
            slots[bad].validity = v;
            let f = Fleet::from_slots(&slots.map(Some));
            let c = both(&f, 1_600, &cfg(ENFORCE), 0);
            let untrusted_idle = bad == 1 && v != Validity::Partial;
            let (want_slot, want_cost) = if untrusted_idle { (0, 0.125) } else { (1, 0.0) };
            assert_eq!(slot(&c), want_slot, "{v:?} on {bad}");
            assert_eq!(c.reason, Reason::Fallback(cause));
            assert_eq!(c.fallback, Some(cause));
            assert_eq!(c.cost, want_cost);
        }
    }
    let fresh = Fleet::from_slots(&[
        Some(fig(100.0, 2.0, 1_000.0, 0.0, 0.0)),
        Some(fig(0.0, 0.0, 0.0, 0.0, 0.0)),
    ]);
    let c = both(&fresh, 1_600, &cfg(ENFORCE), 0);
    assert_eq!(
        (slot(&c), c.reason, c.fallback),
        (0, Reason::CacheHold, None)
    );
}

fn random_fleet(seed: u64, n: usize) -> Fleet {
    let mut r = kvroute_score::NearTieRng::new(seed);
    let mut v = |m: u64| (r.next_u64() % m) as f32;
    let slots: Vec<_> = (0..n)
        .map(|_| Some(fig(v(4), v(50), v(20_000), v(20_000), v(100) / 100.0)))
        .collect();
    Fleet::from_slots(&slots)
}

proptest! {
    /// Item 6: `off` is exactly `least_load` (slot, cost, reason).
    #[test]
    fn incident_a_6_off_preserves_least_load(seed in any::<u64>(), n in 1usize..70, cursor in any::<u32>()) {
        let f = random_fleet(seed, n);
        let off = both(&f, 200, &cfg(Policy::ProjectedTime { mode: ProjectedMode::Off }), cursor);
        let ll = both(&f, 200, &cfg(Policy::LeastLoad), cursor);
        prop_assert!(off.same_as(&ll), "{off:?} {ll:?}");
    }

    /// Item 7: `shadow` dispatches exactly as `least_load` and records `enforce`'s choice.
    #[test]
    fn incident_a_7_shadow_records_counterfactual_without_changing_dispatch(seed in any::<u64>(), n in 1usize..70, cursor in any::<u32>()) {
        let f = random_fleet(seed, n);
        let sh = both(&f, 200, &cfg(Policy::ProjectedTime { mode: ProjectedMode::Shadow }), cursor);
        let ll = both(&f, 200, &cfg(Policy::LeastLoad), cursor);
        let en = both(&f, 200, &cfg(ENFORCE), cursor);
        prop_assert_eq!((sh.slot, sh.reason, sh.cost.to_bits()), (ll.slot, ll.reason, ll.cost.to_bits()));
        let cf = sh.shadow.expect("shadow records a counterfactual");
        prop_assert_eq!((cf.slot, cf.reason, cf.cost.to_bits()), (en.slot, en.reason, en.cost.to_bits()));
    }
}

/// Item 8. Slot 0 holds the whole 16,000-token prompt (1,000 blocks) but prefills at 100
/// tokens/s with 300 queued tokens: projected 300/100 = 3 s, against the idle slot 1's
/// 16,000/100 = 160 s, so the projected winner is slot 0. Its `least_load` seconds are
/// 300/100 = 3 s against slot 1's 0 s: a 3 s gap. Margin 2 s: escape to slot 1. Margin
/// 5 s: slot 0 keeps it.
#[test]
fn incident_a_8_enforce_takes_the_hard_load_escape() {
    let slow = |overlap, queued| SlotFigures {
        prefill_tps: 100.0,
        ..fig(overlap, 1.0, queued, 0.0, 0.0)
    };
    let f = Fleet::from_slots(&[Some(slow(1_000.0, 300.0)), Some(slow(0.0, 0.0))]);
    let c = both(&f, 16_000, &cfg(ENFORCE), 0);
    assert_eq!((slot(&c), c.reason), (1, Reason::LoadEscape));
    assert!(
        (c.cost - 160.0).abs() < 1e-3,
        "the chosen slot's projected seconds: {c:?}"
    );
    let wide_margin = ScoreConfig {
        escape_margin_s: 5.0,
        ..cfg(ENFORCE)
    };
    let c = both(&f, 16_000, &wide_margin, 0);
    assert_eq!((slot(&c), c.reason), (0, Reason::CacheHold));
    assert!((c.cost - 3.0).abs() < 1e-6);
}

/// Item 9: knobs out of range are rejected, naming the knob (more in `config.rs`).
#[test]
fn incident_a_9_runtime_knobs_are_bounded() {
    let bad = ScoreConfig {
        escape_margin_s: -1.0,
        ..cfg(ENFORCE)
    };
    let e = bad.validate().unwrap_err();
    assert_eq!(e.knob, "escape_margin_s");
    assert!(e.to_string().contains("0.0..=3600.0"));
    let mut s = Scorer::new();
    // A scorer given an invalid config still decides without panicking (the facade never
    // passes one; SharedConfig refuses to hold one).
    let f = Fleet::from_slots(&[Some(SlotFigures::idle())]);
    let req = ScoreRequest {
        prompt_tokens: 10,
        block_size: 16,
    };
    assert!(s.score(&f, req, &bad, TieInput::default()).slot.is_some());
}
