//! Who holds what: an engine's DP rank ([`WorkerId`]), the dense lane it is scored in
//! ([`Slot`]) and the tenancy of that lane ([`SlotGeneration`]).

use core::fmt;

/// A worker: one data-parallel rank of one engine, the unit of KV cache and of scoring.
///
/// An engine without DP attention is one worker (`dp_rank` 0); an engine running DP
/// attention over `n` ranks is `n` workers, each with its own KV cache and its own lane.
/// Displayed as `engine_id:dp_rank`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkerId {
    /// The engine (instance) id, as the deployment names it.
    pub engine_id: u64,
    /// The data-parallel rank inside that engine (0 for engines without DP attention).
    pub dp_rank: u32,
}

impl WorkerId {
    /// Shorthand for `WorkerId { engine_id, dp_rank }`.
    pub const fn new(engine_id: u64, dp_rank: u32) -> Self {
        Self { engine_id, dp_rank }
    }

    /// The engine this DP rank belongs to.
    pub const fn engine(self) -> EngineId {
        EngineId(self.engine_id)
    }
}

/// An engine (inference server instance) as the deployment names it: every DP rank of it
/// is a [`WorkerId`] with this `engine_id`. Deployment facts that hold for all its ranks
/// (DP size, scheduler cap, throughputs) are configured per engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EngineId(pub u64);

impl fmt::Display for EngineId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.engine_id, self.dp_rank)
    }
}

/// A dense lane index `0..capacity` assigned to one worker for as long as it is registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slot(pub u32);

impl Slot {
    /// The slot as an array index.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Counts tenancies of one slot: incremented every time a worker is assigned the slot, so
/// that anything outliving its tenant (a reservation guard, a decision) can tell that the
/// slot now belongs to someone else.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotGeneration(pub u64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_id_displays_engine_then_rank() {
        assert_eq!(WorkerId::new(7, 3).to_string(), "7:3");
        assert_eq!(Slot(5).index(), 5);
        assert_eq!(WorkerId::new(7, 3).engine(), EngineId(7));
        assert!(WorkerId::new(1, 9) < WorkerId::new(2, 0));
    }
}
