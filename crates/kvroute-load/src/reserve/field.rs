//! One reserved quantity of one slot (requests, prefill tokens or decode tokens): two tagged
//! buckets, so that whole cohorts of reservations can be dropped at once (sweeping,
//! reconciliation, worker removal) while a guard can still tell whether its share is live.
//!
//! Each bucket is one `AtomicU64` word: a 32-bit *tag* (high half) and a 32-bit *value*
//! (low half). The bucket with the newer tag is *young*: reservations are added to it. A
//! reservation remembers `(bucket, tag, amount)` as an [`Entry`]; it is live while its bucket
//! still carries its tag.
//!
//! * [`FieldCell::age`] (sweeping) swaps the old bucket to `(young tag + 1, 0)`: the old
//!   bucket's reservations are dropped and counted, it becomes the new young bucket, and the
//!   former young one becomes old. A reservation therefore survives one ageing and is dropped
//!   by the second.
//! * [`FieldCell::clear`] ages twice: both buckets are dropped.
//!
//! Limitation: an addition that read the words just before an ageing lands in the bucket
//! the ageing just made old (its compare-and-swap is on that bucket's word, which the
//! ageing did not change), so that reservation is dropped by the very next ageing: it
//! lives from zero to one ageing period instead of one to two. Only the TTL sweep's
//! timing is affected (a guard's return and reconciliation are exact either way); closing
//! it would take a second read-modify-write per addition.
//!
//! Tags only change under the table's admin lock, and every change is one `swap`, so a
//! reader always sees two well-formed buckets. A tag repeats only after 2^32 re-taggings of
//! one bucket (years at several per second); a guard still out by then could at worst take
//! back its own amount from a bucket that no longer holds it, and subtraction is clamped
//! at zero and counted (`underflow_clamped`), so a counter never wraps or goes below zero.
//!
//! Values are checked, never wrapped: an addition that would pass `u32::MAX` is refused,
//! or, where the caller asks for it (the token fields), fills the bucket to `u32::MAX` and
//! records in its entry the part that fitted, which is what its return later takes back.
//!
//! # Orderings
//! Exactness rests on each word alone: every operation is a single read-modify-write (or a
//! load that a compare-and-swap then validates) on one word, so the modification order of
//! that word gives the exactness claims: an entry's subtraction succeeds only on a word that
//! still carries its tag, which cannot have been re-tagged since its addition, so the value
//! still contains the amount. For that alone every operation could be `Relaxed`.
//!
//! The callers also publish one field through another (`table.rs`, `# Orderings`): a
//! reservation's token additions must be visible to a reader that sees its request count.
//! So [`FieldCell::add`], [`FieldCell::sub`] and [`FieldCell::total`] take the ordering of
//! the successful read-modify-write (`Release` where it publishes earlier writes) or of the
//! loads (`Acquire` where the reader then reads the published fields); failed
//! compare-and-swaps and the re-reads of a retry are `Relaxed`, since only the final,
//! successful operation publishes. Every later read-modify-write of the word (other
//! reservations, returns, [`FieldCell::age`], [`FieldCell::clear`]) continues the release
//! sequence, so an `Acquire` load that reads a later value still synchronises with the
//! publishing operation. `grow` and `age` publish nothing and are `Relaxed`. `clear` is
//! `Release`: a guard that reads a cleared (or later, re-tagged) word and finds its entry
//! dead then issues an `Acquire` fence, so it sees what the clearing thread wrote before
//! the clear (the ended-request tag of `finished.rs`; every later write of the word is a
//! read-modify-write, which continues the release sequence). The
//! tenancy protocol that orders these words against worker removal lives in `table.rs`.

use kvroute_core::sync::atomic::{
    AtomicU64,
    Ordering::{self, Relaxed},
};

/// One word: `tag` in the high half, `value` in the low half (also the ended-request
/// word of `finished.rs`).
#[inline]
pub(super) fn pack(tag: u32, value: u32) -> u64 {
    (u64::from(tag) << 32) | u64::from(value)
}

/// A word's tag (high half).
#[inline]
pub(super) fn tag(word: u64) -> u32 {
    (word >> 32) as u32
}

/// A word's value (low half).
#[inline]
pub(super) fn value(word: u64) -> u32 {
    word as u32
}

/// Whether tag `a` is newer than tag `b` (wrapping comparison).
#[inline]
fn newer(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// Which bucket of `words` is young.
#[inline]
fn young(words: [u64; 2]) -> usize {
    usize::from(newer(tag(words[1]), tag(words[0])))
}

/// A reservation's share of one field: where it was added and how much.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) bucket: u8,
    pub(crate) tag: u32,
    pub(crate) amount: u32,
}

/// Outcome of returning an [`Entry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Returned {
    /// The entry was live; its amount was subtracted.
    Released,
    /// The entry's bucket was dropped (aged, reconciled, worker removed); nothing to do.
    Dead,
    /// Live, but the bucket held less than the amount (only after a tag wrap, see the
    /// module docs); clamped to zero.
    Clamped,
}

/// Why [`FieldCell::add`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AddRefused {
    /// The young bucket would pass `u32::MAX`.
    Saturated,
    /// The field's total already exceeded the caller's limit.
    OverLimit { prior: u64 },
}

/// Two tagged buckets; see the module docs.
#[derive(Debug)]
pub(crate) struct FieldCell {
    buckets: [AtomicU64; 2],
}

impl FieldCell {
    pub(crate) fn new() -> Self {
        Self {
            buckets: [AtomicU64::new(pack(1, 0)), AtomicU64::new(pack(0, 0))],
        }
    }

    fn load(&self, order: Ordering) -> [u64; 2] {
        [self.buckets[0].load(order), self.buckets[1].load(order)]
    }

    /// Sum of both buckets, each loaded with `order` (`Relaxed` or `Acquire`).
    pub(crate) fn total(&self, order: Ordering) -> u64 {
        let w = self.load(order);
        u64::from(value(w[0])) + u64::from(value(w[1]))
    }

    /// Adds `amount` to the young bucket; the successful compare-and-swap has ordering
    /// `order` (`Relaxed` or `Release`). Returns the entry and the field's total just before
    /// (the young bucket's exact pre-value plus the old bucket as last read). With `limit`,
    /// refuses (adding nothing) when that total exceeds it. An addition that would pass
    /// `u32::MAX` is refused ([`AddRefused::Saturated`]), or with `saturate` adds what fits
    /// (the entry's `amount`, possibly 0, is what was added).
    #[inline]
    pub(crate) fn add(
        &self,
        amount: u32,
        limit: Option<u64>,
        order: Ordering,
        saturate: bool,
    ) -> Result<(Entry, u64), AddRefused> {
        let mut words = self.load(Relaxed);
        loop {
            let y = young(words);
            let w = words[y];
            let prior = u64::from(value(w)) + u64::from(value(words[1 - y]));
            if limit.is_some_and(|max| prior > max) {
                return Err(AddRefused::OverLimit { prior });
            }
            let new = match value(w).checked_add(amount) {
                Some(v) => v,
                None if saturate => u32::MAX,
                None => return Err(AddRefused::Saturated),
            };
            match self.buckets[y].compare_exchange_weak(w, pack(tag(w), new), order, Relaxed) {
                Ok(_) => {
                    let entry = Entry {
                        bucket: y as u8,
                        tag: tag(w),
                        amount: new - value(w),
                    };
                    return Ok((entry, prior));
                }
                Err(now) => {
                    words[y] = now;
                    words[1 - y] = self.buckets[1 - y].load(Relaxed);
                }
            }
        }
    }

    /// Takes `entry`'s amount back if its bucket still carries its tag; the successful
    /// compare-and-swap has ordering `order` (`Relaxed` or `Release`).
    pub(crate) fn sub(&self, entry: Entry, order: Ordering) -> Returned {
        let cell = &self.buckets[usize::from(entry.bucket)];
        let mut w = cell.load(Relaxed);
        loop {
            if tag(w) != entry.tag {
                return Returned::Dead;
            }
            let (new, outcome) = match value(w).checked_sub(entry.amount) {
                Some(v) => (v, Returned::Released),
                None => (0, Returned::Clamped),
            };
            match cell.compare_exchange_weak(w, pack(tag(w), new), order, Relaxed) {
                Ok(_) => return outcome,
                Err(now) => w = now,
            }
        }
    }

    /// Adds up to `extra` to a live entry's bucket (as much as fits under `u32::MAX` in both
    /// the bucket and the entry) and records it in the entry. Returns the amount added, or
    /// `None` when the entry is dead.
    pub(crate) fn grow(&self, entry: &mut Entry, extra: u32) -> Option<u32> {
        let cell = &self.buckets[usize::from(entry.bucket)];
        let mut w = cell.load(Relaxed);
        loop {
            if tag(w) != entry.tag {
                return None;
            }
            let add = extra.min(u32::MAX - value(w)).min(u32::MAX - entry.amount);
            match cell.compare_exchange_weak(w, pack(tag(w), value(w) + add), Relaxed, Relaxed) {
                Ok(_) => {
                    entry.amount += add;
                    return Some(add);
                }
                Err(now) => w = now,
            }
        }
    }

    /// Drops the old bucket's reservations and makes it the young one. Returns the amount
    /// dropped. Callers serialise ageing (the table's admin lock).
    pub(crate) fn age(&self) -> u32 {
        let words = self.load(Relaxed);
        let y = young(words);
        let next = tag(words[y]).wrapping_add(1);
        value(self.buckets[1 - y].swap(pack(next, 0), Relaxed))
    }

    /// Drops both buckets (two ageings at once: the old bucket becomes `young tag + 1`, the
    /// young one `young tag + 2`). Returns the amount dropped. Callers serialise it with
    /// ageing. Both swaps are `Release`: a guard that then finds its entry dead sees what
    /// the caller wrote before (the ended-request tag, `finished.rs`).
    pub(crate) fn clear(&self) -> u64 {
        let words = self.load(Relaxed);
        let y = young(words);
        let t = tag(words[y]);
        let old = self.buckets[1 - y].swap(pack(t.wrapping_add(1), 0), Ordering::Release);
        let young = self.buckets[y].swap(pack(t.wrapping_add(2), 0), Ordering::Release);
        u64::from(value(old)) + u64::from(value(young))
    }
}

#[cfg(all(test, not(kvroute_loom)))]
mod tests {
    use super::*;

    #[test]
    fn add_and_sub_exactly_once() {
        let f = FieldCell::new();
        let (a, prior) = f.add(5, None, Relaxed, false).unwrap();
        assert_eq!(prior, 0);
        let (b, prior) = f.add(7, None, Relaxed, false).unwrap();
        assert_eq!(prior, 5);
        assert_eq!(f.total(Relaxed), 12);
        assert_eq!(f.sub(a, Relaxed), Returned::Released);
        assert_eq!(f.total(Relaxed), 7);
        assert_eq!(f.sub(b, Relaxed), Returned::Released);
        assert_eq!(f.total(Relaxed), 0);
    }

    #[test]
    fn ageing_keeps_one_cohort_and_drops_the_next() {
        let f = FieldCell::new();
        let (a, _) = f.add(3, None, Relaxed, false).unwrap();
        assert_eq!(f.age(), 0, "old bucket was empty");
        let (b, prior) = f.add(4, None, Relaxed, false).unwrap();
        assert_eq!(prior, 3, "old bucket counts in the total");
        assert_ne!(a.bucket, b.bucket);
        assert_eq!(f.total(Relaxed), 7);
        assert_eq!(f.age(), 3, "a's cohort is dropped by the second ageing");
        assert_eq!(f.sub(a, Relaxed), Returned::Dead);
        assert_eq!(f.total(Relaxed), 4);
        assert_eq!(f.sub(b, Relaxed), Returned::Released);
        assert_eq!(f.total(Relaxed), 0);
    }

    #[test]
    fn clear_kills_every_entry() {
        let f = FieldCell::new();
        let (a, _) = f.add(2, None, Relaxed, false).unwrap();
        f.age();
        let (b, _) = f.add(9, None, Relaxed, false).unwrap();
        assert_eq!(f.clear(), 11);
        assert_eq!(f.total(Relaxed), 0);
        assert_eq!(f.sub(a, Relaxed), Returned::Dead);
        assert_eq!(f.sub(b, Relaxed), Returned::Dead);
        // New reservations go to a fresh young bucket.
        let (c, prior) = f.add(1, None, Relaxed, false).unwrap();
        assert_eq!(prior, 0);
        assert_eq!(f.sub(c, Relaxed), Returned::Released);
    }

    #[test]
    fn checked_add_and_limit() {
        let f = FieldCell::new();
        let (big, _) = f.add(u32::MAX - 1, None, Relaxed, false).unwrap();
        assert_eq!(f.add(2, None, Relaxed, false), Err(AddRefused::Saturated));
        assert_eq!(
            f.total(Relaxed),
            u64::from(u32::MAX - 1),
            "a refused add adds nothing"
        );
        assert_eq!(
            f.add(1, Some(10), Relaxed, false),
            Err(AddRefused::OverLimit { prior: 4294967294 })
        );
        assert_eq!(f.sub(big, Relaxed), Returned::Released);
        assert!(f.add(1, Some(0), Relaxed, false).is_ok());
    }

    /// A saturating add fills the bucket to `u32::MAX` and its entry records what fitted:
    /// MAX − 10 held, 25 asked gives 10; a second gets 0; their returns take back exactly
    /// 10 and 0.
    #[test]
    fn a_saturating_add_records_what_fitted() {
        let f = FieldCell::new();
        let (base, _) = f.add(u32::MAX - 10, None, Relaxed, true).unwrap();
        assert_eq!(base.amount, u32::MAX - 10);
        let (a, prior) = f.add(25, None, Relaxed, true).unwrap();
        assert_eq!((a.amount, prior), (10, u64::from(u32::MAX - 10)));
        assert_eq!(f.total(Relaxed), u64::from(u32::MAX));
        let (b, _) = f.add(7, None, Relaxed, true).unwrap();
        assert_eq!(b.amount, 0);
        assert_eq!(f.sub(a, Relaxed), Returned::Released);
        assert_eq!(f.total(Relaxed), u64::from(u32::MAX - 10));
        assert_eq!(f.sub(b, Relaxed), Returned::Released);
        assert_eq!(f.sub(base, Relaxed), Returned::Released);
        assert_eq!(f.total(Relaxed), 0);
    }

    #[test]
    fn grow_saturates_and_records() {
        let f = FieldCell::new();
        let (mut e, _) = f.add(10, None, Relaxed, false).unwrap();
        assert_eq!(f.grow(&mut e, 5), Some(5));
        assert_eq!(e.amount, 15);
        assert_eq!(f.total(Relaxed), 15);
        let (mut g, _) = f.add(u32::MAX - 20, None, Relaxed, false).unwrap();
        // Bucket holds 15 + (MAX - 20) = MAX - 5; room is 5.
        assert_eq!(f.grow(&mut g, 100), Some(5));
        assert_eq!(f.total(Relaxed), u64::from(u32::MAX));
        assert_eq!(f.sub(g, Relaxed), Returned::Released);
        assert_eq!(f.sub(e, Relaxed), Returned::Released);
        assert_eq!(f.total(Relaxed), 0);
        f.clear();
        assert_eq!(f.grow(&mut e, 1), None, "dead entry");
    }

    #[test]
    fn newer_wraps() {
        assert!(newer(1, 0));
        assert!(newer(0, u32::MAX));
        assert!(!newer(u32::MAX, 0));
        assert!(!newer(5, 5));
    }
}
