//! Per-decision scratch buffers (hashes, overlaps, fleet lanes, cost lanes), cached per
//! thread so that a warm router allocates nothing per decision and takes no lock for them.
//!
//! # Sharing
//! Each thread keeps up to [`KEEP`] buffer sets in a thread-local cache, each tagged with the
//! id of the router that used it last ([`next_router_id`]: unique in the process, never
//! reused, kept by the router when it moves). A decision takes the set tagged with its
//! router (or, on a miss, a new one while fewer than [`KEEP`] exist, else the least
//! recently used set, re-tagged), uses it in place and leaves it there. The tag only picks
//! which set to reuse: any set serves any router, because every buffer is rewritten by the
//! decision that uses it (hashes cleared, overlaps reset to the index's slot count, cost
//! lanes resized) except the fleet's lanes, which are cached under the load snapshot's
//! stamp, unique in the process to one publication of one publisher, and the scorer
//! configuration, cached under its cell's stamp, unique in the process to one install
//! (`SharedConfig::stamp`). So taking over
//! another router's set costs at most one refill, never a wrong decision, and threads that
//! use several routers in turn keep one set per router (up to [`KEEP`]) without
//! reallocating.
//!
//! Memory: at most [`KEEP`] sets per thread that routes, each as large as the largest fleet
//! it served. A set whose router was dropped is emptied (its buffers freed, and with them
//! its reader and lease, which keep that router's snapshot buffers and reservation table
//! allocated) at the thread's next look for such sets, every [`RELEASE_EVERY`] decisions
//! of the thread on any router, or when another router takes it over; a thread that stops
//! routing keeps its sets until it exits.
//!
//! A set also holds a block of decision numbers taken from the router it serves
//! ([`SeqBlock`]), its tally of that router's decisions (`tally.rs`), its reader of that
//! router's load snapshots with an announcement slot of its own
//! (`kvroute_load::PinnedReader`: loading a snapshot then writes no cache line other
//! threads write) and its lease of the router's reservation table
//! (`kvroute_load::TableLease`: its reservations count on the lease's reference count, not
//! on the table's), all dropped when the set is re-tagged (the router keeps the tally's
//! counts). Until then the set keeps that router's snapshot buffers and reservation table
//! allocated, after the router is dropped too (see *Memory*: at most [`KEEP`] routers' per
//! thread, until the next look for dropped routers).
//!
//! One `unsafe` (the cache's address taken out of the thread-local access, `with`). No
//! atomic of its own but the id counter's, a plain `std` atomic, `Relaxed`: it only hands
//! out distinct numbers and is no protocol the loom models check (a `static` loom atomic
//! is not possible); the decision-number blocks are taken from the router's counter with
//! one `Relaxed` `fetch_add` each, for the same reason. The cache is a `RefCell` borrowed
//! for the decision. A
//! decision that finds it borrowed (it never is: `route` calls nothing that routes) or
//! runs while the thread's locals are being destroyed uses a fresh set instead.

use core::cell::RefCell;

use kvroute_core::SequenceHash;
use std::sync::Arc;

use kvroute_score::{Fleet, ScoreConfig, Scorer};

/// Buffers of one decision in flight.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    pub hashes: Vec<SequenceHash>,
    pub fleet: Fleet,
    pub scorer: Scorer,
    /// The scorer configuration a decision last loaded, under its stamp: reused while the
    /// cell's stamp is unchanged (no atomic read-modify-write per decision).
    pub config: Option<(u64, Arc<ScoreConfig>)>,
    /// Decision numbers this set may still hand out for the router it serves.
    pub seq: SeqBlock,
    /// Whether the set is kept in the thread's cache (a one-off set registers no tally).
    pub pooled: bool,
    /// This set's tally of decisions for the router it serves (`tally.rs`), registered by
    /// its first decision there.
    pub tally: Option<kvroute_core::sync::Arc<crate::tally::Tally>>,
    /// What the set holds of the router it serves, made by its first decision there.
    pub attached: Option<Attached>,
}

/// A set's own handles on the router it serves.
#[derive(Debug)]
pub(crate) struct Attached {
    /// Its reader of the router's load snapshots, with an announcement slot of its own
    /// (`kvroute_load::PinnedReader`).
    pub pin: kvroute_load::PinnedReader<kvroute_load::LoadSnapshot>,
    /// Its lease of the router's reservation table (`kvroute_load::TableLease`: its guards
    /// count on the lease's reference count, not the table's).
    pub lease: kvroute_load::TableLease,
    /// Whether the router is still alive (`Router::alive`): a set whose router is dropped
    /// is emptied by [`Cache::release_dropped`].
    pub alive: std::sync::Weak<()>,
}

/// Decision numbers taken from a router's counter [`SEQ_BLOCK`] at a time, so that a
/// decision numbers itself without an atomic read-modify-write (the router's counter is
/// one cache line every deciding thread would otherwise write per decision).
///
/// The first block a router hands out starts at 0, so a router used from one thread
/// numbers its decisions 0, 1, 2, … as a shared counter would, as long as the thread
/// keeps its buffer set for that router (it alternates among at most [`KEEP`] routers; a
/// set taken over by another router, or a one-off set, drops the rest of its block).
/// Blocks are `2^32 - 1` long, so the `k`-th block starts `k` below a multiple of `2^32`:
/// the low 32 bits (the rotating tie cursor) of each block start one tie position behind
/// the previous block's, so the first threads to route start on different slots of a
/// band of tied slots (blocks `k` and `k + n` start on the same slot of a band of `n`).
/// Decisions made at the same moment on different threads no longer take consecutive
/// numbers.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SeqBlock {
    next: u64,
    end: u64,
}

/// Length of a [`SeqBlock`]: `2^32 - 1` decision numbers.
pub(crate) const SEQ_BLOCK: u64 = u32::MAX as u64;

impl SeqBlock {
    /// The next decision number, taking a new block from `counter` (one `fetch_add`,
    /// `Relaxed`: the numbers only need to be distinct) when this one is used up.
    #[inline]
    pub(crate) fn take(&mut self, counter: &kvroute_core::sync::atomic::AtomicU64) -> u64 {
        if self.next == self.end {
            let base = counter.fetch_add(SEQ_BLOCK, kvroute_core::sync::atomic::Ordering::Relaxed);
            self.next = base;
            self.end = base.wrapping_add(SEQ_BLOCK);
        }
        let n = self.next;
        self.next = n.wrapping_add(1);
        n
    }
}

/// Buffer sets kept per thread.
pub(crate) const KEEP: usize = 4;

/// Decisions of a thread between two looks at its sets for routers since dropped.
pub(crate) const RELEASE_EVERY: u64 = 4_096;

/// One cached buffer set.
struct Entry {
    /// The id of the router that used it last (module docs, *Sharing*).
    tag: u64,
    /// [`Cache::clock`] at its last use.
    used: u64,
    scratch: Scratch,
}

/// A thread's buffer sets.
struct Cache {
    entries: Vec<Entry>,
    /// Counts decisions of this thread (the recency of `Entry::used`).
    clock: u64,
}

impl Cache {
    /// The set for `tag`: its own, a new one, or the least recently used one re-tagged.
    #[inline]
    fn entry(&mut self, tag: u64) -> &mut Scratch {
        self.clock = self.clock.wrapping_add(1);
        if self.clock % RELEASE_EVERY == 0 {
            self.release_dropped();
        }
        let i = match self.entries.iter().position(|e| e.tag == tag) {
            Some(i) => i,
            None => self.miss(tag),
        };
        let e = &mut self.entries[i];
        e.used = self.clock;
        &mut e.scratch
    }

    /// Empties the sets whose router was dropped (their `router` reads no strong count):
    /// their buffers, and the snapshot reader and table lease that keep that router's
    /// snapshot buffers and reservation table allocated, are freed, and the set is left
    /// untagged (tag 0, which no router has) for the next router to take.
    #[cold]
    #[inline(never)]
    fn release_dropped(&mut self) {
        for e in &mut self.entries {
            if e.scratch
                .attached
                .as_ref()
                .is_some_and(|a| a.alive.strong_count() == 0)
            {
                e.tag = 0;
                e.scratch = Scratch {
                    pooled: true,
                    ..Scratch::default()
                };
            }
        }
    }

    /// [`entry`](Self::entry) for a tag without a set: the index of a new set, or of the
    /// least recently used one re-tagged.
    #[cold]
    #[inline(never)]
    fn miss(&mut self, tag: u64) -> usize {
        if self.entries.len() < KEEP {
            if self.entries.capacity() == 0 {
                self.entries.reserve_exact(KEEP);
            }
            self.entries.push(Entry {
                tag,
                used: 0,
                scratch: Scratch {
                    pooled: true,
                    ..Scratch::default()
                },
            });
            return self.entries.len() - 1;
        }
        let lru = (0..self.entries.len())
            .min_by_key(|&i| self.entries[i].used)
            .unwrap_or(0);
        self.entries[lru].tag = tag;
        // Its numbers and its tally were the other router's.
        self.entries[lru].scratch.seq = SeqBlock::default();
        self.entries[lru].scratch.tally = None;
        self.entries[lru].scratch.attached = None;
        lru
    }
}

thread_local! {
    static CACHE: RefCell<Cache> = const {
        RefCell::new(Cache {
            entries: Vec::new(),
            clock: 0,
        })
    };
}

/// A new router id (module docs, *Sharing*): 1, 2, … across every router of the process.
pub(crate) fn next_router_id() -> u64 {
    static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Runs `f` on this thread's buffer set for the router whose id is `tag`, or on a fresh
/// set when the cache is unavailable (module docs). `f` runs exactly once.
#[inline]
pub(crate) fn with<R>(tag: u64, f: impl FnOnce(&mut Scratch) -> R) -> R {
    // The cache's address, not a result carried out of the access's closure: `f`'s value
    // (a whole decision) is then written once, into this function's return place, instead
    // of being moved through the closure's `Option` and the access's `Result`.
    if let Ok(cache) = CACHE.try_with(core::ptr::from_ref) {
        // SAFETY: `cache` points at this thread's `CACHE`, and the reference made here
        // does not outlive this call (`R` cannot borrow the `&mut Scratch`). It is valid
        // for that long because (1) `try_with` just succeeded, so `CACHE`'s destructor has
        // not run (this may be another thread-local's destructor, during the thread's
        // teardown, but not `CACHE`'s); (2) it cannot run during this call: a thread's
        // local destructors run one at a time on this thread, and nothing `f` does ends the
        // thread or destroys `CACHE`; (3) the standard library keeps a thread-local value
        // at one address from its first access until its destructor runs. Only a shared
        // reference is made; the `RefCell` checks the mutable borrow below, so a
        // re-entrant call gets a fresh set instead.
        let cell = unsafe { &*cache };
        if let Ok(mut c) = cell.try_borrow_mut() {
            return f(c.entry(tag));
        }
    }
    f(&mut Scratch::default())
}

/// How many buffer sets this thread holds (tests).
#[cfg(test)]
pub(crate) fn cached_sets() -> usize {
    CACHE.with(|c| c.borrow().entries.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache() -> Cache {
        Cache {
            entries: Vec::new(),
            clock: 0,
        }
    }

    /// Each tag keeps its own set (marked here by the hash buffer's capacity) up to `KEEP`
    /// tags; a further tag takes over the least recently used set, buffers and all, and the
    /// cache never holds more than `KEEP` sets.
    #[test]
    fn tags_keep_their_sets_and_evict_the_least_recent() {
        let mut c = cache();
        for tag in 1..=KEEP as u64 {
            c.entry(tag).hashes.reserve_exact(100 * tag as usize);
        }
        assert_eq!(c.entries.len(), KEEP);
        // Tag 1 again: its own set, with the 100 it reserved.
        assert!(c.entry(1).hashes.capacity() >= 100);
        assert!(c.entry(1).hashes.capacity() < 200);
        // Tag 2 is now the least recently used (1 was just used, 3 and 4 after 2): a new
        // tag reuses its buffers (200 reserved), and tag 2 then misses.
        let cap = c.entry(99).hashes.capacity();
        assert!((200..300).contains(&cap), "{cap}");
        assert_eq!(c.entries.len(), KEEP);
        assert!(c.entries.iter().all(|e| e.tag != 2));
        assert!(c.entries.iter().any(|e| e.tag == 99));
    }

    /// A block hands out consecutive numbers from where the counter stood (0, 1, 2, …
    /// for the first), takes `2^32 - 1` of the counter's numbers at once, and takes a new
    /// block only when its own is used up; the second block's numbers start one below
    /// `2^32`, so their low 32 bits (the tie cursor) start one behind the first block's.
    #[test]
    fn decision_numbers_come_in_blocks() {
        use kvroute_core::sync::atomic::{AtomicU64, Ordering};
        let counter = AtomicU64::new(0);
        let mut a = SeqBlock::default();
        let mut b = SeqBlock::default();
        assert_eq!(
            [a.take(&counter), a.take(&counter), a.take(&counter)],
            [0, 1, 2]
        );
        assert_eq!(counter.load(Ordering::Relaxed), (1 << 32) - 1);
        let first = b.take(&counter);
        assert_eq!(first, (1 << 32) - 1);
        assert_eq!(first as u32, u32::MAX);
        assert_eq!(b.take(&counter) as u32, 0);
        assert_eq!(counter.load(Ordering::Relaxed), 2 * ((1 << 32) - 1));
        // The last number of a block, then a fresh block from the counter.
        let mut c = SeqBlock { next: 41, end: 42 };
        assert_eq!(c.take(&counter), 41);
        assert_eq!(c.take(&counter), 2 * ((1 << 32) - 1));
        assert_eq!(c.take(&counter), 2 * ((1 << 32) - 1) + 1);
    }

    /// A set taken over by another router drops the numbers and the tally it held for the
    /// first one, and stays a pooled set.
    #[test]
    fn a_retagged_set_drops_its_decision_numbers_and_tally() {
        let mut c = cache();
        for tag in 1..=KEEP as u64 {
            c.entry(tag).seq = SeqBlock {
                next: tag,
                end: 100,
            };
        }
        assert_eq!(c.entry(1).seq, SeqBlock { next: 1, end: 100 });
        c.entry(2).tally = Some(kvroute_core::sync::Arc::new(
            crate::tally::Tally::new_for_test(),
        ));
        for tag in [1, 3, 4] {
            c.entry(tag);
        }
        // Tag 2 is the least recently used: its set goes to tag 99, without its numbers
        // or its tally.
        let s = c.entry(99);
        assert_eq!(s.seq, SeqBlock::default());
        assert!(s.tally.is_none());
        assert!(s.pooled);
        assert_eq!(c.entry(3).seq, SeqBlock { next: 3, end: 100 });
    }

    /// A set whose router is dropped is emptied and untagged at the next look, after
    /// [`RELEASE_EVERY`] decisions of the thread; a set whose router lives keeps its
    /// buffers and its tag.
    #[test]
    fn sets_of_dropped_routers_are_emptied() {
        let mut c = cache();
        let (gone, kept) = (std::sync::Arc::new(()), std::sync::Arc::new(()));
        let (_writer, reader) =
            kvroute_load::snapshot_cell(2, |_| kvroute_load::LoadSnapshot::default()).unwrap();
        let table = kvroute_load::ReservationTable::new(1, kvroute_core::Nanos(1)).unwrap();
        for (tag, alive) in [(1, &gone), (2, &kept)] {
            let s = c.entry(tag);
            s.hashes.push(kvroute_core::SequenceHash(7));
            s.attached = Some(Attached {
                pin: reader.pinned(),
                lease: table.lease(),
                alive: std::sync::Arc::downgrade(alive),
            });
        }
        drop(gone);
        // Up to one decision before the look, the dropped router's set is untouched.
        while c.clock % RELEASE_EVERY != RELEASE_EVERY - 1 {
            c.entry(2);
        }
        assert_eq!(c.entries[0].tag, 1);
        assert_eq!(c.entries[0].scratch.hashes.len(), 1);
        c.entry(2);
        assert_eq!(c.entries[0].tag, 0, "untagged");
        assert!(c.entries[0].scratch.hashes.is_empty(), "buffers freed");
        assert_eq!(c.entries[0].scratch.hashes.capacity(), 0, "buffers freed");
        assert!(
            c.entries[0].scratch.attached.is_none(),
            "reader and lease dropped"
        );
        assert!(c.entries[0].scratch.pooled);
        assert_eq!(c.entries[1].tag, 2);
        assert!(c.entries[1].scratch.attached.is_some());
        assert_eq!(
            c.entries[1].scratch.hashes.len(),
            1,
            "a live router's set stays"
        );
    }

    /// The thread-local cache holds one set per router that routed on this thread (a
    /// router moved keeps its set), and routers dropped and rebuilt keep routing correctly
    /// with the sets left behind.
    #[test]
    fn one_thread_serves_several_routers() {
        use kvroute_core::{LoadSample, Nanos, WorkerId};

        use crate::config::RouterConfig;
        use crate::request::RouteRequest;
        use crate::router::Router;

        std::thread::spawn(|| {
            let build = |workers: u64| {
                let r = Router::new(RouterConfig::new(8, 16)).unwrap();
                for e in 0..workers {
                    let w = WorkerId::new(e, 0);
                    r.add_worker(w).unwrap();
                    r.update_load(w, LoadSample::idle(64), Nanos::from_secs(1))
                        .unwrap();
                }
                r.publish(Nanos::from_secs(1)).unwrap();
                r
            };
            let prompt: Vec<u32> = (0..64).collect();
            let req = RouteRequest::tokens(&prompt, 10, Nanos::from_secs(1));
            for round in 0..3 {
                // Fleets of 1, 2 and 3 idle workers: every decision picks one of them.
                let first = build(1);
                drop(first.route(&req).unwrap());
                let before = cached_sets();
                // Moved into the vector: the same id, the same set.
                let mut routers = vec![first];
                drop(routers[0].route(&req).unwrap());
                assert_eq!(cached_sets(), before);
                routers.extend((2..=3).map(build));
                for _ in 0..4 {
                    for (k, r) in routers.iter().enumerate() {
                        let d = r.route(&req).unwrap();
                        assert!(d.worker.engine_id <= k as u64, "round {round}");
                    }
                }
                assert!(cached_sets() <= KEEP);
            }
            // Three routers at a time: three sets, never more than `KEEP`.
            assert!((3..=KEEP).contains(&cached_sets()));
        })
        .join()
        .unwrap();
    }
}
