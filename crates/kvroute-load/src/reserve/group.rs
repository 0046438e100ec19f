//! Live-reservation counts per group of [`GROUP_SLOTS`] slots, so that a reader of every
//! slot's totals ([`ReservationTable::reserved_nonzero`](super::ReservationTable::reserved_nonzero))
//! can skip a group holding no reservation without touching its slots' cache lines.
//!
//! A group's count is the number of reservation guards on its slots that have been handed
//! out and not yet returned. [`ReservationTable::reserve`](super::ReservationTable::reserve)
//! raises it after the reservation's per-slot counters are raised and the tenancy is
//! re-validated (a refused reserve never raises it); the guard lowers it once, after it has
//! returned its per-slot amounts. Amounts dropped in bulk (sweeping, reconciliation, worker
//! removal) leave the count raised until their guards return: the count may over-state
//! what the slots hold (a group is then read, not skipped), never under-state it. A leaked
//! guard (`mem::forget`) keeps its group read on every scan; nothing else is lost.
//!
//! # Orderings
//! * Raising is a `fetch_add(1, Release)` after the slot counters' additions (the request
//!   count's own `Release` compare-and-swap included), so a reader whose `Acquire` load of
//!   the count reads that raise, or any later value (every later write is a
//!   read-modify-write, continuing the release sequence), synchronises with it and then
//!   sees the reservation's additions whole (or later values of those words, which drop
//!   them only when it is being returned or dropped).
//! * A reservation whose `reserve` returned before a scan began is never missed: its raise
//!   happens-before the scan's load of the count, so (coherence) the load reads the raise
//!   or a later value in the count's modification order. Each guard's lowering comes after
//!   its own raising in that order (it happens-after it, on whichever thread drops the
//!   guard), so every value from the raise until this guard's lowering is at least 1: the
//!   group is read. Only a scan racing with that guard's own return can read it as 0, and
//!   then the reservation is ending.
//! * A reservation made concurrently with the scan may be seen (the load reads its raise)
//!   or not (skipped, or its slot read before the additions), exactly as without groups.
//! * Lowering is a `fetch_sub(1, Release)` after the per-slot subtractions, so while a
//!   group reads as 0 after a guard's return, the slots no longer hold its amounts.
//! * Counts never wrap: only a guard that raised a count lowers it, once.

use kvroute_core::sync::atomic::{AtomicU64, Ordering};

/// Slots per group: one count per this many consecutive slots.
pub const GROUP_SLOTS: usize = 64;

/// One group's count, on its own cache line (decisions reserving in different groups do
/// not contend).
#[repr(align(64))]
struct GroupCell(AtomicU64);

/// The counts of every group of a table.
pub(crate) struct GroupCounts {
    cells: Box<[GroupCell]>,
}

impl GroupCounts {
    /// Counts for `slots` slots (`slots.div_ceil(GROUP_SLOTS)` groups), all zero.
    pub(crate) fn new(slots: usize) -> Self {
        Self {
            cells: (0..slots.div_ceil(GROUP_SLOTS))
                .map(|_| GroupCell(AtomicU64::new(0)))
                .collect(),
        }
    }

    /// Counts a guard handed out on slot index `slot` (after its counters were raised).
    pub(crate) fn raise(&self, slot: usize) {
        self.cells[slot / GROUP_SLOTS]
            .0
            .fetch_add(1, Ordering::Release);
    }

    /// Counts a guard of slot index `slot` returned (after its counters were lowered).
    pub(crate) fn lower(&self, slot: usize) {
        self.cells[slot / GROUP_SLOTS]
            .0
            .fetch_sub(1, Ordering::Release);
    }

    /// Bit `b` set for each group `start + b` (`b < 64`, groups below `end` and inside the
    /// table) whose count is not 0, each count loaded with `Acquire` as [`live`](Self::live)
    /// loads it. One pass over a slice of the cells, last to first, each bit shifted in at
    /// the bottom (a shift by one, not by a variable count), so the loop keeps their
    /// address in a register across the loads.
    pub(crate) fn live_bits(&self, start: usize, end: usize) -> u64 {
        let end = end.min(self.cells.len()).min(start.saturating_add(64));
        let cells = self.cells.get(start..end).unwrap_or(&[]);
        let mut bits = 0u64;
        for c in cells.iter().rev() {
            bits = bits << 1 | u64::from(c.0.load(Ordering::Acquire) != 0);
        }
        bits
    }

    /// Guards out on group `group` (`Acquire`; 0 for a group beyond the table).
    pub(crate) fn live(&self, group: usize) -> u64 {
        self.cells
            .get(group)
            .map_or(0, |c| c.0.load(Ordering::Acquire))
    }
}
