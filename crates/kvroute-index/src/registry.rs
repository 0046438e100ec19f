//! Worker registry: interns `WorkerId`s (engine id, DP rank) into dense slots.
//!
//! Every data-parallel rank of an engine is its own KV cache, so it is its own worker and
//! its own scoring lane. The registry hands out slots `0..capacity` (capacity fixed at
//! construction), lowest free slot first so that lanes stay dense.
//!
//! A removed worker's slot is *retired*, not freed: [`WorkerRegistry::remove`] returns a
//! [`RetiredSlot`] token, and the slot becomes reusable only when that token is handed back
//! to [`WorkerRegistry::release`] after every structure keyed by the slot (index residency,
//! reservations, load lanes) has dropped the old tenant. Each tenancy gets a new
//! [`SlotGeneration`], so anything that outlives its tenant (a reservation guard, a
//! decision) can tell that its slot now belongs to someone else.
//!
//! The registry is on the control path (workers join and leave rarely); it uses one mutex.
//! Routing decisions never touch it.

use core::fmt;

use hashbrown::HashMap;
use kvroute_core::sync::Mutex;
use kvroute_core::{Slot, SlotGeneration, WorkerId};

/// Proof that a worker was removed and its slot awaits cleanup. Hand it to
/// [`WorkerRegistry::release`] once every structure keyed by the slot has dropped the old
/// tenant; until then the slot is never reassigned.
#[must_use = "a retired slot is never reused until it is released"]
#[derive(Debug, PartialEq, Eq)]
pub struct RetiredSlot {
    slot: Slot,
    generation: SlotGeneration,
    worker: WorkerId,
}

impl RetiredSlot {
    /// The retired slot.
    pub fn slot(&self) -> Slot {
        self.slot
    }
    /// The generation of the tenancy that ended.
    pub fn generation(&self) -> SlotGeneration {
        self.generation
    }
    /// The worker that held it.
    pub fn worker(&self) -> WorkerId {
        self.worker
    }
}

/// Errors of the registry.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistryError {
    /// Every slot is taken (or retired and not yet released).
    Full {
        /// The registry's fixed capacity.
        capacity: usize,
    },
    /// The worker is not registered.
    UnknownWorker(WorkerId),
    /// A [`RetiredSlot`] from another registry, or released twice.
    ForeignRetiredSlot(Slot),
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full { capacity } => write!(f, "all {capacity} worker slots are in use"),
            Self::UnknownWorker(w) => write!(f, "worker {w} is not registered"),
            Self::ForeignRetiredSlot(s) => write!(f, "slot {} is not retired here", s.0),
        }
    }
}

impl std::error::Error for RegistryError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Free,
    Live(WorkerId),
    Retired,
}

struct Inner {
    by_worker: HashMap<WorkerId, Slot>,
    states: Vec<SlotState>,
    generations: Vec<u64>,
    /// Free slots; allocation takes the lowest (a sorted stack, lowest at the end).
    free: Vec<u32>,
}

/// Interns workers into dense slots; see the module docs for the slot lifecycle.
pub struct WorkerRegistry {
    capacity: usize,
    inner: Mutex<Inner>,
}

impl WorkerRegistry {
    /// The minimum capacity a router may ask for is 1; kvroute's defaults use 1,024.
    pub const DEFAULT_CAPACITY: usize = 1024;

    /// A registry of `capacity` slots.
    ///
    /// # Panics
    /// If `capacity` is 0 or above `u32::MAX` (configuration errors).
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0 && capacity <= u32::MAX as usize);
        let free: Vec<u32> = (0..capacity as u32).rev().collect();
        Self {
            capacity,
            inner: Mutex::new(Inner {
                by_worker: HashMap::new(),
                states: vec![SlotState::Free; capacity],
                generations: vec![0; capacity],
                free,
            }),
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn lock(&self) -> kvroute_core::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock leaves `Inner` consistent (every mutation below is
        // a single step after all checks), so a poisoned lock is safe to keep using.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The worker's slot, registering it in the lowest free slot if it is new. Returns the
    /// slot, its generation, and whether this call registered it.
    ///
    /// # Errors
    /// [`RegistryError::Full`] when no slot is free.
    pub fn get_or_add(
        &self,
        worker: WorkerId,
    ) -> Result<(Slot, SlotGeneration, bool), RegistryError> {
        let mut g = self.lock();
        if let Some(&slot) = g.by_worker.get(&worker) {
            return Ok((slot, SlotGeneration(g.generations[slot.index()]), false));
        }
        let Some(raw) = g.free.pop() else {
            return Err(RegistryError::Full {
                capacity: self.capacity,
            });
        };
        let slot = Slot(raw);
        g.states[slot.index()] = SlotState::Live(worker);
        g.generations[slot.index()] += 1;
        g.by_worker.insert(worker, slot);
        Ok((slot, SlotGeneration(g.generations[slot.index()]), true))
    }

    /// The slot of a registered worker.
    pub fn slot_of(&self, worker: WorkerId) -> Option<Slot> {
        self.lock().by_worker.get(&worker).copied()
    }

    /// The worker in `slot` and the tenancy's generation, if the slot is live.
    pub fn worker_at(&self, slot: Slot) -> Option<(WorkerId, SlotGeneration)> {
        let g = self.lock();
        match g.states.get(slot.index())? {
            SlotState::Live(w) => Some((*w, SlotGeneration(g.generations[slot.index()]))),
            _ => None,
        }
    }

    /// Unregisters `worker`. Its slot is retired until [`release`](Self::release).
    ///
    /// # Errors
    /// [`RegistryError::UnknownWorker`] when it is not registered.
    pub fn remove(&self, worker: WorkerId) -> Result<RetiredSlot, RegistryError> {
        let mut g = self.lock();
        let slot = g
            .by_worker
            .remove(&worker)
            .ok_or(RegistryError::UnknownWorker(worker))?;
        g.states[slot.index()] = SlotState::Retired;
        Ok(RetiredSlot {
            slot,
            generation: SlotGeneration(g.generations[slot.index()]),
            worker,
        })
    }

    /// Makes a retired slot reusable. Call it only after the old tenant's residency,
    /// reservations and load lanes are gone.
    ///
    /// # Errors
    /// [`RegistryError::ForeignRetiredSlot`] when the token does not match a retired slot of
    /// this registry (wrong registry, or a generation that has moved on).
    pub fn release(&self, retired: RetiredSlot) -> Result<(), RegistryError> {
        let mut g = self.lock();
        let i = retired.slot.index();
        let ok = g.states.get(i) == Some(&SlotState::Retired)
            && g.generations[i] == retired.generation.0;
        if !ok {
            return Err(RegistryError::ForeignRetiredSlot(retired.slot));
        }
        g.states[i] = SlotState::Free;
        // Keep the free stack sorted descending so `pop` yields the lowest slot.
        let pos = g.free.partition_point(|&s| s > retired.slot.0);
        g.free.insert(pos, retired.slot.0);
        Ok(())
    }

    /// Number of live (registered) workers.
    pub fn len(&self) -> usize {
        self.lock().by_worker.len()
    }

    /// Whether no worker is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every live worker with its slot, in slot order.
    pub fn workers(&self) -> Vec<(Slot, WorkerId)> {
        let g = self.lock();
        let mut v: Vec<(Slot, WorkerId)> = g.by_worker.iter().map(|(w, s)| (*s, *w)).collect();
        v.sort_unstable();
        v
    }
}

impl fmt::Debug for WorkerRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerRegistry")
            .field("capacity", &self.capacity)
            .field("live", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_free_slot_first_and_retired_slots_wait_for_release() {
        let r = WorkerRegistry::new(3);
        let a = WorkerId::new(10, 0);
        let b = WorkerId::new(10, 1);
        let c = WorkerId::new(11, 0);
        assert_eq!(r.get_or_add(a).unwrap(), (Slot(0), SlotGeneration(1), true));
        assert_eq!(r.get_or_add(b).unwrap(), (Slot(1), SlotGeneration(1), true));
        assert_eq!(
            r.get_or_add(a).unwrap(),
            (Slot(0), SlotGeneration(1), false)
        );
        let retired = r.remove(a).unwrap();
        assert_eq!(retired.slot(), Slot(0));
        // Slot 0 is retired, so c gets slot 2.
        assert_eq!(r.get_or_add(c).unwrap().0, Slot(2));
        assert_eq!(
            r.get_or_add(a),
            Err(RegistryError::Full { capacity: 3 }),
            "a retired slot is not reusable before release"
        );
        r.release(retired).unwrap();
        // Re-added worker: same slot, new generation.
        assert_eq!(r.get_or_add(a).unwrap(), (Slot(0), SlotGeneration(2), true));
        assert_eq!(r.worker_at(Slot(0)), Some((a, SlotGeneration(2))));
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn unknown_and_foreign() {
        let r = WorkerRegistry::new(2);
        let w = WorkerId::new(1, 0);
        assert_eq!(r.remove(w), Err(RegistryError::UnknownWorker(w)));
        let other = WorkerRegistry::new(2);
        other.get_or_add(w).unwrap();
        let t = other.remove(w).unwrap();
        assert_eq!(
            r.release(t),
            Err(RegistryError::ForeignRetiredSlot(Slot(0)))
        );
    }
}
