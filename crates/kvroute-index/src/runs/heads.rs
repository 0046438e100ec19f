//! The head table: an open-addressing map from a run's first key to its current view,
//! written by the index's one writer and read without locks.
//!
//! Each slot holds a key and a view pointer. A key is written once, into an empty slot, and
//! stays until the next rebuild; a view is published by storing its pointer in its key's
//! slot, replaced by storing another, and unlinked by storing null (a *tombstone*: the key
//! stays, so probes for other keys still pass it, and only the same key can revive the
//! slot). Linear probing stops at the first empty key. When claimed keys pass 3/4 of the
//! slots, or live ones fall below 1/16 (never below the initial size), the writer rebuilds
//! the array at twice its live count, publishes it, and retires the old array: the writer
//! hands it to the epoch collector with the rest of its event's garbage (see `write`); a
//! reader that started on the old array finishes on it.
//!
//! # Orderings
//! * `key`: stored `Relaxed` before the slot's first view pointer; a reader that loads the
//!   key and then a null pointer treats the key as absent, which is a valid linearisation
//!   (the insert has not completed).
//! * `view`: stored with `Release` after the view (and the keys it points to) are fully
//!   written; readers load it with `Acquire`, so they see them. Replaced or unlinked views
//!   are freed by the writer through the epoch collector, after every reader that could
//!   have loaded the pointer has unpinned.
//! * `array`: published with `Release` after the new array is fully written; readers load
//!   it with `Acquire`. The writer is the only thread that stores it, so its own loads are
//!   `Relaxed`.
//!
//! The loom models in `loom_models/runs.rs` race a reader against an append in place, a
//! new child run, a split, an unlink and a rebuild; with `view` or `array` weakened to
//! `Relaxed` on both sides, loom reports the reader reaching a view or an array that is
//! not yet written (a causality violation on the cell each carries in loom builds).

use core::ptr;
use kvroute_core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use super::epoch::Guard;

use super::view::ViewHead;

/// An empty slot's key; a real key of 0 is stored as [`ZERO_STAND_IN`].
const EMPTY: u64 = 0;
const ZERO_STAND_IN: u64 = 0x9e37_79b9_7f4a_7c15;

#[inline]
fn slot_key(key: u64) -> u64 {
    if key == EMPTY { ZERO_STAND_IN } else { key }
}

struct Slot {
    key: AtomicU64,
    view: AtomicPtr<ViewHead>,
}

struct Array {
    slots: Box<[Slot]>,
    mask: usize,
    /// Loom builds only: written by `new`, read by every reader of the array (see
    /// `ViewHead::check_built`).
    #[cfg(kvroute_loom)]
    built: kvroute_core::sync::cell::UnsafeCell<usize>,
}

impl Array {
    fn new(cap: usize) -> Box<Self> {
        debug_assert!(cap.is_power_of_two());
        Box::new(Self {
            slots: (0..cap)
                .map(|_| Slot {
                    key: AtomicU64::new(EMPTY),
                    view: AtomicPtr::new(ptr::null_mut()),
                })
                .collect(),
            mask: cap - 1,
            #[cfg(kvroute_loom)]
            built: kvroute_core::sync::cell::UnsafeCell::new(cap),
        })
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        // Keys are hashes already; a Fibonacci multiply spreads the ones a caller made up.
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20) as usize & self.mask
    }
}

/// Heap bytes of an array of `cap` slots.
fn array_bytes(cap: usize) -> usize {
    core::mem::size_of::<Array>() + cap * core::mem::size_of::<Slot>()
}

/// A [`Heads::set`] refused: another run is linked under the key (two runs with one first
/// key, which only input that breaks the chain property can make).
#[derive(Debug)]
pub(crate) struct Taken;

/// The head table; see the module docs.
pub(crate) struct Heads {
    array: AtomicPtr<Array>,
}

/// The head table's writer-only counts, kept in the writer's state (under the index's
/// writer lock): claimed keys, live views, the initial capacity, and the arrays replaced
/// by rebuilds that the writer has not yet handed to the epoch collector.
#[derive(Debug)]
pub(crate) struct HeadCounts {
    used: usize,
    live: usize,
    min_cap: usize,
    /// Replaced arrays: (pointer from `Box::into_raw`, heap bytes), freed with
    /// [`free_array`] once no reader can use them.
    pub(crate) retired: Vec<(usize, usize)>,
}

/// Frees an array that a rebuild replaced (an entry of [`HeadCounts::retired`]).
///
/// # Safety
/// `p` is the pointer of a `retired` entry, freed once, with no reader left on it.
pub(crate) unsafe fn free_array(p: usize) {
    // SAFETY: the caller's contract; `p` came from `Box::into_raw`.
    unsafe { drop(Box::from_raw(p as *mut Array)) };
}

// SAFETY: the array is reached through an atomic pointer and freed through the epoch
// collector (or by `drop`, with exclusive access).
unsafe impl Send for Heads {}
// SAFETY: every `&self` method only uses atomics; the writer methods are called by one
// thread at a time (the holder of the writer lock, which owns the `HeadCounts`).
unsafe impl Sync for Heads {}

impl Heads {
    /// A table of at least `expected` keys, and its writer counts.
    pub(crate) fn new(expected: usize) -> (Self, HeadCounts) {
        let cap = (expected.max(4) * 2).next_power_of_two();
        let heads = Self {
            array: AtomicPtr::new(Box::into_raw(Array::new(cap))),
        };
        (
            heads,
            HeadCounts {
                used: 0,
                live: 0,
                min_cap: cap,
                retired: Vec::new(),
            },
        )
    }

    /// The view of the run whose first key is `key`, if one is linked. Keys 0 and
    /// [`ZERO_STAND_IN`] share a slot, so for either the view found may be the other's run:
    /// a caller compares the run's first key (the walk's key compare does; the writer's
    /// `place` checks it).
    #[inline]
    pub(crate) fn find<'g>(&self, key: u64, _guard: &'g Guard) -> Option<&'g ViewHead> {
        let k = slot_key(key);
        // SAFETY: the array is freed only through the epoch collector, after every reader
        // pinned when it was retired (this one holds `_guard`) has unpinned.
        let a = unsafe { &*self.array.load(Ordering::Acquire) };
        #[cfg(kvroute_loom)]
        // SAFETY: the cell is written only by `Array::new`, before the array is published.
        assert_eq!(unsafe { *a.built.get().deref() }, a.slots.len());
        let mut i = a.home(k);
        loop {
            let s = &a.slots[i];
            let sk = s.key.load(Ordering::Relaxed);
            if sk == k {
                let v = s.view.load(Ordering::Acquire);
                // SAFETY: a non-null pointer is a published view, freed only through the
                // epoch collector after this reader unpins.
                let v = unsafe { v.as_ref() };
                if let Some(v) = v {
                    v.check_built();
                }
                return v;
            }
            if sk == EMPTY {
                return None;
            }
            i = (i + 1) & a.mask;
        }
    }

    /// Starts loading the slot where a [`find`](Self::find) of `key` begins.
    #[inline]
    pub(crate) fn prefetch(&self, key: u64, _guard: &Guard) {
        // SAFETY: as in `find`: the array outlives the reader's pin.
        let a = unsafe { &*self.array.load(Ordering::Acquire) };
        let i = a.home(slot_key(key));
        crate::index::table::prefetch_read(core::ptr::from_ref(&a.slots[i]).cast());
    }

    /// Writer: the slot index of `key` in the current array, or the empty slot where it
    /// would go.
    fn probe(a: &Array, k: u64) -> (usize, bool) {
        let mut i = a.home(k);
        loop {
            let sk = a.slots[i].key.load(Ordering::Relaxed);
            if sk == k {
                return (i, true);
            }
            if sk == EMPTY {
                return (i, false);
            }
            i = (i + 1) & a.mask;
        }
    }

    fn current(&self) -> &Array {
        // SAFETY: only the writer (the holder of the writer lock, which every caller of
        // this is) swaps the array, so the one it loads stays allocated while it uses it.
        unsafe { &*self.array.load(Ordering::Relaxed) }
    }

    /// Writer: publishes `view` as the view of the run starting at `key`, returning the
    /// view it replaces (null if none). The caller frees a replaced view through the epoch
    /// collector.
    pub(crate) fn set(
        &self,
        c: &mut HeadCounts,
        key: u64,
        view: *mut ViewHead,
    ) -> Result<*mut ViewHead, Taken> {
        let k = slot_key(key);
        if (c.used + 1) * 4 > self.current().slots.len() * 3 {
            self.rebuild(c, ((c.live + 1) * 4).next_power_of_two());
        }
        let a = self.current();
        let (i, found) = Self::probe(a, k);
        let s = &a.slots[i];
        if found {
            let cur = s.view.load(Ordering::Relaxed);
            // SAFETY: a linked view of this writer (only it links and frees views), and
            // `view` is the caller's fresh one.
            if !cur.is_null() && unsafe { (*cur).run != (*view).run } {
                return Err(Taken);
            }
        } else {
            s.key.store(k, Ordering::Relaxed);
            c.used += 1;
        }
        let old = s.view.swap(view, Ordering::AcqRel);
        if old.is_null() {
            c.live += 1;
        }
        Ok(old)
    }

    /// Writer: unlinks the view of the run starting at `key`, returning it (null if none).
    /// The caller frees it through the epoch collector.
    pub(crate) fn unlink(&self, c: &mut HeadCounts, key: u64, run: u32) -> *mut ViewHead {
        let k = slot_key(key);
        let a = self.current();
        let (i, found) = Self::probe(a, k);
        if !found {
            return ptr::null_mut();
        }
        let cur = a.slots[i].view.load(Ordering::Relaxed);
        // SAFETY: a linked view of this writer (only it links and frees views).
        if cur.is_null() || unsafe { (*cur).run } != run {
            // Another run's view (or none): not this run's to unlink.
            return ptr::null_mut();
        }
        let old = a.slots[i].view.swap(ptr::null_mut(), Ordering::AcqRel);
        if !old.is_null() {
            c.live -= 1;
            let cap = a.slots.len();
            if c.live * 16 < cap && cap > c.min_cap {
                let want = ((c.live + 1) * 4).next_power_of_two();
                self.rebuild(c, want);
            }
        }
        old
    }

    /// Writer: copies the live slots into a fresh array of `cap` slots and retires the old
    /// (into `c.retired`, for the writer to hand to the epoch collector).
    fn rebuild(&self, c: &mut HeadCounts, cap: usize) {
        let cap = cap.max(c.min_cap);
        let new = Array::new(cap);
        let old = self.current();
        let mut live = 0;
        for s in old.slots.iter() {
            let v = s.view.load(Ordering::Relaxed);
            if v.is_null() {
                continue;
            }
            let k = s.key.load(Ordering::Relaxed);
            let (i, _) = Self::probe(&new, k);
            new.slots[i].key.store(k, Ordering::Relaxed);
            new.slots[i].view.store(v, Ordering::Relaxed);
            live += 1;
        }
        c.used = live;
        c.live = live;
        let old = self.array.swap(Box::into_raw(new), Ordering::AcqRel);
        // `old` is no longer reachable for new readers; readers pinned now finish before
        // the collector runs the writer's garbage batch that frees it.
        // SAFETY: `old` came from `Box::into_raw` and stays allocated until that batch.
        let bytes = array_bytes(unsafe { &*old }.slots.len());
        c.retired.push((old as usize, bytes));
    }

    /// Heap bytes of the current array.
    pub(crate) fn heap_bytes(&self) -> usize {
        array_bytes(self.current().slots.len())
    }
}

impl Drop for Heads {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader or writer uses the table any more; the array came
        // from `Box::into_raw`. The views are freed by the index, which owns them.
        unsafe { drop(Box::from_raw(self.array.load(Ordering::Relaxed))) };
    }
}
