//! The node table: an open-addressing hash table from chained block hash to node, with
//! lock-free lookups and a growable, shrinkable slot array.
//!
//! Each slot holds a key and a node pointer. Keys are claimed once (CAS from empty) and stay
//! until the next resize; a node is linked by storing its pointer in its key's slot and
//! unlinked by CASing that pointer back to null, so no chain surgery is ever needed and
//! lookups compare keys without touching nodes. Linear probing stops at the first empty key.
//!
//! # Writers and resizing
//! Writers (inserts and unlinks) hold one of [`GATES`] reader-writer *gates* in shared mode
//! for the length of an event; a resize takes every gate exclusively, so it sees a quiescent
//! array, copies the live (key, node) pairs into a new one sized for them, publishes it, and
//! retires the old array through the epoch collector. Readers never take a gate: a match
//! that started on the old array finishes on it (nodes are shared, so it sees every bit
//! change; it can only miss nodes inserted after the switch). The array grows when claimed
//! keys (live and dead) pass 3/4 of the slots and shrinks when live nodes fall below 1/16,
//! never below the configured initial size, so memory returns to its baseline after every
//! worker clears.
//!
//! # Orderings
//! * `key`: claimed with a CAS (`AcqRel`/`Acquire`); readers load it with `Acquire`. A key
//!   claimed but without a node yet reads as absent, which is a valid linearisation (the
//!   insert has not completed).
//! * `node`: published with a CAS (`AcqRel`) after the node is fully initialised; readers
//!   load it with `Acquire`, so they see the node's key, holder count and words. Unlink CASes
//!   it to null (`AcqRel`); the node is freed through the epoch collector only after every
//!   reader that could have loaded the pointer has unpinned.
//! * `array`: published with `Release` after the new array is fully written (under every
//!   gate, so no writer races the copy); readers load it with `Acquire`. The old array is
//!   retired through the epoch collector.
//! * `used` and `live`: `Relaxed` counters that only drive resize decisions; the resize
//!   recomputes `live` exactly under the gates.

use core::ptr;

use kvroute_core::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use kvroute_core::sync::{RwLock, RwLockReadGuard};

use super::node::{self as node, Head, Node};
use kvroute_core::sync::Arc;

use super::reclaim::{Guard, NodeMemory, Parked};

/// Writer gates; a writer uses gate `slot % GATES`.
#[cfg(not(kvroute_loom))]
pub(crate) const GATES: usize = 64;
/// Writer gates (two under loom, to keep the models small).
#[cfg(kvroute_loom)]
pub(crate) const GATES: usize = 2;

/// An empty slot's key. A real chained hash of 0 is stored under [`ZERO_STAND_IN`] instead
/// (a 2^-64 event that then behaves like any other hash collision).
const EMPTY: u64 = 0;
const ZERO_STAND_IN: u64 = 0x9e37_79b9_7f4a_7c15;

#[inline]
fn slot_key(key: u64) -> u64 {
    if key == EMPTY { ZERO_STAND_IN } else { key }
}

struct Slot {
    key: AtomicU64,
    /// The node's thin pointer (see `node`), or null.
    node: AtomicPtr<Head>,
}

struct Array {
    slots: Box<[Slot]>,
    mask: usize,
}

impl Array {
    fn new(capacity: usize) -> Self {
        debug_assert!(capacity.is_power_of_two());
        Self {
            slots: (0..capacity)
                .map(|_| Slot {
                    key: AtomicU64::new(EMPTY),
                    node: AtomicPtr::new(ptr::null_mut()),
                })
                .collect(),
            mask: capacity - 1,
        }
    }

    fn capacity(&self) -> usize {
        self.slots.len()
    }
}

/// Heap bytes of an array of `cap` slots: its boxed record and its slots.
fn array_bytes(cap: usize) -> usize {
    core::mem::size_of::<Array>() + cap * core::mem::size_of::<Slot>()
}

/// Whether claiming one more key in an array of `cap` slots would pass 3/4 full.
fn needs_grow(used: usize, cap: usize) -> bool {
    (used + 1) * 4 > cap * 3
}

/// Whether `live` nodes fill less than 1/16 of `cap` slots, above the minimum size.
fn needs_shrink(live: usize, cap: usize, min: usize) -> bool {
    live * 16 < cap && cap > min
}

/// Slots needed for `live` nodes right after a resize: at most 3/8 full.
fn capacity_for(live: usize, min: usize) -> usize {
    (live * 8 / 3 + 1).next_power_of_two().max(min)
}

pub(crate) struct Table {
    array: AtomicPtr<Array>,
    /// Keys claimed in the current array (live and dead).
    used: AtomicUsize,
    /// Slots of the current array whose node pointer is non-null.
    live: AtomicUsize,
    min_capacity: usize,
    gates: Box<[RwLock<()>]>,
    mix: u64,
    /// Bit words of every node of this table (`worker_slots.div_ceil(64)`).
    pub(crate) words: u32,
    resizes: AtomicU64,
    /// Nodes allocated and garbage waiting for the collector (shared with the batches it
    /// defers, which may run after the table is gone).
    mem: Arc<NodeMemory>,
    parked: Parked,
}

impl Table {
    /// A table sized for `expected` nodes (never shrinking below that), whose nodes carry
    /// `words` bit words each (at least 1).
    pub(crate) fn new(expected: usize, words: u32, mix: u64) -> Self {
        Self::with_floor(expected, 16, words, mix)
    }

    /// As [`Table::new`], with the smallest array size given (a power of two).
    pub(crate) fn with_floor(expected: usize, floor: usize, words: u32, mix: u64) -> Self {
        debug_assert!(words >= 1);
        let min_capacity = capacity_for(expected, floor);
        Self {
            array: AtomicPtr::new(Box::into_raw(Box::new(Array::new(min_capacity)))),
            used: AtomicUsize::new(0),
            live: AtomicUsize::new(0),
            min_capacity,
            gates: (0..GATES).map(|_| RwLock::new(())).collect(),
            mix: mix | 1,
            words,
            resizes: AtomicU64::new(0),
            mem: NodeMemory::new(words as usize),
            parked: Parked::default(),
        }
    }

    #[inline]
    fn home(&self, key: u64, mask: usize) -> usize {
        ((key ^ (key >> 29)).wrapping_mul(self.mix) >> 32) as usize & mask
    }

    #[inline]
    fn current<'g>(&self, _guard: &'g Guard) -> &'g Array {
        // SAFETY: `array` always points to a live array allocated with `Box::into_raw`;
        // a replaced array is retired through the epoch collector, and the caller's guard
        // was pinned before this load, so the array outlives `'g`.
        unsafe { &*self.array.load(Ordering::Acquire) }
    }

    /// The live node for `key`, if any. The reference is valid while `guard` is pinned.
    #[cfg(all(test, kvroute_loom))]
    pub(crate) fn find<'g>(&'g self, key: u64, guard: &'g Guard) -> Option<&'g Node> {
        self.view(guard).find(key)
    }

    /// A read-only view of the current array, for many lookups under one guard.
    #[inline]
    pub(crate) fn view<'g>(&'g self, guard: &'g Guard) -> View<'g> {
        View {
            table: self,
            arr: self.current(guard),
        }
    }

    /// Shared access for one writer's event; `gate_hint` spreads writers over gates.
    pub(crate) fn writer(&self, gate_hint: usize) -> Writer<'_> {
        let gate = gate_hint % GATES;
        Writer {
            table: self,
            gate,
            lock: Some(read(&self.gates[gate])),
        }
    }

    /// Number of resizes so far.
    pub(crate) fn resizes(&self) -> u64 {
        self.resizes.load(Ordering::Relaxed)
    }

    /// The count of this table's nodes and deferred garbage.
    pub(crate) fn memory(&self) -> &Arc<NodeMemory> {
        &self.mem
    }

    /// Heap bytes of the current slot array (its record and its slots), the gates and the
    /// memory count's record; nodes and deferred garbage are counted in [`Table::memory`].
    pub(crate) fn fixed_bytes(&self) -> usize {
        let guard = super::reclaim::pin();
        array_bytes(self.current(&guard).capacity())
            + GATES * core::mem::size_of::<RwLock<()>>()
            + NodeMemory::own_bytes()
    }

    /// Replaces the array by one sized for the live nodes. Takes every gate exclusively, so
    /// the caller must hold none.
    fn resize(&self, why: Resize) {
        let _all: Vec<_> = self
            .gates
            .iter()
            .map(|g| g.write().unwrap_or_else(|p| p.into_inner()))
            .collect();
        let guard = super::reclaim::pin();
        let old = self.current(&guard);
        // Another writer may have resized while we waited for the gates.
        let used = self.used.load(Ordering::Relaxed);
        let live = self.live.load(Ordering::Relaxed);
        let cap = old.capacity();
        let still_needed = match why {
            Resize::Grow => needs_grow(used, cap),
            Resize::Shrink => needs_shrink(live, cap, self.min_capacity),
            Resize::Full => used >= cap,
        };
        if !still_needed {
            return;
        }
        let mut pairs = Vec::with_capacity(live);
        for slot in old.slots.iter() {
            let p = slot.node.load(Ordering::Acquire);
            if !p.is_null() {
                pairs.push((slot.key.load(Ordering::Acquire), p));
            }
        }
        let new = Array::new(capacity_for(pairs.len(), self.min_capacity));
        for (k, p) in &pairs {
            let mut i = self.home(*k, new.mask);
            while new.slots[i].key.load(Ordering::Relaxed) != EMPTY {
                i = (i + 1) & new.mask;
            }
            new.slots[i].key.store(*k, Ordering::Relaxed);
            new.slots[i].node.store(*p, Ordering::Relaxed);
        }
        let old_ptr = self
            .array
            .swap(Box::into_raw(Box::new(new)), Ordering::AcqRel);
        self.used.store(pairs.len(), Ordering::Relaxed);
        self.live.store(pairs.len(), Ordering::Relaxed);
        self.resizes.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `old_ptr` came from `Box::into_raw`, was just replaced (so no reader that
        // pins from now on can load it), and only this resize, which holds every gate,
        // could replace it.
        unsafe { guard.retire(old_ptr, array_bytes(cap), &self.mem, &self.parked) };
    }
}

/// Lookups in one array under one pinned guard.
pub(crate) struct View<'g> {
    table: &'g Table,
    arr: &'g Array,
}

impl<'g> View<'g> {
    /// The live node for `key`, if any; see [`Table::find`].
    #[inline]
    pub(crate) fn find(&self, key: u64) -> Option<&'g Node> {
        let arr = self.arr;
        let want = slot_key(key);
        let mut i = self.table.home(want, arr.mask);
        for _ in 0..arr.slots.len() {
            let slot = &arr.slots[i];
            let k = slot.key.load(Ordering::Acquire);
            if k == want {
                let p = slot.node.load(Ordering::Acquire);
                // SAFETY: a non-null node pointer was published by CAS after the node was
                // initialised (by `alloc_acquired` with the table's word count) and is freed
                // only through the epoch collector after being unlinked; the guard this
                // view borrows was pinned before this load.
                return (!p.is_null())
                    .then(|| unsafe { Node::from_thin(p, self.table.words as usize) });
            }
            if k == EMPTY {
                return None;
            }
            i = (i + 1) & arr.mask;
        }
        // Every slot probed: the array is full (possible only transiently, see `Writer`).
        None
    }
}

/// A prefetch hint for the cache line at `p`; a no-op where no hint instruction is used.
#[inline(always)]
pub(crate) fn prefetch_read(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(kvroute_loom)))]
    {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: `_mm_prefetch` is a hint: it never faults, whatever the address, and
        // reads nothing architecturally; SSE is part of the x86_64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) };
    }
    #[cfg(not(all(target_arch = "x86_64", not(kvroute_loom))))]
    let _ = p;
}

/// Why a writer asks for a resize (rechecked once every gate is held).
#[derive(Clone, Copy)]
enum Resize {
    /// Claimed keys passed 3/4 of the slots.
    Grow,
    /// Live nodes fell below 1/16 of the slots.
    Shrink,
    /// A probe found no empty slot: writers racing past the 3/4 check filled the array.
    Full,
}

fn read(gate: &RwLock<()>) -> RwLockReadGuard<'_, ()> {
    // The gate guards no data (`()`), so a poisoned gate carries no broken invariant.
    gate.read().unwrap_or_else(|p| p.into_inner())
}

/// One writer's shared access to the table; see the module docs.
pub(crate) struct Writer<'t> {
    table: &'t Table,
    gate: usize,
    lock: Option<RwLockReadGuard<'t, ()>>,
}

impl Writer<'_> {
    /// Acquires the live node for `key` (one holder reference), inserting a new one when
    /// there is none. Returns the node and whether it was inserted.
    pub(crate) fn acquire_or_insert<'g>(&mut self, key: u64, guard: &'g Guard) -> (&'g Node, bool) {
        let t = self.table;
        let cap = t.current(guard).capacity();
        if needs_grow(t.used.load(Ordering::Relaxed), cap) {
            self.resize(Resize::Grow);
        }
        let want = slot_key(key);
        let slot = loop {
            match self.claim(want, guard) {
                Some(slot) => break slot,
                None => self.resize(Resize::Full),
            }
        };
        let words = t.words as usize;
        let mut fresh: *mut Head = ptr::null_mut();
        loop {
            let p = slot.node.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: published node, epoch-protected by `guard` (see `find`).
                let node = unsafe { Node::from_thin(p, words) };
                if node.try_acquire() {
                    if !fresh.is_null() {
                        // SAFETY: our own allocation (with the table's `mem`), never linked
                        // anywhere: every CAS that could publish it failed.
                        unsafe { node::free(fresh, &t.mem, guard) };
                    }
                    return (node, false);
                }
            }
            // Empty, or a retired node whose retirer has not unlinked it yet: replace it.
            if fresh.is_null() {
                fresh = node::alloc_acquired(key, &t.mem);
            }
            if slot
                .node
                .compare_exchange(p, fresh, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                if p.is_null() {
                    t.live.fetch_add(1, Ordering::Relaxed);
                }
                // SAFETY: just published, allocated with `words`; freed only through unlink
                // + the epoch collector, after `guard` is dropped.
                return (unsafe { Node::from_thin(fresh, words) }, true);
            }
        }
    }

    /// Asks the CPU to start loading `key`'s home slot (a hint; no effect on results).
    #[inline]
    pub(crate) fn prefetch(&self, key: u64, guard: &Guard) {
        let arr = self.table.current(guard);
        let i = self.table.home(slot_key(key), arr.mask);
        prefetch_read(ptr::from_ref(&arr.slots[i]).cast());
    }

    fn resize(&mut self, why: Resize) {
        self.lock = None;
        self.table.resize(why);
        self.lock = Some(read(&self.table.gates[self.gate]));
    }

    /// The slot holding `want` in the current array, claiming an empty one if the key is
    /// absent; `None` when every slot was probed without finding either.
    fn claim<'g>(&self, want: u64, guard: &'g Guard) -> Option<&'g Slot> {
        let t = self.table;
        let arr = t.current(guard);
        let mut i = t.home(want, arr.mask);
        for _ in 0..arr.slots.len() {
            let slot = &arr.slots[i];
            let mut k = slot.key.load(Ordering::Acquire);
            if k == EMPTY {
                match slot
                    .key
                    .compare_exchange(EMPTY, want, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => {
                        t.used.fetch_add(1, Ordering::Relaxed);
                        k = want;
                    }
                    Err(now) => k = now,
                }
            }
            if k == want {
                return Some(slot);
            }
            i = (i + 1) & arr.mask;
        }
        None
    }

    /// Unlinks a node the caller retired (its `release` returned `true`) and frees it after
    /// the grace period.
    ///
    /// # Safety
    /// `node` must be a node of this table that the caller retired, unlinked only once,
    /// and retired while holding this same writer (no resize in between).
    pub(crate) unsafe fn unlink(&mut self, node: &Node, guard: &Guard) {
        let t = self.table;
        let target = node.as_thin();
        let arr = t.current(guard);
        let want = slot_key(node.key);
        let mut i = t.home(want, arr.mask);
        loop {
            let slot = &arr.slots[i];
            let k = slot.key.load(Ordering::Acquire);
            if k == want {
                // Fails only if an inserter already replaced the retired node with a fresh
                // one; either way `target` is unreachable afterwards.
                if slot
                    .node
                    .compare_exchange(target, ptr::null_mut(), Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    t.live.fetch_sub(1, Ordering::Relaxed);
                }
                break;
            }
            debug_assert!(k != EMPTY, "retired node missing from the table");
            if k == EMPTY {
                break;
            }
            i = (i + 1) & arr.mask;
        }
        node.unlink_succ(guard);
        // SAFETY: allocated by `acquire_or_insert` with the table's word count; the table's
        // link owned one reference, and no slot of the current array points to it any more
        // (older arrays are only reachable by readers pinned before now); the caller
        // guarantees this is its only unlink, so the table's reference is dropped once.
        unsafe { node::drop_ref(target, guard) };
    }
}

impl Drop for Writer<'_> {
    fn drop(&mut self) {
        self.lock = None;
        let t = self.table;
        let guard = super::reclaim::pin();
        let cap = t.current(&guard).capacity();
        if needs_shrink(t.live.load(Ordering::Relaxed), cap, t.min_capacity) {
            drop(guard);
            t.resize(Resize::Shrink);
        }
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        let arr = self.array.load(Ordering::Acquire);
        let mem = &*self.mem;
        // SAFETY: `&mut self`: no reader or writer remains, so no thread can reach any node
        // (the preconditions of `drop_ref_now`); every node was allocated with `mem`. The
        // current array was allocated with `Box::into_raw` and is freed once here. One pass:
        // each linked node gives up its successor link, then its table reference. A node's
        // references are its table link and the successor links pointing at it; each is
        // released exactly once (a table node's link when the pass reaches it, a retired
        // node's link when that node is freed), so every node whose references all come from
        // the table or from nodes freed here is freed, whatever the order of the slots,
        // including nodes held whose links form a cycle (possible with caller-chosen
        // hashes).
        unsafe {
            for slot in (*arr).slots.iter() {
                let p = slot.node.load(Ordering::Acquire);
                if !p.is_null() {
                    let s = (*p).take_succ();
                    if !s.is_null() {
                        node::drop_ref_now(s, mem);
                    }
                    node::drop_ref_now(p, mem);
                }
            }
            drop(Box::from_raw(arr));
        }
    }
}
