//! Per-decision scratch buffers (hashes, overlaps, fleet lanes, cost lanes), pooled so that
//! a warm router allocates nothing per decision.

use kvroute_core::SequenceHash;
use kvroute_core::sync::Mutex;
use kvroute_index::index::Overlaps;
use kvroute_score::{Fleet, Scorer};

/// Buffers of one decision in flight.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    pub hashes: Vec<SequenceHash>,
    pub overlaps: Overlaps,
    pub fleet: Fleet,
    pub scorer: Scorer,
}

/// Free scratch buffers; at most [`ScratchPool::KEEP`] are kept.
#[derive(Debug, Default)]
pub(crate) struct ScratchPool {
    free: Mutex<Vec<Scratch>>,
}

impl ScratchPool {
    /// Buffers kept for reuse (decisions in flight beyond this allocate their own).
    const KEEP: usize = 64;

    /// A free buffer set, or a new one.
    pub fn take(&self) -> Scratch {
        // A poisoned pool only holds whole buffer sets.
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        free.pop().unwrap_or_default()
    }

    /// Returns a buffer set for reuse.
    pub fn give(&self, s: Scratch) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < Self::KEEP {
            free.push(s);
        }
    }
}
