//! loom models of reservations.
//!
//! Counters are unsigned, so "never negative" is checked as: no subtraction ever needed
//! clamping (`underflow_clamped == 0`) and every counter is back to exactly zero at the end.

use kvroute_core::sync::{model, thread};
use kvroute_core::{Fields, Slot, SlotGeneration};

use crate::{ReservationTable, ReserveError, Reserved, Work};
use kvroute_core::Nanos;

const G1: SlotGeneration = SlotGeneration(1);
const G2: SlotGeneration = SlotGeneration(2);

fn work(prefill_tokens: u32, decode_tokens: u32) -> Work {
    Work {
        prefill_tokens,
        decode_tokens,
    }
}

#[test]
fn loom_reserve_first_token_commit_drop_two_threads() {
    model(|| {
        let t = ReservationTable::new(1, Nanos(10)).unwrap();
        t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
        let t1 = t.clone();
        let a = thread::spawn(move || {
            let mut g = t1.reserve(Slot(0), G1, work(3, 2), Nanos(0)).unwrap();
            let prior = g.prior();
            // The sibling's reservation is either not there yet, or there (its tokens are
            // added before its request count), or already returned.
            assert!(prior.requests <= 1);
            assert!(g.first_token());
            assert_eq!(
                g.held(),
                Reserved {
                    requests: 1,
                    prefill_tokens: 0,
                    decode_tokens: 5,
                    finished: 0
                }
            );
            drop(g);
        });
        let t2 = t.clone();
        let b = thread::spawn(move || {
            let g = t2.reserve(Slot(0), G1, work(5, 1), Nanos(0)).unwrap();
            let released = g.commit();
            assert_eq!(
                released,
                Reserved {
                    requests: 1,
                    prefill_tokens: 5,
                    decode_tokens: 1,
                    finished: 0
                }
            );
        });
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(t.reserved(Slot(0)), Reserved::default());
        assert_eq!(t.stats().underflow_clamped, 0);
    });
}

#[test]
fn loom_reservations_race_with_sweep_and_reconcile() {
    model(|| {
        let t = ReservationTable::new(1, Nanos(10)).unwrap();
        t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
        let t1 = t.clone();
        let a = thread::spawn(move || {
            let mut g = t1.reserve(Slot(0), G1, work(3, 2), Nanos(0)).unwrap();
            g.first_token();
            drop(g);
        });
        // The control path ages the slot and reconciles requests meanwhile.
        t.sweep(Nanos(10));
        t.reconcile(Slot(0), G1, kvroute_core::Fields::REQUESTS);
        a.join().unwrap();
        // Every amount is back; the request ends counted once if the reconciliation
        // dropped it first (`finished.rs`), and its count keeps the group read. That
        // reconciliation absorbed at most this reservation, which offsets its end.
        let r = t.reserved(Slot(0));
        assert_eq!(Reserved { finished: 0, ..r }, Reserved::default());
        let ended = t.ended_requests(Slot(0));
        assert!(ended <= 1);
        assert!(r.finished <= ended);
        assert_eq!(t.guards_in_group(Slot(0)), ended);
        assert_eq!(t.stats().underflow_clamped, 0);
    });
}

#[test]
fn loom_two_threads_reserve_the_last_idle_slot() {
    model(|| {
        let t = ReservationTable::new(1, Nanos(10)).unwrap();
        t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
        let spawn = |t: &ReservationTable| {
            let t = t.clone();
            // The winner's guard is returned, so it stays held until both have finished.
            thread::spawn(move || t.reserve_at_most(Slot(0), G1, work(1, 1), Nanos(0), 0))
        };
        let (a, b) = (spawn(&t), spawn(&t));
        let results = [a.join().unwrap(), b.join().unwrap()];
        let winners = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(winners, 1, "exactly one decision gets the idle slot");
        for r in &results {
            match r {
                Ok(g) => assert_eq!(g.prior().requests, 0),
                Err(e) => assert_eq!(
                    *e,
                    ReserveError::Contended {
                        slot: Slot(0),
                        prior_requests: 1
                    }
                ),
            }
        }
        assert_eq!(t.reserved(Slot(0)).requests, 1);
        drop(results);
        assert_eq!(t.reserved(Slot(0)), Reserved::default());
    });
}

#[test]
fn loom_two_threads_reserve_the_same_slot_detect_each_other() {
    model(|| {
        let t = ReservationTable::new(1, Nanos(10)).unwrap();
        t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
        let spawn = |t: &ReservationTable| {
            let t = t.clone();
            // Each decision keeps its guard (returns it) so both are held at once.
            thread::spawn(move || t.reserve(Slot(0), G1, work(0, 0), Nanos(0)).unwrap())
        };
        let (a, b) = (spawn(&t), spawn(&t));
        let guards = [a.join().unwrap(), b.join().unwrap()];
        let mut priors = guards.each_ref().map(|g| g.prior().requests);
        priors.sort_unstable();
        // Both read the slot as idle; one of them learns that the other got there first.
        assert_eq!(priors, [0, 1]);
        drop(guards);
        assert_eq!(t.reserved(Slot(0)), Reserved::default());
    });
}

#[test]
fn loom_stale_guard_vs_removal_and_readd() {
    model(|| {
        let t = ReservationTable::new(1, Nanos(10)).unwrap();
        t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
        let old = t.reserve(Slot(0), G1, work(4, 4), Nanos(0)).unwrap();
        // The old tenancy's guard finishes its lifecycle while the worker is removed and
        // re-added and the new tenant reserves.
        let stale_guard = thread::spawn(move || {
            let mut old = old;
            old.first_token();
            drop(old);
        });
        t.remove_worker(Slot(0), G1).unwrap();
        t.add_worker(Slot(0), G2, Nanos(0)).unwrap();
        let new = t.reserve(Slot(0), G2, work(7, 3), Nanos(0)).unwrap();
        stale_guard.join().unwrap();
        // Only the new tenant's own reservation remains.
        assert_eq!(
            t.reserved(Slot(0)),
            Reserved {
                requests: 1,
                prefill_tokens: 7,
                decode_tokens: 3,
                finished: 0
            }
        );
        drop(new);
        assert_eq!(t.reserved(Slot(0)), Reserved::default());
        assert_eq!(t.stats().underflow_clamped, 0);
    });
}

#[test]
fn loom_late_reserve_vs_removal_and_readd() {
    model(|| {
        let t = ReservationTable::new(1, Nanos(10)).unwrap();
        t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
        // A decision that read the old tenancy reserves while the worker is removed and
        // re-added: it either succeeds before the removal (and the removal drops its
        // counts) or is refused; in no case does the new tenant keep any of it.
        let t2 = t.clone();
        let late = thread::spawn(move || t2.reserve(Slot(0), G1, work(2, 2), Nanos(0)));
        t.remove_worker(Slot(0), G1).unwrap();
        t.add_worker(Slot(0), G2, Nanos(0)).unwrap();
        let result = late.join().unwrap();
        assert!(matches!(
            result,
            Ok(_) | Err(ReserveError::StaleSlot { .. })
        ));
        drop(result);
        assert_eq!(t.reserved(Slot(0)), Reserved::default());
        let new = t.reserve(Slot(0), G2, work(7, 3), Nanos(0)).unwrap();
        assert_eq!(
            new.prior(),
            Reserved::default(),
            "the new tenant starts at zero"
        );
        assert_eq!(t.stats().underflow_clamped, 0);
    });
}

/// Reads the slot's totals until they show at least one request (yielding to loom's
/// scheduler meanwhile), and returns every figure read on the way. A reader that sees the
/// request count after the reserving thread ran makes loom explore which values of the token
/// words the reader's loads may still return (loom's scheduling alone may not interleave a
/// reader between a thread's load and compare-and-swap of one word).
fn read_until_requests(t: &ReservationTable) -> Vec<Reserved> {
    let mut seen = vec![t.reserved(Slot(0))];
    while seen.last().is_some_and(|r| r.requests == 0) {
        thread::yield_now();
        seen.push(t.reserved(Slot(0)));
    }
    if let Some(r) = t.reserved_for(Slot(0), G1) {
        seen.push(r);
    }
    let mut nonzero = Vec::new();
    t.reserved_nonzero(&[G1.0], &mut nonzero);
    seen.extend(nonzero.iter().map(|(_, r)| *r));
    seen
}

/// The partial-reservation visibility gap, closed: a reservation adds its tokens before its
/// request count (`Release`) and readers load the request count first (`Acquire`), so a
/// reader that counts the request of a held reservation also counts all of its tokens.
/// The reserving thread also moves its prefill to decode (`first_token`) while the reader
/// reads: the tokens move, they never vanish.
#[test]
fn loom_reader_never_sees_requests_without_tokens() {
    model(|| {
        let t = ReservationTable::new(1, Nanos(10)).unwrap();
        t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
        let t1 = t.clone();
        // The guard is returned, so it is held until the reader is done.
        let reserver = thread::spawn(move || {
            let mut g = t1.reserve(Slot(0), G1, work(3, 2), Nanos(0)).unwrap();
            g.first_token();
            g
        });
        let seen = read_until_requests(&t);
        let guard = reserver.join().unwrap();
        for r in seen {
            assert!(r.requests <= 1, "{r:?}");
            if r.requests == 1 {
                // Before first_token: 3 prefill + 2 decode; after: 0 + 5; while moving,
                // possibly both (counted twice for a moment), never fewer than 5 in all.
                assert!(
                    r.prefill_tokens + r.decode_tokens >= 5,
                    "the request without its tokens: {r:?}"
                );
                assert!(r.decode_tokens >= 2 && r.prefill_tokens <= 3, "{r:?}");
            }
        }
        assert_eq!(
            t.reserved(Slot(0)),
            Reserved {
                requests: 1,
                prefill_tokens: 0,
                decode_tokens: 5,
                finished: 0
            }
        );
        drop(guard);
        assert_eq!(t.reserved(Slot(0)), Reserved::default());
        assert_eq!(t.stats().underflow_clamped, 0);
    });
}

/// Group counts (`reserve/group.rs`): a scan of every slot skips a group whose count reads
/// 0, so the count must be raised after the slot counters (and at all). A reader that sees
/// the count raised by a concurrent reservation must then see that reservation whole in
/// `reserved_nonzero`; a reservation whose `reserve` returned before the scan must be seen;
/// a sibling's concurrent return must not hide a reservation still held.
#[test]
fn loom_group_count_never_hides_a_reservation() {
    model(|| {
        let t = ReservationTable::new(2, Nanos(10)).unwrap();
        t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
        t.add_worker(Slot(1), G1, Nanos(0)).unwrap();
        let generations = [G1.0, G1.0];
        let held = Reserved {
            requests: 1,
            prefill_tokens: 3,
            decode_tokens: 2,
            finished: 0,
        };
        // A sibling in the same group, returned while the reader reads.
        let sibling = t.reserve(Slot(1), G1, work(1, 1), Nanos(0)).unwrap();
        let t1 = t.clone();
        // The guard is returned, so it is held until the reader is done.
        let reserver = thread::spawn(move || {
            let g = t1.reserve(Slot(0), G1, work(3, 2), Nanos(0)).unwrap();
            drop(sibling);
            g
        });
        let mut out = Vec::new();
        if t.guards_in_group(Slot(0)) >= 2 {
            // The reader saw the reservation's raise (the sibling's alone is 1): its
            // counters are visible whole.
            t.reserved_nonzero(&generations, &mut out);
            assert!(out.contains(&(Slot(0), held)), "{out:?}");
        }
        let guard = reserver.join().unwrap();
        // Returned before this scan began: never skipped.
        t.reserved_nonzero(&generations, &mut out);
        assert_eq!(out, vec![(Slot(0), held)]);
        assert_eq!(t.guards_in_group(Slot(0)), 1);
        drop(guard);
        assert_eq!(t.guards_in_group(Slot(0)), 0);
        t.reserved_nonzero(&generations, &mut out);
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(t.stats().underflow_clamped, 0);
    });
}

/// A guard ending while its reservation is reconciled: if its release finds the request
/// already dropped (the reconciliation cleared it first), the slot counts exactly one ended
/// request, which keeps its group read; if the guard returned the request itself, none.
/// Fails with a `Relaxed` clear (`field.rs`): the guard can then find its entry dead and
/// still read the tag from before the reconciliation (`finished.rs`, `# Orderings`).
#[test]
fn loom_ended_request_counts_once_per_report() {
    model(|| {
        let t = ReservationTable::new(1, Nanos(10)).unwrap();
        t.add_worker(Slot(0), G1, Nanos(0)).unwrap();
        let g = t.reserve(Slot(0), G1, work(1, 1), Nanos(0)).unwrap();
        let t2 = t.clone();
        let a = thread::spawn(move || g.release().requests);
        let b = thread::spawn(move || {
            t2.reconcile(Slot(0), G1, Fields::REQUESTS);
        });
        let live = a.join().unwrap();
        b.join().unwrap();
        let ended = t.ended_requests(Slot(0));
        assert_eq!(ended, 1 - live);
        assert_eq!(t.guards_in_group(Slot(0)), ended);
        // The reconciliation absorbed at most this one reservation, which offsets its end.
        assert_eq!(t.reserved(Slot(0)).finished, 0);
        // The next report resets it and lowers the group.
        t.reconcile(Slot(0), G1, Fields::REQUESTS);
        assert_eq!(t.reserved(Slot(0)), Reserved::default());
        assert_eq!(t.guards_in_group(Slot(0)), 0);
    });
}
