//! The `owner_pressure` rule: pressure `max(kv, util, (running + waiting)/max_running)`
//! with DP-rank sums, 0.9 watermark, 0.1 owner slack, a prefix worth keeping (processor
//! sharing), hold on the least-pressured owner when no safe spill exists, and the
//! fleet-wide fallback to `max(kv, util)`.

mod common;

use common::{both, cfg, slot};
use kvroute_core::{LoadSample, Nanos};
use kvroute_core::{Slot, SlotGeneration, WorkerId};
use kvroute_index::index::Overlaps;
use kvroute_load::{LoadConfig, LoadPublisher, ReservationTable, Validity};
use kvroute_score::{FallbackCause, Fleet, Policy, Reason, SlotFigures};

fn w(overlap: f32, kv: f32, occupancy: Option<f32>, requests: f32) -> Option<SlotFigures> {
    Some(SlotFigures {
        overlap_blocks: overlap,
        kv_usage: kv,
        occupancy,
        requests,
        ..SlotFigures::idle()
    })
}

/// The `owner-canary` scenario's start: owner at 35 running + 40 waiting of 37 (occupancy
/// 75/37 = 2.03) with KV usage 0.3; the old pressure (0.3) would hold it. Peer idle:
/// pressure 0 < 0.9 and 0 + 0.1 <= 2.03: spill to the peer.
#[test]
fn scheduler_occupancy_makes_a_full_owner_spill() {
    let f = Fleet::from_slots(&[
        w(100.0, 0.3, Some(75.0 / 37.0), 75.0),
        w(0.0, 0.0, Some(0.0), 0.0),
    ]);
    let c = both(&f, 1_600, &cfg(Policy::OwnerPressure), 0);
    assert_eq!((slot(&c), c.reason, c.fallback), (1, Reason::Spill, None));
    assert_eq!(c.cost, 0.0);
}

/// Owner below the watermark (0.85 < 0.9) keeps the request: cache hold.
#[test]
fn owner_below_watermark_holds() {
    let f = Fleet::from_slots(&[w(100.0, 0.2, Some(0.85), 30.0), w(0.0, 0.0, Some(0.0), 0.0)]);
    let c = both(&f, 1_600, &cfg(Policy::OwnerPressure), 1);
    assert_eq!((slot(&c), c.reason), (0, Reason::CacheHold));
    assert!((c.cost - 0.85).abs() < 1e-6);
}

/// A prefix not worth keeping: the owner holds 1 block (16 tokens) of a 528-token prompt,
/// share `s` = 16/528 = 1/33, at pressure 0.5; the peer is idle. `(1 − s)·(1 − 0) = 32/33 =
/// 0.970 > 1 − 0.5`: the owner would still prefill 97 % of the prompt on an engine half
/// busy, so the idle peer takes it (spill), although 0.5 is below the watermark.
#[test]
fn a_prefix_not_worth_keeping_spills_below_the_watermark() {
    let f = Fleet::from_slots(&[w(1.0, 0.0, Some(0.5), 32.0), w(0.0, 0.0, Some(0.0), 0.0)]);
    let c = both(&f, 528, &cfg(Policy::OwnerPressure), 0);
    assert_eq!((slot(&c), c.reason), (1, Reason::Spill));
    // Pressure 0.04: 0.970 > 0.96, still a spill; 0.02: 0.970 <= 0.98, the owner holds.
    let f = Fleet::from_slots(&[w(1.0, 0.0, Some(0.04), 3.0), w(0.0, 0.0, Some(0.0), 0.0)]);
    let c = both(&f, 528, &cfg(Policy::OwnerPressure), 0);
    assert_eq!((slot(&c), c.reason), (1, Reason::Spill));
    let f = Fleet::from_slots(&[w(1.0, 0.0, Some(0.02), 1.0), w(0.0, 0.0, Some(0.0), 0.0)]);
    let c = both(&f, 528, &cfg(Policy::OwnerPressure), 1);
    assert_eq!((slot(&c), c.reason), (0, Reason::CacheHold));
    // Against a peer at 0.3 the owner at 0.32 holds: 0.970 · 0.7 = 0.679 <= 0.68.
    let f = Fleet::from_slots(&[w(1.0, 0.0, Some(0.32), 20.0), w(0.0, 0.0, Some(0.3), 19.0)]);
    let c = both(&f, 528, &cfg(Policy::OwnerPressure), 1);
    assert_eq!((slot(&c), c.reason), (0, Reason::CacheHold));
}

/// No safe spill: owners at 0.95 and 1.2, the only peer at 0.88 (below 0.9 but 0.88 + 0.1 =
/// 0.98 > 0.95). The least-pressured owner (slot 0, 0.95) holds.
#[test]
fn no_safe_spill_holds_on_least_pressured_owner() {
    let f = Fleet::from_slots(&[
        w(100.0, 0.1, Some(0.95), 30.0),
        w(100.0, 0.1, Some(1.2), 40.0),
        w(0.0, 0.1, Some(0.88), 28.0),
    ]);
    let c = both(&f, 1_600, &cfg(Policy::OwnerPressure), 2);
    assert_eq!((slot(&c), c.reason), (0, Reason::NoSafeSpillHold));
    assert!((c.cost - 0.95).abs() < 1e-6);
}

/// Fallback: one peer's caps are unknown, so every slot uses `max(kv, util)`: the owner's
/// 0.3 is below 0.9, it holds, and the choice records the cause (the peer is `Partial`).
#[test]
fn unknown_caps_fall_back_fleet_wide_to_old_pressure() {
    let mut peer = w(0.0, 0.0, None, 0.0).unwrap();
    peer.validity = Validity::Partial;
    let f = Fleet::from_slots(&[w(100.0, 0.3, Some(75.0 / 37.0), 75.0), Some(peer)]);
    let c = both(&f, 1_600, &cfg(Policy::OwnerPressure), 0);
    assert_eq!((slot(&c), c.reason), (0, Reason::CacheHold));
    assert_eq!(c.fallback, Some(FallbackCause::Partial));
    assert!((c.cost - 0.3).abs() < 1e-6);
}

fn sample(running: u32, waiting: u32, cap: u32) -> LoadSample {
    {
        let mut c = LoadSample::idle(cap);
        c.running = running;
        c.waiting = waiting;
        c
    }
}

/// DP-rank sums through a real published snapshot. Engine 1 (slots 0, 1): ranks 20
/// running + 10 waiting of 20, and 0 of 20: occupancy (20 + 10 + 0)/(20 + 20) = 0.75 on both
/// slots (rank 0 alone would be 1.5, rank 1 alone 0). Engine 2 (slots 2, 3): 16 + 2 of 20
/// and 16 + 2 of 20: 36/40 = 0.9. With no owner the least pressure wins: 0.75, on slot 1
/// (fewer requests than slot 0). Then engine 1's rank 1 goes stale: its own last report
/// gives it an occupancy (0 of 20), but its engine is no longer current, so rank 0 (now
/// partial) has none: the old pressure (KV 0 everywhere) ties at 0 and rank 0's cause is
/// recorded.
#[test]
fn caps_and_counts_are_summed_across_dp_ranks() {
    let (mut publisher, reader) = LoadPublisher::new(LoadConfig::new(4)).unwrap();
    let table = ReservationTable::new(4, ReservationTable::DEFAULT_TTL).unwrap();
    let workers = [(1, 0), (1, 1), (2, 0), (2, 1)];
    for (i, &(id, rank)) in workers.iter().enumerate() {
        let slot = Slot(i as u32);
        publisher
            .add_worker(slot, WorkerId::new(id, rank), SlotGeneration(1))
            .unwrap();
        table
            .add_worker(slot, SlotGeneration(1), Nanos::ZERO)
            .unwrap();
    }
    let samples = [
        sample(20, 10, 20),
        sample(0, 0, 20),
        sample(16, 2, 20),
        sample(16, 2, 20),
    ];
    let t0 = Nanos::from_secs(10);
    for (&(id, rank), s) in workers.iter().zip(samples) {
        publisher
            .apply_sample(WorkerId::new(id, rank), s, t0)
            .unwrap();
    }
    publisher.publish(t0).unwrap();
    let overlaps = Overlaps::new(4);
    let mut fleet = Fleet::new();
    {
        let snap = reader.load();
        fleet.fill(&snap, &table, &overlaps, 512);
    }
    let c = both(&fleet, 1_600, &cfg(Policy::OwnerPressure), 0);
    assert_eq!(
        (slot(&c), c.reason, c.fallback),
        (1, Reason::CacheMiss, None)
    );
    assert!((c.cost - 0.75).abs() < 1e-6, "{c:?}");

    // Everyone but engine 1's rank 1 reports again 5 s later; the default max age is 2 s.
    let t1 = Nanos::from_secs(15);
    for (&(id, rank), s) in workers.iter().zip(samples) {
        if (id, rank) != (1, 1) {
            publisher
                .apply_sample(WorkerId::new(id, rank), s, t1)
                .unwrap();
        }
    }
    publisher.publish(t1).unwrap();
    {
        let snap = reader.load();
        fleet.fill(&snap, &table, &overlaps, 512);
    }
    assert_eq!(
        fleet.aggregates().occupancy_unknown,
        Some(Validity::Partial)
    );
    let c = both(&fleet, 1_600, &cfg(Policy::OwnerPressure), 0);
    assert_eq!(c.fallback, Some(FallbackCause::Partial), "{c:?}");
    assert_eq!(c.cost, 0.0);
}

/// A stale rank's occupancy is its own last report's, with what was routed there since and
/// less what ended: engines 1 and 2 of one rank each, cap 20. Engine 1 reports 18 running
/// (0.9); engine 2 reported 10 running + 5 waiting at 9 s and at 10 s and nothing since;
/// two requests were routed to it: one before those reports (absorbed by the first, counted
/// by both, then ended) and one after (live). At 15 s engine 2
/// is stale (the default maximum age is 2 s): (10 + 5 + 1 − 1)/20 = 0.75, below engine
/// 1's 0.9, so the least pressure is engine 2's at 0.75 (no owner: a miss).
#[test]
fn a_stale_rank_keeps_its_own_occupancy() {
    let (mut publisher, reader) = LoadPublisher::new(LoadConfig::new(2)).unwrap();
    let table = ReservationTable::new(2, ReservationTable::DEFAULT_TTL).unwrap();
    publisher.attach_reservations(table.clone()).unwrap();
    for i in 0..2u32 {
        let w = WorkerId::new(u64::from(i) + 1, 0);
        publisher.add_worker(Slot(i), w, SlotGeneration(1)).unwrap();
        table
            .add_worker(Slot(i), SlotGeneration(1), Nanos::ZERO)
            .unwrap();
    }
    let absorbed = table
        .reserve(
            Slot(1),
            SlotGeneration(1),
            kvroute_load::Work::default(),
            Nanos::ZERO,
        )
        .unwrap();
    // A report at 9 s absorbs that reservation; the one at 10 s (which still counts the
    // request) absorbs none, so nothing offsets its end.
    let t9 = Nanos::from_secs(9);
    publisher
        .apply_sample(WorkerId::new(2, 0), sample(10, 5, 20), t9)
        .unwrap();
    publisher.publish(t9).unwrap();
    let t0 = Nanos::from_secs(10);
    publisher
        .apply_sample(WorkerId::new(1, 0), sample(18, 0, 20), t0)
        .unwrap();
    publisher
        .apply_sample(WorkerId::new(2, 0), sample(10, 5, 20), t0)
        .unwrap();
    publisher.publish(t0).unwrap();
    drop(absorbed);
    let _live = table
        .reserve(
            Slot(1),
            SlotGeneration(1),
            kvroute_load::Work::default(),
            t0,
        )
        .unwrap();
    let t1 = Nanos::from_secs(15);
    publisher
        .apply_sample(WorkerId::new(1, 0), sample(18, 0, 20), t1)
        .unwrap();
    publisher.publish(t1).unwrap();
    let mut fleet = Fleet::new();
    {
        let snap = reader.load();
        assert_eq!(snap.validity()[1], Validity::Stale);
        fleet.fill(&snap, &table, &Overlaps::new(2), 512);
    }
    assert_eq!(fleet.aggregates().occupancy_unknown, None);
    let c = both(&fleet, 1_600, &cfg(Policy::OwnerPressure), 0);
    assert_eq!(slot(&c), 1, "{c:?}");
    assert!((c.cost - 0.75).abs() < 1e-6, "{c:?}");
}
