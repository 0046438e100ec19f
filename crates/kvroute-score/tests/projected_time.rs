//! The `projected_time` policy: a hot cached owner loses to idle peers, affinity wins where
//! the saved prefill outweighs the load, simultaneous identical requests spread (at the
//! scorer level: reservations are modelled by adding each pick's work to its lanes; the
//! whole-fleet runs are the simulator's), decode occupancy and a full batch change the
//! winner, bad telemetry falls back to load only, `off` and `shadow` dispatch as
//! `least_load`, `enforce` takes the hard load escape, and the knobs are bounded.
//! Every expected value is computed by hand in the comments, with the default knobs:
//! prefill 8,000 tokens/s and decode 1,000 tokens/s when not reported, `least_load`
//! 2,000 tokens/s, barrier 0.15 s · k/(1−k), escape margin 2 s + 2 × the other slots' mean
//! `least_load` seconds, block size 16.
//!
//! Projected seconds (`kvroute_score` module `cost`): `queued/π + wait + n·U/π +
//! (2n − 1)·O/δ + barrier`, `q` requests, `U` uncached tokens, `O` expected output tokens,
//! `n = q + 1` while occupancy is below 1 (lifted to the fleet's mean batch + 1, at most the
//! cap, where the occupancy is not 0), else the cap `M = q/occupancy`, and then
//! `wait = (q − M + 1)·T/δ` (0 while there is room), `T` the typical output
//! (`tokens_per_request`, 512). No step base: processor sharing.

mod common;

use common::{both, both_out, cfg, slot};
use kvroute_load::Validity;
use kvroute_score::{
    FallbackCause, Fleet, Policy, ProjectedMode, Reason, ScoreRequest, Scorer, SlotFigures,
    TieInput,
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
        decode_step_base_s: 0.0,
        ..SlotFigures::idle()
    }
}

/// 51 workers of 38 slots; slot 0 owns the 4,096-token prefix (256 blocks) of
/// 4,160-token prompts (256 output tokens) with 38 running and 109 waiting: q = 147,
/// occupancy 147/38, so M = 38 = n; queued 109 × 64 = 6,976 tokens (0.872 s), KV 0.6.
/// Its wait for the 110th free slot, the running requests taken to generate the typical 512
/// tokens each (`tokens_per_request`): 110 × 0.512 = 56.32 s, after the queue's 0.872 s;
/// prefill 38 × 64/8,000 = 0.304 s; decode 75 × 0.256 = 19.2 s; barrier 0.15·0.6/0.4 =
/// 0.225 s: 76.921 s. Slot 50 has 2 running (n = 3, KV 0.05): 3 × 4,160/8,000 + 5 × 0.256 +
/// 0.15·0.05/0.95 = 1.56 + 1.28 + 0.0079 = 2.8479 s. The 49 idle peers: 4,160/8,000 +
/// 0.256 = 0.776 s (an idle worker's batch is 1: no cap to lift it to the fleet's mean;
/// alone, slot 50's batch is the fleet's mean batch + 1 = 3 = q + 1). The lift reads the
/// fleet's mean batch, each worker counted at most at its cap: the owner's 147 count 38,
/// slot 50's 2 count 2, an idle peer 0. Each pick reserves one request, 4,160 prefill and
/// 256 decode tokens: the picked peer queues 0.52 s and holds q = 1, its batch
/// n = max(2, mean batch + 1) >= 2 (the mean batch runs from 40/51 = 0.784 before the
/// first pick to 88/51 = 1.725 before the 49th), and costs at least 0.52 + 2 × 0.52 +
/// 3 × 0.256 = 2.328 s, above an idle peer's 0.776 s: 49 new hot-prefix requests go to the 49
/// idle peers, one each. Then the mean batch is 89/51 = 1.745 10, a peer costs
/// 0.52 + 2.745 10 × 0.52 + 4.490 20 × 0.256 = 0.52 + 1.427 45 + 1.149 49 = 3.096 94 s,
/// and the light worker (q = 2, n = max(3, 2.745 10) = 3, nothing queued) its 2.847 89 s:
/// the 50th goes to the light worker. None goes to the owner.
#[test]
fn hot_owner_among_51_workers_spills_to_the_idle_peers() {
    let with_occ = |f: SlotFigures| SlotFigures {
        occupancy: Some(f.requests / 38.0),
        ..f
    };
    let mut slots = vec![Some(with_occ(fig(0.0, 0.0, 0.0, 0.0, 0.0))); 51];
    slots[0] = Some(with_occ(fig(256.0, 147.0, 6_976.0, 159_600.0, 0.6)));
    slots[50] = Some(with_occ(fig(0.0, 2.0, 0.0, 8_400.0, 0.05)));
    let owner = both_out(
        &Fleet::from_slots(&slots[..1]),
        4_160,
        256,
        &cfg(ENFORCE),
        0,
    );
    assert!((owner.cost - 76.921).abs() < 1e-3, "{owner:?}");
    let light = both_out(
        &Fleet::from_slots(&slots[50..]),
        4_160,
        256,
        &cfg(ENFORCE),
        0,
    );
    assert!((light.cost - 2.847_89).abs() < 1e-4, "{light:?}");
    let mut seen = [0u32; 51];
    for cursor in 0..50u32 {
        let c = both_out(
            &Fleet::from_slots(&slots),
            4_160,
            256,
            &cfg(ENFORCE),
            cursor,
        );
        let s = slot(&c) as usize;
        let (want_slots, want) = if cursor < 49 {
            (1..50, 0.776)
        } else {
            (50..51, 2.847_89)
        };
        assert!(
            want_slots.contains(&s),
            "request {cursor} went to {s}: {c:?}"
        );
        assert_eq!(c.reason, Reason::Spill);
        assert!((c.cost - want).abs() < 1e-4, "request {cursor}: {c:?}");
        seen[s] += 1;
        let f = slots[s].as_mut().unwrap();
        f.requests += 1.0;
        f.occupancy = Some(f.requests / 38.0);
        f.queued_tokens += 4_160.0;
        f.decode_tokens += 256.0;
    }
    assert_eq!(seen[0], 0, "{seen:?}");
    assert!(seen[1..50].iter().all(|&n| n == 1), "{seen:?}");
    assert_eq!(seen[50], 1, "{seen:?}");
}

/// Both sides of the crossover between affinity and load. 4,000-token prompts expecting 100
/// output tokens (0.1 s of decode at 1,000 tokens/s). Slot 0 holds the whole prompt (250
/// blocks) with one request in flight (n = 2) and `q` queued tokens: q/8,000 + 3 × 0.1 s.
/// Slot 1 is idle: 4,000/8,000 + 0.1 = 0.6 s. The crossover is q = 2,400. q = 2,000: 0.55 s
/// < 0.6 s, the owner keeps it. q = 2,800: 0.65 s > 0.6 s, the peer takes it. Neither is an
/// escape (`least_load` gaps of 0.25 s and 0.35 s, below the 2 s margin).
#[test]
fn affinity_preferred_when_saved_prefill_exceeds_load_penalty() {
    let at = |q: f32| {
        let f = Fleet::from_slots(&[
            Some(fig(250.0, 1.0, q, 0.0, 0.0)),
            Some(fig(0.0, 0.0, 0.0, 0.0, 0.0)),
        ]);
        both_out(&f, 4_000, 100, &cfg(ENFORCE), 1)
    };
    let below = at(2_000.0);
    assert_eq!((slot(&below), below.reason), (0, Reason::CacheHold));
    assert!((below.cost - 0.55).abs() < 1e-6, "{below:?}");
    let above = at(2_800.0);
    assert_eq!((slot(&above), above.reason), (1, Reason::Spill));
    assert!((above.cost - 0.6).abs() < 1e-6, "{above:?}");
}

/// Simultaneous identical requests at the scorer level: 8 identical requests on 4 idle
/// workers, each pick's work added to its lanes before the next decision (what a
/// reservation does), all with the same cursor: 2 per worker. (An idle worker costs
/// 1,000/8,000 + 0.512 = 0.637 s with the assumed 512 output tokens; one with the first
/// request 0.125 + 2 × 0.125 + 3 × 0.512 = 1.911 s.)
#[test]
fn simultaneous_identical_requests_spread_through_reservations() {
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

/// Active decode occupancy. 2,000-token prompts expecting 100 output tokens. Slot 0 holds
/// the prompt (125 blocks), nothing queued, `r` requests decoding (occupancy r/32):
/// (2(r + 1) − 1) × 0.1 s. Slot 1 idle: 2,000/8,000 + 0.1 = 0.35 s. r = 1: 0.3 s, the
/// owner; r = 2: 0.5 s, the peer (at 0.35 s).
#[test]
fn active_decode_occupancy_changes_the_winner() {
    let at = |r: f32| {
        let owner = SlotFigures {
            occupancy: Some(r / 32.0),
            ..fig(125.0, r, 0.0, r * 2_100.0, 0.0)
        };
        let f = Fleet::from_slots(&[Some(owner), Some(fig(0.0, 0.0, 0.0, 0.0, 0.0))]);
        both_out(&f, 2_000, 100, &cfg(ENFORCE), 1)
    };
    let c = at(1.0);
    assert_eq!(slot(&c), 0);
    assert!((c.cost - 0.3).abs() < 1e-6, "{c:?}");
    let c = at(2.0);
    assert_eq!(slot(&c), 1);
    assert!((c.cost - 0.35).abs() < 1e-6, "{c:?}");
}

/// Decode occupancy of a full batch: the owner waits for a running slot. 1,600-token prompts
/// expecting 100 output tokens. Slot 0 holds the prompt, 32 running + 8 waiting of a 32-slot
/// cap (occupancy 1.25, so M = n = 32): it needs the 9th slot to free; the running requests
/// are taken to generate the typical 512 tokens (`tokens_per_request`), so one frees every
/// 0.512 s: 4.608 s; prefill 0; decode 63 × 0.1 = 6.3 s: 10.908 s. Slot 1 has room
/// (31 running, occupancy 31/32, n = 32; the fleet's mean batch + 1, the owner counted at
/// its cap, (32 + 31)/2 + 1 = 32.5, is above the cap)
/// but must prefill: 32 × 1,600/8,000 + 6.3 = 12.7 s; the owner keeps it. Against an idle slot 1 (0.2 + 0.1 = 0.3 s) the owner loses.
#[test]
fn a_full_batch_waits_for_a_slot() {
    let owner = SlotFigures {
        occupancy: Some(1.25),
        ..fig(100.0, 40.0, 0.0, 0.0, 0.0)
    };
    let nearly_full = SlotFigures {
        occupancy: Some(31.0 / 32.0),
        ..fig(0.0, 31.0, 0.0, 0.0, 0.0)
    };
    let f = Fleet::from_slots(&[Some(owner), Some(nearly_full)]);
    let c = both_out(&f, 1_600, 100, &cfg(ENFORCE), 1);
    assert_eq!((slot(&c), c.reason), (0, Reason::CacheHold));
    assert!((c.cost - 10.908).abs() < 1e-4, "{c:?}");
    let f = Fleet::from_slots(&[Some(owner), Some(fig(0.0, 0.0, 0.0, 0.0, 0.0))]);
    let c = both_out(&f, 1_600, 100, &cfg(ENFORCE), 0);
    assert_eq!((slot(&c), c.reason), (1, Reason::Spill));
    assert!((c.cost - 0.3).abs() < 1e-6, "{c:?}");
}

/// Bad telemetry. 1,600-token prompts expecting 10 output tokens (0.01 s of decode). Slot 0 holds
/// the prompt with 2 requests and 1,000 queued tokens: projected 0.125 + 5 × 0.01 = 0.175 s
/// beats the idle slot 1's 0.2 + 0.01 = 0.21 s, but `least_load` gives slot 0 1,000/8,000 =
/// 0.125 s and slot 1 0 s.
///
/// Fleet-wide (`fallback_fraction` 0: any slot not fresh switches the fleet): the decision is
/// `least_load`'s over every slot from what is known of it, with the reason naming the
/// worst validity: slot 1 wins at 0 s whichever slot is bad (a missing, stale or invalid
/// slot is costed from its own figures, not excluded).
///
/// Scoped (the default 0.5; one slot of two not fresh): only the bad slot loses its cache
/// credit. Slot 0 bad: its projected cost without the cache is 1,000/8,000 plus
/// 3 × 1,600/8,000 plus 5 × 0.01, 0.775 s, so the fresh idle slot 1 takes it (0.21 s, a spill
/// off the deepest holder). Slot 1 bad: it had no cache to lose, its 0.21 s is above slot
/// 0's, and slot 0 keeps its hold at 0.175 s.
#[test]
fn bad_telemetry_falls_back_to_load_only() {
    let mut fleet_wide = cfg(ENFORCE);
    fleet_wide.fallback_fraction = 0.0;
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
            let c = both_out(&f, 1_600, 10, &fleet_wide, 0);
            assert_eq!(
                (slot(&c), c.reason, c.fallback, c.cost),
                (1, Reason::Fallback(cause), Some(cause), 0.0),
                "fleet-wide, {v:?} on {bad}"
            );
            let c = both_out(&f, 1_600, 10, &cfg(ENFORCE), 0);
            let (want_slot, want_reason, want_cost) = if bad == 0 {
                (1, Reason::Spill, 0.21)
            } else {
                (0, Reason::CacheHold, 0.175)
            };
            assert_eq!(
                (slot(&c), c.reason, c.fallback),
                (want_slot, want_reason, None),
                "scoped, {v:?} on {bad}"
            );
            assert!(
                (c.cost - want_cost).abs() < 1e-6,
                "scoped, {v:?} on {bad}: {c:?}"
            );
        }
    }
    let fresh = Fleet::from_slots(&[
        Some(fig(100.0, 2.0, 1_000.0, 0.0, 0.0)),
        Some(fig(0.0, 0.0, 0.0, 0.0, 0.0)),
    ]);
    let c = both_out(&fresh, 1_600, 10, &cfg(ENFORCE), 0);
    assert_eq!(
        (slot(&c), c.reason, c.fallback),
        (0, Reason::CacheHold, None)
    );
    assert!((c.cost - 0.175).abs() < 1e-6, "{c:?}");
}

/// The scoped rule: three slots, slot 2 not fresh and, by its last figures, the least
/// loaded. Slots 0 and 1 run 4 requests each (n = 5); slot 2 ran 1, its batch lifted to the
/// fleet's mean batch plus one (3 + 1: n = 4; no occupancy known, each counted in full), none queued, none holding the 1,600-token prompt:
/// projected 5 × 0.2 + 9 × 0.01 = 1.09 s for slots 0 and 1, 4 × 0.2 + 7 × 0.01 = 0.87 s for
/// slot 2. One slot of three is under the 0.5 share.
/// * Missing figures: slot 2 is costed no lower than just above the best fresh cost and
///   its tie band, so the fresh slot 0 (cursor 0 of the tied 0 and 1) takes the request at
///   1.09 s.
/// * Stale figures, this router the only one (`router_replicas` 1, the default): slot 2 is
///   costed from what is known of it and takes the request at 0.87 s, recording its cause.
/// * Stale, two replicas: floored as when missing (1.09 s on slot 0), unless its load is
///   below its last report (`below_report`): then 0.87 s on slot 2 again.
/// * Every slot stale but slot 0 (two of three: fleet-wide): `least_load` over what is
///   known takes the least loaded, slot 2 (0 queued tokens: 0 s), recording the worst cause.
#[test]
fn a_slot_that_is_not_fresh_is_costed_by_what_is_known_of_it() {
    let mut slots = [
        fig(0.0, 4.0, 0.0, 0.0, 0.0),
        fig(0.0, 4.0, 0.0, 0.0, 0.0),
        fig(0.0, 1.0, 0.0, 0.0, 0.0),
    ];
    let mut two = cfg(ENFORCE);
    two.router_replicas = 2;
    let stale = (
        2,
        Reason::Fallback(FallbackCause::Stale),
        Some(FallbackCause::Stale),
    );
    let fresh_pick = (0, Reason::CacheMiss, None);
    for (validity, below, config, want, cost) in [
        (Validity::Missing, false, cfg(ENFORCE), fresh_pick, 1.09),
        (Validity::Missing, true, cfg(ENFORCE), fresh_pick, 1.09),
        (Validity::Stale, false, cfg(ENFORCE), stale, 0.87),
        (Validity::Stale, false, two, fresh_pick, 1.09),
        (Validity::Stale, true, two, stale, 0.87),
    ] {
        slots[2].validity = validity;
        slots[2].below_report = below;
        let f = Fleet::from_slots(&slots.map(Some));
        let c = both_out(&f, 1_600, 10, &config, 0);
        let what = format!(
            "{validity:?}, below {below}, {} replicas",
            config.router_replicas
        );
        assert_eq!((slot(&c), c.reason, c.fallback), want, "{what}");
        assert!((c.cost - cost).abs() < 1e-6, "{what}: {c:?}");
    }
    slots[1].validity = Validity::Stale;
    let f = Fleet::from_slots(&slots.map(Some));
    let c = both_out(&f, 1_600, 10, &cfg(ENFORCE), 0);
    assert_eq!((slot(&c), c.reason, c.fallback), stale);
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
    /// `off` is exactly `least_load` (slot, cost, reason).
    #[test]
    fn off_preserves_least_load(seed in any::<u64>(), n in 1usize..70, cursor in any::<u32>()) {
        let f = random_fleet(seed, n);
        let off = both(&f, 200, &cfg(Policy::ProjectedTime { mode: ProjectedMode::Off }), cursor);
        let ll = both(&f, 200, &cfg(Policy::LeastLoad), cursor);
        prop_assert!(off.same_as(&ll), "{off:?} {ll:?}");
    }

    /// `shadow` dispatches exactly as `least_load` and records `enforce`'s choice.
    #[test]
    fn shadow_records_counterfactual_without_changing_dispatch(seed in any::<u64>(), n in 1usize..70, cursor in any::<u32>()) {
        let f = random_fleet(seed, n);
        let sh = both(&f, 200, &cfg(Policy::ProjectedTime { mode: ProjectedMode::Shadow }), cursor);
        let ll = both(&f, 200, &cfg(Policy::LeastLoad), cursor);
        let en = both(&f, 200, &cfg(ENFORCE), cursor);
        prop_assert_eq!((sh.slot, sh.reason, sh.cost.to_bits()), (ll.slot, ll.reason, ll.cost.to_bits()));
        let cf = sh.shadow.expect("shadow records a counterfactual");
        prop_assert_eq!((cf.slot, cf.reason, cf.cost.to_bits()), (en.slot, en.reason, en.cost.to_bits()));
    }
}

/// The hard load escape. 16,000-token prompts expecting 10 output tokens (0.01 s of decode
/// at 1,000 tokens/s). Slot 0 holds the whole prompt (1,000 blocks) but prefills at 100
/// tokens/s, with one request and 300 queued tokens: projected 300/100 + 3 × 0.01 = 3.03 s,
/// against the idle slot 1's (no request) 16,000/100 + 0.01 = 160.01 s, so the projected
/// winner is slot 0. Its `least_load` seconds are 300/100 = 3 s against slot 1's 0 s: a 3 s
/// gap. The other slot's mean is 0, so the margin is the absolute 2 s: escape to slot 1.
/// Margin 5 s: slot 0 keeps it.
#[test]
fn enforce_takes_the_hard_load_escape() {
    let slow = |overlap, requests, queued| SlotFigures {
        prefill_tps: 100.0,
        ..fig(overlap, requests, queued, 0.0, 0.0)
    };
    let f = Fleet::from_slots(&[Some(slow(1_000.0, 1.0, 300.0)), Some(slow(0.0, 0.0, 0.0))]);
    let c = both_out(&f, 16_000, 10, &cfg(ENFORCE), 0);
    assert_eq!((slot(&c), c.reason), (1, Reason::LoadEscape));
    assert!(
        (c.cost - 160.01).abs() < 1e-3,
        "the chosen slot's projected seconds: {c:?}"
    );
    let wide_margin = {
        let mut c = cfg(ENFORCE);
        c.escape_margin_s = 5.0;
        c
    };
    let c = both_out(&f, 16_000, 10, &wide_margin, 0);
    assert_eq!((slot(&c), c.reason), (0, Reason::CacheHold));
    assert!((c.cost - 3.03).abs() < 1e-5, "{c:?}");
}

/// The escape's load-relative part. The fleet of `enforce_takes_the_hard_load_escape` plus
/// slot 2, a worker without the prefix carrying one request and 200 queued tokens at 100
/// tokens/s (`least_load` 2 s; projected 2 + 2 × 160 + 3 × 0.01 = 322.03 s). The projected
/// winner is still slot 0 (3.03 s), the load-only winner slot 1 (0 s), the gap 3 s. The
/// others' mean `least_load` is (0 + 2)/2 = 1 s, so the default margin is 2 + 2 × 1 = 4 s >
/// 3 s: slot 0 keeps it. With `escape_margin_rel` 0 the margin is 2 s: escape to slot 1.
/// With rel 0.9 it is 2.9 s: escape; with rel 1.1, 3.1 s: no escape.
#[test]
fn the_escape_margin_grows_with_the_fleets_load() {
    let slow = |overlap, requests, queued| SlotFigures {
        prefill_tps: 100.0,
        ..fig(overlap, requests, queued, 0.0, 0.0)
    };
    let f = Fleet::from_slots(&[
        Some(slow(1_000.0, 1.0, 300.0)),
        Some(slow(0.0, 0.0, 0.0)),
        Some(slow(0.0, 1.0, 200.0)),
    ]);
    for (rel, escapes) in [(2.0, false), (0.0, true), (0.9, true), (1.1, false)] {
        let c = both_out(
            &f,
            16_000,
            10,
            &{
                let mut c = cfg(ENFORCE);
                c.escape_margin_rel = rel;
                c
            },
            0,
        );
        let want = if escapes {
            (1, Reason::LoadEscape, 160.01)
        } else {
            (0, Reason::CacheHold, 3.03)
        };
        assert_eq!((slot(&c), c.reason), (want.0, want.1), "rel {rel}: {c:?}");
        assert!((c.cost - want.2).abs() < 1e-3, "rel {rel}: {c:?}");
    }
}

/// Knobs out of range are rejected, naming the knob (more in `config.rs`).
#[test]
fn runtime_knobs_are_bounded() {
    let bad = {
        let mut c = cfg(ENFORCE);
        c.escape_margin_s = -1.0;
        c
    };
    let e = bad.validate().unwrap_err();
    assert_eq!(e.field, "escape_margin_s");
    assert_eq!(
        e.to_string(),
        "escape_margin_s = -1 is out of range 0..=3600 s"
    );
    for replicas in [0, 1_025] {
        let mut c = cfg(ENFORCE);
        c.router_replicas = replicas;
        let e = c.validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("router_replicas = {replicas} is out of range 1..=1024 replicas")
        );
    }
    for usage in [-0.1, 2.01, f32::NAN] {
        let mut c = cfg(ENFORCE);
        c.kv_bound_usage = usage;
        assert_eq!(c.validate().unwrap_err().field, "kv_bound_usage", "{usage}");
    }
    for usage in [0.0, 0.9, 2.0] {
        let mut c = cfg(ENFORCE);
        c.kv_bound_usage = usage;
        assert_eq!(c.validate(), Ok(()), "{usage}");
    }
    let mut s = Scorer::new();
    // A scorer given an invalid config still decides without panicking (the facade never
    // passes one; SharedConfig refuses to hold one).
    let f = Fleet::from_slots(&[Some(SlotFigures::idle())]);
    let req = ScoreRequest {
        prompt_tokens: 10,
        block_size: 16,
        expected_output_tokens: 0,
    };
    assert!(s.score(&f, req, &bad, TieInput::default()).slot.is_some());
}

/// The escape obeys the scoped rule too: a worker that never reported (`Missing`, its
/// figures all zero) is neither the escape's target nor part of the others' mean. Slot 0
/// holds the whole 16,000-token prompt (1,000 blocks) with 6,000 tokens queued (0.75 s of
/// prefill at 8,000 tokens/s); slots 1 to 3 hold nothing and queue 1,000 tokens each
/// (0.125 s), where the prompt's prefill alone is 2 s. The oracle is the same fleet
/// without the missing slot: at escape margins of 2, 0.5 and 0 s, adding the missing slot
/// changes neither the slot chosen nor the reason (before the rule, at 0.5 s the escape
/// left slot 0 for the missing slot, its least load read as 0).
#[test]
fn the_escape_never_targets_a_worker_without_telemetry() {
    let owner = fig(1_000.0, 1.0, 6_000.0, 0.0, 0.0);
    let peer = fig(0.0, 1.0, 1_000.0, 0.0, 0.0);
    let mut missing = fig(0.0, 0.0, 0.0, 0.0, 0.0);
    missing.validity = Validity::Missing;
    for margin in [2.0f32, 0.5, 0.0] {
        let mut c = cfg(ENFORCE);
        c.escape_margin_s = margin;
        let without = Fleet::from_slots(&[Some(owner), Some(peer), Some(peer), Some(peer)]);
        let with = Fleet::from_slots(&[
            Some(owner),
            Some(peer),
            Some(peer),
            Some(peer),
            Some(missing),
        ]);
        let a = both_out(&without, 16_000, 10, &c, 0);
        let b = both_out(&with, 16_000, 10, &c, 0);
        assert_ne!(slot(&b), 4, "margin {margin}: {b:?}");
        assert_eq!(
            (slot(&a), a.reason),
            (slot(&b), b.reason),
            "margin {margin}: {a:?} against {b:?}"
        );
    }
}

/// Two workers for an 8,000-token prompt (500 blocks) expecting 100 output tokens: slot 0
/// holds all of it, with 4 requests and 100,000 decode tokens in KV; slot 1 holds none, with
/// 12 requests and 60,000 decode tokens; nothing queued; KV usage 15/16 and 7/8, so the
/// mean is 0.906 25 (exact in the 2⁻²⁰ units the mean counts).
///
/// At or below the switch (the default 0.9, or 0.906 25 itself) the fleet is KV-bound and
/// the blocks cost decides: `(queued + prompt)/16 − overlap + decode/16 + max(prompt/16 −
/// overlap, 0)`, slot 0: `500 − 500 + 6,250 + 0 = 6,250`, slot 1: `500 − 0 + 3,750 + 500 =
/// 4,750`: slot 1, reason `kv_bound`, cost 4,750.
///
/// Two units of the mean (2⁻²⁰ each) above it (the switch allows one unit of rounding),
/// projected seconds decide (occupancy unknown, so each batch is its
/// requests counted in full and the mean batch is (4 + 12)/2 = 8, lifted to 9): slot 0,
/// `n = max(9, 5) = 9`, no prefill, decode `(2·9 − 1) × 100/1,000 = 1.7`, barrier
/// `0.15 × 15 = 2.25`: 3.95 s; slot 1, `n = max(9, 13) = 13`, prefill
/// `13 × 8,000/8,000 = 13`, decode `25 × 0.1 = 2.5`, barrier `0.15 × 7 = 1.05`: 16.55 s. The
/// escape does not fire (`least_load` 52.25 against 31.05 s, a gap of 21.2 s under the
/// 2 + 2 × 31.05 s margin): slot 0 keeps it, `cache_hold`, 3.95 s.
#[test]
fn a_kv_bound_fleet_is_balanced_on_kv_blocks() {
    let f = Fleet::from_slots(&[
        Some(fig(500.0, 4.0, 0.0, 100_000.0, 0.9375)),
        Some(fig(0.0, 12.0, 0.0, 60_000.0, 0.875)),
    ]);
    assert_eq!(f.aggregates().mean_kv_usage, 0.906_25);
    let at = |switch: f32| {
        let mut c = cfg(ENFORCE);
        c.kv_bound_usage = switch;
        both_out(&f, 8_000, 100, &c, 0)
    };
    for switch in [0.9, 0.906_25] {
        let c = at(switch);
        assert_eq!((slot(&c), c.reason), (1, Reason::KvBound), "{switch}");
        assert_eq!(c.cost, 4_750.0, "{switch}");
    }
    let c = at(0.906_25 + 2.0 / 1_048_576.0);
    assert_eq!((slot(&c), c.reason), (0, Reason::CacheHold));
    assert!((c.cost - 3.95).abs() < 1e-5, "{c:?}");
    // Shadow records the same KV-bound counterfactual beside its `least_load` dispatch.
    let mut c = cfg(Policy::ProjectedTime {
        mode: ProjectedMode::Shadow,
    });
    c.kv_bound_usage = 0.9;
    let shadow = both_out(&f, 8_000, 100, &c, 0);
    let cf = shadow.shadow.expect("shadow records a counterfactual");
    assert_eq!(
        (cf.slot.map(|s| s.index()), cf.reason, cf.cost),
        (Some(1), Reason::KvBound, 4_750.0)
    );
}

/// The fleet's mean KV usage counts occupied slots only, each rounded down to 2⁻²⁰ and at
/// most 1: 0.5 and 1.0 with a vacant slot between them average 0.75; a NaN or negative
/// usage counts 0 (0.5, NaN and −1 average 1/6, rounded once to `f32`); +∞ and 7 count 1
/// (with 0.5, 2.5/3).
#[test]
fn the_mean_kv_usage_counts_occupied_slots() {
    let at = |kv: f32| Some(fig(0.0, 1.0, 0.0, 0.0, kv));
    let f = Fleet::from_slots(&[at(0.5), None, at(1.0)]);
    assert_eq!(f.aggregates().mean_kv_usage, 0.75);
    let g = Fleet::from_slots(&[at(0.5), at(f32::NAN), at(-1.0)]);
    assert_eq!(g.aggregates().mean_kv_usage, (0.5f64 / 3.0) as f32);
    let h = Fleet::from_slots(&[at(0.5), at(f32::INFINITY), at(7.0)]);
    assert_eq!(h.aggregates().mean_kv_usage, (2.5f64 / 3.0) as f32);
    assert_eq!(Fleet::from_slots(&[None]).aggregates().mean_kv_usage, 0.0);
}

/// The switch at its own value: eight workers each reporting exactly 0.9 (0.899 999 976 as
/// `f32`, 943,718.4 units of 2⁻²⁰, counted 943,718) have a mean just below 0.9, yet the
/// knob at 0.9 switches (it allows one unit of 2⁻²⁰ for the rounding) and the knob two
/// units above the mean (943,720/2²⁰) does not. A worker reporting +∞ among idle ones is counted at 1, so
/// the knob above 1 never switches, and at 0 an idle fleet does.
#[test]
fn the_kv_bound_switch_holds_at_its_own_value() {
    let reason = |kv: &[f32], switch: f32| {
        let slots: Vec<_> = kv
            .iter()
            .map(|&k| Some(fig(0.0, 1.0, 0.0, 0.0, k)))
            .collect();
        let mut c = cfg(ENFORCE);
        c.kv_bound_usage = switch;
        both_out(&Fleet::from_slots(&slots), 1_000, 100, &c, 0).reason
    };
    let at_switch = [0.9f32; 8];
    assert_eq!(reason(&at_switch, 0.9), Reason::KvBound);
    assert_eq!(
        reason(&at_switch, (943_720.0f64 / 1_048_576.0) as f32),
        Reason::CacheMiss
    );
    let mut spike = [0.1f32; 100];
    spike[0] = f32::INFINITY;
    assert_eq!(reason(&spike, 1.01), Reason::CacheMiss);
    assert_eq!(reason(&spike, 2.0), Reason::CacheMiss);
    assert_eq!(reason(&[0.0; 4], 0.0), Reason::KvBound);
}
