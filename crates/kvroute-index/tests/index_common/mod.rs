//! A naive reference model of the prefix index, shared by this crate's index test binaries
//! and by the router stress test of the workspace (`tests/router_stress.rs`, which includes
//! this module by path: the model is written against kvroute-index, so it cannot live in
//! kvroute-testkit, which depends on no kvroute crate).
//!
//! The model is written from the index's documented contract, not from its code:
//!
//! * per worker, a map `engine hash -> (sequence hash, copies, store stamp)`;
//! * a worker holds sequence hash `s` iff some entry with `copies > 0` maps to `s` (entries
//!   are deleted when their last copy goes, so every entry has `copies >= 1`);
//! * a store of `(e, s)`: same mapping again -> one more copy (and a fresh stamp); `e` mapped
//!   to other content -> the old mapping (all its copies) is dropped and the new one wins
//!   ("the engine's latest word wins", counted as a conflict); a store that would take the
//!   worker past `max_blocks_per_worker` entries first drops `n = max(cap / 16, 1)` entries:
//!   of its `2n` least recently stored entries, the `n` deepest (ties: least recently
//!   stored). Depth: a store's first block is its parent's depth + 1 (0 without a parent,
//!   and for `store_hashes`), each next block one deeper; a re-stored copy keeps its depth
//!   and the block after it continues from there;
//! * a remove drops one copy of each listed engine hash, in order; unknown hashes are counted;
//! * the overlap of worker `w` for a query `h[0..D]` is the largest `k` with `h[0..k]` all held
//!   by `w`;
//! * `residencies` = sum over workers of distinct held hashes, `nodes` = distinct hashes held
//!   by anyone.
//!
//! Not every binary uses every helper.
#![allow(dead_code)]

pub mod tree;

use std::collections::{BTreeMap, BTreeSet};

use kvroute_core::EngineHash;
use kvroute_core::{SequenceHash, Slot};
use kvroute_index::BlockHasher;
use kvroute_index::index::{
    BlockStore, IndexError, IndexStats, Overlaps, PrefixIndex, RemoveOutcome, StoreOutcome,
};
use kvroute_index::runs::{RunIndex, RunIndexStats};

/// What [`check_matches`] asks of an index: both indexes answer it the same way.
pub trait Matcher {
    /// The index's `match_prefix`.
    fn matches(&self, query: &[SequenceHash], out: &mut Overlaps);
    /// The index's `worker_blocks`.
    fn blocks_of(&self, slot: Slot) -> usize;
}

impl Matcher for PrefixIndex {
    fn matches(&self, query: &[SequenceHash], out: &mut Overlaps) {
        self.match_prefix(query, out);
    }
    fn blocks_of(&self, slot: Slot) -> usize {
        self.worker_blocks(slot)
    }
}

impl Matcher for RunIndex {
    fn matches(&self, query: &[SequenceHash], out: &mut Overlaps) {
        self.match_prefix(query, out);
    }
    fn blocks_of(&self, slot: Slot) -> usize {
        self.worker_blocks(slot)
    }
}

/// One engine hash of one worker in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// The chained hash the engine hash resolves to.
    pub seq: u64,
    /// Physical copies still reported (always >= 1 while the entry exists).
    pub copies: u32,
    /// Model clock at the last store of this engine hash.
    pub stamp: u64,
    /// Position in its sequence (see the module docs).
    pub depth: u64,
}

/// What one worker holds in the model.
#[derive(Clone, Debug, Default)]
pub struct WorkerModel {
    /// Engine hash -> mapping.
    pub entries: BTreeMap<u64, Mapping>,
    /// Advances once per stored block (including copies and conflicts).
    pub clock: u64,
}

impl WorkerModel {
    /// Distinct sequence hashes held.
    pub fn held(&self) -> BTreeSet<u64> {
        self.entries.values().map(|m| m.seq).collect()
    }
}

/// Counters the index exposes through `stats()`, as the model predicts them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelCounters {
    pub slot_out_of_range: u64,
    pub block_size_mismatches: u64,
    pub token_count_mismatches: u64,
    pub unknown_parent_stores: u64,
    pub unknown_removes: u64,
    pub hash_conflicts: u64,
    pub evicted_blocks: u64,
}

impl ModelCounters {
    /// Adds another model's counters (used to merge per-writer models).
    pub fn add(&mut self, o: &ModelCounters) {
        self.slot_out_of_range += o.slot_out_of_range;
        self.block_size_mismatches += o.block_size_mismatches;
        self.token_count_mismatches += o.token_count_mismatches;
        self.unknown_parent_stores += o.unknown_parent_stores;
        self.unknown_removes += o.unknown_removes;
        self.hash_conflicts += o.hash_conflicts;
        self.evicted_blocks += o.evicted_blocks;
    }
}

/// The reference model of a whole index.
#[derive(Clone, Debug)]
pub struct Model {
    pub worker_slots: usize,
    pub block_size: usize,
    pub cap: usize,
    pub workers: BTreeMap<u32, WorkerModel>,
    pub counters: ModelCounters,
}

impl Model {
    pub fn new(worker_slots: usize, block_size: usize, cap: usize) -> Self {
        Self {
            worker_slots,
            block_size,
            cap,
            workers: BTreeMap::new(),
            counters: ModelCounters::default(),
        }
    }

    fn check_slot(&mut self, slot: Slot) -> Result<(), IndexError> {
        if slot.index() < self.worker_slots {
            Ok(())
        } else {
            self.counters.slot_out_of_range += 1;
            Err(IndexError::SlotOutOfRange {
                slot,
                worker_slots: self.worker_slots,
            })
        }
    }

    /// The worker's mapping of an engine hash, if any.
    pub fn mapping(&self, slot: Slot, eh: u64) -> Option<Mapping> {
        self.workers.get(&slot.0)?.entries.get(&eh).copied()
    }

    /// `store_hashes`.
    pub fn store_hashes(
        &mut self,
        slot: Slot,
        blocks: &[(EngineHash, SequenceHash)],
    ) -> Result<StoreOutcome, IndexError> {
        self.store_from_depth(slot, blocks, 0)
    }

    /// `RunIndex::store_hashes`: `blocks` after the block the worker indexed under
    /// `parent` (or a chain's first block without one). An unknown parent is counted and
    /// refused with nothing stored.
    pub fn store_hashes_after(
        &mut self,
        slot: Slot,
        parent: Option<EngineHash>,
        blocks: &[(EngineHash, SequenceHash)],
    ) -> Result<StoreOutcome, IndexError> {
        self.check_slot(slot)?;
        let first_depth = match parent {
            None => 0,
            Some(p) => match self.mapping(slot, p.0) {
                Some(m) => m.depth + 1,
                None => {
                    self.counters.unknown_parent_stores += 1;
                    return Err(IndexError::UnknownParent {
                        parent: p,
                        blocks: blocks.len(),
                    });
                }
            },
        };
        self.store_from_depth(slot, blocks, first_depth)
    }

    /// Reconciles the model (built without a cap) with an index that evicts under `cap`
    /// by its own rule: after a store that reported `evicted` engine hashes evicted (all
    /// their copies), the worker's engine hashes the index still has (`kept`) must be at
    /// most `cap`, and exactly `evicted` of the model's must be missing from them; those
    /// are dropped from the model and counted in its `evicted_blocks`.
    pub fn reconcile_evictions(
        &mut self,
        slot: Slot,
        kept: &[(EngineHash, u32)],
        evicted: usize,
        cap: usize,
    ) -> Result<(), String> {
        if kept.len() > cap {
            return Err(format!("{} engine hashes over the cap {cap}", kept.len()));
        }
        let kept: BTreeSet<u64> = kept.iter().map(|(e, _)| e.0).collect();
        let Some(w) = self.workers.get_mut(&slot.0) else {
            return if evicted == 0 {
                Ok(())
            } else {
                Err(format!("reported {evicted} evicted from an empty worker"))
            };
        };
        let gone: Vec<u64> = w
            .entries
            .keys()
            .copied()
            .filter(|e| !kept.contains(e))
            .collect();
        if gone.len() != evicted {
            return Err(format!("reported {evicted} evicted, {} gone", gone.len()));
        }
        for e in gone {
            w.entries.remove(&e);
        }
        self.counters.evicted_blocks += evicted as u64;
        Ok(())
    }

    /// `store_hashes` whose first block sits at `first_depth`.
    fn store_from_depth(
        &mut self,
        slot: Slot,
        blocks: &[(EngineHash, SequenceHash)],
        first_depth: u64,
    ) -> Result<StoreOutcome, IndexError> {
        self.check_slot(slot)?;
        let mut depth = first_depth;
        let cap = self.cap;
        let w = self.workers.entry(slot.0).or_default();
        let mut out = StoreOutcome::default();
        for &(EngineHash(eh), SequenceHash(seq)) in blocks {
            w.clock += 1;
            let stamp = w.clock;
            if let Some(m) = w.entries.get_mut(&eh) {
                if m.seq == seq {
                    m.copies += 1;
                    m.stamp = stamp;
                    out.extra_copies += 1;
                    depth = m.depth + 1;
                    continue;
                }
                w.entries.remove(&eh);
                out.conflicts += 1;
                self.counters.hash_conflicts += 1;
            }
            if w.entries.len() >= cap {
                // The 2n least recently stored (stamps are unique per worker), then the n
                // deepest of those, oldest first among equal depths.
                let mut by_age: Vec<(u64, u64, u64)> = w
                    .entries
                    .iter()
                    .map(|(&e, m)| (m.stamp, m.depth, e))
                    .collect();
                by_age.sort_unstable();
                let n = (cap / 16).max(1).min(by_age.len());
                by_age.truncate((2 * n).min(by_age.len()));
                by_age.sort_unstable_by_key(|&(stamp, depth, _)| (std::cmp::Reverse(depth), stamp));
                for &(_, _, victim) in &by_age[..n] {
                    w.entries.remove(&victim);
                }
                out.evicted += n;
                self.counters.evicted_blocks += n as u64;
            }
            w.entries.insert(
                eh,
                Mapping {
                    seq,
                    copies: 1,
                    stamp,
                    depth,
                },
            );
            out.new_blocks += 1;
            depth += 1;
        }
        Ok(out)
    }

    /// `store`: validates the event, resolves the parent, hashes the tokens with
    /// [`BlockHasher`] and applies the result like `store_hashes`.
    pub fn store(&mut self, slot: Slot, ev: &BlockStore<'_>) -> Result<StoreOutcome, IndexError> {
        if ev.block_size != self.block_size {
            self.counters.block_size_mismatches += 1;
            return Err(IndexError::BlockSizeMismatch {
                expected: self.block_size,
                got: ev.block_size,
            });
        }
        if ev.token_ids.len() != self.block_size * ev.block_hashes.len() {
            self.counters.token_count_mismatches += 1;
            return Err(IndexError::TokenCountMismatch {
                blocks: ev.block_hashes.len(),
                block_size: self.block_size,
                tokens: ev.token_ids.len(),
            });
        }
        self.check_slot(slot)?;
        let mut first_depth = 0;
        let parent = match ev.parent {
            None => None,
            Some(p) => match self.mapping(slot, p.0) {
                Some(m) => {
                    first_depth = m.depth + 1;
                    Some(SequenceHash(m.seq))
                }
                None => {
                    self.counters.unknown_parent_stores += 1;
                    return Err(IndexError::UnknownParent {
                        parent: p,
                        blocks: ev.block_hashes.len(),
                    });
                }
            },
        };
        let mut seqs = Vec::new();
        BlockHasher::new(self.block_size, ev.namespace).sequence_hashes_into(
            ev.token_ids,
            parent,
            &mut seqs,
        );
        let pairs: Vec<(EngineHash, SequenceHash)> =
            ev.block_hashes.iter().copied().zip(seqs).collect();
        self.store_from_depth(slot, &pairs, first_depth)
    }

    /// `remove`.
    pub fn remove(
        &mut self,
        slot: Slot,
        hashes: &[EngineHash],
    ) -> Result<RemoveOutcome, IndexError> {
        self.check_slot(slot)?;
        let w = self.workers.entry(slot.0).or_default();
        let mut out = RemoveOutcome::default();
        for &EngineHash(eh) in hashes {
            match w.entries.get_mut(&eh) {
                None => out.unknown += 1,
                Some(m) if m.copies > 1 => {
                    m.copies -= 1;
                    out.copies_dropped += 1;
                }
                Some(_) => {
                    w.entries.remove(&eh);
                    out.removed += 1;
                }
            }
        }
        self.counters.unknown_removes += out.unknown as u64;
        Ok(out)
    }

    /// `clear`: returns how many engine hashes the worker had.
    pub fn clear(&mut self, slot: Slot) -> Result<usize, IndexError> {
        self.check_slot(slot)?;
        let w = self.workers.entry(slot.0).or_default();
        let n = w.entries.len();
        w.entries.clear();
        Ok(n)
    }

    /// `remove_worker`: like `clear`, and the worker is forgotten entirely.
    pub fn remove_worker(&mut self, slot: Slot) -> Result<usize, IndexError> {
        self.check_slot(slot)?;
        Ok(self
            .workers
            .remove(&slot.0)
            .map(|w| w.entries.len())
            .unwrap_or(0))
    }

    /// Engine hashes the worker has indexed.
    pub fn worker_blocks(&self, slot: Slot) -> usize {
        self.workers.get(&slot.0).map_or(0, |w| w.entries.len())
    }

    /// Whether the worker holds `seq`.
    pub fn holds(&self, slot: u32, seq: u64) -> bool {
        self.workers
            .get(&slot)
            .is_some_and(|w| w.entries.values().any(|m| m.seq == seq))
    }

    /// Overlap of one worker: the largest `k` with `query[0..k]` all held.
    pub fn overlap(&self, slot: u32, query: &[SequenceHash]) -> u32 {
        let Some(w) = self.workers.get(&slot) else {
            return 0;
        };
        let held = w.held();
        query.iter().take_while(|h| held.contains(&h.0)).count() as u32
    }

    /// Expected `Overlaps::to_vec()`: the overlap of every slot.
    pub fn overlaps(&self, query: &[SequenceHash]) -> Vec<u32> {
        let mut v = vec![0u32; self.worker_slots];
        for &slot in self.workers.keys() {
            v[slot as usize] = self.overlap(slot, query);
        }
        v
    }

    pub fn residencies(&self) -> u64 {
        self.workers.values().map(|w| w.held().len() as u64).sum()
    }

    pub fn nodes(&self) -> u64 {
        let mut all = BTreeSet::new();
        for w in self.workers.values() {
            all.extend(w.held());
        }
        all.len() as u64
    }

    /// Folds another model (of disjoint workers) into this one.
    pub fn merge(&mut self, other: Model) {
        for (slot, w) in other.workers {
            assert!(
                self.workers.insert(slot, w).is_none(),
                "merged models must have disjoint workers"
            );
        }
        self.counters.add(&other.counters);
    }
}

/// The model's counters as an index's stats hold them (`IndexStats` and `RunIndexStats`
/// name them alike).
macro_rules! counters_of {
    ($stats:expr) => {
        ModelCounters {
            slot_out_of_range: $stats.slot_out_of_range,
            block_size_mismatches: $stats.block_size_mismatches,
            token_count_mismatches: $stats.token_count_mismatches,
            unknown_parent_stores: $stats.unknown_parent_stores,
            unknown_removes: $stats.unknown_removes,
            hash_conflicts: $stats.hash_conflicts,
            evicted_blocks: $stats.evicted_blocks,
        }
    };
}

/// Compares an index's distinct blocks (`what`), residencies and counters with the model's.
fn compare_counts(what: &str, got: (u64, u64, ModelCounters), model: &Model) -> Result<(), String> {
    let want = (model.nodes(), model.residencies(), model.counters);
    if got != want {
        return Err(format!(
            "stats ({what}, residencies, counters):\n  index {got:?}\n  model {want:?}"
        ));
    }
    Ok(())
}

/// Compares every counter and gauge of `stats` with the model.
pub fn check_stats(stats: &IndexStats, model: &Model) -> Result<(), String> {
    let got = (stats.nodes, stats.residencies, counters_of!(stats));
    compare_counts("nodes", got, model)
}

/// [`check_stats`] for a [`RunIndex`]: its `blocks` (distinct blocks held) stand for the
/// nodes, and its separate rejection counts for the model's.
pub fn check_run_stats(stats: &RunIndexStats, model: &Model) -> Result<(), String> {
    let got = (stats.blocks, stats.residencies, counters_of!(stats));
    compare_counts("blocks", got, model)
}

/// Matches every query against the index (reusing one `Overlaps`) and compares the whole
/// per-slot array and `deepest` with the model; also compares `worker_blocks` of `slots`.
pub fn check_matches(
    index: &impl Matcher,
    model: &Model,
    queries: &[Vec<SequenceHash>],
    slots: &[Slot],
    out: &mut Overlaps,
) -> Result<(), String> {
    for (qi, q) in queries.iter().enumerate() {
        index.matches(q, out);
        let want = model.overlaps(q);
        if out.to_vec() != want.to_vec() {
            let diff: Vec<(usize, u32, u32)> = want
                .iter()
                .zip(out.to_vec())
                .enumerate()
                .filter(|(_, (w, g))| **w != *g)
                .map(|(i, (w, g))| (i, g, *w))
                .collect();
            return Err(format!(
                "query #{qi} (len {}): (slot, index, model) differ: {diff:?}",
                q.len()
            ));
        }
        let deepest = want.iter().copied().max().unwrap_or(0);
        if out.deepest() != deepest {
            return Err(format!(
                "query #{qi}: deepest {} but model {deepest}",
                out.deepest()
            ));
        }
    }
    for &s in slots {
        if index.blocks_of(s) != model.worker_blocks(s) {
            return Err(format!(
                "worker_blocks({}) = {} but model {}",
                s.0,
                index.blocks_of(s),
                model.worker_blocks(s)
            ));
        }
    }
    Ok(())
}

/// Token ids of one block of `block_size` tokens for "choice" `c` (a small alphabet of
/// block contents, so that paths of choices give a small tree of chained hashes).
pub fn block_tokens(c: u8, block_size: usize) -> Vec<u32> {
    (0..block_size)
        .map(|i| 1 + u32::from(c) * 1000 + i as u32)
        .collect()
}

/// Token ids of a path of choices.
pub fn path_tokens(path: &[u8], block_size: usize) -> Vec<u32> {
    path.iter()
        .flat_map(|&c| block_tokens(c, block_size))
        .collect()
}

/// Chained hashes of a whole path of choices from the start of a sequence.
pub fn path_hashes(hasher: &BlockHasher, path: &[u8]) -> Vec<SequenceHash> {
    let mut out = Vec::new();
    hasher.sequence_hashes_into(&path_tokens(path, hasher.block_size()), None, &mut out);
    out
}

/// Every path of choices `0..branching` of length `1..=depth`, in order of length.
pub fn all_paths(branching: u8, depth: usize) -> Vec<Vec<u8>> {
    let mut all: Vec<Vec<u8>> = Vec::new();
    let mut level: Vec<Vec<u8>> = vec![Vec::new()];
    for _ in 0..depth {
        let mut next = Vec::new();
        for p in &level {
            for c in 0..branching {
                let mut q = p.clone();
                q.push(c);
                next.push(q);
            }
        }
        all.extend(next.iter().cloned());
        level = next;
    }
    all
}

/// The number of proptest cases: `PROPTEST_CASES` when set, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The deterministic generator of the non-proptest tests (SplitMix64, `Rng::new(seed)`).
#[allow(unused_imports)] // not every binary uses it
pub use kvroute_testkit::SplitMix64 as Rng;
