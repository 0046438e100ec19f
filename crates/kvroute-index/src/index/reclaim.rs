//! Deferred freeing of unlinked nodes (epoch-based reclamation).
//!
//! Readers pin an epoch guard for the duration of a match; a writer that unlinks a node
//! hands it here, and it is freed only after every guard pinned before the unlink has been
//! dropped. Normally this is `crossbeam-epoch`. Under `--cfg kvroute_loom` (where
//! crossbeam's global collector cannot be modelled) unlinked nodes are parked on the index
//! and freed when the index is dropped, after every model thread has joined: the models then
//! check the unlink protocol itself, and the memory is still freed exactly once.

use super::node::Node;

/// A pinned epoch: nodes reachable while it is alive stay allocated.
#[cfg(not(kvroute_loom))]
pub(crate) struct Guard(crossbeam_epoch::Guard);

#[cfg(kvroute_loom)]
pub(crate) struct Guard(());

/// Pins the current thread.
#[inline]
pub(crate) fn pin() -> Guard {
    #[cfg(not(kvroute_loom))]
    {
        Guard(crossbeam_epoch::pin())
    }
    #[cfg(kvroute_loom)]
    {
        Guard(())
    }
}

/// Where retired nodes wait under loom.
#[derive(Default)]
pub(crate) struct Parked {
    #[cfg(kvroute_loom)]
    nodes: kvroute_sync::Mutex<Vec<SendPtr>>,
}

#[cfg(kvroute_loom)]
struct SendPtr(*mut Node);
// SAFETY: the pointer is only dereferenced (freed) by `Parked::drop`, which has exclusive
// access; moving the address between threads is harmless.
#[cfg(kvroute_loom)]
unsafe impl Send for SendPtr {}

#[cfg(kvroute_loom)]
impl Drop for Parked {
    fn drop(&mut self) {
        let nodes = core::mem::take(&mut *self.nodes.lock().unwrap());
        for SendPtr(p) in nodes {
            // SAFETY: each parked pointer came from `Box::into_raw`, was unlinked exactly
            // once, and is freed here exactly once, with no thread left to read it.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

impl Guard {
    /// Frees `node` once no thread can still reach it.
    ///
    /// # Safety
    /// - `node` came from `Box::into_raw` and has been unlinked from every shared structure,
    ///   so no new reader can reach it;
    /// - it is retired at most once.
    pub(crate) unsafe fn retire(&self, node: *mut Node, parked: &Parked) {
        #[cfg(not(kvroute_loom))]
        {
            let _ = parked;
            let addr = node as usize;
            // SAFETY: the caller guarantees the node is unlinked and retired once; crossbeam
            // runs the closure only after every guard pinned before now is dropped, so no
            // reader still holds a reference when it is freed.
            unsafe {
                self.0.defer_unchecked(move || {
                    drop(Box::from_raw(addr as *mut Node));
                });
            }
        }
        #[cfg(kvroute_loom)]
        {
            let _ = self;
            parked.nodes.lock().unwrap().push(SendPtr(node));
        }
    }

    /// Asks the collector to run deferred frees now (a no-op under loom).
    pub(crate) fn flush(&self) {
        #[cfg(not(kvroute_loom))]
        self.0.flush();
    }
}
