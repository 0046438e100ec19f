//! Batch operations of [`HashSlots`]: a run of inserts or removals whose keys are known
//! ahead (the blocks of one KV event), with each key's home slot computed once and
//! prefetched [`AHEAD`] keys before it is probed, and the entry count written once per
//! batch instead of once per key.
//!
//! Each is the same, entry for entry, as the single-key operation called once per key in
//! order ([`insert_new`](HashSlots::insert_new), [`remove`](HashSlots::remove)); the tests
//! below compare them with those on random batches.

use super::{EMPTY, HashSlots, Slot, prefetch_addr};

/// Keys ahead of the one being probed whose home slots are being loaded.
pub const AHEAD: usize = 16;

/// Starts loading slot `i` of `slots`, both lines when it straddles two.
#[inline(always)]
fn prefetch_slot<V>(slots: &[Slot<V>], i: usize) {
    let p = core::ptr::from_ref(&slots[i]).cast::<u8>();
    prefetch_addr(p);
    prefetch_addr(p.wrapping_add(size_of::<Slot<V>>() - 1));
}

/// The home slots of the next [`AHEAD`] keys of a batch, each prefetched when computed.
struct Homes([usize; AHEAD]);

impl Homes {
    /// The homes of keys `0..AHEAD` (those below `count`) among `slots`, prefetched.
    #[inline(always)]
    fn start<V>(slots: &[Slot<V>], count: usize, key: &impl Fn(usize) -> u64) -> Self {
        let n = slots.len();
        let mut homes = [0usize; AHEAD];
        for (k, h) in homes.iter_mut().enumerate().take(count) {
            *h = home_of(key(k), n);
            prefetch_slot(slots, *h);
        }
        Self(homes)
    }

    /// Key `k`'s home; computes and prefetches key `k + AHEAD`'s in its place.
    #[inline(always)]
    fn take<V>(
        &mut self,
        k: usize,
        slots: &[Slot<V>],
        count: usize,
        key: &impl Fn(usize) -> u64,
    ) -> usize {
        let home = self.0[k % AHEAD];
        if k + AHEAD < count {
            let h = home_of(key(k + AHEAD), slots.len());
            prefetch_slot(slots, h);
            self.0[k % AHEAD] = h;
        }
        home
    }
}

/// `HashSlots::home_in` for any value type.
#[inline(always)]
fn home_of(key: u64, n: usize) -> usize {
    HashSlots::<()>::home_in(key, n)
}

/// A batch's changes to the entry count and to the entry beside the slots, written back to
/// the map when dropped: at the end of the batch, or while a caller's closure unwinds, so
/// the count always matches the slots.
struct Writeback<'a, V: Copy> {
    len: &'a mut usize,
    max_key: &'a mut Option<V>,
    /// Entries put into the slots.
    added: usize,
    /// Entries taken out of the slots.
    taken: usize,
    /// The entry beside the slots as the batch leaves it.
    max: Option<V>,
}

impl<V: Copy> Drop for Writeback<'_, V> {
    fn drop(&mut self) {
        *self.len = *self.len + self.added - self.taken;
        *self.max_key = self.max;
    }
}

/// The slot holding `key`, or the vacant one that ends its probe sequence, probing from
/// slot `home` of `slots` (at least one of them vacant). Whether `key` is present.
#[inline(always)]
pub(super) fn probe_from<V>(slots: &[Slot<V>], key: u64, home: usize) -> (usize, bool) {
    let n = slots.len();
    let mut i = home;
    loop {
        let k = slots[i].key;
        if k == key {
            return (i, true);
        }
        if k == EMPTY {
            return (i, false);
        }
        i += 1;
        if i >= n {
            i = 0;
        }
    }
}

impl<V: Copy> HashSlots<V> {
    /// The slots, and a writeback of the entry count and the side entry (for a batch).
    #[inline(always)]
    fn batch_parts(&mut self) -> (&mut [Slot<V>], Writeback<'_, V>) {
        let HashSlots {
            slots,
            len,
            max_key,
            ..
        } = self;
        let w = Writeback {
            max: *max_key,
            len,
            max_key,
            added: 0,
            taken: 0,
        };
        (&mut slots[..], w)
    }
}

impl<V: Copy + Default> HashSlots<V> {
    /// Inserts the keys `key(0)`, `key(1)`, …, `key(count − 1)` with the values
    /// `value(k)`, each unless it is present, and stops at the first key already present;
    /// returns how many it inserted (`count` when none was present). The entries are those
    /// of [`insert_new`](Self::insert_new) called once per key in order, except that the
    /// room for all `count` keys is reserved first: a batch that stops early, or whose keys
    /// repeat or include `u64::MAX` (kept beside the slots), may leave the slots larger
    /// than its entries need (as large as `count` more entries need).
    #[inline(always)]
    pub fn insert_new_run(
        &mut self,
        count: usize,
        key: impl Fn(usize) -> u64,
        value: impl Fn(usize) -> V,
    ) -> usize {
        if count == 0 {
            return 0;
        }
        self.reserve(count);
        let (slots, mut w) = self.batch_parts();
        let mut homes = Homes::start(slots, count, &key);
        for k in 0..count {
            let kk = key(k);
            let i = homes.take(k, slots, count, &key);
            if kk == EMPTY {
                if w.max.is_some() {
                    return k;
                }
                w.max = Some(value(k));
                continue;
            }
            let (i, present) = probe_from(slots, kk, i);
            if present {
                return k;
            }
            slots[i] = Slot {
                key: kk,
                value: value(k),
            };
            w.added += 1;
        }
        count
    }

    /// Removes each of the keys `key(0)`, …, `key(count − 1)` that is present, calling
    /// `removed(k, value)` for each in order; returns how many were present. The entries
    /// are those of [`remove`](Self::remove) called once per key in order.
    #[inline(always)]
    pub fn remove_each(
        &mut self,
        count: usize,
        key: impl Fn(usize) -> u64,
        mut removed: impl FnMut(usize, V),
    ) -> usize {
        let (slots, mut w) = self.batch_parts();
        let n = slots.len();
        let mut max_gone = 0;
        let mut homes = (n > 0).then(|| Homes::start(slots, count, &key));
        for k in 0..count {
            let kk = key(k);
            let hole = homes.as_mut().map(|h| h.take(k, slots, count, &key));
            if kk == EMPTY {
                if let Some(v) = w.max.take() {
                    max_gone += 1;
                    removed(k, v);
                }
                continue;
            }
            let Some(home) = hole else {
                continue;
            };
            let (hole, found) = probe_from(slots, kk, home);
            if !found {
                continue;
            }
            let value = slots[hole].value;
            Self::vacate(slots, hole);
            w.taken += 1;
            removed(k, value);
        }
        w.taken + max_gone
    }
}

#[cfg(all(test, not(kvroute_loom)))]
mod tests {
    use super::super::Growth;
    use super::*;

    /// A small xorshift generator (the tests need no dependency for it).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Every entry of `t` (the slotted ones and the one beside them), sorted.
    fn entries(t: &HashSlots<u32>) -> Vec<(u64, u32)> {
        let mut v: Vec<(u64, u32)> = t
            .slots
            .iter()
            .filter(|e| e.key != EMPTY)
            .map(|e| (e.key, e.value))
            .collect();
        v.extend(t.max_key.map(|x| (EMPTY, x)));
        v.sort_unstable();
        v
    }

    /// Random batches of inserts and removals, keys drawn from a small range (so batches
    /// hit present keys and crowd a few homes) with the empty-slot key among them: the
    /// batch and the single-key operations leave the same entries in the same slots,
    /// with the same counts and the same values reported, at both growths.
    #[test]
    fn batches_equal_single_key_operations() {
        for growth in [Growth::Halves, Growth::Quarters] {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
            let mut batch = HashSlots::<u32>::with_growth(growth);
            let mut single = HashSlots::<u32>::with_growth(growth);
            for round in 0..400 {
                let len = (rng.next() % 70) as usize;
                let keys: Vec<u64> = (0..len)
                    .map(|_| match rng.next() % 40 {
                        0 => EMPTY,
                        _ => rng.next() % 300,
                    })
                    .collect();
                if rng.next() % 2 == 0 {
                    let base = (round * 1000) as u32;
                    let got = batch.insert_new_run(len, |k| keys[k], |k| base + k as u32);
                    // The single-key form: reserve for the batch, then one at a time,
                    // stopping at the first present key.
                    single.reserve(len);
                    let mut want = len;
                    for (k, &key) in keys.iter().enumerate() {
                        if !single.insert_new(key, base + k as u32) {
                            want = k;
                            break;
                        }
                    }
                    assert_eq!(got, want, "round {round}: inserted");
                } else {
                    let mut seen = Vec::new();
                    let got = batch.remove_each(len, |k| keys[k], |k, v| seen.push((k, v)));
                    let mut want = Vec::new();
                    for (k, &key) in keys.iter().enumerate() {
                        if let Some(v) = single.remove(key) {
                            want.push((k, v));
                        }
                    }
                    assert_eq!(seen, want, "round {round}: removed");
                    assert_eq!(got, want.len(), "round {round}: count");
                }
                assert_eq!(batch.len(), single.len(), "round {round}: len");
                assert_eq!(entries(&batch), entries(&single), "round {round}: entries");
                assert_eq!(
                    batch.slots.len(),
                    single.slots.len(),
                    "round {round}: slot count"
                );
                for (i, (a, b)) in batch.slots.iter().zip(&single.slots).enumerate() {
                    let (ak, bk) = (a.key, b.key);
                    assert_eq!(ak, bk, "round {round}: slot {i}");
                }
            }
        }
    }

    /// A closure that panics mid-batch leaves the entry count matching the slots: three
    /// entries in before an insert's panic at the fourth key, one out before a removal's
    /// panic in its callback for the second.
    #[test]
    fn a_panic_mid_batch_keeps_the_count_exact() {
        let mut t = HashSlots::<u32>::with_slots(16);
        let keys = [10u64, 11, 12, 13, 14];
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            t.insert_new_run(
                5,
                |k| keys[k],
                |k| {
                    assert!(k < 3, "value closure fails at the fourth key");
                    k as u32
                },
            )
        }));
        assert!(r.is_err());
        assert_eq!(t.len(), 3);
        assert_eq!(entries(&t), vec![(10, 0), (11, 1), (12, 2)]);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            t.remove_each(
                3,
                |k| keys[k],
                |k, _| assert!(k < 1, "callback fails at the second key"),
            )
        }));
        assert!(r.is_err());
        assert_eq!(t.len(), 1);
        assert_eq!(entries(&t), vec![(12, 2)]);
    }

    /// Hand case: a batch that meets a present key stops there, keeping what it inserted
    /// before it, and a removal batch reports each present key once, in order.
    #[test]
    fn an_insert_batch_stops_at_a_present_key() {
        let mut t = HashSlots::<u32>::with_slots(16);
        assert!(t.insert_new(7, 70));
        let keys = [1u64, 2, 7, 3];
        assert_eq!(t.insert_new_run(4, |k| keys[k], |k| k as u32), 2);
        assert_eq!(t.get(1), Some(0));
        assert_eq!(t.get(2), Some(1));
        assert_eq!(t.get(7), Some(70), "the present key keeps its value");
        assert_eq!(t.get(3), None, "nothing after the present key");
        assert_eq!(t.len(), 3);
        let gone = [2u64, 9, 7, 2];
        let mut seen = Vec::new();
        assert_eq!(t.remove_each(4, |k| gone[k], |k, v| seen.push((k, v))), 2);
        assert_eq!(seen, vec![(0, 1), (2, 70)]);
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(1), Some(0));
    }
}
