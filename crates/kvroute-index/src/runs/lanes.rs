//! One worker's lane map: engine hash → position `(run, offset)`, an open-addressing table
//! of 16-byte slots.
//!
//! A [`HashSlots`] (linear probing, backward-shift deletion, so an engine's steady churn of
//! stores and removals never degrades probes; it doubles when it would pass 3/4 full) that
//! shrinks, with hysteresis, once it is below 1/8 full and larger than [`KEEP_SLOTS`].
//!
//! Why 3/4: linear probing's expected probes for an insert (an unsuccessful search) at
//! load `a` are `(1 + 1 / (1 - a)^2) / 2` (Knuth, *The Art of Computer Programming* vol.
//! 3, section 6.4): 8.5 at 3/4, 32.5 at 7/8. The peer bench's `ingest/store` row
//! went from 1.99 to 1.44 ms when the threshold went from 7/8 to 3/4 (`docs/BENCHMARKS.md`,
//! "kvroute's run-compressed index beside them").

use crate::slots::HashSlots;

/// Slots below which the table never shrinks (it keeps its allocation when it empties).
pub(crate) const KEEP_SLOTS: usize = 128;

/// Where one engine hash sits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Lane {
    pub(crate) run: u32,
    pub(crate) off: u32,
}

/// The lane map; see the module docs.
#[derive(Default)]
pub(crate) struct LaneMap {
    t: HashSlots<Lane>,
}

impl LaneMap {
    /// Entries.
    pub(crate) fn len(&self) -> usize {
        self.t.len()
    }

    /// Starts loading the home slot of `key` (for a batch of lookups).
    #[inline]
    pub(crate) fn prefetch(&self, key: u64) {
        self.t.prefetch(key);
    }

    /// The lane of `key`.
    #[inline]
    pub(crate) fn get(&self, key: u64) -> Option<Lane> {
        self.t.get(key)
    }

    /// Points `key` at `lane` if it is present; returns whether it was.
    pub(crate) fn set(&mut self, key: u64, lane: Lane) -> bool {
        self.t.set(key, lane)
    }

    /// Inserts or replaces `key`'s lane.
    pub(crate) fn insert(&mut self, key: u64, lane: Lane) {
        if !self.insert_new(key, lane) {
            self.set(key, lane);
        }
    }

    /// Inserts `key` unless it is present; returns whether it inserted (the table doubles
    /// past 3/4 full).
    #[inline]
    pub(crate) fn insert_new(&mut self, key: u64, lane: Lane) -> bool {
        self.t.insert_new(key, lane)
    }

    /// Removes `key`, returning its lane.
    pub(crate) fn remove(&mut self, key: u64) -> Option<Lane> {
        let lane = self.t.remove(key)?;
        let (len, cap) = (self.t.slotted(), self.t.slot_count());
        if cap > KEEP_SLOTS && len * 8 < cap {
            self.t.rehash((len * 4).next_power_of_two().max(KEEP_SLOTS));
        }
        Some(lane)
    }

    /// Every engine hash.
    pub(crate) fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.t.keys()
    }

    /// Gives back spare slots (down to twice the entries, at least 16; none when empty).
    pub(crate) fn trim(&mut self) {
        let len = self.t.slotted();
        if len == 0 {
            self.t.rehash(0);
        } else {
            let want = (len * 2).next_power_of_two().max(16);
            if want < self.t.slot_count() {
                self.t.rehash(want);
            }
        }
    }

    /// Heap bytes.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.t.heap_bytes()
    }
}

#[cfg(all(test, not(kvroute_loom)))]
mod tests {
    use super::*;

    fn lane(i: u64) -> Lane {
        Lane {
            run: i as u32,
            off: (i / 3) as u32,
        }
    }

    /// The map's own policy over `HashSlots` (whose probing is tested in `slots`): it
    /// doubles past 3/4 full, shrinks once below 1/8 to four times its entries (never
    /// below `KEEP_SLOTS`), `insert` replaces, and `trim` gives back what is spare.
    #[test]
    fn grows_shrinks_and_trims_by_its_load() {
        let mut m = LaneMap::default();
        // 3,072 entries fill 4,096 slots to 3/4; the next one doubles them.
        for k in 1..=3_072u64 {
            assert!(m.insert_new(k, lane(k)));
        }
        assert_eq!(m.heap_bytes(), 4_096 * 16);
        m.insert(3_073, lane(0));
        assert_eq!(m.heap_bytes(), 8_192 * 16);
        // A second insert of a key replaces its lane; `insert_new` leaves it.
        m.insert(3_073, lane(9));
        assert!(!m.insert_new(3_073, lane(1)));
        assert_eq!(m.get(3_073), Some(lane(9)));
        // Down to 1,023 entries: below 1/8 of 8,192, so 4,096 slots.
        for k in 1_024..=3_073u64 {
            assert_eq!(m.remove(k), Some(lane(if k == 3_073 { 9 } else { k })));
        }
        assert_eq!((m.len(), m.heap_bytes()), (1_023, 4_096 * 16));
        // `trim`: twice the entries, rounded up.
        m.trim();
        assert_eq!(m.heap_bytes(), 2_048 * 16);
        assert!((1..1_024u64).all(|k| m.get(k) == Some(lane(k))));
        // Emptied by removals it keeps its floor; `trim` frees it.
        for k in 1..1_024u64 {
            m.remove(k);
        }
        assert_eq!((m.len(), m.heap_bytes()), (0, KEEP_SLOTS * 16));
        m.trim();
        assert_eq!(m.heap_bytes(), 0);
    }
}
