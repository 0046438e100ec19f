//! Pinned readers of a publication cell: a reader that announces the buffer it reads in
//! a slot of its own, so that loading a snapshot writes no cache line that other readers
//! write.
//!
//! A [`SnapshotReader::load`] registers itself in the cell's shared word (`current`): one
//! atomic increment to load and one compare-and-swap to return, on the one line that
//! every reading thread writes. Threads deciding at once then take turns owning that line.
//! A [`PinnedReader`] instead owns an *announcement slot* on a cache line of its own,
//! registered once with the cell (under the cell's registration lock, off the hot path).
//! Its [`load`](PinnedReader::load) reads `current`, announces that buffer in its slot,
//! and reads `current` again: if the buffer is still current, the announcement is in
//! place before the writer could retire it and look for readers; otherwise it announces
//! the new one and checks again. Returning the guard clears the slot. The writer counts a
//! buffer free only when no slot announces it, besides the split counts of ordinary
//! readers (module `publish`).
//!
//! # Orderings
//! The announcement and the writer's retirement form Dekker's pattern: the reader stores
//! its announcement, then loads `current`; the writer stores `current` (the publishing
//! `swap`), then loads the announcements (in its next [`begin`](crate::SnapshotWriter::begin)).
//! Each side puts a `fence(SeqCst)` between its store and its load. The two fences are
//! ordered one way or the other: if the reader's comes first, the writer's loads after its
//! own fence see the announcement (the buffer stays pinned); if the writer's comes first,
//! the reader's load of `current` after its fence sees the new index and the reader
//! announces again. So a reader never reads a buffer the writer has counted free.
//! * The announcement and the clearing are `Release` stores; the writer loads slots with
//!   `Acquire`. A load that reads a clearing, or any later announcement by the same reader
//!   (also `Release`, and after the clearing in the reader's program order), synchronises
//!   with it, so the reader's accesses to the buffer happen-before the writer rewrites it.
//! * The reader's loads of `current` are `Acquire`: the validating load reads the
//!   publishing `swap` of its buffer (or a later read-modify-write of an ordinary reader,
//!   which continues its release sequence), so the buffer's contents happen-before the
//!   reader's accesses.
//! * loom gives `SeqCst` loads and stores no more than acquire and release, but models
//!   `SeqCst` fences (more strongly than the language does: each fence happens-after every
//!   earlier one, which the argument above does not use); the protocol uses the fences, so
//!   the models (`loom_models/snapshot.rs`, `loom_pinned_reader_never_sees_a_reused_buffer`
//!   and `loom_pinned_and_plain_readers_with_a_reader_dropped`) check it as it runs: both
//!   fail with the reader's fence weakened to `AcqRel`, the first with the publisher's too.
//! * A dropped reader's slot is removed by the writer (or by the next registration) after a
//!   `fence(Acquire)` that pairs with the reader's `Release` decrement of the slot's count
//!   (module `publish`, Orderings).
//!
//! # Limitations
//! A pinned reader has one slot, so one guard at a time (`load` takes `&mut self`). A
//! reader that loads in a loop while the writer publishes faster than it validates retries
//! (lock-free, not wait-free); publications come at the telemetry thread's pace. Slots of
//! dropped readers are removed by the writer's next `begin` and by the next registration,
//! so the list stays at the live readers plus those dropped since. A guard forgotten with
//! `mem::forget` keeps its buffer pinned until its reader is dropped.

use core::fmt;
use core::ops::Deref;

use kvroute_core::sync::Arc;
use kvroute_core::sync::atomic::{AtomicU64, Ordering, fence};
use kvroute_core::sync::cell::ConstPtr;

use crate::publish::{Shared, SnapshotReader, index_of};

/// One reader's announcement: 0, or the index of the buffer it reads plus 1. On a line of
/// its own.
#[repr(align(64))]
pub(crate) struct Announce(AtomicU64);

impl Announce {
    pub(crate) fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    /// Whether this slot announces buffer `index` (`Acquire`; module docs).
    pub(crate) fn holds(&self, index: usize) -> bool {
        self.0.load(Ordering::Acquire) == index as u64 + 1
    }
}

/// A reader of a publication cell with an announcement slot of its own, on a cache line of
/// its own: its [`load`](Self::load) stores the index of the buffer it reads there, runs a
/// `SeqCst` fence and reads the cell's index again, and the cell's writer counts a buffer
/// free only when no slot announces it. So loading writes no cache line other readers
/// write, whereas [`SnapshotReader::load`] increments the cell's one shared word (and its
/// guard's return decrements it). For a thread that loads many times.
///
/// Costs: registering (in [`SnapshotReader::pinned`]) takes the cell's registration lock
/// and scans the registered slots, as every [`SnapshotWriter::begin`](crate::SnapshotWriter::begin)
/// does, so both take time in proportion to the pinned readers alive; a load is a store
/// and a fence on the reader's own line (2.2 ns on the machine of `docs/BENCHMARKS.md`,
/// "2026-12-07: batched lane maps; pinned snapshot readers, reservation leases", against
/// 6.2 ns for a `SnapshotReader` on one thread).
///
/// Limitations: one guard at a time ([`load`](Self::load) takes `&mut self`); a load
/// retries while the writer publishes between its two reads of the index (lock-free, not
/// wait-free; publications come at the telemetry thread's pace); a guard forgotten with
/// `mem::forget` keeps its buffer from reuse until the reader is dropped. A dropped
/// reader's slot is removed at the writer's next `begin` and at the next registration.
/// Keeps the cell alive.
pub struct PinnedReader<T> {
    shared: Arc<Shared<T>>,
    slot: Arc<Announce>,
}

impl<T> fmt::Debug for PinnedReader<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedReader").finish_non_exhaustive()
    }
}

impl<T: Send + Sync> SnapshotReader<T> {
    /// A reader with its own announcement slot, registered with the cell (takes the
    /// cell's registration lock once; the slot is unregistered by the writer after the
    /// reader is dropped). Its loads write only that slot's cache line (module
    /// `pinned`).
    pub fn pinned(&self) -> PinnedReader<T> {
        let slot = Arc::new(Announce::new());
        self.shared().register(slot.clone());
        PinnedReader {
            shared: self.shared().clone(),
            slot,
        }
    }
}

impl<T: Send + Sync> PinnedReader<T> {
    /// The current value, whole and consistent, pinned until the guard drops: an
    /// announcement in the reader's own slot, a `SeqCst` fence and a second read of the
    /// current index (again while the writer publishes in between). Never locks, never
    /// waits for the writer.
    #[inline]
    pub fn load(&mut self) -> PinnedGuard<'_, T> {
        let current = &self.shared.current;
        let mut index = index_of(current.load(Ordering::Acquire));
        loop {
            self.slot.0.store(index as u64 + 1, Ordering::Release);
            fence(Ordering::SeqCst);
            let now = index_of(current.load(Ordering::Acquire));
            if now == index {
                break;
            }
            index = now;
        }
        PinnedGuard {
            ptr: self.shared.buffers[index].value.get(),
            reader: self,
        }
    }
}

/// A pinned, immutable published value read through a [`PinnedReader`]; dereferences to
/// `T`. Returning it (drop) is one plain store to the reader's own slot.
pub struct PinnedGuard<'r, T> {
    reader: &'r PinnedReader<T>,
    ptr: ConstPtr<T>,
}

impl<T> Deref for PinnedGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: (1) the buffer was filled before the publication whose `swap` the
        // reader's validating `Acquire` load of `current` read (or a read-modify-write in
        // its release sequence), so its contents happen-before this access; (2) the
        // reader's slot announces the buffer from before that load until this guard drops,
        // and the writer never counts an announced buffer free (module docs, Dekker's
        // pattern), so it does not write the buffer while the guard lives, and the
        // returned reference cannot outlive the guard; (3) the reader keeps the cell alive.
        unsafe { self.ptr.deref() }
    }
}

impl<T> fmt::Debug for PinnedGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedGuard").finish_non_exhaustive()
    }
}

impl<T> Drop for PinnedGuard<'_, T> {
    fn drop(&mut self) {
        self.reader.slot.0.store(0, Ordering::Release);
    }
}

#[cfg(all(test, not(kvroute_loom)))]
mod tests {
    use crate::{PublishError, snapshot_cell};

    /// Two buffers: a pinned guard on the buffer the writer retires keeps it from being
    /// reused until the guard drops, as an ordinary guard does.
    #[test]
    fn a_pinned_guard_keeps_its_buffer_from_reuse() {
        let (mut w, r) = snapshot_cell(2, |i| i as u64).unwrap();
        let mut pin = r.pinned();
        let g = pin.load(); // buffer 0
        assert_eq!(*g, 0);
        let mut s = w.begin().expect("buffer 1 was never read");
        s.fill(|v| *v = 10);
        s.publish(); // buffer 1 current, buffer 0 retired but announced
        assert_eq!(*g, 0, "the guard keeps its publication");
        assert_eq!(w.begin().err(), Some(PublishError::AllBuffersPinned));
        drop(g);
        let mut s = w.begin().expect("the announcement was cleared");
        s.fill(|v| *v = 20);
        assert_eq!(s.publish(), 2);
        assert_eq!(*pin.load(), 20);
        assert_eq!(*r.load(), 20);
    }

    /// A pinned reader reads what an ordinary one reads, publication after publication,
    /// and announces nothing between loads.
    #[test]
    fn a_pinned_reader_reads_the_latest_publication() {
        let (mut w, r) = snapshot_cell(3, |_| 0u64).unwrap();
        let mut pin = r.pinned();
        for k in 1..=10u64 {
            let mut s = w.begin().expect("no buffer is held between loads");
            s.fill(|v| *v = k);
            s.publish();
            assert_eq!(*pin.load(), k);
            assert_eq!(*r.load(), k);
        }
    }

    /// A dropped pinned reader's slot leaves the cell at the writer's next `begin`; a live
    /// one's stays.
    #[test]
    fn a_dropped_pinned_reader_is_unregistered() {
        let (mut w, r) = snapshot_cell(2, |_| 0u64).unwrap();
        let kept = r.pinned();
        let gone = r.pinned();
        assert_eq!(r.shared().announced_len(), 2);
        drop(gone);
        let _ = w.begin().unwrap();
        assert_eq!(r.shared().announced_len(), 1);
        drop(kept);
        let _ = w.begin().unwrap();
        assert_eq!(r.shared().announced_len(), 0);
    }

    /// Without any `begin` (a writer that stopped publishing), registering removes the
    /// slots of readers dropped before: 10,000 readers made and dropped one after another
    /// leave one slot, not 10,000.
    #[test]
    fn registering_removes_the_slots_of_dropped_readers() {
        let (_w, r) = snapshot_cell(2, |_| 0u64).unwrap();
        for _ in 0..10_000 {
            drop(r.pinned());
        }
        let last = r.pinned();
        assert_eq!(r.shared().announced_len(), 1);
        drop(last);
    }

    /// A guard forgotten with `mem::forget` keeps its buffer pinned while its reader lives,
    /// and pins nothing once the reader is dropped (no guard of a dropped reader can exist).
    #[test]
    fn a_forgotten_guard_pins_its_buffer_until_its_reader_is_dropped() {
        let (mut w, r) = snapshot_cell(2, |_| 0u64).unwrap();
        let mut pin = r.pinned();
        core::mem::forget(pin.load()); // announces buffer 0
        let mut s = w.begin().expect("buffer 1 was never read");
        s.fill(|v| *v = 1);
        s.publish(); // buffer 0 retired, still announced
        assert_eq!(w.begin().err(), Some(PublishError::AllBuffersPinned));
        drop(pin);
        let mut s = w.begin().expect("the dropped reader's slot pins nothing");
        s.fill(|v| *v = 2);
        s.publish();
        assert_eq!(*r.load(), 2);
    }
}
