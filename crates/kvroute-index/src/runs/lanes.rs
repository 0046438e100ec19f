//! One worker's lane map: engine hash → position `(run, offset)`, an open-addressing table
//! of 16-byte slots.
//!
//! Linear probing from a Fibonacci home slot; deletion shifts the following entries back
//! into the hole (no tombstones, so an engine's steady churn of stores and removals never
//! degrades probes). The table doubles when it would pass 3/4 full and halves, with
//! hysteresis, once it is below 1/8 full and larger than [`KEEP_SLOTS`]. `u64::MAX` marks
//! an empty slot; an engine hash of that value is kept beside the table.
//!
//! Why 3/4: linear probing's expected probes for an insert (an unsuccessful search) at
//! load `a` are `(1 + 1 / (1 - a)^2) / 2` (Knuth, *The Art of Computer Programming* vol.
//! 3, section 6.4): 8.5 at 3/4, 32.5 at 7/8. The peer bench's `ingest/store` row
//! went from 1.99 to 1.44 ms when the threshold went from 7/8 to 3/4 (`docs/BENCHMARKS.md`,
//! "kvroute's run-compressed index beside them").

use crate::index::table::prefetch_read;

/// Slots below which the table never shrinks (it keeps its allocation when it empties).
pub(crate) const KEEP_SLOTS: usize = 128;

const EMPTY: u64 = u64::MAX;

/// Where one engine hash sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lane {
    pub(crate) run: u32,
    pub(crate) off: u32,
}

#[derive(Clone, Copy)]
struct Entry {
    key: u64,
    lane: Lane,
}

const VACANT: Entry = Entry {
    key: EMPTY,
    lane: Lane { run: 0, off: 0 },
};

/// The lane map; see the module docs.
#[derive(Default)]
pub(crate) struct LaneMap {
    slots: Vec<Entry>,
    len: usize,
    /// The entry of engine hash `u64::MAX`, if any.
    max_key: Option<Lane>,
}

impl LaneMap {
    #[inline]
    fn home(&self, key: u64) -> usize {
        let bits = self.slots.len().trailing_zeros();
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Entries.
    pub(crate) fn len(&self) -> usize {
        self.len + usize::from(self.max_key.is_some())
    }

    /// Starts loading the home slot of `key` (for a batch of lookups).
    #[inline]
    pub(crate) fn prefetch(&self, key: u64) {
        if !self.slots.is_empty() {
            prefetch_read(core::ptr::from_ref(&self.slots[self.home(key)]).cast());
        }
    }

    fn find(&self, key: u64) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            let k = self.slots[i].key;
            if k == key {
                return Some(i);
            }
            if k == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// The lane of `key`.
    #[inline]
    pub(crate) fn get(&self, key: u64) -> Option<Lane> {
        if key == EMPTY {
            return self.max_key;
        }
        self.find(key).map(|i| self.slots[i].lane)
    }

    /// Points `key` at `lane` if it is present; returns whether it was.
    pub(crate) fn set(&mut self, key: u64, lane: Lane) -> bool {
        if key == EMPTY {
            return match &mut self.max_key {
                Some(l) => {
                    *l = lane;
                    true
                }
                None => false,
            };
        }
        match self.find(key) {
            Some(i) => {
                self.slots[i].lane = lane;
                true
            }
            None => false,
        }
    }

    /// Inserts or replaces `key`'s lane.
    pub(crate) fn insert(&mut self, key: u64, lane: Lane) {
        if !self.insert_new(key, lane) {
            self.set(key, lane);
        }
    }

    /// Inserts `key` unless it is present; returns whether it inserted.
    #[inline]
    pub(crate) fn insert_new(&mut self, key: u64, lane: Lane) -> bool {
        if key == EMPTY {
            if self.max_key.is_some() {
                return false;
            }
            self.max_key = Some(lane);
            return true;
        }
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.resize((self.slots.len() * 2).max(16));
        }
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            let k = self.slots[i].key;
            if k == key {
                return false;
            }
            if k == EMPTY {
                self.slots[i] = Entry { key, lane };
                self.len += 1;
                return true;
            }
            i = (i + 1) & mask;
        }
    }

    /// Removes `key`, returning its lane.
    pub(crate) fn remove(&mut self, key: u64) -> Option<Lane> {
        if key == EMPTY {
            return self.max_key.take();
        }
        let mut hole = self.find(key)?;
        let lane = self.slots[hole].lane;
        let mask = self.mask();
        // Shift back every following entry whose home lies at or before the hole.
        let mut j = (hole + 1) & mask;
        loop {
            let k = self.slots[j].key;
            if k == EMPTY {
                break;
            }
            let h = self.home(k);
            // `j`'s entry may move to `hole` when `hole` lies cyclically in [h, j).
            if (j.wrapping_sub(h) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.slots[hole] = VACANT;
        self.len -= 1;
        let cap = self.slots.len();
        if cap > KEEP_SLOTS && self.len * 8 < cap {
            self.resize((self.len * 4).next_power_of_two().max(KEEP_SLOTS));
        }
        Some(lane)
    }

    fn resize(&mut self, cap: usize) {
        let old = core::mem::replace(&mut self.slots, vec![VACANT; cap]);
        let mask = cap - 1;
        for e in old.into_iter().filter(|e| e.key != EMPTY) {
            let mut i = self.home(e.key);
            while self.slots[i].key != EMPTY {
                i = (i + 1) & mask;
            }
            self.slots[i] = e;
        }
    }

    /// Every engine hash.
    pub(crate) fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.slots
            .iter()
            .filter(|e| e.key != EMPTY)
            .map(|e| e.key)
            .chain(self.max_key.map(|_| EMPTY))
    }

    /// Gives back spare slots (down to twice the entries, at least 16; none when empty).
    pub(crate) fn trim(&mut self) {
        if self.len == 0 {
            self.slots = Vec::new();
        } else {
            let want = (self.len * 2).next_power_of_two().max(16);
            if want < self.slots.len() {
                self.resize(want);
            }
        }
    }

    /// Heap bytes.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * core::mem::size_of::<Entry>()
    }
}

#[cfg(all(test, not(kvroute_loom)))]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn agrees_with_a_hash_map_under_churn() {
        let mut m = LaneMap::default();
        let mut model: HashMap<u64, Lane> = HashMap::new();
        let mut x: u64 = 0x0009_8765_4321;
        for step in 0..200_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few distinct keys (collisions and long probe runs), the empty marker among them.
            let key = match x % 1000 {
                0 => u64::MAX,
                k => k * 0x1_0000_0001,
            };
            let lane = Lane {
                run: step,
                off: step / 3,
            };
            match (x >> 32) % 5 {
                0 | 1 => {
                    m.insert(key, lane);
                    model.insert(key, lane);
                }
                4 => {
                    let fresh = !model.contains_key(&key);
                    assert_eq!(m.insert_new(key, lane), fresh);
                    if fresh {
                        model.insert(key, lane);
                    }
                }
                2 => assert_eq!(m.remove(key), model.remove(&key)),
                _ => assert_eq!(m.get(key), model.get(&key).copied()),
            }
            assert_eq!(m.len(), model.len());
        }
        for (k, l) in &model {
            assert_eq!(m.get(*k), Some(*l));
        }
        let mut keys: Vec<u64> = m.keys().collect();
        keys.sort_unstable();
        let mut want: Vec<u64> = model.keys().copied().collect();
        want.sort_unstable();
        assert_eq!(keys, want);
        for k in want {
            m.remove(k);
        }
        assert_eq!(m.len(), 0);
        // Emptied by removals it shrinks to its floor; `trim` frees it.
        assert_eq!(m.heap_bytes(), KEEP_SLOTS * 16);
        m.trim();
        assert_eq!(m.heap_bytes(), 0);
    }
}
