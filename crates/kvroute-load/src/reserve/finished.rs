//! Requests a slot's telemetry already counts that have since ended: one word per slot.
//!
//! Reconciliation drops a reservation once a report counts its request (`reconcile.rs`),
//! and from then on the report is the only thing that counts it, until the next report. A
//! report over-states the slot's load by every such request that ends before the next one;
//! while telemetry flows that lasts one period, but a worker whose reports stop (a
//! telemetry blackout, a stuck publisher) keeps its last figures for as long as the
//! blackout lasts. The guard of such a request still knows when it ends (it is dropped or
//! released), so it counts itself here, and a decision subtracts the count from the report
//! ([`Reserved::finished`](super::Reserved::finished)).
//!
//! The word packs a 32-bit *tag* (high half) and a 32-bit *count* (low half). The tag is
//! an 8-bit tenancy sequence (advanced by worker removal) above a 24-bit reconciliation
//! epoch (advanced by each reconciliation of the requests field). A guard records the tag
//! when it reserves ([`FinishedCell::tag`]); when it ends with its request entry already
//! dropped (`Returned::Dead`), it counts itself only if, since then, the epoch advanced (a
//! report absorbed it; a sweep alone drops it without advancing the epoch) and the tenancy
//! sequence did not (a guard of a removed worker never counts towards the next tenant).
//! Each reconciliation of the requests field, and each removal, resets the count.
//!
//! What it gives up (all on the side of "looks idler" by at most one telemetry delay's
//! worth of requests, and all cleared by the next report): a request reserved between a
//! report's observation and its reconciliation is dropped by that reconciliation although
//! the report does not count it, and is subtracted when it ends (unless its reserve read
//! the new tag: then it is not); a request that ends between a report's observation and
//! its reconciliation is not subtracted (the report over-states it until the next one, as
//! before). The tag repeats after 2^24 reconciliations of one tenancy, or 2^8 tenancies of
//! one slot, while a guard is out: that guard then does not count itself (or counts towards
//! the wrong tenancy): one request.
//!
//! # Orderings
//! * A reconciliation (and a removal) swaps the word first ([`FinishedCell::reset`],
//!   [`FinishedCell::retire`]), then clears the request buckets with `Release` swaps
//!   (`field.rs`), all under the table's admin lock. A guard whose request entry turns out
//!   dead has read a cleared word (or a later value: every later write of a bucket is a
//!   read-modify-write, continuing the release sequence) and then issues an `Acquire`
//!   fence, so the swap of the tag happens-before its [`FinishedCell::count_end`]: a guard
//!   dropped by a reconciliation always sees that reconciliation's tag and counts itself
//!   (loom: `loom_ended_request_counts_once_per_report`, which fails with a `Relaxed`
//!   clear). A guard dropped only by a sweep sees no new epoch and does not count.
//! * The tag a reserve records ([`FinishedCell::tag`], `Relaxed`) decides nothing about
//!   exactness: if it is the new one, the reservation was made after the report was
//!   observed and is not counted when it ends, which is right; if the old one, it is counted
//!   only if a clearing dropped its entry.
//! * [`FinishedCell::count_end`] is a compare-and-swap (`Relaxed`: it publishes nothing but
//!   itself) that retries on a concurrent change of the word.
//! * Readers (`reserved_nonzero`, `reserved_for`) load the word after loading the snapshot,
//!   whose publication the reconciliation happens-before, so they never read a count from
//!   before the reconciliation of the report they hold (`Relaxed` suffices for that; they
//!   load it with `Acquire` like the request buckets). A reader holding an older snapshot
//!   may read a newer, smaller count (an over-statement, as before).
//! * Group counts (`group.rs`): a slot whose count is not zero is counted once in its group,
//!   so a scan reads it. The guard raises the group before its compare-and-swap and keeps
//!   the raise only when it moved the count from 0 to 1; the reset lowers the group when it
//!   swapped out a count that was not zero. A group count therefore never drops below the
//!   slots it must cover, and only a count's own 0 → 1 raise is lowered by its reset.

use kvroute_core::sync::atomic::{AtomicU64, Ordering};

use super::field::{pack, tag, value as count};

const EPOCH_BITS: u32 = 24;
const EPOCH_MASK: u32 = (1 << EPOCH_BITS) - 1;

/// One slot's count of ended requests its last report counts; see the module docs.
#[derive(Debug)]
pub(crate) struct FinishedCell(AtomicU64);

impl FinishedCell {
    pub(crate) fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    /// The tag a reserve records (`Relaxed`; module docs).
    #[inline]
    pub(crate) fn tag(&self) -> u32 {
        tag(self.0.load(Ordering::Relaxed))
    }

    /// The count (requests), loaded with `Acquire`.
    #[inline]
    pub(crate) fn get(&self) -> u32 {
        count(self.0.load(Ordering::Acquire))
    }

    /// Reconciliation of the requests field: advances the epoch and resets the count,
    /// before the request buckets are cleared. Returns the count it swapped out. Callers
    /// serialise it (the admin lock).
    pub(crate) fn reset(&self) -> u32 {
        let t = tag(self.0.load(Ordering::Relaxed));
        let next = (t & !EPOCH_MASK) | (t.wrapping_add(1) & EPOCH_MASK);
        count(self.0.swap(pack(next, 0), Ordering::Relaxed))
    }

    /// Worker removal: advances the tenancy sequence (the epoch kept) and resets the count.
    /// Returns the count it swapped out. Callers serialise it (the admin lock).
    pub(crate) fn retire(&self) -> u32 {
        let t = tag(self.0.load(Ordering::Relaxed));
        let next = (t & EPOCH_MASK) | ((t >> EPOCH_BITS).wrapping_add(1) << EPOCH_BITS);
        count(self.0.swap(pack(next, 0), Ordering::Relaxed))
    }

    /// Counts one ended request reserved under tag `since`, if a reconciliation of the same
    /// tenancy came after it. Returns `None` when it does not count (no reconciliation
    /// since, another tenancy, or the count at `u32::MAX`), `Some(true)` when it moved the
    /// count from 0 to 1, `Some(false)` otherwise.
    pub(crate) fn count_end(&self, since: u32) -> Option<bool> {
        let mut w = self.0.load(Ordering::Relaxed);
        loop {
            let t = tag(w);
            if t >> EPOCH_BITS != since >> EPOCH_BITS || t == since || count(w) == u32::MAX {
                return None;
            }
            let new = pack(t, count(w) + 1);
            match self
                .0
                .compare_exchange_weak(w, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(count(w) == 0),
                Err(now) => w = now,
            }
        }
    }
}

#[cfg(all(test, not(kvroute_loom)))]
mod tests {
    use super::*;

    /// By hand: a request reserved at tag 0 counts only after a reconciliation (epoch 1),
    /// not after a removal (tenancy sequence 1), and each reset returns and zeroes the count.
    #[test]
    fn counts_only_after_a_reconciliation_of_the_same_tenancy() {
        let c = FinishedCell::new();
        let t0 = c.tag();
        assert_eq!(c.count_end(t0), None, "no reconciliation since");
        assert_eq!(c.reset(), 0);
        assert_eq!(c.tag(), 1);
        assert_eq!(c.count_end(t0), Some(true));
        assert_eq!(c.count_end(t0), Some(false));
        assert_eq!(c.get(), 2);
        let t1 = c.tag();
        assert_eq!(c.reset(), 2);
        assert_eq!((c.get(), c.tag()), (0, 2));
        assert_eq!(c.count_end(t1), Some(true));
        assert_eq!(c.retire(), 1);
        assert_eq!(c.tag(), (1 << EPOCH_BITS) | 2);
        assert_eq!(c.count_end(t1), None, "a guard of the removed tenancy");
        assert_eq!(c.count_end(t0), None);
        let t2 = c.tag();
        c.reset();
        assert_eq!(c.count_end(t2), Some(true));
    }

    /// The epoch wraps within its 24 bits without touching the tenancy sequence.
    #[test]
    fn the_epoch_wraps_inside_its_bits() {
        let c = FinishedCell(AtomicU64::new(pack((3 << EPOCH_BITS) | EPOCH_MASK, 5)));
        assert_eq!(c.reset(), 5);
        assert_eq!(c.tag(), 3 << EPOCH_BITS);
        let c = FinishedCell(AtomicU64::new(pack(u32::MAX, 0)));
        assert_eq!(c.retire(), 0);
        assert_eq!(c.tag(), EPOCH_MASK);
    }
}
