//! Shared test support: the emulated engine, a residency model, condition waits.

#![allow(dead_code)]

pub mod engine;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kvroute::{EngineHash, Router, WorkerId};
use kvroute_wire::{BlockRemoved, BlockStored, EventEncoding, KvEvent, KvEventBatch, Medium};

/// Block size of every test batch.
pub const BLOCK: u32 = 4;

/// Engine hash → copies, as the engine holds them (computed by the test, not by kvroute).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Residency(pub BTreeMap<u64, u32>);

impl Residency {
    /// Applies a batch as the engine's cache does: stores add a copy of each block whose
    /// parent is held (or that starts a sequence), removals take one copy, a clear empties.
    pub fn apply(&mut self, batch: &KvEventBatch) {
        for e in &batch.events {
            match e {
                KvEvent::BlockStored(s)
                    if s.parent_block_hash
                        .is_none_or(|p| self.0.contains_key(&p.0)) =>
                {
                    for h in &s.block_hashes {
                        *self.0.entry(h.0).or_default() += 1;
                    }
                }
                KvEvent::BlockRemoved(r) => {
                    for h in &r.block_hashes {
                        if let Some(c) = self.0.get_mut(&h.0) {
                            *c -= 1;
                            if *c == 0 {
                                self.0.remove(&h.0);
                            }
                        }
                    }
                }
                KvEvent::AllBlocksCleared => self.0.clear(),
                _ => {}
            }
        }
    }

    /// The Router's residency of `worker`, in the same form.
    pub fn of(router: &Router, worker: WorkerId) -> Self {
        let Some(slot) = router.slot_of(worker) else {
            return Self::default();
        };
        Self(
            router
                .index()
                .engine_hashes(slot)
                .into_iter()
                .map(|(h, c)| (h.0, c))
                .collect(),
        )
    }
}

/// A store of `hashes` (chained on `parent`), token ids derived from the hashes.
pub fn store(hashes: &[u64], parent: Option<u64>) -> KvEvent {
    let token_ids = hashes
        .iter()
        .flat_map(|&h| (0..BLOCK).map(move |t| (h as u32).wrapping_mul(7).wrapping_add(t)))
        .collect();
    KvEvent::BlockStored(BlockStored::device(
        hashes.iter().map(|&h| EngineHash(h)).collect(),
        parent.map(EngineHash),
        token_ids,
        BLOCK,
    ))
}

/// A removal of one copy of each of `hashes`.
pub fn remove(hashes: &[u64]) -> KvEvent {
    KvEvent::BlockRemoved(BlockRemoved {
        block_hashes: hashes.iter().map(|&h| EngineHash(h)).collect(),
        medium: Medium::Gpu,
        group_idx: None,
        encoding: EventEncoding::Named,
    })
}

/// A batch of rank `dp_rank` at wall-clock `ts` seconds.
pub fn batch(ts: f64, events: Vec<KvEvent>, dp_rank: u32) -> KvEventBatch {
    KvEventBatch {
        ts,
        events,
        dp_rank: Some(dp_rank),
    }
}

/// Wall-clock seconds now (the engines' batch `ts`).
pub fn wall() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Waits until `cond` holds, calling `between` every 50 ms meanwhile; false at the
/// deadline (a generous one: only to avoid a hang).
pub async fn wait_until(
    deadline: Duration,
    mut cond: impl FnMut() -> bool,
    mut between: impl FnMut(),
) -> bool {
    let end = Instant::now() + deadline;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        between();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cond()
}
