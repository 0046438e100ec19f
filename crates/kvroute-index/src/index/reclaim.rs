//! Deferred freeing of unlinked nodes and replaced slot arrays (epoch-based reclamation).
//!
//! Readers pin an epoch guard for the duration of a match; a writer that makes an object
//! unreachable hands it here, and it is freed only after every guard pinned before that
//! point has been dropped. Normally this is `crossbeam-epoch`. Under `--cfg kvroute_loom`
//! (where crossbeam's global collector cannot be modelled) retired objects are parked on
//! the table and freed when the table is dropped, after every model thread has joined: the
//! models then check the unlink protocol itself, and memory is still freed exactly once.

/// A pinned epoch: objects reachable while it is alive stay allocated.
#[cfg(not(kvroute_loom))]
pub(crate) struct Guard(crossbeam_epoch::Guard);

/// A pinned epoch (a no-op under loom; see the module docs).
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

/// Where retired objects wait under loom.
#[derive(Default)]
pub(crate) struct Parked {
    #[cfg(kvroute_loom)]
    items: kvroute_core::sync::Mutex<Vec<(usize, unsafe fn(usize))>>,
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

/// Frees a `Box<T>` given its address.
///
/// # Safety
/// `addr` must come from `Box::<T>::into_raw`, and nothing may use it afterwards.
unsafe fn free_box<T>(addr: usize) {
    // SAFETY: guaranteed by the caller.
    drop(unsafe { Box::from_raw(addr as *mut T) });
}

impl Guard {
    /// Frees a node whose last reference was dropped, once no thread can still reach it.
    /// Uses this guard (the caller's pinned epoch) rather than pinning again.
    ///
    /// Under loom the node is leaked instead (reclamation is crossbeam's and not modelled;
    /// the models are small).
    ///
    /// # Safety
    /// `p` came from `node::alloc_acquired` with this `words`, no reference to it is left
    /// (no table slot and no successor link points to it), and this is called once for it.
    #[inline]
    pub(crate) unsafe fn defer_free_node(&self, p: *mut super::node::Head, words: usize) {
        #[cfg(not(kvroute_loom))]
        {
            let addr = p as usize;
            // SAFETY: the caller guarantees the node is unreachable for threads that pin
            // from now on and is freed once; crossbeam runs the closure only after every
            // guard pinned before now has been dropped.
            unsafe {
                self.0
                    .defer_unchecked(move || super::node::free(addr as *mut _, words));
            }
        }
        #[cfg(kvroute_loom)]
        let _ = (self, p, words);
    }

    /// Frees `ptr` once no thread can still reach it.
    ///
    /// # Safety
    /// - `ptr` came from `Box::<T>::into_raw`;
    /// - it has been made unreachable from every shared structure, so no thread that pins
    ///   after this call can obtain it;
    /// - it is retired at most once.
    pub(crate) unsafe fn retire<T: Send + 'static>(&self, ptr: *mut T, parked: &Parked) {
        let addr = ptr as usize;
        #[cfg(not(kvroute_loom))]
        {
            let _ = parked;
            // SAFETY: the caller guarantees `ptr` is unreachable for new readers and retired
            // once; crossbeam runs the closure only after every guard pinned before now has
            // been dropped, so no reader still holds a reference when it is freed.
            unsafe {
                self.0.defer_unchecked(move || free_box::<T>(addr));
            }
        }
        #[cfg(kvroute_loom)]
        {
            let _ = self;
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
        self.0.flush();
    }
}
