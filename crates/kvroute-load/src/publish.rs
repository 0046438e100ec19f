//! A single-writer publication cell (read-copy-update over a fixed ring of buffers).
//!
//! One writer publishes immutable values of `T`; any number of readers load the current one.
//! A reader's [`SnapshotReader::load`] is one wait-free `fetch_add`; its guard's drop is a
//! compare-and-swap that retries only when another reader touched the cell at the same
//! instant, and never waits for the writer. The writer never waits for a reader either: when
//! every spare buffer is still held by a reader, [`SnapshotWriter::begin`] returns
//! [`PublishError::AllBuffersPinned`] and the caller retries at its next tick. (`begin` takes
//! the cell's registration lock to scan the pinned readers' slots, module `pinned`; a
//! reader holds it only while it registers, once per pinned reader.)
//!
//! # Why not `arc-swap` or `crossbeam-epoch`
//! Both are well kept, but neither can be explored by loom through kvroute's
//! `kvroute_core::sync` shim: their atomics are their own, so a model would only check the code
//! around them. This cell is ~200 lines over `kvroute_core::sync` atomics and a loom-checked
//! `UnsafeCell`, so the model "publish vs concurrent read" checks the real protocol. It
//! also fits the load snapshot better: buffers are reused in place (no allocation per
//! publication once the lanes are sized), memory is bounded by the buffer count, and a
//! buffer is reclaimed the moment its last reader leaves (no dependence on other threads
//! advancing an epoch).
//!
//! # Protocol (split reference counts)
//! * `current` packs the index of the current buffer (high 16 bits) and the number of guards
//!   taken on it *while it is current* and not yet returned (low 48 bits).
//! * A reader does `current.fetch_add(1)`: the returned word names the buffer, and the
//!   increment registers the reader, in one atomic step.
//! * The writer fills a *free* buffer, then `swap`s `current` to `(new, 0)`. The swap returns
//!   the old buffer's outstanding count `L`, which the writer adds to that buffer's own
//!   `refs`.
//! * A guard is returned either by decrementing `current` (if its buffer is still current:
//!   then its registration is still in the packed count) or, after a swap, by decrementing
//!   its buffer's `refs`. Before the writer's transfer `refs` may dip below zero; after it,
//!   `refs` equals the number of guards still out.
//! * A non-current buffer is free when its `refs` is zero (checked by the writer only, after
//!   its own transfer, so the transient negative values are never misread) and no pinned
//!   reader's slot announces it (module `pinned`).
//!
//! A buffer still held by a guard is never current again before that guard returns, because
//! it cannot be free; so "the index in `current` equals my buffer" proves that the guard's
//! registration is still in the packed count (no ABA).
//!
//! # Orderings
//! * `current.fetch_add(1, Acquire)` (reader) reads the writer's `swap(.., AcqRel)` or a later
//!   read-modify-write in its release sequence (every other reader operation on `current`
//!   is an RMW), so the buffer's contents, written before the swap, happen-before the read.
//! * Guard return on `current`: `compare_exchange(.., Release, Relaxed)`. The writer's next
//!   `swap` (acquire part) reads a value at or after it in modification order, so the
//!   reader's accesses happen-before the writer reuses the buffer. The failure ordering is
//!   relaxed: a failed attempt only re-reads.
//! * Guard return on `refs`: `fetch_sub(1, Release)`; the writer's `refs.load(Acquire)` that
//!   reads zero reads the last RMW of a release sequence containing every earlier return,
//!   so all those readers' accesses happen-before the buffer is rewritten.
//! * The writer's transfer `refs.fetch_add(L, AcqRel)` is an RMW, so it continues the release
//!   sequences of returns that came before it.
//! * Pinned readers (module `pinned`, which has the argument): `publish` runs a
//!   `fence(SeqCst)` after its `swap`, and `begin` loads every registered slot with `Acquire`
//!   before counting a buffer free. A slot whose reader is dropped (its `Arc` count read as
//!   1, `Relaxed` in std) is removed after a `fence(Acquire)`, which pairs with the reader's
//!   `Release` decrement of that count, so the dropped reader's accesses happen-before any
//!   later fill; a slot is removed so at every `begin` and at every registration, so the
//!   list holds at most the live pinned readers plus those dropped since the last of them.
//!   (Under loom, `strong_count` synchronises by itself, so the models do not show that
//!   fence missing.)
//! * `UnsafeCell` accesses are checked by loom under `--cfg kvroute_loom`.

use core::fmt;

use core::ops::Deref;
use kvroute_core::Nanos;

use kvroute_core::sync::atomic::{AtomicI64, AtomicU64, Ordering, fence};
use kvroute_core::sync::{Arc, Mutex};

use crate::pinned::Announce;

use kvroute_core::sync::cell::{ConstPtr, UnsafeCell};

const INDEX_SHIFT: u32 = 48;
const COUNT_MASK: u64 = (1 << INDEX_SHIFT) - 1;
/// Like `Arc`: more guards than this can only come from leaking guards in a loop; abort
/// before the count could carry into the index bits.
const MAX_GUARDS: u64 = 1 << 47;
/// Most buffers a cell may have (the index field is 16 bits).
pub const MAX_BUFFERS: usize = 1 << 16;

fn pack(index: usize, count: u64) -> u64 {
    ((index as u64) << INDEX_SHIFT) | count
}

/// Removes the slots whose pinned reader is dropped. No guard of such a reader exists (a
/// guard borrows its reader), so whatever its slot still announces (a forgotten guard's
/// buffer) pins nothing. The `Acquire` fence pairs with the reader's `Release` decrement of
/// the slot's count (module docs, Orderings).
fn prune(announced: &mut Vec<Arc<Announce>>) {
    announced.retain(|a| {
        if Arc::strong_count(a) > 1 {
            return true;
        }
        fence(Ordering::Acquire);
        false
    });
}

pub(crate) fn index_of(word: u64) -> usize {
    (word >> INDEX_SHIFT) as usize
}

pub(crate) struct Buffer<T> {
    /// Guards held on this buffer after it stopped being current, minus returns; see the
    /// module docs. Zero for a free buffer.
    refs: AtomicI64,
    pub(crate) value: UnsafeCell<T>,
}

pub(crate) struct Shared<T> {
    pub(crate) current: AtomicU64,
    pub(crate) buffers: Box<[Buffer<T>]>,
    /// The announcement slots of the pinned readers (module `pinned`), registered under
    /// this lock and scanned by the writer's `begin`.
    announced: Mutex<Vec<Arc<Announce>>>,
}

impl<T> Shared<T> {
    /// Registers a pinned reader's slot, removing the slots of dropped readers first.
    pub(crate) fn register(&self, slot: Arc<Announce>) {
        let mut announced = self.announced.lock().unwrap_or_else(|e| e.into_inner());
        prune(&mut announced);
        announced.push(slot);
    }

    /// Registered announcement slots (tests).
    #[cfg(test)]
    pub(crate) fn announced_len(&self) -> usize {
        self.announced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }
}

// SAFETY: `Shared` hands out `&T` to many threads (needs `T: Sync`) and moves `T` values
// between threads through buffer reuse (needs `T: Send`); every access to a buffer's value is
// ordered by the protocol in the module docs (and module `pinned` for pinned readers), so no
// `&T` coexists with the writer's `&mut T`.
unsafe impl<T: Send + Sync> Sync for Shared<T> {}
// SAFETY: as above; the atomics are `Send`, and the values are `Send`.
unsafe impl<T: Send + Sync> Send for Shared<T> {}

/// Errors of [`SnapshotWriter::begin`] and [`snapshot_cell`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PublishError {
    /// Every buffer other than the current one is still held by a reader; nothing was
    /// published. Retry later (readers hold guards for one decision, microseconds).
    AllBuffersPinned,
    /// [`snapshot_cell`] was asked for fewer than 2 or more than [`MAX_BUFFERS`] buffers.
    BadBufferCount(usize),
    /// The publication's time is further ahead of the publisher's clock (the latest time
    /// published) than `LoadConfig::max_clock_lead`: nothing was published.
    FromTheFuture {
        /// The time given (caller's clock).
        now: Nanos,
        /// The publisher's clock.
        clock: Nanos,
    },
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AllBuffersPinned => write!(f, "every spare snapshot buffer is still read"),
            Self::BadBufferCount(n) => {
                write!(f, "{n} buffers requested; need 2..={MAX_BUFFERS}")
            }
            Self::FromTheFuture { now, clock } => write!(
                f,
                "publication at {now} is too far ahead of the clock ({clock}); check the caller's clock"
            ),
        }
    }
}

impl std::error::Error for PublishError {}

/// Creates a publication cell of `buffers` buffers, each initialised by `init(i)`; buffer 0
/// is published first. Returns the single writer and a cloneable reader.
///
/// Memory: `buffers` values of `T` for the life of the cell. A reader holding a guard pins
/// one buffer; publication needs one free buffer besides the current one.
///
/// # Errors
/// [`PublishError::BadBufferCount`] unless `2 <= buffers <= MAX_BUFFERS`.
pub fn snapshot_cell<T: Send + Sync>(
    buffers: usize,
    mut init: impl FnMut(usize) -> T,
) -> Result<(SnapshotWriter<T>, SnapshotReader<T>), PublishError> {
    if !(2..=MAX_BUFFERS).contains(&buffers) {
        return Err(PublishError::BadBufferCount(buffers));
    }
    let buffers: Box<[Buffer<T>]> = (0..buffers)
        .map(|i| Buffer {
            refs: AtomicI64::new(0),
            value: UnsafeCell::new(init(i)),
        })
        .collect();
    let shared = Arc::new(Shared {
        current: AtomicU64::new(pack(0, 0)),
        buffers,
        announced: Mutex::new(Vec::new()),
    });
    Ok((
        SnapshotWriter {
            shared: shared.clone(),
            current: 0,
            publications: 0,
        },
        SnapshotReader { shared },
    ))
}

/// The single writer of a cell (not `Clone`).
pub struct SnapshotWriter<T> {
    shared: Arc<Shared<T>>,
    /// Index of the current buffer (only the writer changes it).
    current: usize,
    /// Publications so far (the initial value is publication 0).
    publications: u64,
}

impl<T> fmt::Debug for SnapshotWriter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotWriter")
            .field("current", &self.current)
            .field("publications", &self.publications)
            .finish()
    }
}

impl<T: Send + Sync> SnapshotWriter<T> {
    /// Claims a free buffer to fill. The buffer still holds whatever an earlier publication
    /// left in it (reuse its allocations). Nothing is visible to readers until
    /// [`Staged::publish`]; dropping the [`Staged`] publishes nothing.
    ///
    /// # Errors
    /// [`PublishError::AllBuffersPinned`] when every non-current buffer is held by a reader.
    pub fn begin(&mut self) -> Result<Staged<'_, T>, PublishError> {
        let n = self.shared.buffers.len();
        let mut announced = self
            .shared
            .announced
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        prune(&mut announced);
        // Prefer the buffer after the current one, so buffers rotate and a just-retired one
        // (most likely still read) is tried last. A buffer is free when no ordinary guard
        // holds it and no pinned reader announces it (module `pinned`: this `begin` comes
        // after the `fence(SeqCst)` of the `publish` that retired it).
        let free = (1..n)
            .map(|k| (self.current + k) % n)
            .find(|&i| {
                self.shared.buffers[i].refs.load(Ordering::Acquire) == 0
                    && !announced.iter().any(|a| a.holds(i))
            })
            .ok_or(PublishError::AllBuffersPinned)?;
        drop(announced);
        Ok(Staged {
            writer: self,
            index: free,
        })
    }

    /// Number of publications so far (the initial buffer counts as 0).
    pub fn publications(&self) -> u64 {
        self.publications
    }

    /// A new reader of this cell.
    pub fn reader(&self) -> SnapshotReader<T> {
        SnapshotReader {
            shared: self.shared.clone(),
        }
    }
}

/// A claimed, not yet visible buffer; see [`SnapshotWriter::begin`].
pub struct Staged<'w, T> {
    writer: &'w mut SnapshotWriter<T>,
    index: usize,
}

impl<T> fmt::Debug for Staged<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Staged")
            .field("index", &self.index)
            .finish()
    }
}

impl<T: Send + Sync> Staged<'_, T> {
    /// Runs `fill` with exclusive access to the claimed buffer.
    pub fn fill<R>(&mut self, fill: impl FnOnce(&mut T) -> R) -> R {
        let buffer = &self.writer.shared.buffers[self.index];
        buffer.value.with_mut(|p| {
            // SAFETY: (1) the buffer is not current, so no reader can newly acquire it (readers
            // only acquire the index in `current`, and only this writer changes `current`);
            // (2) its `refs` read zero with Acquire after the writer's own transfer, so every
            // ordinary guard ever taken on it was returned, and those readers' accesses
            // happen-before this write (module docs, Orderings); (3) `begin` found no
            // registered slot announcing it, after the `fence(SeqCst)` of the `publish` that
            // retired it, so no pinned reader reads it or can validate it before it is current
            // again, and the readers that announced it before happen-before this write
            // (module `pinned`, Orderings; a dropped reader's slot is removed only after the
            // `fence(Acquire)` of the Orderings above); (4) `&mut self` on the only writer
            // excludes another writer. `p` comes from a live cell, so it is non-null and
            // aligned.
            fill(unsafe { &mut *p })
        })
    }

    /// Makes the filled buffer current and retires the previous one. Returns the new
    /// publication number (1 for the first publication after the initial value).
    pub fn publish(self) -> u64 {
        let w = self.writer;
        let old = w.shared.current.swap(pack(self.index, 0), Ordering::AcqRel);
        let old_index = index_of(old);
        debug_assert_eq!(old_index, w.current, "only the writer changes `current`");
        let outstanding = (old & COUNT_MASK) as i64;
        // Transfer the guards registered while the old buffer was current; from here its
        // `refs` counts exactly the guards still out on it.
        w.shared.buffers[old_index]
            .refs
            .fetch_add(outstanding, Ordering::AcqRel);
        // Between the store that retired the old buffer and the next `begin`'s loads of
        // the pinned readers' announcements (module `pinned`, Dekker's pattern).
        fence(Ordering::SeqCst);
        w.current = self.index;
        w.publications += 1;
        w.publications
    }
}

/// A cloneable handle that loads the current value of a cell.
pub struct SnapshotReader<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for SnapshotReader<T> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<T> fmt::Debug for SnapshotReader<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotReader").finish_non_exhaustive()
    }
}

impl<T> SnapshotReader<T> {
    /// The cell.
    pub(crate) fn shared(&self) -> &Arc<Shared<T>> {
        &self.shared
    }
}

impl<T: Send + Sync> SnapshotReader<T> {
    /// The current value, whole and consistent, pinned until the guard drops. One
    /// wait-free atomic increment; never locks, never waits for the writer.
    ///
    /// Hold the guard for one decision: while held, its buffer cannot be reused, and a
    /// writer that finds every spare buffer pinned skips its publication.
    ///
    /// # Aborts
    /// The process aborts (like `Arc`'s count overflow) if more than 2^47 guards are
    /// outstanding on one publication, which only leaking guards in a loop can cause.
    pub fn load(&self) -> SnapshotGuard<'_, T> {
        let word = self.shared.current.fetch_add(1, Ordering::Acquire);
        if word & COUNT_MASK >= MAX_GUARDS {
            std::process::abort();
        }
        let index = index_of(word);
        let buffer = &self.shared.buffers[index];
        SnapshotGuard {
            shared: &self.shared,
            index,
            ptr: buffer.value.get(),
        }
    }
}

/// A pinned, immutable published value; dereferences to `T`. Returning it (drop) is one
/// compare-and-swap or one `fetch_sub`.
pub struct SnapshotGuard<'r, T> {
    shared: &'r Shared<T>,
    index: usize,
    ptr: ConstPtr<T>,
}

impl<T> Deref for SnapshotGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: (1) the buffer was filled before the publication this guard acquired, and
        // the guard's Acquire `fetch_add` synchronises with that publication; (2) the guard's
        // registration keeps the buffer from being free (it is current, or its `refs` is
        // positive after the transfer), so the writer does not write it until this guard is
        // dropped, and the returned reference cannot outlive the guard; (3) `self.shared` is
        // borrowed from a reader that keeps the cell alive.
        unsafe { self.ptr.deref() }
    }
}

impl<T> fmt::Debug for SnapshotGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotGuard")
            .field("buffer", &self.index)
            .finish_non_exhaustive()
    }
}

impl<T> Drop for SnapshotGuard<'_, T> {
    fn drop(&mut self) {
        let current = &self.shared.current;
        let mut word = current.load(Ordering::Relaxed);
        while index_of(word) == self.index {
            // Still current: our registration is in the packed count (module docs), so the
            // count is at least 1 and the decrement cannot borrow from the index bits.
            debug_assert!(word & COUNT_MASK >= 1);
            match current.compare_exchange_weak(
                word,
                word - 1,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => word = now,
            }
        }
        // Retired: the writer transfers (or has transferred) our registration to `refs`.
        self.shared.buffers[self.index]
            .refs
            .fetch_sub(1, Ordering::Release);
    }
}

#[cfg(all(test, not(kvroute_loom)))]
mod tests {
    use super::*;

    #[test]
    fn bad_buffer_counts_are_rejected() {
        assert_eq!(
            snapshot_cell(1, |i| i).err(),
            Some(PublishError::BadBufferCount(1))
        );
        assert_eq!(
            snapshot_cell(MAX_BUFFERS + 1, |i| i).err(),
            Some(PublishError::BadBufferCount(MAX_BUFFERS + 1))
        );
    }

    #[test]
    fn readers_see_the_latest_publication_and_old_guards_keep_theirs() {
        let (mut w, r) = snapshot_cell(3, |i| vec![i as u32; 4]).unwrap();
        assert_eq!(*r.load(), vec![0, 0, 0, 0]);
        let old = r.load();
        let mut staged = w.begin().unwrap();
        staged.fill(|v| v.iter_mut().for_each(|x| *x = 7));
        assert_eq!(staged.publish(), 1);
        assert_eq!(*r.load(), vec![7, 7, 7, 7]);
        assert_eq!(*old, vec![0, 0, 0, 0], "a guard keeps its publication");
        drop(old);
    }

    #[test]
    fn pinned_buffers_block_publication_until_released() {
        // Two buffers: the current one and one spare.
        let (mut w, r) = snapshot_cell(2, |i| i).unwrap();
        let mut s = w.begin().unwrap();
        s.fill(|v| *v = 10);
        s.publish(); // buffer 1 current, buffer 0 retired and free (no guard).
        let pin = r.load(); // pins buffer 1
        let mut s = w.begin().unwrap(); // buffer 0 is free
        s.fill(|v| *v = 20);
        s.publish(); // buffer 0 current; buffer 1 retired, pinned by `pin`
        assert_eq!(*pin, 10);
        assert_eq!(w.begin().err(), Some(PublishError::AllBuffersPinned));
        drop(pin);
        let mut s = w.begin().unwrap();
        s.fill(|v| *v = 30);
        assert_eq!(s.publish(), 3);
        assert_eq!(*r.load(), 30);
    }

    #[test]
    fn dropping_a_staged_buffer_publishes_nothing() {
        let (mut w, r) = snapshot_cell(2, |_| 5u64).unwrap();
        {
            let mut s = w.begin().unwrap();
            s.fill(|v| *v = 6);
        } // dropped without `publish`
        assert_eq!(*r.load(), 5);
        assert_eq!(w.publications(), 0);
    }

    /// Ordinary and pinned readers (module `pinned`) at once, each on its own thread,
    /// while one thread publishes as fast as it can: each publication writes `n` into both
    /// halves, so a torn read (a buffer rewritten while read) shows a mismatch, and one
    /// reader's publications never go backwards.
    #[test]
    fn many_threads_read_while_one_publishes() {
        let (mut w, r) = snapshot_cell(4, |_| (0u64, 0u64)).unwrap();
        let check = |g: &(u64, u64), last: &mut u64| {
            assert_eq!(g.0, g.1, "torn snapshot");
            assert!(g.0 >= *last, "publications go forward for one reader");
            *last = g.0;
        };
        let mut readers = Vec::new();
        for _ in 0..2 {
            let plain = r.clone();
            readers.push(kvroute_core::sync::thread::spawn(move || {
                let mut last = 0;
                for _ in 0..20_000 {
                    check(&plain.load(), &mut last);
                }
            }));
            let mut pin = r.pinned();
            readers.push(kvroute_core::sync::thread::spawn(move || {
                let mut last = 0;
                for _ in 0..20_000 {
                    check(&pin.load(), &mut last);
                }
            }));
        }
        let mut published = 0;
        while published < 2_000 {
            if let Ok(mut s) = w.begin() {
                let n = published + 1;
                s.fill(|v| *v = (n, n));
                s.publish();
                published = n;
            }
        }
        for t in readers {
            t.join().unwrap();
        }
        assert_eq!(*r.load(), (2_000, 2_000));
        assert_eq!(*r.pinned().load(), (2_000, 2_000));
    }
}
