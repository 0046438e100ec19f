//! One indexed block: its chained hash, the bitset of workers holding it, and the holder
//! count that decides, race-free, when the node may be unlinked.
//!
//! # The holder protocol
//! `holders` counts the workers whose bit is set (each worker counts once, however many
//! copies or engine hashes it has for the block; that bookkeeping is the worker's own).
//! A writer *acquires* a node before setting its bit and *releases* it after clearing it:
//!
//! * acquire: CAS `h -> h + 1` for any `h != RETIRED`; fails once the node is retired, and
//!   the writer then inserts a fresh node for the same key;
//! * release: `fetch_sub(1)`; the writer that takes the count from 1 to 0 then tries
//!   CAS `0 -> RETIRED`. Only if that succeeds does it unlink the node. If another writer
//!   acquired the node in between, the CAS fails and the node stays, with that writer's bit.
//!
//! So a retired node has no holder and no bit, no holder can appear on it afterwards, and
//! exactly one writer unlinks it.
//!
//! # Successor links and node lifetime
//! A node may point to one *successor*: a node a writer stored right after it in one store
//! event (the next block of the same sequence). The link is set by CAS when the node has
//! none or its successor has retired, and
//! lets a match step from block `i` to block `i + 1` without a table lookup, after checking
//! that the successor's key is the next requested hash and that it is not retired (a retired
//! successor has no bits; the match then looks the hash up in the table instead).
//!
//! Memory is owned by reference counts, `refs`: one for the table's link, one for a
//! predecessor's successor pointer. Unlinking from the table and freeing a predecessor each
//! drop one; the last drop hands the node to the epoch collector, so a reader that reached
//! it (through the table before the unlink, or through a predecessor that was still
//! allocated) finishes before it is freed. A node leaving the table also gives up its own
//! successor link, and a retired node never takes a new one (bar one race: a writer that
//! checked the node just before another retired it), so a retired node kept allocated by a
//! live predecessor keeps at most one further node: at most two extra nodes per live node,
//! and no chain or cycle of retired nodes can stay allocated.
//!
//! # Orderings
//! * `holders`: acquire and release use `AcqRel` so that a writer that retires a node
//!   happens-after every earlier holder's release (their bit clears are visible before the
//!   node is unlinked), and an acquirer that sees a non-retired count synchronises with the
//!   last release. The failure ordering of the CAS is `Acquire` for the same reason.
//! * Bit words: `fetch_or` / `fetch_and` with `Release` publish a worker's residency change;
//!   readers load with `Acquire`. The words carry no other data, so no stronger ordering is
//!   needed; a match that races with a store sees the bit either set or not, both of which
//!   are valid linearisations.
//! * `ext` (bit words for slots 64 and above): installed once with a CAS (`AcqRel` success,
//!   `Acquire` failure) so that readers that load the pointer with `Acquire` see the zeroed
//!   words; it is freed only when the node itself is freed.
//! * `succ`: set with a CAS (`AcqRel`) after the new successor's `refs` was raised, so the
//!   successor cannot be freed while the link exists; the CAS (or the swap when the node
//!   leaves the table) hands the old link's reference to exactly one thread, which drops
//!   it. Readers load it with `Acquire` and then read the successor's (immutable) key and
//!   atomics.
//! * `refs`: raised with `Relaxed` (the raiser already holds the node, so it cannot reach
//!   zero concurrently), dropped with `AcqRel` so that the thread that frees the node
//!   happens-after every other thread's last use of it. Teardown (`drop_ref_now`, when the
//!   table is dropped) frees without the epoch collector: `&mut` on the table already
//!   orders it after every other thread's use, and the same `AcqRel` decrements are kept.

use core::ptr;

use kvroute_sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// Marks a node whose last holder has left: it can never be acquired again.
pub(crate) const RETIRED: u32 = u32::MAX;

pub(crate) struct Node {
    /// The chained block hash this node stands for.
    pub(crate) key: u64,
    pub(crate) holders: AtomicU32,
    /// References keeping the allocation: the table link and a predecessor's `succ`.
    refs: AtomicU32,
    /// Bits of slots 0..64.
    word0: AtomicU64,
    /// Bits of slots 64.., allocated on first use, or null. The allocation is `1 + len`
    /// words: word 0 holds `len`, the rest are the bit words of slots 64 and up.
    ext: AtomicPtr<AtomicU64>,
    /// The block stored after this one in the same event, or null (see the module docs).
    succ: AtomicPtr<Node>,
}

impl Node {
    /// A node for `key`, already acquired once by its creator (holders = 1), with the
    /// reference its table link will own.
    pub(crate) fn new_acquired(key: u64) -> Self {
        Self {
            key,
            holders: AtomicU32::new(1),
            refs: AtomicU32::new(1),
            word0: AtomicU64::new(0),
            ext: AtomicPtr::new(ptr::null_mut()),
            succ: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Makes `next` this node's successor unless it has a live one (a retired successor is
    /// replaced). Does nothing on a retired node. The caller holds a holder reference on
    /// `next` (so it is linked in the table and `refs >= 1`).
    pub(crate) fn link_succ(&self, next: &Node) {
        if ptr::eq(self, next) || self.holders.load(Ordering::Acquire) == RETIRED {
            return;
        }
        let cur = self.succ.load(Ordering::Acquire);
        if !cur.is_null() {
            // SAFETY: a non-null `succ` holds a reference on its target, and `self` is
            // borrowed (so not freed), hence the target is allocated.
            let c = unsafe { &*cur };
            if c.holders.load(Ordering::Acquire) != RETIRED {
                return;
            }
            // A retired successor is useless to matches: replace it below.
        }
        next.refs.fetch_add(1, Ordering::Relaxed);
        let linked = self
            .succ
            .compare_exchange(
                cur,
                ptr::from_ref(next).cast_mut(),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok();
        if linked {
            if !cur.is_null() {
                // SAFETY: the CAS took the old link out of the node; it owned one reference
                // on `cur`, released exactly once, here.
                unsafe { drop_ref(cur) };
            }
        } else {
            // The table's reference is still held (the caller holds `next`), so this cannot
            // be the last reference.
            let prev = next.refs.fetch_sub(1, Ordering::AcqRel);
            debug_assert!(prev >= 2);
        }
    }

    /// Current reference count (tests only).
    #[cfg(all(test, kvroute_loom))]
    pub(crate) fn refs(&self) -> u32 {
        self.refs.load(Ordering::Acquire)
    }

    /// Takes the successor link out of this node and returns its target (null if none);
    /// the caller then owns the reference the link held.
    pub(crate) fn take_succ(&self) -> *mut Node {
        self.succ.swap(ptr::null_mut(), Ordering::AcqRel)
    }

    /// Gives up this node's successor link (when the node leaves the table), so that a
    /// retired node never keeps a chain of other retired nodes allocated.
    pub(crate) fn unlink_succ(&self) {
        let s = self.succ.swap(ptr::null_mut(), Ordering::AcqRel);
        if !s.is_null() {
            // SAFETY: the link owned one reference on `s`; the swap took it out of the node,
            // so it is released exactly once, here.
            unsafe { drop_ref(s) };
        }
    }

    /// The successor, if it stands for `key` and is not retired.
    #[inline]
    pub(crate) fn succ_for(&self, key: u64) -> Option<&Node> {
        let p = self.succ.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: a non-null `succ` holds a reference on its target (`refs`), released
        // only when this node is freed; this node is borrowed, so it is not freed, and a
        // target whose last reference goes is freed only after the epoch grace period.
        let s = unsafe { &*p };
        (s.key == key && s.holders.load(Ordering::Acquire) != RETIRED).then_some(s)
    }

    /// Takes one holder reference unless the node is retired.
    pub(crate) fn try_acquire(&self) -> bool {
        let mut h = self.holders.load(Ordering::Acquire);
        loop {
            if h == RETIRED {
                return false;
            }
            match self
                .holders
                .compare_exchange_weak(h, h + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(now) => h = now,
            }
        }
    }

    /// Drops one holder reference; returns `true` when the caller retired the node and must
    /// unlink it.
    pub(crate) fn release(&self) -> bool {
        let prev = self.holders.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(prev != 0 && prev != RETIRED, "release without acquire");
        prev == 1
            && self
                .holders
                .compare_exchange(0, RETIRED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// Whether the node has been retired.
    #[cfg(all(test, not(kvroute_loom)))]
    pub(crate) fn is_retired(&self) -> bool {
        self.holders.load(Ordering::Acquire) == RETIRED
    }

    fn ext_words(&self) -> Option<&[AtomicU64]> {
        let p = self.ext.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY:
        // - a non-null `ext` was produced by `Box::into_raw` of a boxed slice of `1 + len`
        //   initialised `AtomicU64`s whose first word holds `len` (see `ext_or_alloc`);
        // - it is freed only in `Drop for Node`, which needs `&mut self`, so it outlives the
        //   returned borrow of `self`;
        // - atomics are only ever accessed through shared references.
        let all = unsafe {
            let len = (*p).load(Ordering::Relaxed) as usize;
            core::slice::from_raw_parts(p, len + 1)
        };
        Some(&all[1..])
    }

    /// Whether the extension words are allocated.
    pub(crate) fn has_ext(&self) -> bool {
        !self.ext.load(Ordering::Acquire).is_null()
    }

    /// The extension words, allocating them if needed; the flag says whether this call
    /// installed them.
    fn ext_or_alloc(&self, ext_len: usize) -> (&[AtomicU64], bool) {
        if let Some(words) = self.ext_words() {
            return (words, false);
        }
        // Word 0 holds the length, then the zeroed words. A range of known length collects
        // in one allocation (a chained iterator would grow the buffer step by step).
        let fresh: Box<[AtomicU64]> = (0..=ext_len)
            .map(|i| AtomicU64::new(if i == 0 { ext_len as u64 } else { 0 }))
            .collect();
        let fresh = Box::into_raw(fresh).cast::<AtomicU64>();
        let installed = self
            .ext
            .compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if !installed {
            // SAFETY: `fresh` came from `Box::into_raw` of a slice of `1 + ext_len` words
            // just above and was never shared (the CAS failed), so we own it and free it once.
            drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(fresh, ext_len + 1)) });
        }
        (self.ext_words().expect("ext installed above"), installed)
    }

    /// Sets `slot`'s bit (`ext_len`: extension words to allocate if needed, at least
    /// `slot / 64`). Returns whether it was already set, and whether this call allocated
    /// the extension words.
    pub(crate) fn set_bit(&self, slot: usize, ext_len: usize) -> (bool, bool) {
        let mask = 1u64 << (slot % 64);
        let (word, new_ext) = if slot < 64 {
            (&self.word0, false)
        } else {
            let (words, new_ext) = self.ext_or_alloc(ext_len);
            (&words[slot / 64 - 1], new_ext)
        };
        (word.fetch_or(mask, Ordering::Release) & mask != 0, new_ext)
    }

    /// Clears `slot`'s bit.
    pub(crate) fn clear_bit(&self, slot: usize) {
        let mask = 1u64 << (slot % 64);
        if slot < 64 {
            self.word0.fetch_and(!mask, Ordering::Release);
        } else if let Some(words) = self.ext_words() {
            words[slot / 64 - 1].fetch_and(!mask, Ordering::Release);
        }
    }

    /// The bit words for reading: word 0 and the extension words (`None` while no slot of
    /// 64 or more has stored on this node), each loaded once. Skips reading the extension's
    /// length header by trusting `ext_len`.
    ///
    /// # Safety
    /// Every extension array of this node was allocated with at least `ext_len` words (true
    /// for all nodes of one table: `set_bit` is always passed the table's `ext_len`).
    #[inline]
    pub(crate) unsafe fn words_unchecked(&self, ext_len: usize) -> (u64, Option<&[AtomicU64]>) {
        let word0 = self.word0.load(Ordering::Acquire);
        let p = self.ext.load(Ordering::Acquire);
        if p.is_null() {
            return (word0, None);
        }
        // SAFETY: a non-null `ext` points to `1 + len` initialised words (header first) that
        // live as long as the node (freed only in `Drop`); the caller guarantees
        // `len >= ext_len`, so `ext_len` words after the header are in bounds.
        let words = unsafe { core::slice::from_raw_parts(p.add(1), ext_len) };
        (word0, Some(words))
    }

    /// The bit word of slots 0..64.
    #[inline]
    pub(crate) fn word0(&self) -> u64 {
        self.word0.load(Ordering::Acquire)
    }

    /// Address of the successor (null if none), for prefetching.
    #[inline]
    pub(crate) fn succ_addr(&self) -> *const u8 {
        self.succ.load(Ordering::Relaxed).cast_const().cast()
    }

    /// Address of the extension words (null if none), for prefetching.
    #[inline]
    pub(crate) fn ext_addr(&self) -> *const u8 {
        self.ext.load(Ordering::Relaxed).cast_const().cast()
    }

    /// The bit word `w` (slots `64w..64w+64`).
    #[cfg(test)]
    pub(crate) fn word(&self, w: usize) -> u64 {
        if w == 0 {
            self.word0.load(Ordering::Acquire)
        } else {
            match self.ext_words() {
                Some(words) => words[w - 1].load(Ordering::Acquire),
                None => 0,
            }
        }
    }

    /// Heap bytes this node owns besides itself.
    #[cfg(all(test, not(kvroute_loom)))]
    pub(crate) fn ext_bytes(&self) -> usize {
        if self.ext.load(Ordering::Acquire).is_null() {
            0
        } else {
            (self.ext_words().map_or(0, <[AtomicU64]>::len) + 1) * core::mem::size_of::<AtomicU64>()
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let p = self.ext.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: a non-null `ext` is the `Box::into_raw` of `1 + len` words installed by
            // `ext_or_alloc`, with `len` in word 0; `&mut self` proves no reader holds it.
            unsafe {
                let len = (*p).load(Ordering::Relaxed) as usize;
                drop(Box::from_raw(ptr::slice_from_raw_parts_mut(p, len + 1)));
            }
        }
        let s = self.succ.load(Ordering::Acquire);
        if !s.is_null() {
            // SAFETY: the successor link owns one reference on `s`, released exactly once
            // here as this node is freed.
            unsafe { drop_ref(s) };
        }
    }
}

/// Drops one reference on `p`; the last one hands it to the epoch collector.
///
/// # Safety
/// `p` came from `Box::<Node>::into_raw`, and the caller owns one of its references (the
/// table link or a successor link), which it gives up here.
pub(crate) unsafe fn drop_ref(p: *mut Node) {
    // SAFETY: the caller's reference keeps `p` allocated until this decrement.
    if unsafe { &*p }.refs.fetch_sub(1, Ordering::AcqRel) == 1 {
        // SAFETY: no reference is left: the node is unreachable for threads that pin from
        // now on, and only this call saw the count reach zero.
        unsafe { super::reclaim::defer_free_node(p) };
    }
}

/// Drops one reference on `p` and frees it at once when that was the last one, then does
/// the same for its successor, and so on down the chain (a loop, not recursion). For
/// tearing down a table that is being dropped: with no thread able to reach any node, there
/// is no grace period to wait for, and skipping the epoch collector saves one deferred
/// closure (a heap allocation) per node.
///
/// # Safety
/// - `p` came from `Box::<Node>::into_raw`, and the caller owns one of its references,
///   which it gives up here;
/// - no thread can reach `p` or any node reachable from it by successor links other than
///   through references the caller owns (the owning table is being dropped, so no reader
///   or writer is left).
pub(crate) unsafe fn drop_ref_now(p: *mut Node) {
    let mut cur = p;
    loop {
        // SAFETY: the reference being released keeps `cur` allocated until this decrement.
        if unsafe { &*cur }.refs.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        // SAFETY: that was the last reference, so `cur` is still allocated (only this call
        // can free it). Its successor link is taken out first, so `Node::drop` does not
        // release it through the collector; the next turn of the loop releases it.
        let next = unsafe { &*cur }.take_succ();
        // SAFETY: `cur` came from `Box::into_raw`, its last reference is gone, and (caller's
        // precondition) no thread can reach it: it is freed here, once.
        drop(unsafe { Box::from_raw(cur) });
        if next.is_null() {
            return;
        }
        cur = next;
    }
}

#[cfg(all(test, not(kvroute_loom)))]
mod tests {
    use super::*;

    #[test]
    fn bits_in_both_word_kinds() {
        let n = Node::new_acquired(7);
        assert_eq!(n.set_bit(3, 3), (false, false));
        assert_eq!(n.set_bit(3, 3), (true, false));
        assert_eq!(n.set_bit(64 * 3 + 5, 3), (false, true));
        assert_eq!(n.set_bit(64 + 1, 3), (false, false));
        n.clear_bit(64 + 1);
        assert_eq!(n.word(0), 1 << 3);
        assert_eq!(n.word(3), 1 << 5);
        assert_eq!(n.word(1), 0);
        n.clear_bit(3);
        n.clear_bit(64 * 3 + 5);
        assert_eq!(n.word(0) | n.word(3), 0);
        assert_eq!(n.ext_bytes(), 32, "3 words and the length header");
    }

    #[test]
    fn holder_protocol_retires_exactly_once() {
        let n = Node::new_acquired(1);
        assert!(n.try_acquire());
        assert!(!n.release());
        assert!(n.release(), "the last release retires");
        assert!(n.is_retired());
        assert!(!n.try_acquire(), "a retired node cannot be acquired");
    }
}

#[cfg(all(test, kvroute_loom))]
mod loom_tests {
    use super::*;
    use kvroute_sync::{Arc, thread};

    /// Adder vs last remover on one node: either the remover retires the node (and the adder
    /// sees it retired and must insert a fresh one), or the adder's acquire comes first and
    /// the node survives with the adder's bit. Never both, never a bit on a retired node.
    #[test]
    fn loom_add_vs_last_remove_on_one_node() {
        loom::model(|| {
            let n = Arc::new(Node::new_acquired(9));
            n.set_bit(0, 1);
            let n2 = n.clone();
            let remover = thread::spawn(move || {
                n2.clear_bit(0);
                n2.release()
            });
            let added = if n.try_acquire() {
                n.set_bit(70, 1);
                true
            } else {
                false
            };
            let retired = remover.join().unwrap();
            assert!(
                added != retired,
                "exactly one of: adder kept the node, remover retired it"
            );
            if retired {
                assert_eq!(n.word(0) | n.word(1), 0, "a retired node holds no bit");
                assert!(!n.try_acquire());
            } else {
                assert_eq!(n.word(0), 0);
                assert_eq!(n.word(1), 1 << 6);
                assert_eq!(n.holders.load(Ordering::Acquire), 1);
            }
        });
    }

    /// Two writers (two workers) clearing and setting bits concurrently on one node never
    /// lose each other's bits.
    #[test]
    fn loom_concurrent_bit_updates_do_not_lose_bits() {
        loom::model(|| {
            let n = Arc::new(Node::new_acquired(9));
            n.set_bit(1, 1);
            let n2 = n.clone();
            let t = thread::spawn(move || {
                n2.set_bit(65, 1);
                n2.clear_bit(1);
            });
            n.set_bit(2, 1);
            t.join().unwrap();
            assert_eq!(n.word(0), 1 << 2);
            assert_eq!(n.word(1), 1 << 1);
        });
    }
}
