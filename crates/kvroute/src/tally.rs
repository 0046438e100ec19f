//! Per-thread tallies of decisions by policy label and reason, so that counting a decision
//! writes a cache line of the deciding thread's own instead of one every deciding thread
//! writes (and takes no locked read-modify-write).
//!
//! A [`Tally`] belongs to one buffer set of one thread's scratch cache (`scratch.rs`): only
//! the decisions made with that set add to it, so it has one writer, which adds with a
//! plain load and store. The router keeps every tally it handed out in [`Tallies`], and a
//! statistics snapshot sums the router's shared counters (decisions made with a one-off
//! buffer set, and the folded tallies below) and every tally.
//!
//! A tally whose buffer set is gone (its thread exited, or the set was taken over by
//! another router) is held by the router's list alone; the next registration folds its
//! counts into the shared counters and drops it, so the list grows with the buffer sets
//! alive, not with every thread that ever routed.
//!
//! # Orderings
//! The counters are `Relaxed`, as the other counters are (`stats.rs`): the tallies publish
//! no data. Exactness rests on there being one writer per tally (its store of `load + 1`
//! cannot lose another thread's addition) and on coherence: a snapshot reads some value of
//! each counter at least as recent as any it read before, so its sums never go down; a
//! snapshot taken after a decision returned on another thread may miss it, as for every
//! counter. A tally is folded only once the list holds its last reference: its writer's
//! drop of its own reference is a `Release` decrement of the count, after its last
//! additions; the registration reads the count (`Arc::strong_count`, a `Relaxed` load in
//! `std`), and on reading 1 issues an `Acquire` fence before it reads the tally, so the
//! drop happens-before the fold's loads and the fold reads the final counts. Folding adds
//! them to the shared counters and removes the tally under the list's lock, which a
//! snapshot takes too, so a snapshot counts a folded tally's decisions once.
//!
//! The loom model `loom_tallies_sum_every_thread_exactly` (`loom_models.rs`) has two
//! threads count on their own tallies and drop them while the main thread sums and
//! registers (folding whichever tally is already dropped), and checks the sums. Its
//! `strong_count` synchronises by itself in loom (stronger than `std`'s), so the model
//! does not show the fence missing; it fails when two threads share one tally.

use kvroute_core::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed},
    fence,
};
use kvroute_core::sync::{Arc, Mutex};
use kvroute_score::{Policy, Reason};

/// Counters per tally: one per policy label and reason (`label_index · Reason::COUNT +
/// reason index`).
pub(crate) const COUNTERS: usize = Policy::LABEL_COUNT * Reason::COUNT;

/// One buffer set's decision counts (module docs): `N` counters ([`COUNTERS`] in a
/// router; fewer in the loom model), on cache lines of their own.
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct Tally<const N: usize = COUNTERS> {
    counts: [AtomicU64; N],
}

impl<const N: usize> Tally<N> {
    fn new() -> Self {
        Self {
            counts: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// An unregistered tally (tests).
    #[cfg(test)]
    pub(crate) fn new_for_test() -> Self {
        Self::new()
    }

    /// Adds one decision to counter `i` (ignored past `N`). Only the tally's
    /// owner calls it (module docs): a plain load and store, no read-modify-write.
    #[inline]
    pub(crate) fn add_one(&self, i: usize) {
        if let Some(a) = self.counts.get(i) {
            a.store(a.load(Relaxed).wrapping_add(1), Relaxed);
        }
    }
}

/// The tallies a router handed out (module docs).
#[derive(Debug)]
pub(crate) struct Tallies<const N: usize = COUNTERS> {
    list: Mutex<Vec<Arc<Tally<N>>>>,
}

impl<const N: usize> Default for Tallies<N> {
    fn default() -> Self {
        Self {
            list: Mutex::new(Vec::new()),
        }
    }
}

impl<const N: usize> Tallies<N> {
    /// A new tally for one buffer set, kept in the list; first folds into `shared` (the
    /// router's counters of the same layout) every tally only the list still holds.
    pub(crate) fn register(&self, shared: &[AtomicU64; N]) -> Arc<Tally<N>> {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|t| {
            if Arc::strong_count(t) > 1 {
                return true;
            }
            // The owner's last additions happen-before its drop (a release); this fence
            // makes them happen-before the loads below (module docs, *Orderings*).
            fence(Acquire);
            for (s, c) in shared.iter().zip(&t.counts) {
                let n = c.load(Relaxed);
                if n != 0 {
                    s.fetch_add(n, Relaxed);
                }
            }
            false
        });
        let t = Arc::new(Tally::new());
        list.push(t.clone());
        t
    }

    /// Counter `i` of `shared` plus counter `i` of every tally, under the list's lock (a
    /// fold cannot count a tally twice or not at all).
    pub(crate) fn sum(&self, shared: &[AtomicU64; N]) -> [u64; N] {
        let list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: [u64; N] = core::array::from_fn(|i| shared[i].load(Relaxed));
        for t in list.iter() {
            for (o, c) in out.iter_mut().zip(&t.counts) {
                *o += c.load(Relaxed);
            }
        }
        out
    }

    /// Tallies in the list (tests).
    #[cfg(all(test, not(kvroute_loom)))]
    pub(crate) fn len(&self) -> usize {
        self.list.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(all(test, not(kvroute_loom)))]
mod tests {
    use super::*;

    /// Counts added on two tallies and on the shared counters sum exactly; a tally whose
    /// owner dropped it is folded into the shared counters at the next registration, its
    /// counts kept, and leaves the list.
    #[test]
    fn tallies_sum_and_fold_into_the_shared_counters() {
        let shared: [AtomicU64; COUNTERS] = core::array::from_fn(|_| AtomicU64::new(0));
        let tallies: Tallies = Tallies::default();
        let a = tallies.register(&shared);
        let b = tallies.register(&shared);
        for _ in 0..3 {
            a.add_one(5);
        }
        b.add_one(5);
        b.add_one(COUNTERS - 1);
        b.add_one(COUNTERS); // past the end: ignored
        shared[5].fetch_add(10, Relaxed);
        let s = tallies.sum(&shared);
        assert_eq!((s[5], s[COUNTERS - 1], s[0]), (14, 1, 0));
        assert_eq!(tallies.len(), 2);
        drop(a);
        let c = tallies.register(&shared);
        // `a` folded: its 3 now in the shared counter, the list holds `b` and `c`.
        assert_eq!(shared[5].load(Relaxed), 13);
        assert_eq!(tallies.len(), 2);
        c.add_one(5);
        assert_eq!(tallies.sum(&shared)[5], 15);
    }
}
