//! The block pool's map from block hash to its first cached block: an open-addressing
//! table of fixed capacity, one 16-byte slot per entry, sized once for every block of the
//! pool.
//!
//! A pool's lookups are nearly all misses in the processor's caches (a replay touches
//! millions of blocks), so the layout is what counts: the key and its block share a slot,
//! so a lookup reads one cache line where a map with separate control bytes reads two.
//! Linear probing from a multiplicative (Fibonacci) home slot, at most 3/4 full (the
//! capacity is the next power of two at or above 4/3 of the pool's blocks; a full pool of
//! 300,000 blocks fills 57 % of its 524,288 slots, where an insert probes 3.2 slots on
//! average, `(1 + 1 / (1 − a)²) / 2` (Knuth, *The Art of Computer Programming* vol. 3,
//! section 6.4), within one or two cache lines), with backward-shift deletion, so a run of
//! any length of evictions and stores never degrades the probes (no tombstones). Key 0
//! marks an empty slot, so the table is allocated zeroed; an entry with that key is kept
//! beside the table.

/// Empty-slot key.
const EMPTY: u64 = 0;

/// `[key, block]`: a plain array, so that a table of them is allocated zeroed.
type Slot = [u64; 2];

const VACANT: Slot = [EMPTY, 0];

/// Hash → block, for at most `entries` keys; see the module docs.
#[derive(Debug)]
pub(crate) struct BlockTable {
    slots: Vec<Slot>,
    /// log2 of the slot count.
    bits: u32,
    len: usize,
    /// The block of key 0, if any.
    zero_key: Option<u32>,
}

impl BlockTable {
    /// A table for at most `entries` keys (more fit, up to 3/4 of the slots, at a
    /// growing probe cost).
    pub(crate) fn with_entries(entries: usize) -> Self {
        let cap = (entries.max(12) * 4).div_ceil(3).next_power_of_two();
        Self {
            slots: vec![VACANT; cap],
            bits: cap.trailing_zeros(),
            len: 0,
            zero_key: None,
        }
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - self.bits)) as usize
    }

    /// Starts loading the slot where a probe for `key` begins (for a run of lookups whose
    /// keys are known ahead).
    #[inline]
    pub(crate) fn prefetch(&self, key: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let p = self.slots[self.home(key)].as_ptr().cast();
            // SAFETY: `_mm_prefetch` is a hint: it never faults, whatever the address, and
            // reads nothing architecturally; SSE is part of the x86_64 baseline.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = key;
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Entries.
    pub(crate) fn len(&self) -> usize {
        self.len + usize::from(self.zero_key.is_some())
    }

    /// The slot holding `key`, or the empty slot that ends its probe sequence.
    #[inline]
    fn probe(&self, key: u64) -> (usize, bool) {
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            let k = self.slots[i][0];
            if k == key {
                return (i, true);
            }
            if k == EMPTY {
                return (i, false);
            }
            i = (i + 1) & mask;
        }
    }

    /// The block of `key`.
    #[inline]
    pub(crate) fn get(&self, key: u64) -> Option<u32> {
        if key == EMPTY {
            return self.zero_key;
        }
        match self.probe(key) {
            (i, true) => Some(self.slots[i][1] as u32),
            _ => None,
        }
    }

    /// Maps `key` to `block` unless `key` is present; returns whether it inserted.
    ///
    /// # Panics
    /// When the table is 3/4 full (the pool never caches more hashes than it has blocks,
    /// for which the table was made).
    pub(crate) fn insert_new(&mut self, key: u64, block: u32) -> bool {
        if key == EMPTY {
            if self.zero_key.is_some() {
                return false;
            }
            self.zero_key = Some(block);
            return true;
        }
        assert!(
            (self.len + 1) * 4 <= self.slots.len() * 3,
            "block table overfull"
        );
        match self.probe(key) {
            (_, true) => false,
            (i, false) => {
                self.slots[i] = [key, u64::from(block)];
                self.len += 1;
                true
            }
        }
    }

    /// Points the present `key` at `block`; returns whether it was present.
    pub(crate) fn set(&mut self, key: u64, block: u32) -> bool {
        if key == EMPTY {
            return self.zero_key.as_mut().map(|b| *b = block).is_some();
        }
        match self.probe(key) {
            (i, true) => {
                self.slots[i][1] = u64::from(block);
                true
            }
            _ => false,
        }
    }

    /// Removes `key`, returning its block.
    pub(crate) fn remove(&mut self, key: u64) -> Option<u32> {
        if key == EMPTY {
            return self.zero_key.take();
        }
        let (mut hole, found) = self.probe(key);
        if !found {
            return None;
        }
        let block = self.slots[hole][1] as u32;
        let mask = self.mask();
        // Every later entry of the cluster whose home is not cyclically inside
        // (hole, j] moves back into the hole, which then moves to its old place.
        let mut j = (hole + 1) & mask;
        while self.slots[j][0] != EMPTY {
            let home = self.home(self.slots[j][0]);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.slots[hole] = VACANT;
        self.len -= 1;
        Some(block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;

    /// Against `std`'s map under random churn, with keys crowded into a few home slots
    /// (small keys: their products' top bits collide often) and the empty-slot key among
    /// them.
    #[test]
    fn agrees_with_a_hash_map_under_churn() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut t = BlockTable::with_entries(200);
        let mut m: HashMap<u64, u32> = HashMap::new();
        let keys: Vec<u64> = (0..300)
            .map(|i| if i == 0 { 0 } else { rng.random::<u64>() >> 52 })
            .collect();
        for step in 0..20_000u32 {
            let k = keys[rng.random_range(0..keys.len())];
            match rng.random_range(0..4) {
                0 | 1 if m.len() < 200 || m.contains_key(&k) => {
                    let fresh = !m.contains_key(&k);
                    assert_eq!(t.insert_new(k, step), fresh);
                    m.entry(k).or_insert(step);
                }
                2 => {
                    let had = m.get_mut(&k).map(|b| *b = step).is_some();
                    assert_eq!(t.set(k, step), had);
                }
                _ => assert_eq!(t.remove(k), m.remove(&k)),
            }
            assert_eq!(t.len(), m.len());
        }
        for &k in &keys {
            assert_eq!(t.get(k), m.get(&k).copied(), "key {k:x}");
        }
    }

    #[test]
    fn capacity_is_four_thirds_of_the_entries_rounded_up_to_a_power_of_two() {
        assert_eq!(BlockTable::with_entries(300_000).slots.len(), 1 << 19);
        assert_eq!(BlockTable::with_entries(393_216).slots.len(), 1 << 19);
        assert_eq!(BlockTable::with_entries(393_217).slots.len(), 1 << 20);
        assert_eq!(BlockTable::with_entries(1).slots.len(), 16);
    }
}
