//! Per-slot trust flags: which workers' residency `route` must not believe.
//!
//! A slot is untrusted while a replay is pending for its publisher ([`SEQUENCE`]) or after a
//! block-size mismatch left its residency incomplete ([`BLOCK_SIZE`]). `route` zeroes the
//! overlaps of untrusted slots right after matching ([`TrustFlags::mask`]), so their cache
//! is not credited; with no untrusted slot that costs one atomic load.
//!
//! Flags of a slot are only written under that slot's ingest lock or under the router's
//! exclusive membership lock (worker added or removed), so a slot's transitions are
//! serialised; `Relaxed` suffices: a decision racing a gap may use the overlap of the
//! moment before it, as it may use a block removed an instant later.

use kvroute_core::Slot;
use kvroute_core::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};
use kvroute_index::index::Overlaps;

/// Untrusted: a replay is pending (gap, or restart with lost batches).
pub(crate) const SEQUENCE: u32 = 1;
/// Untrusted: stores were rejected for a block-size mismatch.
pub(crate) const BLOCK_SIZE: u32 = 2;

/// One flag word per slot and the count of slots with any flag.
#[derive(Debug)]
pub(crate) struct TrustFlags {
    flags: Box<[AtomicU32]>,
    untrusted: AtomicUsize,
}

impl TrustFlags {
    pub(crate) fn new(slots: usize) -> Self {
        Self {
            flags: (0..slots).map(|_| AtomicU32::new(0)).collect(),
            untrusted: AtomicUsize::new(0),
        }
    }

    /// Sets the flags of `slot` to `value` (0: trusted).
    pub(crate) fn set(&self, slot: Slot, value: u32) {
        let Some(f) = self.flags.get(slot.index()) else {
            return;
        };
        let old = f.swap(value, Relaxed);
        match (old != 0, value != 0) {
            (false, true) => {
                self.untrusted.fetch_add(1, Relaxed);
            }
            (true, false) => {
                self.untrusted.fetch_sub(1, Relaxed);
            }
            _ => {}
        }
    }

    /// The flags of `slot`.
    pub(crate) fn get(&self, slot: Slot) -> u32 {
        self.flags.get(slot.index()).map_or(0, |f| f.load(Relaxed))
    }

    /// Slots with any flag set.
    pub(crate) fn untrusted(&self) -> usize {
        self.untrusted.load(Relaxed)
    }

    /// Zeroes the overlaps of untrusted slots, in place (never allocates).
    pub(crate) fn mask(&self, overlaps: &mut Overlaps) {
        if self.untrusted() == 0 {
            return;
        }
        let hit = |(i, o): (usize, u32)| o > 0 && self.get(Slot(i as u32)) != 0;
        if !overlaps.iter().enumerate().any(hit) {
            return;
        }
        overlaps.zero_where(|slot| self.get(slot) != 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_zeroes_only_untrusted_slots() {
        let t = TrustFlags::new(3);
        let mut o = Overlaps::from_blocks(vec![4, 5, 6]);
        t.mask(&mut o);
        assert_eq!(o.to_vec(), &[4, 5, 6]);
        t.set(Slot(1), SEQUENCE);
        t.set(Slot(1), SEQUENCE | BLOCK_SIZE);
        assert_eq!(t.untrusted(), 1);
        t.mask(&mut o);
        assert_eq!((o.to_vec(), o.deepest()), (vec![4, 0, 6], 6));
        t.set(Slot(1), 0);
        t.set(Slot(9), SEQUENCE); // out of range: ignored
        assert_eq!(t.untrusted(), 0);
    }
}
