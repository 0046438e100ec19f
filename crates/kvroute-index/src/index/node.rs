//! One indexed block: its chained hash, the bitset of workers holding it, and the holder
//! count that decides, race-free, when the node may be unlinked.
//!
//! # Layout
//! A node is one heap allocation: a 24-byte [`Head`] (key, holder count, reference count,
//! successor pointer) followed by the index's `words = worker_slots.div_ceil(64)` bit
//! words, 8 bytes each (`24 + 8 * words` bytes: 32 at up to 64 slots, 88 at 512). Every
//! node of one index has the same number of words, so pointers are stored thin (`*mut
//! Head`: the table's slots, successor links, the workers' entries) and widened to the
//! slice-tailed [`Node`] with the index's word count where the words are needed. A `&Node`
//! is such a wide reference: it spans the whole allocation, so the words are reached
//! through it (bounds-checked) and not by pointer arithmetic past a header-sized reference.
//! The allocation is made and freed here only (`alloc_acquired`, `free`), with one layout
//! function for both.
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
//! drop one; the last drop hands the node to the epoch collector (in its writer's batch, see
//! `reclaim`), so a reader that reached
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
//!   are valid linearisations. The words are initialised (zero) before the node is
//!   published, by the `AcqRel` CAS that links it in the table, so a reader that loads the
//!   node pointer with `Acquire` sees them; they live exactly as long as the node.
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

use core::alloc::Layout;
use core::ptr;

use kvroute_core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

use super::reclaim::{Guard, NodeMemory};

/// Marks a node whose last holder has left: it can never be acquired again.
pub(crate) const RETIRED: u32 = u32::MAX;

/// The fixed part of a node, at the start of its allocation; the bit words follow it.
/// A `*mut Head` is the node's thin pointer.
#[repr(C)]
pub(crate) struct Head {
    /// The chained block hash this node stands for.
    pub(crate) key: u64,
    pub(crate) holders: AtomicU32,
    /// References keeping the allocation: the table link and a predecessor's `succ`.
    refs: AtomicU32,
    /// The block stored after this one in the same event, or null (see the module docs).
    succ: AtomicPtr<Head>,
}

/// A whole node: the head and its bit words (word `w` holds slots `64w..64w + 64`).
/// Always reached through a reference widened from a thin pointer by [`Node::from_thin`].
#[repr(C)]
pub(crate) struct Node {
    head: Head,
    words: [AtomicU64],
}

impl core::ops::Deref for Node {
    type Target = Head;

    #[inline]
    fn deref(&self) -> &Head {
        &self.head
    }
}

/// The allocation of a node with `words` bit words: the head, then the words with no
/// padding between (the head is 24 bytes, a multiple of the words' alignment).
fn layout(words: usize) -> Layout {
    let (l, _) = Layout::new::<Head>()
        .extend(Layout::array::<AtomicU64>(words).expect("at most 64 bit words"))
        .expect("node layout fits");
    l.pad_to_align()
}

/// Heap bytes of one node with `words` bit words (`24 + 8 * words`).
pub(crate) fn node_bytes(words: usize) -> usize {
    layout(words).size()
}

/// Allocates a node for `key` with the table's zeroed bit words (`mem.words`), already
/// acquired once by its creator (holders = 1), with the reference its table link will own.
/// Returns its thin pointer; free it with [`free`] (or, once shared, through [`drop_ref`]).
/// Counting it in `mem` is the publisher's (`NodeMemory::nodes_allocated`, once per event):
/// a node that never gets published is freed uncounted.
pub(crate) fn alloc_acquired(key: u64, mem: &NodeMemory) -> *mut Head {
    let words = mem.words;
    let layout = layout(words);
    // SAFETY: the layout is non-zero-sized (the head alone is 24 bytes).
    let base = unsafe { std::alloc::alloc(layout) };
    if base.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    let head = base.cast::<Head>();
    // SAFETY: `base` is a fresh allocation of `layout`: the head at offset 0 and the
    // `words` words right after it are in bounds and aligned (see `layout`), and nothing
    // else can see the memory yet, so each is initialised once with a plain write.
    unsafe {
        head.write(Head {
            key,
            holders: AtomicU32::new(1),
            refs: AtomicU32::new(1),
            succ: AtomicPtr::new(ptr::null_mut()),
        });
        let w = head.add(1).cast::<AtomicU64>();
        for i in 0..words {
            w.add(i).write(AtomicU64::new(0));
        }
    }
    head
}

/// Frees a node: releases its successor link (if any; a successor whose last reference
/// that was goes into `guard`'s batch), drops its fields and gives the memory back. The
/// caller counts it (`NodeMemory::nodes_freed`) if it was counted allocated.
///
/// # Safety
/// `p` came from [`alloc_acquired`] with this `mem`; no reference to it is left and no
/// thread can reach it any more (or ever could); this is called once for it.
pub(crate) unsafe fn free(p: *mut Head, mem: &NodeMemory, guard: &Guard) {
    // SAFETY: `p` is allocated (caller), so its head can be read.
    let s = unsafe { &*p }.take_succ();
    if !s.is_null() {
        // SAFETY: the successor link owned one reference on `s`, taken out of the node
        // above and released exactly once here; successors belong to the same table.
        unsafe { drop_ref(s, guard) };
    }
    // SAFETY: the caller's preconditions; the successor link was released above.
    unsafe { dealloc(p, mem) };
}

/// Drops a node's fields and gives its memory back (uncounted); the node holds no successor
/// link any more.
///
/// # Safety
/// As [`free`], and the node's successor link is null.
unsafe fn dealloc(p: *mut Head, mem: &NodeMemory) {
    let words = mem.words;
    let node = ptr::slice_from_raw_parts_mut(p.cast::<AtomicU64>(), words) as *mut Node;
    // SAFETY: `node` spans exactly the allocation made by `alloc_acquired` with `mem`
    // (`words` words), every field of which was initialised there; no one else can reach
    // it (caller), so it is dropped and deallocated once, with the layout it was allocated
    // with.
    unsafe {
        debug_assert!((*p).succ.load(Ordering::Relaxed).is_null());
        ptr::drop_in_place(node);
        std::alloc::dealloc(p.cast(), layout(words));
    }
}

impl Node {
    /// The whole node behind a thin pointer.
    ///
    /// # Safety
    /// `p` came from [`alloc_acquired`] with this `words` and stays allocated for `'a`.
    #[inline]
    pub(crate) unsafe fn from_thin<'a>(p: *const Head, words: usize) -> &'a Node {
        let node = ptr::slice_from_raw_parts(p.cast::<AtomicU64>(), words) as *const Node;
        // SAFETY: the caller guarantees an initialised allocation of `words` words that
        // outlives `'a`; the slice metadata is the trailing word count, as `Node` needs.
        unsafe { &*node }
    }

    /// This node's thin pointer (with the provenance of the whole allocation).
    #[inline]
    pub(crate) fn as_thin(&self) -> *mut Head {
        ptr::from_ref(self).cast::<Head>().cast_mut()
    }

    /// The successor, if it stands for `key` and is not retired.
    #[inline]
    pub(crate) fn succ_for(&self, key: u64) -> Option<&Node> {
        let p = self.head.succ.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: a non-null `succ` holds a reference on its target (`refs`), released
        // only when this node is freed; this node is borrowed, so it is not freed, and a
        // target whose last reference goes is freed only after the epoch grace period.
        // Successors are nodes of the same index, so they have this node's word count.
        let s = unsafe { Node::from_thin(p, self.words.len()) };
        (s.key == key && s.holders.load(Ordering::Acquire) != RETIRED).then_some(s)
    }

    /// Makes `next` this node's successor unless it has a live one (a retired successor is
    /// replaced). Does nothing on a retired node. The caller holds a holder reference on
    /// `next` (so it is linked in the table and `refs >= 1`); both nodes belong to one
    /// index. `guard` is the caller's pinned epoch.
    pub(crate) fn link_succ(&self, next: &Node, guard: &Guard) {
        debug_assert_eq!(self.words.len(), next.words.len());
        let head = &self.head;
        if ptr::eq(head, &next.head) || head.holders.load(Ordering::Acquire) == RETIRED {
            return;
        }
        let cur = head.succ.load(Ordering::Acquire);
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
        let linked = head
            .succ
            .compare_exchange(cur, next.as_thin(), Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
        if linked {
            if !cur.is_null() {
                // SAFETY: the CAS took the old link out of the node; it owned one reference
                // on `cur` (a node of this index), released exactly once, here.
                unsafe { drop_ref(cur, guard) };
            }
        } else {
            // The table's reference is still held (the caller holds `next`), so this cannot
            // be the last reference.
            let prev = next.refs.fetch_sub(1, Ordering::AcqRel);
            debug_assert!(prev >= 2);
        }
    }

    /// Gives up this node's successor link (when the node leaves the table), so that a
    /// retired node never keeps a chain of other retired nodes allocated. `guard` is the
    /// caller's pinned epoch.
    pub(crate) fn unlink_succ(&self, guard: &Guard) {
        let s = self.head.succ.swap(ptr::null_mut(), Ordering::AcqRel);
        if !s.is_null() {
            // SAFETY: the link owned one reference on `s` (a node of this index); the swap
            // took it out of the node, so it is released exactly once, here.
            unsafe { drop_ref(s, guard) };
        }
    }

    /// Sets `slot`'s bit; returns whether it was already set.
    ///
    /// # Panics
    /// If `slot >= 64 * words` (callers pass a slot checked against `worker_slots`).
    #[inline]
    pub(crate) fn set_bit(&self, slot: usize) -> bool {
        let mask = 1u64 << (slot % 64);
        self.words[slot / 64].fetch_or(mask, Ordering::Release) & mask != 0
    }

    /// Clears `slot`'s bit.
    ///
    /// # Panics
    /// If `slot >= 64 * words` (callers pass a slot checked against `worker_slots`).
    #[inline]
    pub(crate) fn clear_bit(&self, slot: usize) {
        let mask = 1u64 << (slot % 64);
        self.words[slot / 64].fetch_and(!mask, Ordering::Release);
    }

    /// The bit words, for a reader to load (`Acquire`) one by one.
    #[inline]
    pub(crate) fn words(&self) -> &[AtomicU64] {
        &self.words
    }

    /// The bit word of slots 0..64.
    #[inline]
    pub(crate) fn word0(&self) -> u64 {
        self.words[0].load(Ordering::Acquire)
    }

    /// The bit word `w` (slots `64w..64w+64`).
    #[cfg(test)]
    pub(crate) fn word(&self, w: usize) -> u64 {
        self.words[w].load(Ordering::Acquire)
    }
}

impl Head {
    /// Current reference count (tests only).
    #[cfg(all(test, kvroute_loom))]
    pub(crate) fn refs(&self) -> u32 {
        self.refs.load(Ordering::Acquire)
    }

    /// Takes the successor link out of this node and returns its target (null if none);
    /// the caller then owns the reference the link held.
    pub(crate) fn take_succ(&self) -> *mut Head {
        self.succ.swap(ptr::null_mut(), Ordering::AcqRel)
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

    /// Address of the successor (null if none), for prefetching.
    #[inline]
    pub(crate) fn succ_addr(&self) -> *const u8 {
        self.succ.load(Ordering::Relaxed).cast_const().cast()
    }
}

/// Drops one reference on `p`; the last one gathers it into `guard`'s batch, which the
/// caller seals (hands to the epoch collector) before dropping the guard.
///
/// # Safety
/// `p` came from [`alloc_acquired`], and the caller owns one of its references (the table
/// link or a successor link), which it gives up here.
pub(crate) unsafe fn drop_ref(p: *mut Head, guard: &Guard) {
    // SAFETY: the caller's reference keeps `p` allocated until this decrement.
    if unsafe { &*p }.refs.fetch_sub(1, Ordering::AcqRel) == 1 {
        // SAFETY: no reference is left: the node is unreachable for threads that pin from
        // now on, and only this call saw the count reach zero.
        unsafe { guard.defer_free_node(p) };
    }
}

/// Drops one reference on `p` and frees it at once when that was the last one, then does
/// the same for its successor, and so on down the chain (a loop, not recursion). For
/// tearing down a table that is being dropped: with no thread able to reach any node, there
/// is no grace period to wait for, and skipping the epoch collector saves one deferred
/// batch.
///
/// # Safety
/// - `p` came from [`alloc_acquired`] with this `mem`, and the caller owns one of its
///   references, which it gives up here;
/// - no thread can reach `p` or any node reachable from it by successor links other than
///   through references the caller owns (the owning table is being dropped, so no reader
///   or writer is left).
pub(crate) unsafe fn drop_ref_now(p: *mut Head, mem: &NodeMemory) {
    let mut cur = p;
    loop {
        // SAFETY: the reference being released keeps `cur` allocated until this decrement.
        if unsafe { &*cur }.refs.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        // SAFETY: that was the last reference, so `cur` is still allocated (only this call
        // can free it). Its successor link is taken out first; the next turn of the loop
        // releases it.
        let next = unsafe { &*cur }.take_succ();
        // SAFETY: `cur` came from `alloc_acquired` with `mem` (successors belong to the same
        // table), its last reference is gone, its successor link is null, and (caller's
        // precondition) no thread can reach it: it is freed here, once.
        unsafe { dealloc(cur, mem) };
        mem.nodes_freed(1);
        if next.is_null() {
            return;
        }
        cur = next;
    }
}

/// Owns a node outside any table (tests of the node protocol alone).
#[cfg(test)]
pub(crate) struct TestNode {
    p: *mut Head,
    mem: kvroute_core::sync::Arc<NodeMemory>,
}

// SAFETY: the node is only accessed through shared references to its atomics and its
// immutable key, which are `Sync`; `TestNode` frees it once, on drop.
#[cfg(test)]
unsafe impl Send for TestNode {}
// SAFETY: as above.
#[cfg(test)]
unsafe impl Sync for TestNode {}

#[cfg(test)]
impl TestNode {
    pub(crate) fn new(key: u64, words: usize) -> Self {
        let mem = NodeMemory::new(words);
        Self {
            p: alloc_acquired(key, &mem),
            mem,
        }
    }
}

#[cfg(test)]
impl core::ops::Deref for TestNode {
    type Target = Node;

    fn deref(&self) -> &Node {
        // SAFETY: allocated with `self.mem.words` words in `new`, freed only in `drop`.
        unsafe { Node::from_thin(self.p, self.mem.words) }
    }
}

#[cfg(test)]
impl Drop for TestNode {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with `self.mem`; tests never link a `TestNode` into a
        // table or as a successor, so this owner holds the only reference and the node has
        // no successor link.
        unsafe { dealloc(self.p, &self.mem) };
    }
}

#[cfg(all(test, not(kvroute_loom)))]
mod tests {
    use super::*;

    #[test]
    fn bits_in_every_word() {
        let n = TestNode::new(7, 4);
        assert!(!n.set_bit(3));
        assert!(n.set_bit(3));
        assert!(!n.set_bit(64 * 3 + 5));
        assert!(!n.set_bit(64 + 1));
        n.clear_bit(64 + 1);
        assert_eq!(n.word(0), 1 << 3);
        assert_eq!(n.word(3), 1 << 5);
        assert_eq!(n.word(1) | n.word(2), 0);
        n.clear_bit(3);
        n.clear_bit(64 * 3 + 5);
        assert_eq!(n.word(0) | n.word(3), 0);
        assert_eq!(n.words().len(), 4);
    }

    #[test]
    fn one_allocation_of_head_and_words() {
        // Head: key 8 + holders 4 + refs 4 + successor pointer 8 = 24 bytes, then 8 per word.
        for (words, bytes) in [(1, 32), (2, 40), (8, 88), (64, 536)] {
            assert_eq!(node_bytes(words), bytes, "{words} words");
            let n = TestNode::new(1, words);
            // The widened reference spans exactly the allocation.
            assert_eq!(core::mem::size_of_val::<Node>(&n), bytes);
            assert_eq!(Layout::for_value::<Node>(&n), layout(words));
        }
    }

    #[test]
    fn holder_protocol_retires_exactly_once() {
        let n = TestNode::new(1, 1);
        assert!(n.try_acquire());
        assert!(!n.release());
        assert!(n.release(), "the last release retires");
        assert!(n.is_retired());
        assert!(!n.try_acquire(), "a retired node cannot be acquired");
    }
}
