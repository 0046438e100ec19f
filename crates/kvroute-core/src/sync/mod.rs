//! The synchronisation shim every kvroute crate uses instead of `std::sync`.
//!
//! Built normally, this re-exports `std::sync::atomic`, `std::sync::{Arc, Mutex, RwLock}`,
//! `std::thread` and (module [`cell`]) `core::cell::UnsafeCell` behind loom's API. Built with `RUSTFLAGS="--cfg kvroute_loom"` it re-exports the
//! [loom](https://docs.rs/loom) model checker's versions of the same items, so that the
//! lock-free protocols of the index, the load snapshot and the reservations can be explored
//! under every interleaving loom allows. The cfg name is namespaced (`kvroute_loom`, not
//! `loom`) so that building kvroute's models never switches on loom inside other crates of
//! the dependency graph.
//!
//! Only the items kvroute needs are re-exported; code outside this crate must never import
//! `std::sync::atomic` directly, or loom would not see those accesses.

pub mod cell;

/// Atomic integer and pointer types, and fences.
pub mod atomic {
    #[cfg(not(kvroute_loom))]
    pub use core::sync::atomic::{
        AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
    };
    #[cfg(kvroute_loom)]
    pub use loom::sync::atomic::{
        AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
    };
}

#[cfg(kvroute_loom)]
pub use loom::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
#[cfg(not(kvroute_loom))]
pub use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Threads: `std::thread` normally, `loom::thread` under `--cfg kvroute_loom`.
pub mod thread {
    #[cfg(kvroute_loom)]
    pub use loom::thread::{JoinHandle, spawn, yield_now};
    #[cfg(not(kvroute_loom))]
    pub use std::thread::{JoinHandle, spawn, yield_now};
}

/// Runs `f` once normally, or under every interleaving loom explores when built with
/// `--cfg kvroute_loom`. Lets one test body serve as both a smoke test and a loom model.
pub fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    #[cfg(kvroute_loom)]
    loom::model(f);
    #[cfg(not(kvroute_loom))]
    f();
}
