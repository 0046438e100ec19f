//! The node table: a fixed array of hash buckets, each a singly linked chain of nodes.
//!
//! Lookups are lock-free and wait-free in the number of writers. Insertion is lock-free:
//! a new node is pushed at the head of its bucket with a CAS, after a scan that found no
//! live node for the key (the scan is repeated whenever the CAS fails, so two writers that
//! race to insert the same key end up sharing one node). Unlinking a retired node takes the
//! bucket's stripe lock, which only other unlinkers ever take: readers and inserters never
//! wait for it.
//!
//! The bucket count is fixed at construction (a power of two sized from the configured
//! capacity), so nodes never move and chains never need rehashing while readers walk them.
//!
//! # Orderings
//! * Bucket heads and `next` pointers are published with `Release` (CAS success `AcqRel`)
//!   after the node is fully initialised, and loaded with `Acquire`, so a reader that
//!   reaches a node sees its key and its initial holder count.
//! * Unlinking stores the successor into the predecessor's `next` (or CASes the bucket
//!   head) with `Release`; the unlinked node's own `next` is left intact, so a reader
//!   standing on it can still walk on. The node is freed through the epoch collector only
//!   after every reader that could have reached it has unpinned.
//! * Interior `next` pointers are written only by unlinkers, which hold the stripe lock;
//!   inserters write only the bucket head (by CAS) and the `next` of their own unpublished
//!   node, so no interior store can be lost.

use core::ptr;

use kvroute_sync::Mutex;
use kvroute_sync::atomic::{AtomicPtr, Ordering};

use super::node::Node;
use super::reclaim::{Guard, Parked};

const STRIPES: usize = 256;

pub(crate) struct Table {
    buckets: Box<[AtomicPtr<Node>]>,
    mask: u64,
    /// Mixing key, so that bucket placement cannot be predicted from block hashes.
    mix: u64,
    stripes: Box<[Mutex<()>]>,
    ext_len: u32,
    parked: Parked,
}

impl Table {
    pub(crate) fn new(buckets: usize, ext_len: u32, mix: u64) -> Self {
        let n = buckets.next_power_of_two().max(16);
        Self {
            buckets: (0..n).map(|_| AtomicPtr::new(ptr::null_mut())).collect(),
            mask: (n - 1) as u64,
            mix: mix | 1,
            stripes: (0..STRIPES.min(n)).map(|_| Mutex::new(())).collect(),
            ext_len,
            parked: Parked::default(),
        }
    }

    #[inline]
    fn bucket_of(&self, key: u64) -> usize {
        ((key ^ (key >> 29)).wrapping_mul(self.mix) >> 32 & self.mask) as usize
    }

    /// The live-or-retired node for `key` reachable first from its bucket, if any. The
    /// reference is valid while `_guard` is pinned.
    #[inline]
    pub(crate) fn find<'g>(&self, key: u64, _guard: &'g Guard) -> Option<&'g Node> {
        let mut cur = self.buckets[self.bucket_of(key)].load(Ordering::Acquire);
        while !cur.is_null() {
            // SAFETY: `cur` was reached from a bucket head through `next` pointers loaded
            // with `Acquire`, so it points to a fully initialised node; nodes are freed only
            // through the epoch collector after unlinking, and the caller's guard was pinned
            // before we loaded the pointer, so the node outlives `'g`.
            let node = unsafe { &*cur };
            if node.key == key {
                return Some(node);
            }
            cur = node.next.load(Ordering::Acquire);
        }
        None
    }

    /// Acquires the live node for `key` (one holder reference), inserting a new one when
    /// there is none. Returns the node and whether it was inserted.
    pub(crate) fn acquire_or_insert<'g>(&self, key: u64, _guard: &'g Guard) -> (&'g Node, bool) {
        let bucket = &self.buckets[self.bucket_of(key)];
        let mut fresh: *mut Node = ptr::null_mut();
        loop {
            let head = bucket.load(Ordering::Acquire);
            let mut cur = head;
            while !cur.is_null() {
                // SAFETY: as in `find`: reached through `Acquire` loads under a pinned guard.
                let node = unsafe { &*cur };
                if node.key == key && node.try_acquire() {
                    if !fresh.is_null() {
                        // SAFETY: `fresh` is our own unpublished allocation (every CAS that
                        // could have published it failed).
                        drop(unsafe { Box::from_raw(fresh) });
                    }
                    return (node, false);
                }
                cur = node.next.load(Ordering::Acquire);
            }
            if fresh.is_null() {
                fresh = Box::into_raw(Box::new(Node::new_acquired(key, self.ext_len)));
            }
            // SAFETY: `fresh` is our own allocation, not yet published.
            unsafe { &*fresh }.next.store(head, Ordering::Relaxed);
            if bucket
                .compare_exchange(head, fresh, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                // SAFETY: just published; freed only through `unlink` + the epoch collector,
                // after the guard the caller holds is dropped.
                return (unsafe { &*fresh }, true);
            }
        }
    }

    /// Unlinks a node that the caller retired (see `Node::release`) and frees it after the
    /// grace period.
    ///
    /// # Safety
    /// `node` must be a node of this table that the caller retired (its `release` returned
    /// `true`), and this must be the only `unlink` of it.
    pub(crate) unsafe fn unlink(&self, node: &Node, guard: &Guard) {
        let target = ptr::from_ref(node).cast_mut();
        let b = self.bucket_of(node.key);
        let bucket = &self.buckets[b];
        let _stripe = self.stripes[b % self.stripes.len()]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let succ = node.next.load(Ordering::Acquire);
        loop {
            let head = bucket.load(Ordering::Acquire);
            if head == target {
                if bucket
                    .compare_exchange(head, succ, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    break;
                }
                // A concurrent insert pushed a node in front; the target is now interior.
                continue;
            }
            let mut prev = head;
            loop {
                debug_assert!(!prev.is_null(), "retired node missing from its bucket");
                if prev.is_null() {
                    return;
                }
                // SAFETY: reached from the bucket head under the stripe lock and a pinned
                // guard; interior nodes cannot be unlinked by anyone else while we hold the
                // lock, so `prev` is live.
                let p = unsafe { &*prev };
                let next = p.next.load(Ordering::Acquire);
                if next == target {
                    p.next.store(succ, Ordering::Release);
                    break;
                }
                prev = next;
            }
            break;
        }
        // SAFETY: the node was allocated by `acquire_or_insert` via `Box::into_raw`, is now
        // unreachable from the bucket, and the caller guarantees this is its only unlink.
        unsafe { guard.retire(target, &self.parked) };
    }

    /// Visits every node (exclusive access: used by `Drop` and by memory accounting).
    fn for_each_exclusive(&mut self, mut f: impl FnMut(*mut Node)) {
        for bucket in self.buckets.iter() {
            let mut cur = bucket.load(Ordering::Acquire);
            while !cur.is_null() {
                // SAFETY: `&mut self` excludes every other access; linked nodes are live.
                let next = unsafe { &*cur }.next.load(Ordering::Acquire);
                f(cur);
                cur = next;
            }
        }
    }

    /// Heap bytes of the bucket and stripe arrays.
    pub(crate) fn fixed_bytes(&self) -> usize {
        self.buckets.len() * core::mem::size_of::<AtomicPtr<Node>>()
            + self.stripes.len() * core::mem::size_of::<Mutex<()>>()
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        self.for_each_exclusive(|p| {
            // SAFETY: every linked node was allocated with `Box::into_raw` and is reachable
            // exactly once; `&mut self` means no reader or writer remains.
            drop(unsafe { Box::from_raw(p) });
        });
    }
}

#[cfg(all(test, kvroute_loom))]
mod loom_tests {
    use super::*;
    use crate::index::reclaim;
    use kvroute_sync::{Arc, thread};

    /// Two writers racing to insert the same key end up sharing one node with two holders.
    #[test]
    fn loom_concurrent_insert_of_one_key_shares_one_node() {
        loom::model(|| {
            let t = Arc::new(Table::new(1, 0, 1));
            let t2 = t.clone();
            let h = thread::spawn(move || {
                let g = reclaim::pin();
                let (n, _) = t2.acquire_or_insert(42, &g);
                core::ptr::from_ref(n) as usize
            });
            let g = reclaim::pin();
            let (n, _) = t.acquire_or_insert(42, &g);
            let a = core::ptr::from_ref(n) as usize;
            let b = h.join().unwrap();
            assert_eq!(a, b, "both writers must acquire the same node");
            assert_eq!(n.holders.load(Ordering::Acquire), 2);
        });
    }

    /// A reader walking a bucket while a writer unlinks a node in front of the key it looks
    /// for still finds that key (unlinking leaves the unlinked node's `next` intact), and a
    /// concurrent insert in the same bucket is never lost.
    #[test]
    fn loom_unlink_vs_reader_and_inserter() {
        loom::model(|| {
            // One bucket, so every key shares a chain: [c, b, a] after three inserts.
            let t = Arc::new(Table::new(1, 0, 1));
            {
                let g = reclaim::pin();
                for k in [1u64, 2, 3] {
                    t.acquire_or_insert(k, &g);
                }
            }
            let reader = {
                let t = t.clone();
                thread::spawn(move || {
                    let g = reclaim::pin();
                    t.find(1, &g).map(|n| n.key)
                })
            };
            let inserter = {
                let t = t.clone();
                thread::spawn(move || {
                    let g = reclaim::pin();
                    t.acquire_or_insert(4, &g).1
                })
            };
            {
                let g = reclaim::pin();
                let n2 = t.find(2, &g).unwrap();
                assert!(n2.release(), "sole holder retires");
                // SAFETY: we retired node 2 just above and unlink it once.
                unsafe { t.unlink(n2, &g) };
            }
            assert_eq!(reader.join().unwrap(), Some(1));
            assert!(inserter.join().unwrap());
            let g = reclaim::pin();
            assert!(t.find(2, &g).is_none(), "unlinked node is unreachable");
            for k in [1u64, 3, 4] {
                assert_eq!(t.find(k, &g).map(|n| n.key), Some(k), "key {k} lost");
            }
        });
    }

    /// Two unlinkers of adjacent nodes in one bucket (serialised by the stripe lock) leave
    /// the chain intact.
    #[test]
    fn loom_adjacent_unlinks() {
        loom::model(|| {
            let t = Arc::new(Table::new(1, 0, 1));
            {
                let g = reclaim::pin();
                for k in [1u64, 2, 3] {
                    t.acquire_or_insert(k, &g);
                }
            }
            let t2 = t.clone();
            let h = thread::spawn(move || {
                let g = reclaim::pin();
                let n = t2.find(2, &g).unwrap();
                assert!(n.release());
                // SAFETY: retired just above by this thread, unlinked once.
                unsafe { t2.unlink(n, &g) };
            });
            {
                let g = reclaim::pin();
                let n = t.find(3, &g).unwrap();
                assert!(n.release());
                // SAFETY: retired just above by this thread, unlinked once.
                unsafe { t.unlink(n, &g) };
            }
            h.join().unwrap();
            let g = reclaim::pin();
            assert_eq!(t.find(1, &g).map(|n| n.key), Some(1));
            assert!(t.find(2, &g).is_none() && t.find(3, &g).is_none());
        });
    }
}
