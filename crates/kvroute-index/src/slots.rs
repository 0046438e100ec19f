//! [`HashSlots`]: an open-addressing map for keys that are already uniform 64-bit hashes
//! (engine block hashes), one slot of key and value per entry, and [`prefetch`].
//!
//! The maps built on it (the run index's per-worker lane maps; the simulator's block pool)
//! hold millions of entries and are read at random, so nearly every lookup misses the
//! processor's caches. The layout is what counts: a slot holds its key and value, so a
//! lookup reads one cache line (a map with separate control bytes reads two), and a
//! caller that knows its keys ahead can [`prefetch`](HashSlots::prefetch) their slots.
//!
//! Linear probing from a multiplicative (Fibonacci) home slot; deletion shifts the
//! following entries of the cluster back into the hole, so there are no tombstones and a
//! steady churn of inserts and removals never lengthens the probes. `u64::MAX` marks an
//! empty slot; an entry with that key is kept beside the slots. The slot count is a power
//! of two; an insert that would fill more than 3/4 of the slots first doubles them (at
//! least 16), and the caller may [`rehash`](HashSlots::rehash) to any size that fits (to
//! shrink, or to size the map once for what it will hold).
//!
//! Expected probes of an insert (an unsuccessful search) at load `a` are
//! `(1 + 1 / (1 − a)²) / 2` (Knuth, *The Art of Computer Programming* vol. 3, section 6.4):
//! 2.0 at 1/2, 3.2 at 4/7, 8.5 at 3/4, 32.5 at 7/8.

/// Empty-slot key.
const EMPTY: u64 = u64::MAX;

/// 2^64 / φ, odd: the multiplier of Fibonacci hashing (Knuth, vol. 3, section 6.4).
const FIBONACCI: u64 = 0x9e37_79b9_7f4a_7c15;

/// One slot: its key ([`EMPTY`] when vacant) and value.
#[derive(Clone, Copy, Debug)]
struct Slot<V> {
    key: u64,
    value: V,
}

/// The map; see the module docs. `V` is the value (`Copy`, usually a few bytes; its
/// `Default` fills the vacant slots and is never read).
#[derive(Clone, Debug)]
pub struct HashSlots<V> {
    slots: Vec<Slot<V>>,
    /// log2 of the slot count (0 when there are no slots).
    bits: u32,
    len: usize,
    /// The value of key `u64::MAX`, if any.
    max_key: Option<V>,
}

impl<V> Default for HashSlots<V> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            bits: 0,
            len: 0,
            max_key: None,
        }
    }
}

impl<V: Copy + Default> HashSlots<V> {
    /// An empty map with `slots` slots (0, or a power of two of at least 2).
    ///
    /// # Panics
    /// When `slots` is 1 or not a power of two.
    pub fn with_slots(slots: usize) -> Self {
        assert!(
            slots == 0 || (slots >= 2 && slots.is_power_of_two()),
            "slot count {slots} is not 0 or a power of two of at least 2"
        );
        let vacant = Slot {
            key: EMPTY,
            value: V::default(),
        };
        Self {
            slots: vec![vacant; slots],
            bits: slots.trailing_zeros(),
            len: 0,
            max_key: None,
        }
    }

    /// The home slot of `key`: the top `bits` bits of its Fibonacci product. Only called
    /// with slots, so `bits` is at least 1.
    #[inline(always)]
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(FIBONACCI) >> (64 - self.bits)) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// Entries.
    #[inline]
    pub fn len(&self) -> usize {
        self.len + usize::from(self.max_key.is_some())
    }

    /// Whether the map is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slots.
    #[inline]
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// Entries in the slots (those of every key but `u64::MAX`), to weigh against
    /// [`slot_count`](Self::slot_count).
    #[inline]
    pub fn slotted(&self) -> usize {
        self.len
    }

    /// Starts loading the slot where a probe for `key` begins (for a run of lookups or
    /// inserts whose keys are known ahead).
    #[inline]
    pub fn prefetch(&self, key: u64) {
        if !self.slots.is_empty() {
            prefetch(&self.slots[self.home(key)]);
        }
    }

    /// The slot holding `key`, or the vacant one that ends its probe sequence. Only called
    /// with slots, at least one of them vacant (the load stays below 1).
    #[inline(always)]
    fn probe(&self, key: u64) -> (usize, bool) {
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            let k = self.slots[i].key;
            if k == key {
                return (i, true);
            }
            if k == EMPTY {
                return (i, false);
            }
            i = (i + 1) & mask;
        }
    }

    /// The value of `key`.
    #[inline(always)]
    pub fn get(&self, key: u64) -> Option<V> {
        if key == EMPTY {
            return self.max_key;
        }
        if self.slots.is_empty() {
            return None;
        }
        match self.probe(key) {
            (i, true) => Some(self.slots[i].value),
            _ => None,
        }
    }

    /// Points the present `key` at `value`; returns whether it was present.
    #[inline]
    pub fn set(&mut self, key: u64, value: V) -> bool {
        if key == EMPTY {
            return self.max_key.as_mut().map(|v| *v = value).is_some();
        }
        if self.slots.is_empty() {
            return false;
        }
        match self.probe(key) {
            (i, true) => {
                self.slots[i].value = value;
                true
            }
            _ => false,
        }
    }

    /// Maps `key` to `value` unless it is present; returns whether it inserted. Doubles the
    /// slots first (at least 16) when the entry would fill more than 3/4 of them.
    #[inline(always)]
    pub fn insert_new(&mut self, key: u64, value: V) -> bool {
        if key == EMPTY {
            if self.max_key.is_some() {
                return false;
            }
            self.max_key = Some(value);
            return true;
        }
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.rehash((self.slots.len() * 2).max(16));
        }
        match self.probe(key) {
            (_, true) => false,
            (i, false) => {
                self.slots[i] = Slot { key, value };
                self.len += 1;
                true
            }
        }
    }

    /// Removes `key`, returning its value.
    #[inline(always)]
    pub fn remove(&mut self, key: u64) -> Option<V> {
        if key == EMPTY {
            return self.max_key.take();
        }
        if self.slots.is_empty() {
            return None;
        }
        let (mut hole, found) = self.probe(key);
        if !found {
            return None;
        }
        let value = self.slots[hole].value;
        let mask = self.mask();
        let shift = 64 - self.bits;
        let slots = &mut self.slots[..];
        // Each later entry of the cluster moves back into the hole unless its home lies
        // cyclically in (hole, j]; the hole then moves to where it was.
        let mut j = (hole + 1) & mask;
        loop {
            let k = slots[j].key;
            if k == EMPTY {
                break;
            }
            let h = (k.wrapping_mul(FIBONACCI) >> shift) as usize;
            if (j.wrapping_sub(h) & mask) >= (j.wrapping_sub(hole) & mask) {
                slots[hole] = slots[j];
                hole = j;
            }
            j = (j + 1) & mask;
        }
        slots[hole].key = EMPTY;
        self.len -= 1;
        Some(value)
    }

    /// Moves every entry into `slots` new slots (0, or a power of two of at least 2 above
    /// the entries in the slots).
    ///
    /// # Panics
    /// As [`with_slots`](Self::with_slots), and when the entries do not fit.
    pub fn rehash(&mut self, slots: usize) {
        assert!(
            slots > self.len || (slots == 0 && self.len == 0),
            "entries do not fit"
        );
        let old = core::mem::replace(self, Self::with_slots(slots));
        self.max_key = old.max_key;
        let mask = self.mask();
        for e in old.slots.into_iter().filter(|e| e.key != EMPTY) {
            let mut i = self.home(e.key);
            while self.slots[i].key != EMPTY {
                i = (i + 1) & mask;
            }
            self.slots[i] = e;
            self.len += 1;
        }
    }

    /// Every key, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.slots
            .iter()
            .filter(|e| e.key != EMPTY)
            .map(|e| e.key)
            .chain(self.max_key.map(|_| EMPTY))
    }

    /// Heap bytes (the slots' allocation).
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * core::mem::size_of::<Slot<V>>()
    }
}

/// Starts loading the cache line of `r` into every cache level (a hint: it never faults
/// and changes nothing; a no-op off x86_64).
#[inline]
pub fn prefetch<T>(r: &T) {
    #[cfg(all(target_arch = "x86_64", not(kvroute_loom)))]
    {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let p = core::ptr::from_ref(r).cast::<i8>();
        // SAFETY: `_mm_prefetch` is a hint: it never faults, whatever the address, and
        // reads nothing architecturally; SSE is part of the x86_64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p) };
    }
    #[cfg(not(all(target_arch = "x86_64", not(kvroute_loom))))]
    let _ = r;
}

#[cfg(all(test, not(kvroute_loom)))]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Against `std`'s map under random churn and rehashes up and down, with keys crowded
    /// into a few home slots (small keys: the top bits of their products collide often)
    /// and the empty-slot key among them.
    #[test]
    fn agrees_with_a_hash_map_under_churn_and_rehashes() {
        let mut t: HashSlots<u32> = HashSlots::with_slots(512);
        let mut m: HashMap<u64, u32> = HashMap::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for step in 0..100_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = match x % 301 {
                0 => u64::MAX,
                k => k,
            };
            match (x >> 32) % 7 {
                0..=2 => {
                    let fresh = !m.contains_key(&key);
                    assert_eq!(t.insert_new(key, step), fresh);
                    m.entry(key).or_insert(step);
                }
                3 => {
                    let had = m.get_mut(&key).map(|v| *v = step).is_some();
                    assert_eq!(t.set(key, step), had);
                }
                4 | 5 => assert_eq!(t.remove(key), m.remove(&key)),
                _ => {
                    // Up and down between 512 and 1,024 slots, entries kept.
                    let to = if t.slot_count() == 512 { 1024 } else { 512 };
                    t.rehash(to);
                    assert_eq!(t.slot_count(), to);
                }
            }
            assert_eq!(t.len(), m.len());
            assert_eq!(t.get(key), m.get(&key).copied());
        }
        for (&k, &v) in &m {
            assert_eq!(t.get(k), Some(v));
        }
        let mut keys: Vec<u64> = t.keys().collect();
        keys.sort_unstable();
        let mut want: Vec<u64> = m.keys().copied().collect();
        want.sort_unstable();
        assert_eq!(keys, want);
        assert_eq!(t.heap_bytes(), t.slot_count() * 16);
    }

    #[test]
    fn an_empty_map_has_no_slots_and_finds_nothing() {
        let mut t: HashSlots<u32> = HashSlots::default();
        assert_eq!((t.get(7), t.remove(7), t.set(7, 1)), (None, None, false));
        t.prefetch(7);
        // The empty-slot key needs no slot.
        assert!(t.insert_new(u64::MAX, 3));
        assert_eq!((t.len(), t.slotted(), t.heap_bytes()), (1, 0, 0));
        t.rehash(0);
        assert_eq!(t.get(u64::MAX), Some(3));
    }

    /// Growth at 3/4: 16 slots take 12 entries, the 13th doubles them; from no slots,
    /// the first entry makes 16.
    #[test]
    fn an_insert_past_three_quarters_doubles_the_slots() {
        let mut t: HashSlots<u32> = HashSlots::with_slots(16);
        for k in 1..=12 {
            t.insert_new(k, 0);
        }
        assert_eq!(t.slot_count(), 16);
        t.insert_new(13, 0);
        assert_eq!(t.slot_count(), 32);
        let mut e: HashSlots<u32> = HashSlots::default();
        e.insert_new(1, 0);
        assert_eq!(e.slot_count(), 16);
        assert!((1..=13).all(|k| t.get(k) == Some(0)));
    }

    #[test]
    #[should_panic(expected = "not 0 or a power of two")]
    fn a_slot_count_of_one_is_refused() {
        let _ = HashSlots::<u32>::with_slots(1);
    }
}
