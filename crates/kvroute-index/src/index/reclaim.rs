//! Deferred freeing of unlinked nodes and replaced slot arrays (epoch-based reclamation),
//! and the count of the memory it holds.
//!
//! Readers pin an epoch guard for the duration of a match; a writer that makes an object
//! unreachable hands it here, and it is freed only after every guard pinned before that
//! point has been dropped. Normally this is `crossbeam-epoch`. Under `--cfg kvroute_loom`
//! (where crossbeam's global collector cannot be modelled) retired arrays are parked on
//! the table and freed when the table is dropped, after every model thread has joined, and
//! nodes are leaked: the models then check the unlink protocol itself.
//!
//! # One deferred function per event, drained by its writer
//! crossbeam's collector frees at most eight sealed bags of 64 deferred functions per
//! collection, and collects only on a flush or every 128th pin. A writer that handed it one
//! function per node (an eviction or a clear releases thousands in one event) made garbage
//! far faster than it was freed: the backlog grew without bound, outside any gauge. So a
//! guard gathers the nodes whose last reference its holder dropped, and
//! [`Guard::seal`] hands the whole batch to the collector as *one* deferred function. After
//! the event, with its guard dropped, the writer calls [`drain`]: a few rounds of pin and
//! flush, each of which can advance the epoch once and collect the bags that have expired,
//! so an event's garbage is normally freed before the writer returns. It stays only while
//! another thread is pinned from before the unlink (a match in progress), and the next
//! event (or [`drain`] with more rounds) frees it.
//!
//! # Counting
//! [`NodeMemory`] is shared (an `Arc`) by the table and every batch it defers, because a
//! batch may run after the table is gone: it counts the nodes allocated and not yet freed
//! (linked, retired but still referenced by a successor link, or waiting in a batch), and
//! the bytes and functions waiting in the collector (batch buffers, replaced slot arrays).
//! The index's heap gauge adds them up, so garbage is never memory the gauge does not show.
//!
//! # Orderings
//! Every counter of [`NodeMemory`] is `Relaxed`: they are gauges that publish no data; the
//! frees they count are ordered by the epoch protocol itself.

use core::cell::RefCell;

use kvroute_core::sync::Arc;
use kvroute_core::sync::atomic::{AtomicUsize, Ordering};

#[cfg(not(kvroute_loom))]
use super::node;
use super::node::Head;

/// Rounds of pin-and-flush a writer runs after an event that deferred garbage (each round
/// advances the epoch at most once; a batch expires two advances after it was sealed, and
/// a freed batch can defer the successors it released, which need two more).
pub(crate) const EVENT_DRAIN_ROUNDS: usize = 6;

/// The memory of one table's nodes and deferred garbage; see the module docs.
pub(crate) struct NodeMemory {
    /// Bit words of every node of the table.
    pub(crate) words: usize,
    /// Nodes allocated and not yet freed.
    allocated: AtomicUsize,
    /// Nodes waiting in deferred batches.
    deferred_nodes: AtomicUsize,
    /// Heap bytes waiting in the collector besides the nodes: batch records and their
    /// buffers, replaced slot arrays.
    deferred_bytes: AtomicUsize,
    /// Deferred functions handed to the collector and not yet run.
    deferred: AtomicUsize,
}

/// What the collector holds of one table, at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct MemoryCounts {
    pub(crate) allocated_nodes: usize,
    pub(crate) deferred_nodes: usize,
    pub(crate) deferred_bytes: usize,
    pub(crate) deferred: usize,
}

impl NodeMemory {
    /// Counts for nodes of `words` bit words.
    pub(crate) fn new(words: usize) -> Arc<Self> {
        Arc::new(Self {
            words,
            allocated: AtomicUsize::new(0),
            deferred_nodes: AtomicUsize::new(0),
            deferred_bytes: AtomicUsize::new(0),
            deferred: AtomicUsize::new(0),
        })
    }

    /// Heap bytes of the shared record itself (the `Arc` allocation: two counts, then it).
    pub(crate) const fn own_bytes() -> usize {
        2 * core::mem::size_of::<usize>() + core::mem::size_of::<Self>()
    }

    pub(crate) fn counts(&self) -> MemoryCounts {
        MemoryCounts {
            allocated_nodes: self.allocated.load(Ordering::Relaxed),
            deferred_nodes: self.deferred_nodes.load(Ordering::Relaxed),
            deferred_bytes: self.deferred_bytes.load(Ordering::Relaxed),
            deferred: self.deferred.load(Ordering::Relaxed),
        }
    }

    /// `n` nodes were allocated and published (counted once per event, not per node, so
    /// that concurrent writers do not contend on the count).
    #[inline]
    pub(crate) fn nodes_allocated(&self, n: usize) {
        if n > 0 {
            self.allocated.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// `n` counted nodes were freed.
    #[inline]
    pub(crate) fn nodes_freed(&self, n: usize) {
        if n > 0 {
            self.allocated.fetch_sub(n, Ordering::Relaxed);
        }
    }

    #[cfg(not(kvroute_loom))]
    fn deferring(&self, nodes: usize, bytes: usize) {
        self.deferred_nodes.fetch_add(nodes, Ordering::Relaxed);
        self.deferred_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.deferred.fetch_add(1, Ordering::Relaxed);
    }

    #[cfg(not(kvroute_loom))]
    fn ran(&self, nodes: usize, bytes: usize) {
        self.deferred_nodes.fetch_sub(nodes, Ordering::Relaxed);
        self.deferred_bytes.fetch_sub(bytes, Ordering::Relaxed);
        self.deferred.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A pinned epoch: objects reachable while it is alive stay allocated. It also gathers the
/// nodes whose last reference its holder dropped, until [`Guard::seal`].
pub(crate) struct Guard {
    #[cfg(not(kvroute_loom))]
    epoch: crossbeam_epoch::Guard,
    /// Thin pointers of nodes to free after the grace period.
    batch: RefCell<Vec<*mut Head>>,
}

/// Pins the current thread.
#[inline]
pub(crate) fn pin() -> Guard {
    Guard {
        #[cfg(not(kvroute_loom))]
        epoch: crossbeam_epoch::pin(),
        batch: RefCell::new(Vec::new()),
    }
}

/// Runs up to `rounds` rounds of pin and flush while `mem` has deferred functions waiting;
/// returns whether none is left. Call it with no guard of this thread pinned (a pinned
/// guard holds the epoch back, so nothing sealed under it could expire).
pub(crate) fn drain(mem: &NodeMemory, rounds: usize) -> bool {
    for _ in 0..rounds {
        if mem.deferred.load(Ordering::Relaxed) == 0 {
            return true;
        }
        pin().flush();
    }
    mem.deferred.load(Ordering::Relaxed) == 0
}

/// A batch of nodes handed to the collector as one deferred function.
#[cfg(not(kvroute_loom))]
struct Batch {
    nodes: Vec<*mut Head>,
    mem: Arc<NodeMemory>,
}

#[cfg(not(kvroute_loom))]
impl Batch {
    /// Heap bytes of the batch: its record and its buffer.
    fn bytes(&self) -> usize {
        core::mem::size_of::<Self>() + self.nodes.capacity() * core::mem::size_of::<*mut Head>()
    }
}

/// Frees a batch's nodes and the batch.
///
/// # Safety
/// `addr` came from `Box::<Batch>::into_raw` in [`Guard::seal`]; each node in it meets
/// [`node::free`]'s preconditions (no reference left, unreachable, freed once), and this
/// runs once per batch, after the grace period.
#[cfg(not(kvroute_loom))]
unsafe fn run_batch(addr: usize) {
    // SAFETY: guaranteed by the caller.
    let batch = unsafe { Box::from_raw(addr as *mut Batch) };
    let (nodes, bytes) = (batch.nodes.len(), batch.bytes());
    // Freeing a node releases its successor link; a successor whose last reference that
    // was may still be in use by a reader that reached it another way, so it goes into a
    // new batch, a grace period later.
    let guard = pin();
    for &p in &batch.nodes {
        // SAFETY: the caller's preconditions, node by node; nodes of one table share
        // `mem` (and its word count).
        unsafe { node::free(p, &batch.mem, &guard) };
    }
    guard.seal(&batch.mem);
    batch.mem.nodes_freed(nodes);
    batch.mem.ran(nodes, bytes);
}

/// Frees a `Box<T>` given its address.
///
/// # Safety
/// `addr` must come from `Box::<T>::into_raw`, and nothing may use it afterwards.
unsafe fn free_box<T>(addr: usize) {
    // SAFETY: guaranteed by the caller.
    drop(unsafe { Box::from_raw(addr as *mut T) });
}

/// A retired object's address and the function that frees it.
#[cfg(kvroute_loom)]
type ParkedItem = (usize, unsafe fn(usize));

/// Where retired objects wait under loom.
#[derive(Default)]
pub(crate) struct Parked {
    #[cfg(kvroute_loom)]
    items: kvroute_core::sync::Mutex<Vec<ParkedItem>>,
}

#[cfg(kvroute_loom)]
impl Drop for Parked {
    fn drop(&mut self) {
        let items = core::mem::take(&mut *self.items.lock().unwrap());
        for (addr, free) in items {
            // SAFETY: each parked address came from `Box::into_raw` of the type `free`
            // was instantiated for, was retired exactly once, and is freed here exactly
            // once, with no thread left to read it.
            unsafe { free(addr) };
        }
    }
}

impl Guard {
    /// Gathers a node whose last reference was dropped, to be freed once no thread can
    /// still reach it, with the rest of this guard's batch at [`seal`](Self::seal).
    ///
    /// # Safety
    /// `p` came from `node::alloc_acquired`, no reference to it is left (no table slot and
    /// no successor link points to it), and this is called once for it.
    #[inline]
    pub(crate) unsafe fn defer_free_node(&self, p: *mut Head) {
        self.batch.borrow_mut().push(p);
    }

    /// Hands the gathered nodes (nodes of the table counted by `mem`) to the collector as
    /// one deferred function. Every guard that gathered nodes is sealed before it is
    /// dropped. Under loom the nodes are leaked (reclamation is crossbeam's and not
    /// modelled; the models are small).
    pub(crate) fn seal(&self, mem: &Arc<NodeMemory>) {
        let nodes = core::mem::take(&mut *self.batch.borrow_mut());
        if nodes.is_empty() {
            return;
        }
        #[cfg(not(kvroute_loom))]
        {
            let batch = Batch {
                nodes,
                mem: mem.clone(),
            };
            mem.deferring(batch.nodes.len(), batch.bytes());
            let addr = Box::into_raw(Box::new(batch)) as usize;
            // SAFETY: the batch's nodes meet `run_batch`'s preconditions (the callers of
            // `defer_free_node`), the box is run once, and crossbeam runs the closure only
            // after every guard pinned before now has been dropped.
            unsafe { self.epoch.defer_unchecked(move || run_batch(addr)) };
        }
        #[cfg(kvroute_loom)]
        {
            let _ = mem;
            core::mem::forget(nodes);
        }
    }

    /// Frees `ptr`, `bytes` of heap counted in `mem` while it waits, once no thread can
    /// still reach it.
    ///
    /// # Safety
    /// - `ptr` came from `Box::<T>::into_raw`;
    /// - it has been made unreachable from every shared structure, so no thread that pins
    ///   after this call can obtain it;
    /// - it is retired at most once.
    pub(crate) unsafe fn retire<T: Send + 'static>(
        &self,
        ptr: *mut T,
        bytes: usize,
        mem: &Arc<NodeMemory>,
        parked: &Parked,
    ) {
        let addr = ptr as usize;
        #[cfg(not(kvroute_loom))]
        {
            let _ = parked;
            mem.deferring(0, bytes);
            let mem = mem.clone();
            // SAFETY: the caller guarantees `ptr` is unreachable for new readers and retired
            // once; crossbeam runs the closure only after every guard pinned before now has
            // been dropped, so no reader still holds a reference when it is freed.
            unsafe {
                self.epoch.defer_unchecked(move || {
                    free_box::<T>(addr);
                    mem.ran(0, bytes);
                });
            }
        }
        #[cfg(kvroute_loom)]
        {
            let _ = (self, bytes, mem);
            parked
                .items
                .lock()
                .unwrap()
                .push((addr, free_box::<T> as unsafe fn(usize)));
        }
    }

    /// Asks the collector to run deferred frees now (a no-op under loom).
    pub(crate) fn flush(&self) {
        #[cfg(not(kvroute_loom))]
        self.epoch.flush();
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        // A batch left unsealed would be leaked: every path that gathers nodes seals.
        debug_assert!(
            std::thread::panicking() || self.batch.get_mut().is_empty(),
            "a guard gathered nodes and was not sealed"
        );
    }
}
