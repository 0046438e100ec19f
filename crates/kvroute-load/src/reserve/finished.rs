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
//! What a decision subtracts is the count *beyond the request reservations the last
//! reconciliation absorbed*: a reconciliation records how many it is about to drop, since
//! up to that many of the requests seen to end may be ones the report never counted (made
//! between its observation and its publication; the argument is in `reconcile.rs`).
//!
//! The word packs a 32-bit *tag* (high half) and a 32-bit *value* (low half): the value's
//! low 20 bits count ended requests (saturating at 2^20 − 1), its high 12 bits the absorbed
//! reservations (saturating at 4,095). The tag is
//! an 8-bit tenancy sequence (advanced by worker removal) above a 24-bit reconciliation
//! epoch (advanced by each reconciliation of the requests field). A guard records the tag
//! when it reserves ([`FinishedCell::tag`]); when it ends with its request entry already
//! dropped (`Returned::Dead`), it counts itself only if, since then, the epoch advanced (a
//! report absorbed it; a sweep alone drops it without advancing the epoch) and the tenancy
//! sequence did not (a guard of a removed worker never counts towards the next tenant).
//! Each reconciliation of the requests field resets the count and records its absorbed
//! reservations; each removal resets both.
//!
//! What it gives up: a request reserved between a report's observation and its
//! reconciliation is dropped by that reconciliation although the report does not count
//! it, and counts here when it ends (unless its reserve read the new tag: then it does
//! not); the absorbed reservations offset such ends, at the price of offsetting as many
//! ends of requests the report did count (an over-statement of at most those reservations,
//! cleared by the next report). A request that ends between a report's observation and its
//! reconciliation is not counted (the report over-states it until the next one). More than
//! 4,095 reservations absorbed at once offset only 4,095 ends. The tag repeats after 2^24
//! reconciliations of one tenancy, or 2^8 tenancies of one slot, while a guard is out: that
//! guard then does not count itself (or counts towards the wrong tenancy): one request.
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
//! * After the clear, the reconciliation adds the request reservations it dropped into the
//!   word's absorbed bits ([`FinishedCell::absorb`], a `Relaxed` `fetch_add`, still under
//!   the admin lock): it orders nothing, since the publication that follows the
//!   reconciliation is what makes the new report and its offset visible to decisions
//!   together; a reader that reads the word between the two sees the ended count not yet
//!   offset (an under-statement of at most those reservations until the publication).
//! * [`FinishedCell::count_end`] is a compare-and-swap that retries on a concurrent change
//!   of the word; it succeeds with `Release`, and the reset's and removal's swaps are
//!   `Acquire`, for the group counts (last item).
//! * Readers (`reserved_nonzero`, `reserved_for`) load the word after loading the snapshot,
//!   whose publication the reconciliation happens-before, so they never read a count from
//!   before the reconciliation of the report they hold (`Relaxed` suffices for that; they
//!   load it with `Acquire` like the request buckets). A reader holding an older snapshot
//!   may read a newer, smaller count (an over-statement, as before).
//! * Group counts (`group.rs`): a slot whose count is not zero is counted once in its group,
//!   so a scan reads it. The guard raises the group before its compare-and-swap and keeps
//!   the raise only when it moved the count from 0 to 1; the reset lowers the group when it
//!   swapped out a count that was not zero. The lowering must come after that raise in the
//!   group count's modification order, or the group could read one too low for a moment
//!   (another slot's count in it then missed by a scan): the raise is sequenced before the
//!   guard's `Release` compare-and-swap, which the reset's `Acquire` swap reads (directly or
//!   through later read-modify-writes of the word), so the raise happens-before the
//!   lowering. A group count therefore never drops below the slots it must cover, and only
//!   a count's own 0 → 1 raise is lowered by its reset. (Loom does not check this one: its
//!   read-modify-writes always read the latest value, so a lowering never overtakes a raise
//!   in its executions whatever the orderings.)

use kvroute_core::sync::atomic::{AtomicU64, Ordering};

use super::field::{pack, tag, value as count};

const EPOCH_BITS: u32 = 24;
const EPOCH_MASK: u32 = (1 << EPOCH_BITS) - 1;

/// Bits of the ended-request count (the low part of the word's value half).
const ENDED_BITS: u32 = 20;
const ENDED_MAX: u32 = (1 << ENDED_BITS) - 1;
/// Largest absorbed-reservation count kept (the value half's high 12 bits).
const ABSORBED_MAX: u32 = (1 << (32 - ENDED_BITS)) - 1;

fn ended(v: u32) -> u32 {
    v & ENDED_MAX
}

fn absorbed(v: u32) -> u32 {
    v >> ENDED_BITS
}

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

    /// The ended requests beyond the reservations the last reconciliation absorbed
    /// (requests, at least 0), loaded with `Acquire`.
    #[inline]
    pub(crate) fn get(&self) -> u32 {
        let v = count(self.0.load(Ordering::Acquire));
        ended(v).saturating_sub(absorbed(v))
    }

    /// The ended requests alone (before the absorbed offset), `Relaxed`.
    #[cfg(test)]
    pub(crate) fn ended_count(&self) -> u32 {
        ended(count(self.0.load(Ordering::Relaxed)))
    }

    /// Reconciliation of the requests field: advances the epoch and resets both counts,
    /// before the request buckets are cleared. Returns the ended count it swapped out.
    /// Callers serialise it (the admin lock).
    pub(crate) fn reset(&self) -> u32 {
        let t = tag(self.0.load(Ordering::Relaxed));
        let next = (t & !EPOCH_MASK) | (t.wrapping_add(1) & EPOCH_MASK);
        // `Acquire`: a group raise of the count swapped out happens-before the caller's
        // lowering (module docs, group counts).
        ended(count(self.0.swap(pack(next, 0), Ordering::Acquire)))
    }

    /// Records `absorbed`, the request reservations the reconciliation after
    /// [`reset`](Self::reset) dropped (at most [`ABSORBED_MAX`] kept). One `Relaxed`
    /// `fetch_add` into the absorbed bits, which `reset` zeroed and nothing else writes, so
    /// it cannot carry into the tag and commutes with a concurrent
    /// [`count_end`](Self::count_end). Callers serialise it with `reset` (the admin lock).
    pub(crate) fn absorb(&self, absorbed: u64) {
        let a = absorbed.min(u64::from(ABSORBED_MAX));
        if a > 0 {
            self.0.fetch_add(a << ENDED_BITS, Ordering::Relaxed);
        }
    }

    /// Worker removal: advances the tenancy sequence (the epoch kept) and resets the count.
    /// Returns the count it swapped out. Callers serialise it (the admin lock).
    pub(crate) fn retire(&self) -> u32 {
        let t = tag(self.0.load(Ordering::Relaxed));
        let next = (t & EPOCH_MASK) | ((t >> EPOCH_BITS).wrapping_add(1) << EPOCH_BITS);
        // `Acquire`, as in `reset`.
        ended(count(self.0.swap(pack(next, 0), Ordering::Acquire)))
    }

    /// Counts one ended request reserved under tag `since`, if a reconciliation of the same
    /// tenancy came after it. Returns `None` when it does not count (no reconciliation
    /// since, another tenancy, or the count at `u32::MAX`), `Some(true)` when it moved the
    /// count from 0 to 1, `Some(false)` otherwise.
    pub(crate) fn count_end(&self, since: u32) -> Option<bool> {
        let mut w = self.0.load(Ordering::Relaxed);
        loop {
            let t = tag(w);
            let v = count(w);
            if t >> EPOCH_BITS != since >> EPOCH_BITS || t == since || ended(v) == ENDED_MAX {
                return None;
            }
            let new = pack(t, v + 1);
            match self
                .0
                // `Release` on success: the caller's group raise, made before this call,
                // happens-before the lowering of the reset that swaps this count out.
                .compare_exchange_weak(w, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return Some(ended(v) == 0),
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

    /// By hand: a reconciliation that absorbed 3 reservations offsets the first 3 ended
    /// requests (`get` is ended − absorbed, at least 0), the 0 → 1 step is the ended count's
    /// (the group count's raise), a reset returns the ended count alone, and the absorbed
    /// count saturates at `ABSORBED_MAX`.
    #[test]
    fn absorbed_reservations_offset_the_ended_count() {
        let c = FinishedCell::new();
        let t0 = c.tag();
        assert_eq!(c.reset(), 0);
        c.absorb(3);
        assert_eq!(c.get(), 0);
        assert_eq!(
            c.count_end(t0),
            Some(true),
            "the first end is the 0 -> 1 step"
        );
        assert_eq!(c.count_end(t0), Some(false));
        assert_eq!(c.count_end(t0), Some(false));
        assert_eq!(c.get(), 0, "3 ended, 3 absorbed");
        assert_eq!(c.count_end(t0), Some(false));
        assert_eq!(c.count_end(t0), Some(false));
        assert_eq!(c.get(), 2, "5 ended, 3 absorbed");
        let t1 = c.tag();
        assert_eq!(c.reset(), 5, "a reset returns the ended count");
        c.absorb(10_000);
        for _ in 0..4_100 {
            c.count_end(t1);
        }
        assert_eq!(c.get(), 4_100 - 4_095);
    }

    /// The ended count saturates within its 20 bits, leaving the absorbed count alone.
    #[test]
    fn the_ended_count_saturates_inside_its_bits() {
        let c = FinishedCell(AtomicU64::new(pack(1, (7 << ENDED_BITS) | ENDED_MAX)));
        assert_eq!(c.count_end(0), None);
        assert_eq!(c.get(), ENDED_MAX - 7);
        assert_eq!(c.reset(), ENDED_MAX);
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
