//! The benchmark workload in the terms of SMG's `kv-index` 2.0.0, and its `ChainIndex` built
//! from it.
//!
//! `ChainIndex` walks a request's per-block content hashes (`ContentHash`, position
//! independent) and keys a worker's stored blocks by the engine's position-aware hash
//! (`SequenceHash`), which it expects to be the same on every worker for the same prefix (a
//! store whose engine hash differs from the one the index carries for the block is counted
//! as a conflict and placed by content). Each worker's blocks are resolved through that
//! worker's own `ChainBlockMap`, which the caller keeps (one writer per worker). The
//! translation gives it:
//!
//! * engine hashes: kvroute's chained hashes of the same blocks (content-derived, equal
//!   across workers), as for `dynamo-kv-router`;
//! * content hashes: `kv-index`'s own `compute_request_content_hashes` over the same token
//!   ids (block size 16), as its router computes them for a request;
//! * events: the same workers (interned in slot order, so worker `w` is id `w`), blocks and
//!   parents, in the order kvroute stores them.

use kv_index::{
    ApplyError, ChainBlockMap, ChainIndex, ContentHash, SequenceHash as ChainHash, StoredBlock,
    compute_request_content_hashes,
};
use kvroute_bench::{
    BLOCK_SIZE, CONVERSATION_BLOCKS, ConversationFleet, SYSTEM_PROMPT_BLOCKS, SplitMix64,
    StoreWorkload,
};
use kvroute_core::SequenceHash;

/// `kv-index`'s content hashes of `tokens` (whole blocks of [`BLOCK_SIZE`] tokens).
pub fn content_hashes(tokens: &[u32]) -> Vec<ContentHash> {
    compute_request_content_hashes(tokens, BLOCK_SIZE)
}

/// One store event in `kv-index`'s terms: the worker, its blocks and the parent's engine hash.
#[derive(Clone, Debug)]
pub struct ChainStore {
    /// The storing worker's id (its kvroute slot).
    pub worker: u32,
    /// The parent's engine hash (`None`: from the start of a sequence).
    pub parent: Option<ChainHash>,
    /// The stored blocks: engine hash (kvroute's chained hash) and content hash.
    pub blocks: Vec<StoredBlock>,
    /// The blocks' engine hashes, as the matching removal names them.
    pub hashes: Vec<ChainHash>,
}

impl ChainStore {
    /// The store of `blocks` (chained hash, content hash) by worker `w` after `parent`.
    pub fn new(
        w: usize,
        parent: Option<SequenceHash>,
        blocks: impl IntoIterator<Item = (SequenceHash, ContentHash)>,
    ) -> Self {
        let blocks: Vec<StoredBlock> = blocks
            .into_iter()
            .map(|(seq, content)| StoredBlock {
                seq_hash: ChainHash(seq.0),
                content_hash: content,
            })
            .collect();
        let hashes = blocks.iter().map(|b| b.seq_hash).collect();
        Self {
            worker: w as u32,
            parent: parent.map(|p| ChainHash(p.0)),
            blocks,
            hashes,
        }
    }
}

/// A `ChainIndex` with the per-worker block maps its writers keep.
pub struct ChainPeer {
    /// The index.
    pub index: ChainIndex,
    /// Worker `w`'s block map (engine hash → place), indexed by worker id.
    pub maps: Vec<ChainBlockMap>,
}

impl ChainPeer {
    /// An empty index sized for `workers` workers, with workers `0..workers` interned (ids
    /// equal to kvroute's slots).
    ///
    /// # Panics
    /// If `workers` exceeds the index's limit (1,024) or the ids come out of order.
    pub fn new(workers: usize) -> Self {
        let index = ChainIndex::with_max_workers(workers);
        for w in 0..workers {
            let id = index.intern_worker(&w.to_string()).expect("worker slot");
            assert_eq!(id as usize, w, "kv-index interns workers densely in order");
        }
        let maps = (0..workers).map(|_| ChainBlockMap::new()).collect();
        Self { index, maps }
    }

    /// Applies `store`.
    ///
    /// # Errors
    /// The index's error (unknown parent).
    pub fn store(&mut self, store: &ChainStore) -> Result<(), ApplyError> {
        let map = &mut self.maps[store.worker as usize];
        self.index
            .apply_stored(store.worker, &store.blocks, store.parent, map)
    }

    /// Removes every block of `store` again.
    pub fn remove(&mut self, store: &ChainStore) {
        let map = &mut self.maps[store.worker as usize];
        self.index.apply_removed(store.worker, &store.hashes, map);
    }

    /// Every worker's overlap with `query` written into `out` (one entry per worker, zeroed
    /// first; the index reports only workers with a non-empty prefix).
    pub fn overlaps_into(&self, query: &[ContentHash], out: &mut [u32]) {
        out.fill(0);
        self.index
            .score_into(query, |c| c.0, false, |w, score| out[w as usize] = score);
    }
}

/// A [`ConversationFleet`] as `kv-index` sees it.
#[derive(Clone, Debug)]
pub struct ChainFleet {
    /// Workers of the fleet.
    pub workers: usize,
    /// Content hashes of each fleet request (system prompt + conversation, 128 blocks), in
    /// the fleet's conversation order.
    pub requests: Vec<Vec<ContentHash>>,
    /// The stores of the fleet: every worker's system prompt (no parent), then each
    /// conversation body on its two holders (parent: the last system-prompt block).
    pub stores: Vec<ChainStore>,
}

impl ChainFleet {
    /// The translation of `fleet`.
    pub fn new(fleet: &ConversationFleet) -> Self {
        let system = content_hashes(&fleet.system_tokens);
        let requests: Vec<Vec<ContentHash>> = fleet
            .conversation_tokens
            .iter()
            .map(|tokens| {
                let mut hashes = system.clone();
                hashes.extend(content_hashes(tokens));
                hashes
            })
            .collect();
        let mut stores = Vec::with_capacity(fleet.workers + 2 * requests.len());
        let system_seq = &fleet.requests[0][..SYSTEM_PROMPT_BLOCKS];
        for w in 0..fleet.workers {
            let blocks = system_seq.iter().copied().zip(system.iter().copied());
            stores.push(ChainStore::new(w, None, blocks));
        }
        let parent = system_seq[SYSTEM_PROMPT_BLOCKS - 1];
        for ((content, seq), holders) in requests.iter().zip(&fleet.requests).zip(&fleet.holders) {
            for &w in holders {
                let blocks = seq[SYSTEM_PROMPT_BLOCKS..]
                    .iter()
                    .copied()
                    .zip(content[SYSTEM_PROMPT_BLOCKS..].iter().copied());
                stores.push(ChainStore::new(w, Some(parent), blocks));
            }
        }
        Self {
            workers: fleet.workers,
            requests,
            stores,
        }
    }

    /// The content hashes of `fleet.cold_request(seed)`: the system prompt, then the same 96
    /// fresh blocks (token ids regenerated from `seed` as `cold_request` draws them).
    pub fn cold_request(fleet: &ConversationFleet, seed: u64) -> Vec<ContentHash> {
        let mut tokens = fleet.system_tokens.clone();
        tokens.extend(SplitMix64::new(seed).tokens(CONVERSATION_BLOCKS * BLOCK_SIZE));
        content_hashes(&tokens)
    }

    /// A `ChainIndex` holding the fleet.
    ///
    /// # Errors
    /// The first store the index rejects.
    pub fn build(&self) -> Result<ChainPeer, ApplyError> {
        let mut peer = ChainPeer::new(self.workers);
        for s in &self.stores {
            peer.store(s)?;
        }
        Ok(peer)
    }
}

/// [`StoreWorkload`]'s events as `kv-index` stores (each removal names the store's blocks).
pub fn store_workload(fleet: &ConversationFleet, load: &StoreWorkload) -> Vec<ChainStore> {
    let parent = fleet.requests[0][SYSTEM_PROMPT_BLOCKS - 1];
    load.events
        .iter()
        .map(|e| {
            let content = content_hashes(&e.token_ids);
            assert_eq!(content.len(), e.blocks(), "whole blocks");
            let seq = e.pairs.iter().map(|&(_, s)| s);
            ChainStore::new(e.slot.index(), Some(parent), seq.zip(content))
        })
        .collect()
}

/// Checks that `got` (kv-index's dense overlaps) equals `expected` (kvroute's) for every
/// worker.
///
/// # Errors
/// A description of the first difference.
pub fn same_dense_overlaps(expected: &[u32], got: &[u32]) -> Result<(), String> {
    if expected.len() != got.len() {
        return Err(format!(
            "{} workers on kvroute's side, {} on kv-index's",
            expected.len(),
            got.len()
        ));
    }
    match expected.iter().zip(got).position(|(a, b)| a != b) {
        Some(w) => Err(format!(
            "worker {w}: kvroute {} blocks, kv-index {}",
            expected[w], got[w]
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvroute_bench::REQUEST_BLOCKS;

    #[test]
    fn chain_index_matches_the_fleet_shape() {
        let fleet = ConversationFleet::new(16, 1);
        let chain = ChainFleet::new(&fleet);
        let peer = chain.build().expect("applies");
        assert_eq!(
            peer.index.stats().engine_conflicts,
            0,
            "engine hashes agree"
        );
        let mut out = vec![0; fleet.workers];
        for (c, holders) in fleet.holders.iter().enumerate() {
            peer.overlaps_into(&chain.requests[c], &mut out);
            for (w, &got) in out.iter().enumerate() {
                let want = if holders.contains(&w) {
                    REQUEST_BLOCKS
                } else {
                    SYSTEM_PROMPT_BLOCKS
                };
                assert_eq!(got as usize, want, "conversation {c}, worker {w}");
            }
        }
        let cold = ChainFleet::cold_request(&fleet, 7);
        peer.overlaps_into(&cold, &mut out);
        assert!(out.iter().all(|&o| o as usize == SYSTEM_PROMPT_BLOCKS));
    }

    #[test]
    fn store_events_apply_and_remove_cleanly() {
        let fleet = ConversationFleet::new(16, 1);
        let chain = ChainFleet::new(&fleet);
        let mut peer = chain.build().expect("applies");
        let base = peer.index.current_size();
        let load = StoreWorkload::new(&fleet, 16, 2);
        let stores = store_workload(&fleet, &load);
        let system = &chain.requests[0][..SYSTEM_PROMPT_BLOCKS];
        let mut out = vec![0; fleet.workers];
        for (e, s) in load.events.iter().zip(&stores) {
            peer.store(s).expect("store applies");
            // The storing worker now matches the system prompt and every stored block.
            let mut query = system.to_vec();
            query.extend(content_hashes(&e.token_ids));
            peer.overlaps_into(&query, &mut out);
            assert_eq!(
                out[e.slot.index()] as usize,
                SYSTEM_PROMPT_BLOCKS + e.blocks()
            );
            peer.remove(s);
            assert_eq!(
                peer.index.current_size(),
                base,
                "the remove restores the index"
            );
        }
    }

    #[test]
    fn dense_overlap_check_names_the_worker() {
        assert!(same_dense_overlaps(&[1, 2], &[1, 2]).is_ok());
        let e = same_dense_overlaps(&[1, 2], &[1, 3]).unwrap_err();
        assert!(e.contains("worker 1"), "{e}");
    }
}
