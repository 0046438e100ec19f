//! The loom models of kvroute's own protocols: the re-score loop (`rescore.rs`), the
//! predicted-residency entry's sequence lock (`predicted.rs`) and the per-thread decision
//! tallies (`tally.rs`), the last two at the end. Run with
//! `RUSTFLAGS="--cfg kvroute_loom"` (see `scripts/loom.sh`); built normally, each model runs
//! once as a smoke test.
//!
//! The `Router` is too heavy for loom, so each decision here is the loop of `route`
//! ([`claim_rescoring`]) around a two-slot pick: read both slots' reserved requests from the
//! real [`ReservationTable`], choose the least reserved (ties to slot 0, as two identical
//! requests with the same tie-break would), and claim it with what was read.
//!
//! The race that matters (both decisions read the slots idle before either reserves) is
//! made explicit: a rendezvous after the first read holds each decision until the other has
//! read too, so every execution has both claim slot 0 with `seen = 0`, and loom explores
//! how the two claims interleave. A second model drops the rendezvous and checks that
//! loom's exploration reached a contended claim at least once.

use core::convert::Infallible;

use kvroute_core::Nanos;
use kvroute_core::sync::atomic::{AtomicUsize, Ordering};
use kvroute_core::sync::{Arc, model, thread};
use kvroute_core::{Slot, SlotGeneration};
use kvroute_load::{Reservation, ReservationTable, Reserved, Work};

use crate::rescore::{Claim, Claimed, claim_rescoring};

const G: SlotGeneration = SlotGeneration(1);
const NOW: Nanos = Nanos(0);
const WORK: Work = Work {
    prefill_tokens: 3,
    decode_tokens: 2,
};
/// One held reservation of [`WORK`] on a slot.
const ONE: Reserved = Reserved {
    requests: 1,
    prefill_tokens: 3,
    decode_tokens: 2,
    finished: 0,
};

/// A table of two idle slots, both holding tenancy [`G`].
fn two_idle_slots() -> ReservationTable {
    let t = ReservationTable::new(2, Nanos(10)).unwrap();
    for s in 0..2 {
        t.add_worker(Slot(s), G, NOW).unwrap();
    }
    t
}

/// Holds each of two decisions after its first read until the other has read too.
#[derive(Clone)]
struct Rendezvous(Arc<AtomicUsize>);

impl Rendezvous {
    fn new() -> Self {
        Self(Arc::new(AtomicUsize::new(0)))
    }

    fn arrive_and_wait(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
        while self.0.load(Ordering::Acquire) < 2 {
            thread::yield_now();
        }
    }
}

/// One decision: up to `max_rescores + 1` attempts of read both slots → least reserved →
/// claim; returns the guard and the attempt that won.
fn decide(
    t: &ReservationTable,
    max_rescores: u32,
    rendezvous: Option<&Rendezvous>,
) -> (Reservation, u32) {
    // Each decision through a lease of its own, as a decision's buffer set reserves.
    let lease = t.lease();
    let claimed = claim_rescoring(&lease, max_rescores, NOW, |attempt| {
        let read = [0, 1].map(|s| t.reserved_for(Slot(s), G).unwrap().requests);
        let slot = usize::from(read[1] < read[0]);
        if attempt == 0 {
            if let Some(r) = rendezvous {
                r.arrive_and_wait();
            }
        }
        let claim = Claim {
            slot: Slot(slot as u32),
            generation: G,
            work: WORK,
            seen: read[slot],
            last_limit: None,
        };
        Ok::<_, Infallible>((claim, ()))
    });
    match claimed {
        Ok(Claimed::Won {
            reservation,
            attempt,
            ..
        }) => (reservation, attempt),
        other => panic!("a decision on two slots must reserve: {other:?}"),
    }
}

/// Runs two decisions at once; returns their guards and winning attempts.
fn two_decisions(
    t: &ReservationTable,
    max_rescores: u32,
    rendezvous: bool,
) -> [(Reservation, u32); 2] {
    let r = rendezvous.then(Rendezvous::new);
    let spawn = || {
        let (t, r) = (t.clone(), r.clone());
        // The guard is returned, so both reservations are held until both have decided.
        thread::spawn(move || decide(&t, max_rescores, r.as_ref()))
    };
    let (a, b) = (spawn(), spawn());
    [a.join().unwrap(), b.join().unwrap()]
}

/// Everything the two decisions reserved is on the table exactly once, and comes off it
/// exactly once: no reservation lost, none released twice (a second release would have to
/// clamp at zero).
fn check_and_release(t: &ReservationTable, decisions: [(Reservation, u32); 2]) {
    let mut per_slot = [Reserved::default(); 2];
    for (g, _) in &decisions {
        let held = g.held();
        assert_eq!(held, ONE);
        let p = &mut per_slot[g.slot().index()];
        p.requests += held.requests;
        p.prefill_tokens += held.prefill_tokens;
        p.decode_tokens += held.decode_tokens;
    }
    for s in 0..2 {
        assert_eq!(t.reserved(Slot(s)), per_slot[s as usize], "slot {s}");
    }
    drop(decisions);
    for s in 0..2 {
        assert_eq!(t.reserved(Slot(s)), Reserved::default(), "slot {s}");
    }
    assert_eq!(t.stats().underflow_clamped, 0);
}

/// Two identical requests read two idle slots before either reserves: both pick slot 0
/// with `seen = 0`, exactly one claim is refused as contended, and that decision's second
/// attempt reads the winner's request and takes slot 1. One re-score is enough (the second
/// attempt is the last, unconditional one, and still lands apart).
#[test]
fn loom_identical_siblings_on_two_idle_slots_end_apart() {
    model(|| {
        let t = two_idle_slots();
        let decisions = two_decisions(&t, 1, true);
        let slots = decisions.each_ref().map(|(g, _)| g.slot());
        assert_ne!(slots[0], slots[1], "both decisions on {:?}", slots[0]);
        let mut attempts = decisions.each_ref().map(|(_, a)| *a);
        attempts.sort_unstable();
        assert_eq!(attempts, [0, 1]);
        // The loser is on slot 1; its refused claim added nothing that stayed.
        let loser = decisions.iter().find(|(_, a)| *a == 1).unwrap();
        assert_eq!(loser.0.slot(), Slot(1));
        assert_eq!(t.stats().rejected_contended, 1);
        check_and_release(&t, decisions);
    });
}

/// The same without a rendezvous, with the router's default re-score bound: whatever the
/// interleaving (one decision reads after the other reserved, or both read idle), they end
/// on different slots, every re-score is one refused claim, and nothing is lost or released
/// twice. The model must also have explored at least one execution where a claim was
/// refused (the race), or it would prove nothing about it.
#[test]
fn loom_siblings_end_apart_in_every_interleaving() {
    // Across loom's executions (the model's own memory is re-created for each), so this
    // tally lives outside the model on purpose.
    static CONTENDED_EXECUTIONS: std::sync::atomic::AtomicUsize =
        std::sync::atomic::AtomicUsize::new(0);
    model(|| {
        let t = two_idle_slots();
        let decisions = two_decisions(&t, crate::RouterConfig::DEFAULT_MAX_RESCORES, false);
        assert_ne!(decisions[0].0.slot(), decisions[1].0.slot());
        let rescores: u32 = decisions.iter().map(|(_, a)| a).sum();
        assert!(rescores <= 1, "{rescores} re-scores for two decisions");
        assert_eq!(t.stats().rejected_contended, u64::from(rescores));
        if rescores > 0 {
            CONTENDED_EXECUTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        check_and_release(&t, decisions);
    });
    if cfg!(kvroute_loom) {
        assert!(
            CONTENDED_EXECUTIONS.load(std::sync::atomic::Ordering::Relaxed) > 0,
            "loom never interleaved two claims on one slot"
        );
    }
}

/// Without re-scores the only attempt is the last, unconditional one: both identical
/// requests land on slot 0. (The check above is what spreads them; this model shows the
/// first one can fail.)
#[test]
fn loom_without_rescores_identical_siblings_share_a_slot() {
    model(|| {
        let t = two_idle_slots();
        let decisions = two_decisions(&t, 0, true);
        for (g, attempt) in &decisions {
            assert_eq!((g.slot(), *attempt), (Slot(0), 0));
        }
        assert_eq!(t.reserved(Slot(0)).requests, 2);
        assert_eq!(t.stats().rejected_contended, 0);
        drop(decisions);
        assert_eq!(t.reserved(Slot(0)), Reserved::default());
        assert_eq!(t.stats().underflow_clamped, 0);
    });
}

use crate::predicted::{Entry, Fields};

/// An entry's fields with every value `t` (0: the empty entry).
fn fields(t: u64) -> Fields {
    Fields {
        key: t,
        depth: t as u32,
        slot: t as u32,
        generation: t,
        expires: t,
    }
}

/// A reader racing two writes of one prediction entry gets the entry empty, as the first
/// write left it or as the second did, whole, or nothing (a write in progress): never the
/// key of one write with the slot or expiry of another. Checked to fail with the reader's
/// `Acquire` fence or the writer's `Release` fence removed (`predicted.rs`, `# Orderings`).
#[test]
fn loom_prediction_reader_never_sees_a_torn_entry() {
    model(|| {
        let e = Arc::new(Entry::default());
        let writer = {
            let e = e.clone();
            thread::spawn(move || {
                assert!(e.write(0, fields(1)));
                assert!(e.write(2, fields(2)));
            })
        };
        for _ in 0..2 {
            if let Some((seq, f)) = e.read() {
                let whole = [(0, fields(0)), (2, fields(1)), (4, fields(2))];
                assert!(whole.contains(&(seq, f)), "torn read: seq {seq}, {f:?}");
            }
        }
        writer.join().unwrap();
        assert_eq!(e.read(), Some((4, fields(2))));
    });
}

/// Two writers that read the same stable entry race to write it: exactly one writes, and
/// the entry then holds that writer's fields whole.
#[test]
fn loom_racing_prediction_writers_one_wins() {
    model(|| {
        let e = Arc::new(Entry::default());
        let spawn = |t| {
            let e = e.clone();
            thread::spawn(move || e.write(0, fields(t)))
        };
        let (a, b) = (spawn(1), spawn(2));
        let (wa, wb) = (a.join().unwrap(), b.join().unwrap());
        assert!(wa != wb, "exactly one writer wins");
        let winner = if wa { 1 } else { 2 };
        assert_eq!(e.read(), Some((2, fields(winner))));
    });
}

/// Per-thread decision tallies (`tally.rs`): two threads count on their own tallies and
/// drop them (as a thread that exits does) while the main thread sums, registers a tally
/// (folding any already dropped into the shared counters) and sums again; the sums never
/// go down and never pass the decisions made, and once both threads are done the sum is
/// exact, before and after a last registration folds what is left. The model fails when
/// both threads count on one tally (a count lost between a load and its store). It does
/// not show the fold's `Acquire` fence missing: loom's `strong_count` synchronises by
/// itself (`tally.rs`, *Orderings*).
#[test]
fn loom_tallies_sum_every_thread_exactly() {
    use crate::tally::Tallies;
    use kvroute_core::sync::atomic::AtomicU64;
    model(|| {
        // One counter per tally (a router's have one per policy and reason).
        let shared: Arc<[AtomicU64; 1]> = Arc::new([AtomicU64::new(0)]);
        let tallies = Arc::new(Tallies::<1>::default());
        let (a, b) = (tallies.register(&shared), tallies.register(&shared));
        let ta = thread::spawn(move || {
            a.add_one(0);
            a.add_one(0);
            drop(a);
        });
        let tb = thread::spawn(move || {
            b.add_one(0);
            drop(b);
        });
        let first = tallies.sum(&shared)[0];
        let _c = tallies.register(&shared);
        let second = tallies.sum(&shared)[0];
        assert!(first <= second && second <= 3, "{first} then {second}");
        ta.join().unwrap();
        tb.join().unwrap();
        assert_eq!(tallies.sum(&shared)[0], 3);
        let _d = tallies.register(&shared);
        assert_eq!(shared[0].load(Ordering::Relaxed), 3);
        assert_eq!(tallies.sum(&shared)[0], 3);
    });
}
