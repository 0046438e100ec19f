//! One worker's lane map: engine hash → position `(run, offset)`, an open-addressing table
//! of 12-byte slots (the hash and the position packed into 32 bits).
//!
//! A [`HashSlots`] (linear probing, backward-shift deletion, so an engine's steady churn of
//! stores and removals never degrades probes; it grows by a quarter of the power of two at
//! or below its size when it would pass 3/4 full, [`Growth::Quarters`], so it stays 3/5 to
//! 3/4 full while it grows) that shrinks, with hysteresis, once it is below 1/8 full and
//! larger than [`KEEP_SLOTS`].
//!
//! Why quarters: the lanes are most of the index's bytes for a block held by one worker
//! (12 bytes per entry at the load), and growing by 3/2 and 4/3 left them half full just
//! after a growth: 36.9 bytes per block at the worst count against 31.1 by quarters
//! (`docs/BENCHMARKS.md`, "Lane maps grown by quarters"), for about twice the entry moves
//! while a map grows and a higher mean load (3.6 % more instructions in the ingest
//! bench).
//!
//! Why 3/4: linear probing's expected probes for an insert (an unsuccessful search) at
//! load `a` are `(1 + 1 / (1 - a)^2) / 2` (Knuth, *The Art of Computer Programming* vol.
//! 3, section 6.4): 8.5 at 3/4, 32.5 at 7/8. The peer bench's `ingest/store` row
//! went from 1.99 to 1.44 ms when the threshold went from 7/8 to 3/4 (`docs/BENCHMARKS.md`,
//! "kvroute's run-compressed index beside them").
//!
//! # Packed positions
//! A slot's value is the position as `run << OFF_BITS | offset` when the run is below
//! `2^20 - 1` and the offset below `2^12` (4,096 blocks, 65,536 tokens at block size 16);
//! any other position is [`WIDE`] in the slot and kept in a side map (`wide`), so every
//! position fits and the common one costs 4 bytes. Run numbers are the arena's, which
//! reuses freed records, so they stay below the runs alive at once.

use hashbrown::HashMap;

use crate::slots::{Growth, HashSlots};

/// Slots below which the table never shrinks (it keeps its allocation when it empties).
pub(crate) const KEEP_SLOTS: usize = 128;

/// Bits of a packed position's offset.
const OFF_BITS: u32 = 12;

/// The slot value of a position kept in the side map.
const WIDE: u32 = u32::MAX;

/// Where one engine hash sits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Lane {
    pub(crate) run: u32,
    pub(crate) off: u32,
}

impl Lane {
    /// The packed value, or [`WIDE`] when the position does not fit.
    #[inline(always)]
    fn pack(self) -> u32 {
        if self.off < 1 << OFF_BITS && self.run < (WIDE >> OFF_BITS) {
            self.run << OFF_BITS | self.off
        } else {
            WIDE
        }
    }

    /// The position of a packed value other than [`WIDE`].
    #[inline(always)]
    fn unpack(v: u32) -> Self {
        Self {
            run: v >> OFF_BITS,
            off: v & ((1 << OFF_BITS) - 1),
        }
    }
}

/// The lane map; see the module docs.
pub(crate) struct LaneMap {
    t: HashSlots<u32>,
    /// The positions that do not pack (their slots hold [`WIDE`]).
    wide: HashMap<u64, Lane>,
    /// The entries of the last [`reserve`](Self::reserve) (0 when none).
    reserved: usize,
}

impl Default for LaneMap {
    fn default() -> Self {
        Self {
            t: HashSlots::with_growth(Growth::Quarters),
            wide: HashMap::new(),
            reserved: 0,
        }
    }
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

    /// The position of a slot value of `key`.
    #[inline(always)]
    fn lane_of(&self, key: u64, v: u32) -> Lane {
        if v == WIDE {
            self.wide[&key]
        } else {
            Lane::unpack(v)
        }
    }

    /// The lane of `key`.
    #[inline]
    pub(crate) fn get(&self, key: u64) -> Option<Lane> {
        let v = self.t.get(key)?;
        Some(self.lane_of(key, v))
    }

    /// Points `key` at `lane` if it is present; returns whether it was.
    pub(crate) fn set(&mut self, key: u64, lane: Lane) -> bool {
        let v = lane.pack();
        let Some(old) = self.t.replace(key, v) else {
            return false;
        };
        if v == WIDE {
            self.wide.insert(key, lane);
        } else if old == WIDE {
            self.wide.remove(&key);
        }
        true
    }

    /// Inserts or replaces `key`'s lane.
    pub(crate) fn insert(&mut self, key: u64, lane: Lane) {
        if !self.insert_new(key, lane) {
            self.set(key, lane);
        }
    }

    /// Inserts `key` unless it is present; returns whether it inserted (the table grows
    /// past 3/4 full).
    #[inline(always)]
    pub(crate) fn insert_new(&mut self, key: u64, lane: Lane) -> bool {
        let v = lane.pack();
        if !self.t.insert_new(key, v) {
            return false;
        }
        if v == WIDE {
            self.insert_wide(key, lane);
        }
        true
    }

    /// Records the position of a [`WIDE`] slot.
    #[cold]
    #[inline(never)]
    fn insert_wide(&mut self, key: u64, lane: Lane) {
        self.wide.insert(key, lane);
    }

    /// Maps the engine hashes of `blocks` (engine hash, chained key) to the consecutive
    /// positions `first`, `first + 1`, ... of one run, stopping at the first hash already
    /// present (the caller's copy or conflict); returns how many it inserted. The same
    /// entries as [`insert_new`](Self::insert_new) one at a time, with the room for all
    /// reserved at once (so a stretch that stops early may leave the table one growth
    /// step larger than its entries need), each home slot computed once and prefetched
    /// ahead, and the entry count written once ([`HashSlots::insert_new_run`]).
    pub(crate) fn insert_new_stretch(&mut self, blocks: &[(u64, u64)], first: Lane) -> usize {
        let n = blocks.len();
        let last = Lane {
            run: first.run,
            off: first.off.saturating_add(n.saturating_sub(1) as u32),
        };
        if n == 0 || last.pack() == WIDE || n > u32::MAX as usize {
            // Some position does not pack: one at a time, through the side map.
            for (k, &(eh, _)) in blocks.iter().enumerate() {
                let lane = Lane {
                    run: first.run,
                    off: first.off + k as u32,
                };
                if !self.insert_new(eh, lane) {
                    return k;
                }
            }
            return n;
        }
        // `first + k` packs (the last one does), so its value is `base + k`.
        let base = first.pack();
        self.t
            .insert_new_run(n, |k| blocks[k].0, |k| base + k as u32)
    }

    /// Removes `key`, returning its lane; then gives back slots once the table is below
    /// 1/8 full ([`shrink_if_sparse`](Self::shrink_if_sparse)).
    pub(crate) fn remove(&mut self, key: u64) -> Option<Lane> {
        let lane = self.take(key)?;
        self.shrink_if_sparse();
        Some(lane)
    }

    /// Removes `key`, returning its lane, and keeps the slots (a caller removing a batch
    /// calls [`shrink_if_sparse`](Self::shrink_if_sparse) once after it).
    #[inline(always)]
    pub(crate) fn take(&mut self, key: u64) -> Option<Lane> {
        let v = self.t.remove(key)?;
        Some(if v == WIDE {
            self.take_wide(key)
        } else {
            Lane::unpack(v)
        })
    }

    /// Removes each of `keys` that is present, calling `taken(lane)` for each in order;
    /// returns how many were present. Keeps the slots (the caller calls
    /// [`shrink_if_sparse`](Self::shrink_if_sparse) once after its batch). The same as
    /// [`take`](Self::take) once per key, with each home slot computed once and prefetched
    /// ahead ([`HashSlots::remove_each`]).
    #[inline(always)]
    pub(crate) fn take_each(
        &mut self,
        keys: &[kvroute_core::EngineHash],
        mut taken: impl FnMut(Lane),
    ) -> usize {
        let LaneMap { t, wide, .. } = self;
        t.remove_each(
            keys.len(),
            |k| keys[k].0,
            |k, v| {
                taken(if v == WIDE {
                    take_wide_from(wide, keys[k].0)
                } else {
                    Lane::unpack(v)
                });
            },
        )
    }

    /// The position of a [`WIDE`] slot just removed, out of the side map.
    #[cold]
    #[inline(never)]
    fn take_wide(&mut self, key: u64) -> Lane {
        take_wide_from(&mut self.wide, key)
    }

    /// Grows the slots once so that `entries` entries fit without a growth (at most 3/4
    /// full), and keeps at least that many slots from then on: neither a shrink nor a
    /// [`trim`](Self::trim) goes below them. The last call sets the floor: a smaller count
    /// lowers it (the map then shrinks as usual), 0 removes it.
    pub(crate) fn reserve(&mut self, entries: usize) {
        self.reserved = entries;
        self.t.reserve(entries.saturating_sub(self.t.slotted()));
    }

    /// Slots the map keeps however few entries it holds: the size a reservation of
    /// [`reserved`](Self::reserved) entries grows an empty map to, the least of its growth
    /// at or above `4/3` of them (every size from 16 on is a multiple of 4); 0 when none.
    fn floor(&self) -> usize {
        match self.reserved {
            0 => 0,
            n => self.t.growth().at_least(n.div_ceil(3) * 4),
        }
    }

    /// Shrinks the slots to the least size of at least four times the entries (never below
    /// [`KEEP_SLOTS`] or the reserved floor) when they are larger than that and below 1/8
    /// full.
    pub(crate) fn shrink_if_sparse(&mut self) {
        let (len, cap) = (self.t.slotted(), self.t.slot_count());
        let keep = KEEP_SLOTS.max(self.floor());
        if cap > keep && len * 8 < cap {
            self.t.rehash(self.t.growth().at_least(len * 4).max(keep));
        }
    }

    /// The entries of the last [`reserve`](Self::reserve) (0 when none).
    pub(crate) fn reserved(&self) -> usize {
        self.reserved
    }

    /// Every engine hash.
    pub(crate) fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.t.keys()
    }

    /// Gives back spare slots (down to the least size of at least twice the entries and 16,
    /// never below the reserved floor; none when empty and nothing is reserved).
    pub(crate) fn trim(&mut self) {
        self.wide.shrink_to_fit();
        let (len, floor) = (self.t.slotted(), self.floor());
        if len == 0 && floor == 0 {
            self.t.rehash(0);
        } else {
            let want = self.t.growth().at_least(len * 2).max(16).max(floor);
            if want < self.t.slot_count() {
                self.t.rehash(want);
            }
        }
    }

    /// Heap bytes (the slots and the side map).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.t.heap_bytes() + self.wide.allocation_size()
    }
}

/// The position of a [`WIDE`] slot just removed, out of the side map `wide`.
#[cold]
#[inline(never)]
fn take_wide_from(wide: &mut HashMap<u64, Lane>, key: u64) -> Lane {
    wide.remove(&key)
        .expect("a wide slot's position is in the side map")
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

    /// The map's own policy over `HashSlots` (whose probing is tested in `slots`), by hand:
    /// it grows past 3/4 full by quarters (4,096 slots hold 3,072 entries; the next makes
    /// 5,120),
    /// shrinks once below 1/8 to the least size of at least four times its entries (never
    /// below `KEEP_SLOTS`), `insert` replaces, and `trim` gives back what is spare.
    #[test]
    fn grows_shrinks_and_trims_by_its_load() {
        let mut m = LaneMap::default();
        for k in 1..=3_072u64 {
            assert!(m.insert_new(k, lane(k)));
        }
        assert_eq!(m.heap_bytes(), 4_096 * 12);
        m.insert(3_073, lane(0));
        assert_eq!(m.heap_bytes(), 5_120 * 12);
        // A second insert of a key replaces its lane; `insert_new` leaves it.
        m.insert(3_073, lane(9));
        assert!(!m.insert_new(3_073, lane(1)));
        assert_eq!(m.get(3_073), Some(lane(9)));
        // Down to 1,023 entries: not below 1/8 of 5,120 (640), so no shrink.
        for k in 1_024..=3_073u64 {
            assert_eq!(m.remove(k), Some(lane(if k == 3_073 { 9 } else { k })));
        }
        assert_eq!((m.len(), m.heap_bytes()), (1_023, 5_120 * 12));
        // `trim`: the least size of at least twice the entries (2,046 → 2,048).
        m.trim();
        assert_eq!(m.heap_bytes(), 2_048 * 12);
        // Below 1/8 of 2,048 at 255 entries: the least size of at least 1,020 is 1,024.
        for k in 256..1_024u64 {
            m.remove(k);
        }
        assert_eq!((m.len(), m.heap_bytes()), (255, 1_024 * 12));
        assert!((1..256u64).all(|k| m.get(k) == Some(lane(k))));
        // Emptied by removals it keeps its floor; `trim` frees it.
        for k in 1..256u64 {
            m.remove(k);
        }
        assert_eq!((m.len(), m.heap_bytes()), (0, KEEP_SLOTS * 12));
        m.trim();
        assert_eq!(m.heap_bytes(), 0);
    }

    /// A reservation sizes the map once (10,000 entries: the least size by quarters of at
    /// least 13,334 slots is 14,336), inserting that many grows nothing, and neither a
    /// shrink nor a `trim` goes below it; without one the same inserts end at the same
    /// size through every quarter step, and 9,000 entries at 12,288 slots.
    #[test]
    fn a_reserved_map_holds_its_size() {
        let mut m = LaneMap::default();
        m.reserve(10_000);
        assert_eq!(m.heap_bytes(), 14_336 * 12);
        for k in 1..=10_000u64 {
            assert!(m.insert_new(k, lane(k)));
            assert_eq!(m.heap_bytes(), 14_336 * 12, "entry {k}");
        }
        for k in 1..=9_990u64 {
            assert_eq!(m.remove(k), Some(lane(k)));
            m.shrink_if_sparse();
        }
        assert_eq!((m.len(), m.heap_bytes()), (10, 14_336 * 12));
        m.trim();
        assert_eq!(m.heap_bytes(), 14_336 * 12);
        assert!((9_991..=10_000u64).all(|k| m.get(k) == Some(lane(k))));
        // A reservation below what the map holds only sets the floor.
        m.reserve(5);
        assert_eq!(m.heap_bytes(), 14_336 * 12);
        m.trim();
        // `trim` then goes down to the least size of at least twice the 10 entries.
        assert_eq!(m.heap_bytes(), 20 * 12);
        // Unreserved: 9,000 entries end at 12,288 slots (3/4 of it is 9,216).
        let mut u = LaneMap::default();
        for k in 1..=9_000u64 {
            u.insert_new(k, lane(k));
        }
        assert_eq!(u.heap_bytes(), 12_288 * 12);
    }

    /// Positions that do not pack (a run at or past `2^20 - 1`, an offset at or past
    /// 4,096) go through the side map and come back whole, across inserts, `set`s that
    /// move a key between packed and wide, and removals; against `std`'s map.
    #[test]
    fn wide_positions_round_trip_through_the_side_map() {
        // The packing's edges, by hand.
        assert_eq!(Lane { run: 3, off: 5 }.pack(), 3 << 12 | 5);
        assert_eq!(
            Lane {
                run: 0xF_FFFE,
                off: 4_095
            }
            .pack(),
            0xFFFF_EFFF
        );
        assert_eq!(
            Lane {
                run: 0xF_FFFF,
                off: 0
            }
            .pack(),
            WIDE
        );
        assert_eq!(Lane { run: 0, off: 4_096 }.pack(), WIDE);
        let mut m = LaneMap::default();
        let mut want: std::collections::HashMap<u64, Lane> = Default::default();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = x % 2_000;
            let l = Lane {
                run: [7, 0xF_FFFE, 0xF_FFFF, u32::MAX][(x >> 20) as usize % 4],
                off: [0, 4_095, 4_096, u32::MAX][(x >> 30) as usize % 4],
            };
            match (x >> 40) % 4 {
                0 => {
                    // `insert_new` leaves a present key.
                    let fresh = !want.contains_key(&key);
                    assert_eq!(m.insert_new(key, l), fresh);
                    want.entry(key).or_insert(l);
                }
                1 => {
                    let had = want.get_mut(&key).map(|v| *v = l).is_some();
                    assert_eq!(m.set(key, l), had);
                }
                2 => assert_eq!(m.remove(key), want.remove(&key)),
                _ => assert_eq!(m.get(key), want.get(&key).copied()),
            }
            assert_eq!(m.len(), want.len());
        }
        assert!(want.iter().all(|(&k, &v)| m.get(k) == Some(v)));
        let wide = want.values().filter(|l| l.pack() == WIDE).count();
        assert_eq!(m.wide.len(), wide);
        assert!(wide > 0);
    }

    /// `insert_new_stretch` against `std`'s map: each stretch maps its hashes to
    /// consecutive offsets from its first lane until a hash already present (returning
    /// how many went in), across stretches whose last offset packs, does not (an offset
    /// past 4,095, a run past `2^20 - 2`), a `u64::MAX` hash, and growth; the slot count
    /// after a whole stretch is the one inserts one at a time reach.
    #[test]
    fn a_stretch_maps_consecutive_offsets_until_a_present_hash() {
        let mut m = LaneMap::default();
        let mut one = LaneMap::default();
        let mut want: std::collections::HashMap<u64, Lane> = Default::default();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..300u32 {
            let n = (next() % 200) as usize;
            let mut blocks: Vec<(u64, u64)> = (0..n).map(|_| (next() % 100_000, 0)).collect();
            if round % 7 == 3 && n > 0 {
                blocks[n / 2].0 = u64::MAX;
            }
            let first = Lane {
                run: [5, 0xF_FFFE, 0xF_FFFF][round as usize % 3],
                off: [0, 3_990, 4_095][(round / 3) as usize % 3],
            };
            // Reference: one at a time, stopping at the first present hash.
            let mut expect = n;
            for (k, &(eh, _)) in blocks.iter().enumerate() {
                let l = Lane {
                    run: first.run,
                    off: first.off + k as u32,
                };
                if want.contains_key(&eh) {
                    expect = k;
                    break;
                }
                want.insert(eh, l);
                assert!(one.insert_new(eh, l));
            }
            assert_eq!(
                m.insert_new_stretch(&blocks, first),
                expect,
                "round {round}"
            );
            assert_eq!(m.len(), want.len());
            // The room is reserved for the whole stretch, so one that stops early may have
            // grown further than the entries it took need.
            if expect == n {
                assert_eq!(m.t.slot_count(), one.t.slot_count(), "round {round}");
            } else {
                assert!(m.t.slot_count() >= one.t.slot_count(), "round {round}");
                one.t.reserve(m.t.slot_count() * 3 / 4 - one.len());
            }
        }
        assert!(want.iter().all(|(&k, &v)| m.get(k) == Some(v)));
        assert!(m.get(u64::MAX).is_some());
        assert!(!m.wide.is_empty());
    }
}
