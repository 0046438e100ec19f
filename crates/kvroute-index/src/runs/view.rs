//! What readers see of one run: an immutable *view*, one heap allocation, replaced as a
//! whole whenever the run's length or coverage changes.
//!
//! # Layout
//! A 24-byte [`ViewHead`] (pointer to the run's keys, the run's id, length, word count and
//! partial count), then `words` 64-bit words of *full* coverage (bit `s` of word `s / 64`:
//! the worker in slot `s` holds every position of the view), then `partials` entries
//! `(slot, cutoff)` for workers that hold exactly the first `cutoff` positions
//! (`0 < cutoff < len`). A worker in neither holds no leading position of the run.
//!
//! # Keys
//! `keys` points into the run's key buffer, which holds at least `len` keys. Positions
//! below a published view's `len` are never written again while the buffer lives (a writer
//! appends only past the buffer's high-water mark, see `write`), so readers load them as
//! plain memory. A buffer outlives every view that points into it: both are freed through
//! the epoch collector, the buffer no earlier than the last view that names it.

use core::alloc::Layout;

/// The fixed part of a view; the coverage words and the partial entries follow it.
#[repr(C)]
pub(crate) struct ViewHead {
    keys: *const u64,
    /// The run's id in the writer's arena.
    pub(crate) run: u32,
    len: u32,
    words: u32,
    partials: u32,
    /// Loom builds only: a checked cell written by the build and read by every reader that
    /// reaches the view, so that loom reports a reader not ordered after the build (a
    /// publication weaker than release / acquire).
    #[cfg(kvroute_loom)]
    built: kvroute_core::sync::cell::UnsafeCell<u32>,
}

/// One partial holder: `(slot, cutoff)`.
pub(crate) type Partial = (u32, u32);

fn layout(words: usize, partials: usize) -> Layout {
    let (l, _) = Layout::new::<ViewHead>()
        .extend(Layout::array::<u64>(words).expect("coverage words fit"))
        .expect("view layout fits");
    let (l, _) = l
        .extend(Layout::array::<Partial>(partials).expect("partials fit"))
        .expect("view layout fits");
    l.pad_to_align()
}

/// Heap bytes of a view with `words` coverage words and `partials` partial entries.
pub(crate) fn view_bytes(words: usize, partials: usize) -> usize {
    layout(words, partials).size()
}

impl ViewHead {
    /// Allocates and fills a view. `keys` must hold at least `len` keys and outlive the
    /// view (see the module docs).
    pub(crate) fn build(
        keys: *const u64,
        run: u32,
        len: u32,
        full: &[u64],
        partials: &[Partial],
    ) -> *mut ViewHead {
        let l = layout(full.len(), partials.len());
        // SAFETY: `l` has a non-zero size (the head alone is 24 bytes).
        let p = unsafe { std::alloc::alloc(l) }.cast::<ViewHead>();
        if p.is_null() {
            std::alloc::handle_alloc_error(l);
        }
        // SAFETY: `p` is a fresh allocation of `layout(full.len(), partials.len())`: the
        // head, then `full.len()` words at offset 24 (8-aligned), then the partials at an
        // offset aligned for `(u32, u32)`; every write below stays inside it, and nothing
        // else can see the allocation yet.
        unsafe {
            p.write(ViewHead {
                keys,
                run,
                len,
                words: full.len() as u32,
                partials: partials.len() as u32,
                #[cfg(kvroute_loom)]
                built: kvroute_core::sync::cell::UnsafeCell::new(run),
            });
            let w = p.cast::<u8>().add(Self::words_offset()).cast::<u64>();
            core::ptr::copy_nonoverlapping(full.as_ptr(), w, full.len());
            let q = p
                .cast::<u8>()
                .add(Self::partials_offset(full.len()))
                .cast::<Partial>();
            core::ptr::copy_nonoverlapping(partials.as_ptr(), q, partials.len());
        }
        p
    }

    /// Frees a view made by [`build`](Self::build).
    ///
    /// # Safety
    /// `p` came from `build`, is freed once, and no reference to it is used afterwards.
    pub(crate) unsafe fn free(p: *mut ViewHead) {
        // SAFETY: the caller guarantees `p` is a live view from `build`; its head records
        // the word and partial counts the layout was made with.
        unsafe {
            let l = layout((*p).words as usize, (*p).partials as usize);
            core::ptr::drop_in_place(p);
            std::alloc::dealloc(p.cast(), l);
        }
    }

    const fn words_offset() -> usize {
        core::mem::size_of::<ViewHead>()
    }

    fn partials_offset(words: usize) -> usize {
        // The head and the words, then the partials at the next multiple of their
        // alignment (4; the words end on a multiple of 8 already).
        let (with_words, _) = Layout::new::<ViewHead>()
            .extend(Layout::array::<u64>(words).expect("coverage words fit"))
            .expect("view layout fits");
        let (_, off) = with_words
            .extend(Layout::array::<Partial>(0).expect("empty array"))
            .expect("fits");
        off
    }

    /// Loom builds: reads the build's checked cell (see the field); nothing otherwise.
    #[inline]
    pub(crate) fn check_built(&self) {
        #[cfg(kvroute_loom)]
        {
            // SAFETY: the cell is written only by `build`, before the view is published.
            let run = unsafe { *self.built.get().deref() };
            assert_eq!(run, self.run, "a view's header is read as it was built");
        }
    }

    /// The run's keys (chained block hashes), `len` of them.
    #[inline]
    pub(crate) fn keys(&self) -> &[u64] {
        // SAFETY: `keys` holds at least `len` keys that are not written while this view
        // lives, and the buffer outlives the view (module docs).
        unsafe { core::slice::from_raw_parts(self.keys, self.len as usize) }
    }

    /// Where the view's keys start and how many it shows (for the writer's invariant
    /// check, which compares them with the run's buffer without reading the keys).
    pub(crate) fn keys_raw(&self) -> (*const u64, u32) {
        (self.keys, self.len)
    }

    /// Full-coverage words.
    #[inline]
    pub(crate) fn full(&self) -> &[u64] {
        // SAFETY: `build` wrote `words` words at `words_offset()` inside this allocation,
        // and `self` spans it (views are only reached through pointers from `build`).
        unsafe {
            let p = core::ptr::from_ref(self)
                .cast::<u8>()
                .add(Self::words_offset())
                .cast::<u64>();
            core::slice::from_raw_parts(p, self.words as usize)
        }
    }

    /// Partial holders, `(slot, cutoff)` with `0 < cutoff < len`.
    #[inline]
    pub(crate) fn partials(&self) -> &[Partial] {
        // SAFETY: as for `full`: `build` wrote `partials` entries at `partials_offset`.
        unsafe {
            let p = core::ptr::from_ref(self)
                .cast::<u8>()
                .add(Self::partials_offset(self.words as usize))
                .cast::<Partial>();
            core::slice::from_raw_parts(p, self.partials as usize)
        }
    }

    /// Heap bytes of this view.
    pub(crate) fn bytes(&self) -> usize {
        view_bytes(self.words as usize, self.partials as usize)
    }
}

#[cfg(all(test, not(kvroute_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_view_returns_what_it_was_built_with() {
        let keys = [11u64, 12, 13, 14];
        let full = [0b1010u64, 0, 1 << 63];
        let partials = [(5u32, 2u32), (70, 1)];
        let p = ViewHead::build(keys.as_ptr(), 7, 3, &full, &partials);
        // SAFETY: `p` was just built and is freed once below.
        let v = unsafe { &*p };
        assert_eq!((v.run, v.keys().len()), (7, 3));
        assert_eq!(v.keys(), &[11, 12, 13]);
        assert_eq!(v.full(), &full);
        assert_eq!(v.partials(), &partials);
        // 24-byte head, 3 words, 2 partials of 8 bytes.
        assert_eq!(v.bytes(), 24 + 24 + 16);
        // SAFETY: built above, not used afterwards.
        unsafe { ViewHead::free(p) };
    }
}
