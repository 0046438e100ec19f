//! Reservations: lifecycle, tenancy, sweeper and reconciliation with telemetry. Expected
//! values are hand-computed in the comments.
#![cfg(not(kvroute_loom))]

mod engine_updates;

use kvroute_core::{Fields, LoadSample, Nanos};
use kvroute_core::{Slot, SlotGeneration, WorkerId};
use kvroute_index::WorkerRegistry;
use kvroute_load::{
    GROUP_SLOTS, LoadConfig, LoadPublisher, Reservation, ReservationTable, ReserveError, Reserved,
    TableError, Validity, Work, effective_load,
};
use kvroute_wire::{SglangRankLoad, VllmLoadUpdate, VllmRankLoad};

use engine_updates::EngineUpdates;

const G1: SlotGeneration = SlotGeneration(1);
const S: u64 = 1_000_000_000;

fn table(capacity: usize) -> ReservationTable {
    ReservationTable::new(capacity, Nanos::from_secs(10)).unwrap()
}

fn r(requests: u64, prefill_tokens: u64, decode_tokens: u64) -> Reserved {
    Reserved {
        requests,
        prefill_tokens,
        decode_tokens,
        finished: 0,
    }
}

fn work(prefill_tokens: u32, decode_tokens: u32) -> Work {
    Work {
        prefill_tokens,
        decode_tokens,
    }
}

#[test]
fn guards_are_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<Reservation>();
    check::<ReservationTable>();
}

#[test]
fn config_and_admin_errors() {
    assert!(matches!(
        ReservationTable::new(0, Nanos::from_secs(1)),
        Err(TableError::BadConfig(_))
    ));
    assert!(matches!(
        ReservationTable::new(4, Nanos::ZERO),
        Err(TableError::BadConfig(_))
    ));
    let t = table(2);
    assert_eq!(
        t.add_worker(Slot(2), G1, Nanos(0)),
        Err(TableError::UnknownSlot(Slot(2)))
    );
    assert_eq!(
        t.add_worker(Slot(0), SlotGeneration(0), Nanos(0)),
        Err(TableError::ZeroGeneration)
    );
    t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
    assert_eq!(
        t.add_worker(Slot(0), SlotGeneration(2), Nanos(0)),
        Err(TableError::Occupied(Slot(0)))
    );
    assert_eq!(
        t.remove_worker(Slot(0), SlotGeneration(2)),
        Err(TableError::NotTenant {
            slot: Slot(0),
            generation: SlotGeneration(2)
        })
    );
    assert_eq!(t.tenancy(Slot(0)), Some(G1));
    assert_eq!(t.tenancy(Slot(1)), None);
}

#[test]
fn reserve_adds_and_drop_releases_exactly_once() {
    let t = table(2);
    t.add_worker(Slot(1), G1, Nanos(0)).unwrap();
    let a = t.reserve(Slot(1), G1, work(1000, 200), Nanos(5)).unwrap();
    assert_eq!(a.prior(), r(0, 0, 0));
    assert_eq!(a.reserved_at(), Nanos(5));
    let b = t.reserve(Slot(1), G1, work(300, 50), Nanos(6)).unwrap();
    // b sees a: 1 request, 1000 prefill, 200 decode.
    assert_eq!(b.prior(), r(1, 1000, 200));
    assert_eq!(t.reserved(Slot(1)), r(2, 1300, 250));
    assert_eq!(t.reserved(Slot(0)), r(0, 0, 0));
    drop(a);
    assert_eq!(t.reserved(Slot(1)), r(1, 300, 50));
    assert_eq!(b.release(), r(1, 300, 50));
    assert_eq!(t.reserved(Slot(1)), r(0, 0, 0));
    assert_eq!(t.stats().underflow_clamped, 0);
}

#[test]
fn first_token_moves_prefill_to_decode_and_commit_hands_over() {
    let t = table(1);
    t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
    let mut a = t.reserve(Slot(0), G1, work(800, 100), Nanos(0)).unwrap();
    assert!(a.first_token());
    // Prefill 800 moved onto decode 100 → 900.
    assert_eq!(t.reserved(Slot(0)), r(1, 0, 900));
    assert_eq!(a.held(), r(1, 0, 900));
    assert!(a.is_decoding());
    assert!(!a.first_token(), "second call is a no-op");
    assert_eq!(t.reserved(Slot(0)), r(1, 0, 900));
    assert_eq!(a.commit(), r(1, 0, 900));
    assert_eq!(t.reserved(Slot(0)), r(0, 0, 0));
}

#[test]
fn panic_unwinding_releases() {
    let t = table(1);
    t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
    let t2 = t.clone();
    let result = std::panic::catch_unwind(move || {
        let _g = t2.reserve(Slot(0), G1, work(10, 10), Nanos(0)).unwrap();
        assert_eq!(t2.reserved(Slot(0)), r(1, 10, 10));
        panic!("request handler failed");
    });
    assert!(result.is_err());
    assert_eq!(t.reserved(Slot(0)), r(0, 0, 0));
}

#[test]
fn stale_and_unknown_slots_are_refused_and_counted() {
    let t = table(2);
    assert_eq!(
        t.reserve(Slot(9), G1, work(1, 1), Nanos(0)).err(),
        Some(ReserveError::UnknownSlot(Slot(9)))
    );
    assert_eq!(
        t.reserve(Slot(0), G1, work(1, 1), Nanos(0)).err(),
        Some(ReserveError::StaleSlot {
            slot: Slot(0),
            generation: G1
        }),
        "vacant slot"
    );
    t.add_worker(Slot(0), SlotGeneration(2), Nanos(0)).unwrap();
    assert!(matches!(
        t.reserve(Slot(0), G1, work(1, 1), Nanos(0)),
        Err(ReserveError::StaleSlot { .. })
    ));
    assert_eq!(t.stats().rejected_stale, 2);
    assert_eq!(t.reserved(Slot(0)), r(0, 0, 0), "refusals hold nothing");
}

/// A token amount that would pass `u32::MAX` in its cohort is cut to what fits: the
/// reservation holds it, the slot's tokens stop at `u32::MAX`, and each return takes back
/// exactly what its reservation added (MAX prefill tokens held, then 1 + 7 asked: 0
/// prefill added, 7 decode added).
#[test]
fn token_amounts_saturate_and_return_what_they_added() {
    let t = table(1);
    t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
    let big = t.reserve(Slot(0), G1, work(u32::MAX, 0), Nanos(0)).unwrap();
    let small = t.reserve(Slot(0), G1, work(1, 7), Nanos(0)).unwrap();
    assert_eq!(small.held(), r(1, 0, 7), "the prefill token did not fit");
    assert_eq!(t.reserved(Slot(0)), r(2, u64::from(u32::MAX), 7));
    assert_eq!(t.stats().saturated_tokens, 1);
    assert_eq!(t.stats().rejected_saturated, 0);
    drop(big);
    assert_eq!(t.reserved(Slot(0)), r(1, 0, 7));
    drop(small);
    assert_eq!(t.reserved(Slot(0)), r(0, 0, 0));
    assert_eq!(t.stats().underflow_clamped, 0);
}

/// A first token's move of prefill tokens into a decode bucket at `u32::MAX` is cut to what
/// fits (nothing here) and counted: `MAX` decode tokens held, then 100 prefill tokens
/// moved.
#[test]
fn a_cut_first_token_move_is_counted() {
    let t = table(1);
    t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
    let big = t.reserve(Slot(0), G1, work(0, u32::MAX), Nanos(0)).unwrap();
    let mut b = t.reserve(Slot(0), G1, work(100, 0), Nanos(0)).unwrap();
    assert_eq!(t.stats().saturated_tokens, 0, "both fitted when made");
    assert!(b.first_token());
    assert_eq!(b.held(), r(1, 0, 0), "the 100 tokens did not fit");
    assert_eq!(t.reserved(Slot(0)), r(2, 0, u64::from(u32::MAX)));
    assert_eq!(t.stats().saturated_tokens, 1);
    drop((big, b));
    assert_eq!(t.reserved(Slot(0)), r(0, 0, 0));
}

/// Guards made through a lease count in the same slots as the table's own, see the
/// table's guards as siblings (and are seen by them), and return what they hold after the
/// table handle and the lease they were made through are dropped.
#[test]
fn a_lease_reserves_on_the_same_slots_and_keeps_the_table_alive() {
    let t = table(2);
    t.add_worker(Slot(1), G1, Nanos(0)).unwrap();
    let lease = t.lease();
    let a = t.reserve(Slot(1), G1, work(1000, 200), Nanos(5)).unwrap();
    let b = lease.reserve(Slot(1), G1, work(300, 50), Nanos(6)).unwrap();
    assert_eq!(
        b.prior(),
        r(1, 1000, 200),
        "the lease's guard sees the table's"
    );
    assert_eq!(
        lease
            .reserve_at_most(Slot(1), G1, work(1, 1), Nanos(7), 1)
            .err(),
        Some(ReserveError::Contended {
            slot: Slot(1),
            prior_requests: 2
        }),
        "two held, at most one allowed"
    );
    let c = lease
        .reserve_at_most(Slot(1), G1, work(7, 3), Nanos(8), 2)
        .unwrap();
    assert_eq!(t.reserved(Slot(1)), r(3, 1307, 253));
    assert_eq!(lease.table().reserved(Slot(1)), r(3, 1307, 253));
    drop(a);
    assert_eq!(t.reserved(Slot(1)), r(2, 307, 53));
    // The table handle and the lease go; the guards still return what they hold.
    let probe = t.clone();
    drop(t);
    drop(lease);
    assert_eq!(b.release(), r(1, 300, 50));
    drop(c);
    assert_eq!(probe.reserved(Slot(1)), r(0, 0, 0));
    assert_eq!(probe.stats().rejected_contended, 1);
    assert_eq!(probe.stats().underflow_clamped, 0);
}

#[test]
fn reserve_at_most_lets_only_one_sibling_take_an_idle_slot() {
    let t = table(2);
    t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
    t.add_worker(Slot(1), G1, Nanos(0)).unwrap();
    let first = t
        .reserve_at_most(Slot(0), G1, work(100, 10), Nanos(0), 0)
        .unwrap();
    assert_eq!(
        t.reserve_at_most(Slot(0), G1, work(100, 10), Nanos(0), 0)
            .err(),
        Some(ReserveError::Contended {
            slot: Slot(0),
            prior_requests: 1
        })
    );
    // The loser goes to the other idle slot.
    let second = t
        .reserve_at_most(Slot(1), G1, work(100, 10), Nanos(0), 0)
        .unwrap();
    assert_eq!(t.reserved(Slot(0)), r(1, 100, 10));
    assert_eq!(t.reserved(Slot(1)), r(1, 100, 10));
    assert_eq!(t.stats().rejected_contended, 1);
    drop((first, second));
}

#[test]
fn a_burst_of_identical_decisions_sees_its_siblings() {
    // Eight decisions all read slot 0 as idle (0 reserved) and reserve it; each sees how
    // many siblings got there first: priors 0, 1, ..., 7.
    let t = table(1);
    t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
    let guards: Vec<_> = (0..8)
        .map(|_| t.reserve(Slot(0), G1, work(1, 1), Nanos(0)).unwrap())
        .collect();
    let priors: Vec<u64> = guards.iter().map(|g| g.prior().requests).collect();
    assert_eq!(priors, vec![0, 1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn removal_releases_and_a_stale_guard_never_touches_the_new_tenant() {
    let reg = WorkerRegistry::new(1);
    let t = table(1);
    let w = WorkerId::new(3, 0);
    let (slot, g1, _) = reg.get_or_add(w).unwrap();
    t.add_worker(slot, g1, Nanos(0)).unwrap();
    let mut old = t.reserve(slot, g1, work(500, 40), Nanos(0)).unwrap();
    let old2 = t.reserve(slot, g1, work(60, 4), Nanos(0)).unwrap();
    // Removal: registry retires, table releases everything, registry frees the slot.
    let retired = reg.remove(w).unwrap();
    assert_eq!(t.remove_worker(slot, g1), Ok(r(2, 560, 44)));
    reg.release(retired).unwrap();
    assert_eq!(t.stats().removed, r(2, 560, 44));
    // Re-added: same slot, new generation, counters at zero.
    let (slot2, g2, _) = reg.get_or_add(w).unwrap();
    assert_eq!((slot2, g2), (slot, SlotGeneration(2)));
    t.add_worker(slot2, g2, Nanos(0)).unwrap();
    assert_eq!(t.reserved(slot2), r(0, 0, 0));
    let new = t.reserve(slot2, g2, work(7, 3), Nanos(0)).unwrap();
    assert_eq!(new.prior(), r(0, 0, 0));
    // The old guards' lifecycle must not touch the new tenant's counters.
    assert!(
        !old.first_token(),
        "its prefill was released by the removal"
    );
    assert_eq!(old.release(), r(0, 0, 0));
    drop(old2);
    assert_eq!(t.reserved(slot2), r(1, 7, 3));
    // And reserving with the old generation is refused.
    assert!(matches!(
        t.reserve(slot2, g1, work(1, 1), Nanos(0)),
        Err(ReserveError::StaleSlot { .. })
    ));
    drop(new);
    assert_eq!(t.reserved(slot2), r(0, 0, 0));
    assert_eq!(t.stats().underflow_clamped, 0);
}

#[test]
fn sweeper_drops_reservations_older_than_the_ttl_and_counts_them() {
    // TTL 10 s. Slot added at t = 0.
    let t = table(1);
    t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
    let a = t.reserve(Slot(0), G1, work(100, 10), Nanos(S)).unwrap(); // t = 1 s
    // t = 5 s: not yet 10 s since the slot was last aged → nothing happens.
    assert_eq!(t.sweep(Nanos(5 * S)).slots_aged, 0);
    // t = 10 s: first ageing; a (9 s old) survives in the old cohort.
    let rep = t.sweep(Nanos(10 * S));
    assert_eq!((rep.slots_aged, rep.released), (1, r(0, 0, 0)));
    let b = t.reserve(Slot(0), G1, work(7, 1), Nanos(12 * S)).unwrap(); // t = 12 s
    assert_eq!(t.reserved(Slot(0)), r(2, 107, 11));
    // t = 15 s: only 5 s since the last ageing → nothing.
    assert_eq!(t.sweep(Nanos(15 * S)).slots_aged, 0);
    // t = 20 s: second ageing drops a (19 s old); b (8 s old) survives.
    let rep = t.sweep(Nanos(20 * S));
    assert_eq!(rep.released, r(1, 100, 10));
    assert_eq!(t.reserved(Slot(0)), r(1, 7, 1));
    assert_eq!(t.stats().swept, r(1, 100, 10));
    // a's own release is now a no-op; b's is live.
    assert_eq!(a.release(), r(0, 0, 0));
    assert_eq!(b.release(), r(1, 7, 1));
    assert_eq!(t.reserved(Slot(0)), r(0, 0, 0));
}

#[test]
fn a_leaked_guard_is_cleaned_by_the_sweeper() {
    let t = table(1);
    t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
    std::mem::forget(t.reserve(Slot(0), G1, work(3, 3), Nanos(0)).unwrap());
    t.sweep(Nanos(10 * S));
    t.sweep(Nanos(20 * S));
    assert_eq!(t.reserved(Slot(0)), r(0, 0, 0));
    assert_eq!(t.stats().swept, r(1, 3, 3));
}

fn sglang(running: i64, waiting: i64, uncached: i64, used: i64, ts: f64) -> SglangRankLoad {
    SglangRankLoad {
        engine_id: 1,
        dp_rank: 0,
        num_running_reqs: running,
        num_waiting_reqs: waiting,
        num_waiting_uncached_tokens: uncached,
        num_used_tokens: used,
        max_total_num_tokens: 100_000,
        token_usage: used as f64 / 100_000.0,
        gen_throughput: 1000.0,
        utilization: 0.5,
        max_running_requests: 16,
        timestamp: ts,
    }
}

/// Worker (1, 0) in slot 0 at generation 1 of a one-slot publisher and the table attached
/// to it.
fn attached() -> (
    WorkerId,
    ReservationTable,
    LoadPublisher,
    kvroute_load::LoadReader,
) {
    let w = WorkerId::new(1, 0);
    let t = table(1);
    let (mut p, reader) = LoadPublisher::new(LoadConfig::new(1)).unwrap();
    p.attach_reservations(t.clone()).unwrap();
    p.add_worker(Slot(0), w, G1).unwrap();
    t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
    (w, t, p, reader)
}

/// A two-slot publisher with its table attached: slot 0 (worker (1, 0)) reports `running`,
/// `waiting`, `queued` prefill and `decode` tokens, slot 1 (worker (2, 0)) idle counts
/// only, both observed and published at 1 s. Returns the table, the publisher, its reader
/// and slot 1's worker.
fn mixed_pair(
    running: u32,
    waiting: u32,
    queued: u32,
    decode: u32,
) -> (
    ReservationTable,
    LoadPublisher,
    kvroute_load::LoadReader,
    WorkerId,
) {
    let t = table(2);
    let (mut p, reader) = LoadPublisher::new(LoadConfig::new(2)).unwrap();
    p.attach_reservations(t.clone()).unwrap();
    let (w0, w1) = (WorkerId::new(1, 0), WorkerId::new(2, 0));
    for (i, w) in [w0, w1].into_iter().enumerate() {
        p.add_worker(Slot(i as u32), w, G1).unwrap();
        t.add_worker(Slot(i as u32), G1, Nanos(0)).unwrap();
    }
    let mut full = LoadSample::new(running, waiting, 16, 0.5);
    full.waiting_prefill_tokens = Some(queued);
    full.active_decode_tokens = Some(decode);
    p.apply_sample(w0, full, Nanos(S)).unwrap();
    p.apply_sample(w1, LoadSample::new(0, 0, 16, 0.0), Nanos(S))
        .unwrap();
    p.publish(Nanos(S)).unwrap();
    (t, p, reader, w1)
}

/// `n` requests of 3,000 prefill and 100 decode tokens reserved on slot 1 just after 1 s.
fn reserve_on_slot_1(t: &ReservationTable, n: u64) -> Vec<kvroute_load::Reservation> {
    (0..n)
        .map(|k| {
            t.reserve(Slot(1), G1, work(3_000, 100), Nanos(S + k))
                .unwrap()
        })
        .collect()
}

/// A report without token figures (vLLM's gauges) still reconciles the token
/// reservations: its counts include the reserved requests, and its token figures are
/// estimated from those counts, so a reservation left in place would be counted twice.
/// Slot 0 reports 1 running + 2 waiting with 6,000 queued and 9,000 decode tokens; slot 1
/// reports counts only. With a prior of 512 the estimates are (6,000 + 512) / (2 + 1) =
/// 2,170.67 tokens per waiting and (9,000 + 512) / (1 + 1) = 4,756 per running request.
#[test]
fn a_counts_only_report_reconciles_the_token_reservations() {
    let (t, mut p, reader, w1) = mixed_pair(1, 2, 6_000, 9_000);

    // Three requests routed to slot 1 before its next report.
    let guards = reserve_on_slot_1(&t, 3);
    let e = effective_load(&reader.load(), &t, Slot(1), 512).unwrap();
    // Nothing waits in the report yet: the reservations alone.
    assert_eq!(
        (e.requests, e.prefill_tokens, e.decode_tokens),
        (3, 9_000, 300)
    );

    // The next report counts them (1 running, 2 waiting): every field is reconciled.
    p.apply_sample(w1, LoadSample::new(1, 2, 16, 0.1), Nanos(2 * S))
        .unwrap();
    p.publish(Nanos(2 * S)).unwrap();
    assert_eq!(t.reserved(Slot(1)), r(0, 0, 0));
    assert_eq!(t.stats().reconciled, r(3, 9_000, 300));
    let e = effective_load(&reader.load(), &t, Slot(1), 512).unwrap();
    // 2 × 2,170.67 = 4,341.33 → 4,341; 1 × 4,756.
    assert_eq!(
        (e.requests, e.prefill_tokens, e.decode_tokens),
        (3, 4_341, 4_756)
    );
    drop(guards);
}

/// A counts-only report reconciles a token field only where some fresh slot reports it.
/// Slot 0 reports 2 running and nothing waiting (0 queued, 5,000 decode tokens); two
/// requests of 3,000 prefill and 100 decode tokens are reserved on the counts-only slot 1,
/// which then reports 1 running + 1 waiting: every reservation is dropped, and the
/// effective figures are the estimates, prefill 1 × (0 + 512) / (0 + 1) = 512 (the prior
/// alone: nothing waits on slot 0) and decode 1 × (5,000 + 512) / (2 + 1) = 1,837.33 →
/// 1,837. At 10 s slot 0's report is stale (maximum age 2 s), so no fresh slot reports
/// tokens: the next report of slot 1 drops only the request reservations.
#[test]
fn token_reservations_stay_where_no_fresh_slot_reports_the_field() {
    let (t, mut p, reader, w1) = mixed_pair(2, 0, 0, 5_000);
    let first = reserve_on_slot_1(&t, 2);
    p.apply_sample(w1, LoadSample::new(1, 1, 16, 0.1), Nanos(2 * S))
        .unwrap();
    p.publish(Nanos(2 * S)).unwrap();
    assert_eq!(t.reserved(Slot(1)), r(0, 0, 0));
    let e = effective_load(&reader.load(), &t, Slot(1), 512).unwrap();
    assert_eq!(
        (e.requests, e.prefill_tokens, e.decode_tokens),
        (2, 512, 1_837)
    );

    // Slot 0's report goes stale: no fresh slot reports tokens, the reservations stay.
    let third = t
        .reserve(Slot(1), G1, work(1_000, 50), Nanos(9 * S))
        .unwrap();
    p.apply_sample(w1, LoadSample::new(1, 2, 16, 0.1), Nanos(10 * S))
        .unwrap();
    p.publish(Nanos(10 * S)).unwrap();
    assert_eq!(reader.load().validity()[0], Validity::Stale);
    assert_eq!(t.reserved(Slot(1)), r(0, 1_000, 50));
    drop((first, third));
}

#[test]
fn reconciliation_never_counts_a_request_twice() {
    let (_, t, mut p, reader) = attached();

    // t = 1 s: the engine reports 3 running + 2 waiting, 400 uncached, 3000 used.
    p.apply_sglang(&sglang(3, 2, 400, 3000, 1.0), Nanos(S))
        .unwrap();
    p.publish(Nanos(S)).unwrap();
    let e = effective_load(&reader.load(), &t, Slot(0), 512).unwrap();
    assert_eq!(
        (e.requests, e.prefill_tokens, e.decode_tokens),
        (5, 400, 3000)
    );

    // Two new requests are routed there: +2 requests, +1000 prefill, +100 decode.
    let a = t.reserve(Slot(0), G1, work(600, 60), Nanos(S + 1)).unwrap();
    let mut b = t.reserve(Slot(0), G1, work(400, 40), Nanos(S + 2)).unwrap();
    let e = effective_load(&reader.load(), &t, Slot(0), 512).unwrap();
    // 5 + 2 = 7 requests, 400 + 1000 prefill, 3000 + 100 decode.
    assert_eq!(
        (e.requests, e.prefill_tokens, e.decode_tokens),
        (7, 1400, 3100)
    );

    // t = 2 s: the engine's next report counts both (5 running + 2 waiting, 1400 uncached,
    // 3100 used). Publishing it reconciles: the reservations are dropped, so the total
    // stays 7, not 9.
    p.apply_sglang(&sglang(5, 2, 1400, 3100, 2.0), Nanos(2 * S))
        .unwrap();
    p.publish(Nanos(2 * S)).unwrap();
    let e = effective_load(&reader.load(), &t, Slot(0), 512).unwrap();
    assert_eq!(
        (e.requests, e.prefill_tokens, e.decode_tokens),
        (7, 1400, 3100)
    );
    assert_eq!(e.reserved, r(0, 0, 0));
    assert_eq!(t.stats().reconciled, r(2, 1000, 100));

    // A reservation made after that publication is counted on top.
    let c = t
        .reserve(Slot(0), G1, work(50, 5), Nanos(2 * S + 1))
        .unwrap();
    let e = effective_load(&reader.load(), &t, Slot(0), 512).unwrap();
    assert_eq!(
        (e.requests, e.prefill_tokens, e.decode_tokens),
        (8, 1450, 3105)
    );

    // The absorbed guards' first token is a no-op (the report counts their tokens). When
    // they end, the report still counts them, but its publication absorbed two
    // reservations, which it may not count (made between its observation and its
    // publication): the two ended requests are offset by them, so nothing is subtracted
    // (module docs of `reconcile`).
    assert!(!b.first_token());
    drop((a, b));
    assert_eq!(t.reserved(Slot(0)), r(1, 50, 5));
    let e = effective_load(&reader.load(), &t, Slot(0), 512).unwrap();
    assert_eq!(
        (e.requests, e.prefill_tokens, e.decode_tokens),
        (8, 1450, 3105)
    );
    drop(c);
    let e = effective_load(&reader.load(), &t, Slot(0), 512).unwrap();
    assert_eq!(
        (e.requests, e.prefill_tokens, e.decode_tokens),
        (7, 1400, 3100)
    );

    // A publication with no new report reconciles nothing (the count stays).
    let d = t.reserve(Slot(0), G1, work(1, 1), Nanos(3 * S)).unwrap();
    p.publish(Nanos(3 * S)).unwrap();
    assert_eq!(t.reserved(Slot(0)), r(1, 1, 1));
    drop(d);
    // At 4.5 s the 2 s report is 2.5 s old, past the default maximum age (2 s): stale, and
    // still 7 requests: the 2 seen to end are offset by the 2 its publication absorbed.
    p.publish(Nanos(4 * S + S / 2)).unwrap();
    assert_eq!(reader.load().validity()[0], kvroute_load::Validity::Stale);
    let e = effective_load(&reader.load(), &t, Slot(0), 512).unwrap();
    assert_eq!(
        (e.requests, e.prefill_tokens, e.decode_tokens),
        (7, 1400, 3100)
    );
    // The next report (5 running, none waiting) counts what is left: the count resets.
    p.apply_sglang(&sglang(5, 0, 0, 2000, 5.0), Nanos(5 * S))
        .unwrap();
    p.publish(Nanos(5 * S)).unwrap();
    assert_eq!(t.reserved(Slot(0)), r(0, 0, 0));
    let e = effective_load(&reader.load(), &t, Slot(0), 512).unwrap();
    assert_eq!(
        (e.requests, e.prefill_tokens, e.decode_tokens),
        (5, 0, 2000)
    );
    assert_eq!(t.stats().underflow_clamped, 0);
}

/// A fleet of one slot on vLLM's wire (counts only, so no slot measures the token
/// figures): a report reconciles the request reservations only.
#[test]
fn reconciliation_is_per_field_vllm_reports_no_tokens() {
    let w = WorkerId::new(1, 0);
    let t = table(1);
    let (mut p, reader) = LoadPublisher::new(LoadConfig::new(1)).unwrap();
    p.attach_reservations(t.clone()).unwrap();
    p.configure_engine(
        1,
        kvroute_load::EngineConfig::new().with_max_running_per_rank(16),
    )
    .unwrap();
    p.add_worker(Slot(0), w, G1).unwrap();
    t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
    let mut a = t.reserve(Slot(0), G1, work(700, 30), Nanos(0)).unwrap();
    p.apply_vllm(
        &VllmLoadUpdate {
            engine_id: 1,
            ranks: vec![VllmRankLoad {
                dp_rank: 0,
                num_requests_running: 0.0,
                num_requests_waiting: 1.0,
                kv_cache_usage: 0.1,
            }],
        },
        Nanos(S),
    )
    .unwrap();
    p.publish(Nanos(S)).unwrap();
    // Requests are reported (1 waiting) → the reserved request is dropped; tokens are not
    // reported by any slot, so their estimate is the prior alone (1 waiting × 512, 0
    // running) and the reserved tokens stay the measure of what was sent: 512 + 700
    // prefill, 0 + 30 decode.
    let e = effective_load(&reader.load(), &t, Slot(0), 512).unwrap();
    assert_eq!(
        (e.requests, e.prefill_tokens, e.decode_tokens),
        (1, 1_212, 30)
    );
    assert!(a.first_token());
    assert_eq!(t.reserved(Slot(0)), r(0, 0, 730));
    // It ends: its tokens go back. The report that counted its request over-states the
    // slot by one until the next, but the reservation its publication absorbed offsets it
    // (the report might not have counted it), so nothing is subtracted.
    drop(a);
    assert_eq!(t.reserved(Slot(0)), r(0, 0, 0));
    let e = effective_load(&reader.load(), &t, Slot(0), 512).unwrap();
    assert_eq!((e.requests, e.prefill_tokens, e.decode_tokens), (1, 512, 0));
    assert_eq!(t.stats().reconciled, r(1, 0, 0));
}

#[test]
fn effective_load_ignores_reservations_of_another_tenancy() {
    let w = WorkerId::new(1, 0);
    let t = table(1);
    let (mut p, reader) = LoadPublisher::new(LoadConfig::new(1)).unwrap();
    p.add_worker(Slot(0), w, G1).unwrap();
    p.apply_sample(w, LoadSample::idle(8), Nanos(0)).unwrap();
    p.publish(Nanos(0)).unwrap();
    // The table already holds generation 2 (the snapshot is older).
    t.add_worker(Slot(0), SlotGeneration(2), Nanos(0)).unwrap();
    let _g = t
        .reserve(Slot(0), SlotGeneration(2), work(5, 5), Nanos(0))
        .unwrap();
    let e = effective_load(&reader.load(), &t, Slot(0), 512).unwrap();
    assert_eq!(e.reserved, r(0, 0, 0));
    assert_eq!(e.requests, 0);
    assert_eq!(Fields::RESERVABLE, Fields(0b111));
}

#[test]
fn concurrent_reserve_and_release_return_to_zero() {
    let t = table(2);
    t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|k| {
            let t = t.clone();
            kvroute_core::sync::thread::spawn(move || {
                for i in 0..5_000u32 {
                    let mut g = t
                        .reserve(Slot(0), G1, work(i % 100, k), Nanos(u64::from(i)))
                        .unwrap();
                    if i % 3 == 0 {
                        g.first_token();
                    }
                    if i % 5 == 0 {
                        let _ = g.commit();
                    }
                }
            })
        })
        .collect();
    // The control path sweeps and reconciles meanwhile.
    for i in 0..200u64 {
        t.sweep(Nanos(i * 20 * S));
        t.reconcile(Slot(0), G1, Fields::REQUESTS);
    }
    for th in threads {
        th.join().unwrap();
    }
    // Every amount is back. Guards a reconciliation dropped and that ended after the last
    // one are counted as ended (at most one per guard), until the next reconciliation.
    let left = t.reserved(Slot(0));
    assert_eq!(
        Reserved {
            finished: 0,
            ..left
        },
        r(0, 0, 0)
    );
    assert!(left.finished <= 4 * 5_000, "{left:?}");
    t.reconcile(Slot(0), G1, Fields::REQUESTS);
    assert_eq!(t.reserved(Slot(0)), r(0, 0, 0));
    assert_eq!(t.guards_in_group(Slot(0)), 0);
    assert_eq!(t.stats().underflow_clamped, 0);
}

/// `reserved_nonzero` per slot, without groups: `reserved_for` of each slot's tenancy,
/// zeros left out.
fn reference_nonzero(t: &ReservationTable, generations: &[u64]) -> Vec<(Slot, Reserved)> {
    generations
        .iter()
        .enumerate()
        .take(t.capacity())
        .filter(|&(_, &g)| g != 0)
        .filter_map(|(i, &g)| {
            let s = Slot(i as u32);
            t.reserved_for(s, SlotGeneration(g))
                .filter(|r| !r.is_zero())
                .map(|r| (s, r))
        })
        .collect()
}

#[test]
fn reserved_nonzero_skips_only_groups_without_guards() {
    assert_eq!(GROUP_SLOTS, 64);
    // 200 slots: groups [0, 64), [64, 128), [128, 192), [192, 200).
    let t = table(200);
    let mut generations = vec![G1.0; 200];
    for i in 0..200 {
        t.add_worker(Slot(i), G1, Nanos(0)).unwrap();
    }
    // Slot 70 holds generation 2 in the table; the snapshot still says 1.
    t.remove_worker(Slot(70), G1).unwrap();
    t.add_worker(Slot(70), SlotGeneration(2), Nanos(0)).unwrap();
    // Slot 100 is vacant in the snapshot.
    generations[100] = 0;

    let mut guards = vec![
        t.reserve(Slot(3), G1, work(10, 20), Nanos(0)).unwrap(),
        t.reserve(Slot(130), G1, work(1, 2), Nanos(0)).unwrap(),
        t.reserve(Slot(130), G1, work(3, 4), Nanos(0)).unwrap(),
        t.reserve(Slot(131), G1, work(0, 7), Nanos(0)).unwrap(),
        t.reserve(Slot(199), G1, work(5, 0), Nanos(0)).unwrap(),
        // Another tenancy than the snapshot's, and a slot the snapshot has vacant.
        t.reserve(Slot(70), SlotGeneration(2), work(9, 9), Nanos(0))
            .unwrap(),
        t.reserve(Slot(100), G1, work(8, 8), Nanos(0)).unwrap(),
        // Dropped by reconciliation: its guard is still out, its slot reads zero.
        t.reserve(Slot(5), G1, work(6, 6), Nanos(0)).unwrap(),
    ];
    assert_eq!(t.reconcile(Slot(5), G1, Fields::RESERVABLE), r(1, 6, 6));
    // The next report of its requests absorbs nothing, so its end is not offset.
    assert_eq!(t.reconcile(Slot(5), G1, Fields::REQUESTS), r(0, 0, 0));
    // Guards out per group, by hand: {3, 5}, {70, 100}, {130, 130, 131}, {199}.
    let counts: Vec<u64> = [0, 64, 128, 192, 200]
        .iter()
        .map(|&s| t.guards_in_group(Slot(s)))
        .collect();
    assert_eq!(counts, [2, 2, 3, 1, 0]);

    let mut out = Vec::new();
    t.reserved_nonzero(&generations, &mut out);
    let expected = vec![
        (Slot(3), r(1, 10, 20)),
        (Slot(130), r(2, 4, 6)),
        (Slot(131), r(1, 0, 7)),
        (Slot(199), r(1, 5, 0)),
    ];
    assert_eq!(out, expected);
    assert_eq!(out, reference_nonzero(&t, &generations));

    // A snapshot shorter than the table, ending inside group 2.
    t.reserved_nonzero(&generations[..131], &mut out);
    assert_eq!(out, vec![(Slot(3), r(1, 10, 20)), (Slot(130), r(2, 4, 6))]);
    assert_eq!(out, reference_nonzero(&t, &generations[..131]));

    // Returning group 2's guards (commit for one, drop for the others) empties it; the
    // other groups are unchanged.
    let g131 = guards.remove(3);
    let g130b = guards.remove(2);
    let g130a = guards.remove(1);
    assert_eq!(g131.commit(), r(1, 0, 7));
    drop((g130a, g130b));
    assert_eq!(t.guards_in_group(Slot(150)), 0);
    assert_eq!(t.guards_in_group(Slot(0)), 2);
    t.reserved_nonzero(&generations, &mut out);
    assert_eq!(out, vec![(Slot(3), r(1, 10, 20)), (Slot(199), r(1, 5, 0))]);
    assert_eq!(out, reference_nonzero(&t, &generations));

    // A guard whose worker was removed still counts until it is returned, once.
    t.remove_worker(Slot(199), G1).unwrap();
    assert_eq!(t.guards_in_group(Slot(199)), 1);
    drop(guards);
    // Slot 5's request, reconciled and now ended, is what its report over-states: the
    // slot is read for it, and its group stays counted once.
    assert_eq!(t.guards_in_group(Slot(0)), 1);
    assert_eq!(t.guards_in_group(Slot(199)), 0);
    assert_eq!(t.guards_in_group(Slot(64)), 0);
    t.reserved_nonzero(&generations, &mut out);
    assert_eq!(out, vec![(Slot(5), finished(0, 0, 0, 1))]);
    assert_eq!(out, reference_nonzero(&t, &generations));
    t.reconcile(Slot(5), G1, Fields::REQUESTS);
    t.reserved_nonzero(&generations, &mut out);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(t.guards_in_group(Slot(0)), 0);
}

#[test]
fn refused_reservations_leave_no_group_count() {
    let t = table(2);
    t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
    let held = t
        .reserve_at_most(Slot(0), G1, work(1, 1), Nanos(0), 0)
        .unwrap();
    assert!(matches!(
        t.reserve_at_most(Slot(0), G1, work(1, 1), Nanos(0), 0),
        Err(ReserveError::Contended { .. })
    ));
    assert!(matches!(
        t.reserve(Slot(1), G1, work(1, 1), Nanos(0)),
        Err(ReserveError::StaleSlot { .. })
    ));
    assert_eq!(t.guards_in_group(Slot(0)), 1, "only the held guard");
    // Token amounts saturate instead of refusing: such a reservation is held and counted
    // like any other (the request counter, the only one still refused, cannot be filled
    // in a test: 2^32 live guards).
    let saturating = t.reserve(Slot(0), G1, work(u32::MAX, 1), Nanos(0)).unwrap();
    assert_eq!(t.guards_in_group(Slot(0)), 2);
    drop(saturating);
    assert_eq!(t.guards_in_group(Slot(0)), 1);
    drop(held);
    assert_eq!(t.guards_in_group(Slot(0)), 0);
}

fn finished(requests: u64, prefill_tokens: u64, decode_tokens: u64, done: u64) -> Reserved {
    Reserved {
        finished: done,
        ..r(requests, prefill_tokens, decode_tokens)
    }
}

/// The ended-request count, by hand: a request whose reservation a reconciliation dropped
/// counts when its guard is dropped or released, until the next reconciliation of the
/// requests field; one that is only swept, committed, still live, or of a removed tenancy
/// does not.
#[test]
fn ended_requests_a_report_counts_are_tallied_until_the_next_report() {
    let t = table(2);
    t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
    let a = t.reserve(Slot(0), G1, work(10, 5), Nanos(0)).unwrap();
    let b = t.reserve(Slot(0), G1, work(20, 5), Nanos(0)).unwrap();
    let c = t.reserve(Slot(0), G1, work(30, 5), Nanos(0)).unwrap();
    // A report counts all three, and so does the next (which absorbs nothing: its
    // publication drops no reservation that would offset their ends); a fourth is routed
    // after it.
    assert_eq!(t.reconcile(Slot(0), G1, Fields::RESERVABLE), r(3, 60, 15));
    assert_eq!(t.reconcile(Slot(0), G1, Fields::REQUESTS), r(0, 0, 0));
    let d = t.reserve(Slot(0), G1, work(40, 5), Nanos(0)).unwrap();
    drop(a);
    assert_eq!(b.release(), r(0, 0, 0));
    // `commit` hands a request over to telemetry: it has not ended.
    assert_eq!(c.commit(), r(0, 0, 0));
    // `d` is live: its own drop takes it back, it does not count as ended.
    assert_eq!(t.reserved(Slot(0)), finished(1, 40, 5, 2));
    drop(d);
    assert_eq!(t.reserved(Slot(0)), finished(0, 0, 0, 2));
    let mut out = Vec::new();
    t.reserved_nonzero(&[G1.0, 0], &mut out);
    assert_eq!(out, vec![(Slot(0), finished(0, 0, 0, 2))]);
    assert_eq!(
        t.guards_in_group(Slot(0)),
        1,
        "the count keeps its group read"
    );

    // A report of the token fields only leaves the count; one of the requests resets it.
    t.reconcile(Slot(0), G1, Fields::PREFILL_TOKENS);
    assert_eq!(t.reserved(Slot(0)).finished, 2);
    t.reconcile(Slot(0), G1, Fields::REQUESTS);
    assert_eq!(t.reserved(Slot(0)), r(0, 0, 0));
    assert_eq!(t.guards_in_group(Slot(0)), 0);
    t.reserved_nonzero(&[G1.0, 0], &mut out);
    assert!(out.is_empty());

    // A report whose publication absorbed two reservations: the first two requests seen
    // to end are offset by them (the report may not count those two), the third is not.
    let x = t.reserve(Slot(0), G1, work(1, 1), Nanos(0)).unwrap();
    let y = t.reserve(Slot(0), G1, work(1, 1), Nanos(0)).unwrap();
    let z = t.reserve(Slot(0), G1, work(1, 1), Nanos(0)).unwrap();
    assert_eq!(t.reconcile(Slot(0), G1, Fields::RESERVABLE), r(3, 3, 3));
    let w = t.reserve(Slot(0), G1, work(1, 1), Nanos(0)).unwrap();
    t.reconcile(Slot(0), G1, Fields::REQUESTS); // absorbs `w` alone
    drop(x);
    assert_eq!(t.reserved(Slot(0)), r(0, 1, 1), "1 ended, 1 absorbed");
    drop(y);
    assert_eq!(
        t.reserved(Slot(0)),
        finished(0, 1, 1, 1),
        "2 ended, 1 absorbed"
    );
    drop((z, w));
    assert_eq!(
        t.reserved(Slot(0)),
        finished(0, 0, 0, 3),
        "4 ended, 1 absorbed"
    );
    t.reconcile(Slot(0), G1, Fields::REQUESTS);
    assert_eq!(t.reserved(Slot(0)), r(0, 0, 0));

    // Swept (two ageings), not reconciled: it does not count when it ends.
    let e = t.reserve(Slot(0), G1, work(1, 1), Nanos(0)).unwrap();
    t.sweep(Nanos(10 * S));
    t.sweep(Nanos(20 * S));
    drop(e);
    assert_eq!(t.reserved(Slot(0)), r(0, 0, 0));

    // Reconciled, then the worker is removed and the slot re-used: the old guard's end
    // does not reach the new tenant.
    let g = t.reserve(Slot(0), G1, work(1, 1), Nanos(0)).unwrap();
    t.reconcile(Slot(0), G1, Fields::RESERVABLE);
    let h = t.reserve(Slot(0), G1, work(1, 1), Nanos(0)).unwrap();
    t.reconcile(Slot(0), G1, Fields::RESERVABLE);
    t.reconcile(Slot(0), G1, Fields::REQUESTS);
    drop(h);
    assert_eq!(t.reserved(Slot(0)).finished, 1);
    t.remove_worker(Slot(0), G1).unwrap();
    assert_eq!(t.guards_in_group(Slot(0)), 1, "only the guard `g` is out");
    let g2 = SlotGeneration(2);
    t.add_worker(Slot(0), g2, Nanos(0)).unwrap();
    t.reconcile(Slot(0), g2, Fields::RESERVABLE);
    drop(g);
    assert_eq!(t.reserved(Slot(0)), r(0, 0, 0));
    assert_eq!(t.guards_in_group(Slot(0)), 0);
    assert_eq!(t.stats().underflow_clamped, 0);
}

/// Figures observed an hour ahead of the first publication are dropped by it (they would
/// read current forever), and so is their reconciliation: nothing published counts the
/// reservations they would have covered, so those stay. One reservation of 1 request,
/// 500 prefill and 50 decode tokens is live; the worker reports at t = 3,600 s, then the
/// first publication comes at t = 1 s: the slot is missing and its effective load is the
/// reservation alone.
#[test]
fn figures_dropped_at_the_first_publication_reconcile_nothing() {
    let (w, t, mut p, reader) = attached();
    let _guard = t.reserve(Slot(0), G1, work(500, 50), Nanos(S)).unwrap();
    p.apply_sample(w, LoadSample::new(2, 0, 16, 0.1), Nanos(3_600 * S))
        .unwrap();
    p.publish(Nanos(S)).unwrap();
    assert_eq!(p.stats().rejected_future, 1);
    let snap = reader.load();
    assert_eq!(snap.slot(Slot(0)).unwrap().validity, Validity::Missing);
    let e = effective_load(&snap, &t, Slot(0), 512).unwrap();
    assert_eq!(
        (e.requests, e.prefill_tokens, e.decode_tokens),
        (1, 500, 50)
    );
}
