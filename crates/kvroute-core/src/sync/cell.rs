//! The one `UnsafeCell` of kvroute: `core`'s normally, loom's checked cell under
//! `--cfg kvroute_loom`, so that loom sees every access to a published buffer and reports a
//! write that races with a reader (a torn snapshot, or a buffer reused while still read).
//!
//! The API is the subset of loom's that kvroute's publication cell needs: [`UnsafeCell::get`]
//! returns a [`ConstPtr`] whose lifetime is the read access, and [`UnsafeCell::with_mut`]
//! scopes a write access.

#[cfg(kvroute_loom)]
pub use loom::cell::{ConstPtr, UnsafeCell};

#[cfg(not(kvroute_loom))]
mod plain {
    /// `core::cell::UnsafeCell` behind loom's API.
    #[derive(Debug)]
    pub struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        /// A cell holding `value`.
        pub fn new(value: T) -> Self {
            Self(core::cell::UnsafeCell::new(value))
        }

        /// A read access lasting as long as the returned pointer.
        pub fn get(&self) -> ConstPtr<T> {
            ConstPtr(self.0.get())
        }

        /// A write access lasting for `f`.
        pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }

    /// A raw read pointer into an [`UnsafeCell`].
    #[derive(Debug)]
    pub struct ConstPtr<T>(*const T);

    impl<T> ConstPtr<T> {
        /// # Safety
        /// The same as dereferencing a `*const T`: the cell is alive and nobody writes it
        /// for the lifetime of the returned reference.
        pub unsafe fn deref(&self) -> &T {
            // SAFETY: forwarded to the caller: the pointer comes from a live cell (never
            // null, aligned) and the caller guarantees no concurrent write.
            unsafe { &*self.0 }
        }
    }
}

#[cfg(not(kvroute_loom))]
pub use plain::{ConstPtr, UnsafeCell};
