//! The epoch guard of the run index: `crossbeam-epoch`'s normally; under
//! `--cfg kvroute_loom` a guard that pins nothing, because crossbeam's global collector
//! cannot be modelled. The writer then parks its garbage instead of deferring it (see
//! `write::Writer::seal`) and frees it when the index is dropped, after every model thread
//! has joined, so the loom models check the publication protocol itself: what a reader
//! reaches through the head table is fully written when it gets there.

#[cfg(not(kvroute_loom))]
pub(crate) use crossbeam_epoch::{Guard, pin};

/// A guard that pins nothing (loom builds; see the module docs).
#[cfg(kvroute_loom)]
pub(crate) struct Guard(());

#[cfg(kvroute_loom)]
impl Guard {
    /// Nothing to flush: garbage is parked, not deferred.
    pub(crate) fn flush(&self) {}
}

/// Ends nothing (nothing is pinned); it exists so that the writer's `drop(guard)` marks
/// the end of the pinned section in loom builds as it does in normal ones.
#[cfg(kvroute_loom)]
impl Drop for Guard {
    fn drop(&mut self) {}
}

/// A guard (loom builds; see the module docs).
#[cfg(kvroute_loom)]
pub(crate) fn pin() -> Guard {
    Guard(())
}
