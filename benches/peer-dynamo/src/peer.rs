//! The benchmark workload in `dynamo-kv-router`'s terms, and its indexes built from it.
//!
//! kvroute indexes chained sequence hashes and keeps each engine's own block hashes (opaque,
//! unique per worker in the benchmark) only to resolve removals and parents. The peer's
//! radix tree walks per-block content hashes (`LocalBlockHash`) under a parent and keys its
//! nodes' edges by the engine's sequence block hash (`ExternalSequenceBlockHash`), which it
//! requires to be the same on every worker for the same prefix (its engines derive it from
//! the tokens with a shared seed; a parent given as another worker's hash for the same block
//! is rejected as not found). The translation therefore gives the peer:
//!
//! * sequence block hashes: kvroute's chained hashes of the same blocks (content-derived,
//!   equal across workers, as its engines' are);
//! * local hashes: the peer's own `compute_block_hash_for_seq` over the same token ids
//!   (block size 16, no LoRA, no namespace), as its router computes them for a request;
//! * events: the same workers, blocks and parents, in the order kvroute stores them
//!   (kvroute's `store_hashes` needs no parent: a chained hash carries its prefix).

use dynamo_kv_router::indexer::KvRouterError;
use dynamo_kv_router::protocols::{
    BlockHashOptions, ExternalSequenceBlockHash, KvCacheEvent, KvCacheEventData, KvCacheEventError,
    KvCacheRemoveData, KvCacheStoreData, KvCacheStoredBlockData, LocalBlockHash, OverlapScores,
    RouterEvent, WorkerWithDpRank, compute_block_hash_for_seq,
};
use dynamo_kv_router::{ConcurrentRadixTreeCompressed, RadixTree, ThreadPoolIndexer};
use kvroute_bench::{
    BLOCK_SIZE, CONVERSATION_BLOCKS, ConversationFleet, SYSTEM_PROMPT_BLOCKS, SplitMix64,
    StoreWorkload,
};
use kvroute_core::SequenceHash;

/// The peer's router-side index: its concurrent compressed radix tree behind its thread-pool
/// writer (reads run inline on the caller's thread, writes on the pool's threads).
pub type PeerPool = ThreadPoolIndexer<ConcurrentRadixTreeCompressed>;

/// The peer's per-block content hashes of `tokens` (whole blocks of [`BLOCK_SIZE`] tokens).
pub fn local_hashes(tokens: &[u32]) -> Vec<LocalBlockHash> {
    compute_block_hash_for_seq(tokens, BLOCK_SIZE as u32, BlockHashOptions::default())
}

/// The peer's id of benchmark worker `w` (slot `w` in kvroute; DP rank 0).
pub fn worker(w: usize) -> WorkerWithDpRank {
    WorkerWithDpRank::new(w as u64, 0)
}

/// A `BlockStored` event of worker `w`: `blocks` as (sequence hash, local hash) pairs, after
/// the worker's block `parent` (`None`: from the start of a sequence).
pub fn stored(
    w: usize,
    event_id: u64,
    parent: Option<SequenceHash>,
    blocks: impl IntoIterator<Item = (SequenceHash, LocalBlockHash)>,
) -> RouterEvent {
    let blocks = blocks
        .into_iter()
        .map(|(engine, local)| KvCacheStoredBlockData {
            block_hash: ExternalSequenceBlockHash(engine.0),
            tokens_hash: local,
            mm_extra_info: None,
        })
        .collect();
    let data = KvCacheEventData::Stored(KvCacheStoreData {
        parent_hash: parent.map(|p| ExternalSequenceBlockHash(p.0)),
        start_position: None,
        blocks,
    });
    RouterEvent::new(
        w as u64,
        KvCacheEvent {
            event_id,
            data,
            dp_rank: 0,
        },
    )
}

/// A `BlockRemoved` event of worker `w` for `hashes`.
pub fn removed(
    w: usize,
    event_id: u64,
    hashes: impl IntoIterator<Item = SequenceHash>,
) -> RouterEvent {
    let data = KvCacheEventData::Removed(KvCacheRemoveData {
        block_hashes: hashes
            .into_iter()
            .map(|h| ExternalSequenceBlockHash(h.0))
            .collect(),
    });
    RouterEvent::new(
        w as u64,
        KvCacheEvent {
            event_id,
            data,
            dp_rank: 0,
        },
    )
}

/// A [`ConversationFleet`] as the peer sees it.
#[derive(Clone, Debug)]
pub struct PeerFleet {
    /// Workers of the fleet.
    pub workers: usize,
    /// Local hashes of each fleet request (system prompt + conversation, 128 blocks), in the
    /// fleet's conversation order.
    pub requests: Vec<Vec<LocalBlockHash>>,
    /// The events that store the fleet: every worker's system prompt (no parent), then each
    /// conversation body on its two holders (parent: the holder's last system-prompt block).
    pub events: Vec<RouterEvent>,
}

impl PeerFleet {
    /// The translation of `fleet`.
    pub fn new(fleet: &ConversationFleet) -> Self {
        let system = local_hashes(&fleet.system_tokens);
        let requests: Vec<Vec<LocalBlockHash>> = fleet
            .conversation_tokens
            .iter()
            .map(|tokens| {
                let mut hashes = system.clone();
                hashes.extend(local_hashes(tokens));
                hashes
            })
            .collect();
        let mut events = Vec::with_capacity(fleet.workers + 2 * requests.len());
        let mut id = 0u64;
        let system_seq = &fleet.requests[0][..SYSTEM_PROMPT_BLOCKS];
        for w in 0..fleet.workers {
            let blocks = system_seq.iter().copied().zip(system.iter().copied());
            events.push(stored(w, id, None, blocks));
            id += 1;
        }
        let parent = system_seq[SYSTEM_PROMPT_BLOCKS - 1];
        for ((local, seq), holders) in requests.iter().zip(&fleet.requests).zip(&fleet.holders) {
            for &w in holders {
                let blocks = seq[SYSTEM_PROMPT_BLOCKS..]
                    .iter()
                    .copied()
                    .zip(local[SYSTEM_PROMPT_BLOCKS..].iter().copied());
                events.push(stored(w, id, Some(parent), blocks));
                id += 1;
            }
        }
        Self {
            workers: fleet.workers,
            requests,
            events,
        }
    }

    /// The local hashes of `fleet.cold_request(seed)`: the system prompt, then the same 96
    /// fresh blocks (the token ids are regenerated from `seed` exactly as `cold_request`
    /// draws them).
    pub fn cold_request(fleet: &ConversationFleet, seed: u64) -> Vec<LocalBlockHash> {
        let mut tokens = fleet.system_tokens.clone();
        tokens.extend(SplitMix64::new(seed).tokens(CONVERSATION_BLOCKS * BLOCK_SIZE));
        local_hashes(&tokens)
    }

    /// The peer's single-threaded radix tree holding the fleet.
    ///
    /// # Errors
    /// The first event the tree rejects.
    pub fn radix_tree(&self) -> Result<RadixTree, KvCacheEventError> {
        let mut tree = RadixTree::new();
        for e in &self.events {
            tree.apply_event(e.clone())?;
        }
        Ok(tree)
    }

    /// The peer's router-side index holding the fleet: a `ThreadPoolIndexer` with
    /// `threads` write threads over a `ConcurrentRadixTreeCompressed`, flushed.
    ///
    /// # Errors
    /// The pool's error if it is offline.
    pub fn pool(
        &self,
        threads: usize,
        rt: &tokio::runtime::Runtime,
    ) -> Result<PeerPool, KvRouterError> {
        let pool = ThreadPoolIndexer::new(
            ConcurrentRadixTreeCompressed::new(),
            threads,
            BLOCK_SIZE as u32,
        );
        for e in &self.events {
            pool.enqueue_event(e.clone())?;
        }
        rt.block_on(pool.flush_and_wait())?;
        Ok(pool)
    }
}

/// [`StoreWorkload`]'s events as the peer's store and remove events.
#[derive(Clone, Debug)]
pub struct PeerStoreWorkload {
    /// One `BlockStored` per kvroute event: the same worker, blocks and parent (the system
    /// prompt's last block), with the blocks' chained hashes as sequence hashes and the
    /// peer's local hashes of the event's token ids.
    pub stores: Vec<RouterEvent>,
    /// The matching `BlockRemoved` events (every block of the store).
    pub removes: Vec<RouterEvent>,
}

impl PeerStoreWorkload {
    /// The translation of `load` (events on `fleet`); event ids start at `first_id`.
    pub fn new(fleet: &ConversationFleet, load: &StoreWorkload, first_id: u64) -> Self {
        let parent = fleet.requests[0][SYSTEM_PROMPT_BLOCKS - 1];
        let mut stores = Vec::with_capacity(load.events.len());
        let mut removes = Vec::with_capacity(load.events.len());
        for (i, e) in load.events.iter().enumerate() {
            let w = e.slot.index();
            let id = first_id + 2 * i as u64;
            let local = local_hashes(&e.token_ids);
            assert_eq!(local.len(), e.blocks(), "whole blocks");
            let seq = e.pairs.iter().map(|&(_, s)| s);
            stores.push(stored(w, id, Some(parent), seq.clone().zip(local)));
            removes.push(removed(w, id + 1, seq));
        }
        Self { stores, removes }
    }
}

/// The peer's overlap of worker `w` in `scores` (blocks; 0 when absent).
pub fn overlap_of(scores: &OverlapScores, w: usize) -> u32 {
    scores.scores.get(&worker(w)).copied().unwrap_or(0)
}

/// Checks that `peer` gives every worker `0..expected.len()` the overlap `expected` gives it
/// (and no other worker any), so both sides index the same workload.
///
/// # Errors
/// A description of the first difference.
pub fn same_overlaps(expected: &[u32], peer: &OverlapScores) -> Result<(), String> {
    for (w, &want) in expected.iter().enumerate() {
        let got = overlap_of(peer, w);
        if got != want {
            return Err(format!("worker {w}: kvroute {want} blocks, peer {got}"));
        }
    }
    if let Some(extra) = peer
        .scores
        .keys()
        .find(|k| k.dp_rank != 0 || k.worker_id as usize >= expected.len())
    {
        return Err(format!("peer scores an unknown worker {extra:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvroute_bench::REQUEST_BLOCKS;

    /// The fleet's known shape: a conversation's two holders match all 128 blocks, every
    /// other worker the 32-block system prompt.
    fn expected(fleet: &ConversationFleet, c: usize) -> Vec<u32> {
        (0..fleet.workers)
            .map(|w| {
                if fleet.holders[c].contains(&w) {
                    REQUEST_BLOCKS as u32
                } else {
                    SYSTEM_PROMPT_BLOCKS as u32
                }
            })
            .collect()
    }

    #[test]
    fn radix_tree_matches_the_fleet_shape() {
        let fleet = ConversationFleet::new(16, 1);
        let peer = PeerFleet::new(&fleet);
        let tree = peer.radix_tree().expect("applies");
        let mut bad = Vec::new();
        for c in 0..fleet.requests.len() {
            let scores = tree.find_matches(peer.requests[c].clone(), false);
            if let Err(e) = same_overlaps(&expected(&fleet, c), &scores) {
                bad.push(format!("conversation {c}: {e}"));
            }
        }
        assert!(bad.is_empty(), "{bad:#?}");
    }

    #[test]
    fn store_events_apply_and_remove_cleanly() {
        let fleet = ConversationFleet::new(16, 1);
        let peer = PeerFleet::new(&fleet);
        let mut tree = peer.radix_tree().expect("applies");
        let base = tree.current_size();
        let load = StoreWorkload::new(&fleet, 16, 2);
        let events = PeerStoreWorkload::new(&fleet, &load, 1 << 20);
        let system = &peer.requests[0][..SYSTEM_PROMPT_BLOCKS];
        for (e, (s, r)) in load
            .events
            .iter()
            .zip(events.stores.iter().zip(&events.removes))
        {
            tree.apply_event(s.clone()).expect("store applies");
            // The storing worker now matches the system prompt and every stored block.
            let mut query = system.to_vec();
            query.extend(local_hashes(&e.token_ids));
            let scores = tree.find_matches(query, false);
            let want = (SYSTEM_PROMPT_BLOCKS + e.blocks()) as u32;
            assert_eq!(overlap_of(&scores, e.slot.index()), want);
            tree.apply_event(r.clone()).expect("remove applies");
            assert_eq!(tree.current_size(), base, "the remove restores the tree");
        }
    }
}
