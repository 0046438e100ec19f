//! Shared workload builders for the benchmarks.
//!
//! Every workload here is deterministic: token ids come from [`SplitMix64`] with fixed
//! seeds, so two runs (and two machines) index exactly the same blocks.
//!
//! * [`ConversationFleet`]: the `match_prefix` benchmark shape: a 32-block system prompt
//!   shared by every worker, then 96 blocks per conversation, each conversation held by 2
//!   workers, 8 conversations per worker (so `4 × workers` conversations).
//! * [`StoreWorkload`]: realistic `BlockStored` events of 16 to 512 blocks on top of a
//!   populated fleet, for ingest throughput.
//! * [`OneOwnerData`]: every block on exactly one worker (memory accounting).
//! * [`route`]: a router holding a [`ConversationFleet`] with fresh, varied load (the
//!   `Router::route` shape); [`score`]: the fixed fleet of the scorer-pass benches.
//!
//! The criterion benches (`benches/*.rs`) and the instruction-count benches of
//! `benches/kvroute-gungraun` build their workloads here, with the seeds below.

use kvroute_core::EngineHash;
use kvroute_core::{HashNamespace, SequenceHash, Slot};
use kvroute_index::BlockHasher;
use kvroute_index::index::{BlockStore, IndexConfig, PrefixIndex};
use kvroute_index::runs::RunIndex;

pub mod route;
pub mod score;

/// Seed of every [`ConversationFleet`] the benches build.
pub const FLEET_SEED: u64 = 0x6b76_726f_7574_6501;
/// Seed of the conversations' visiting order ([`ConversationFleet::query_order`]).
pub const ORDER_SEED: u64 = 0x6b76_726f_7574_6502;
/// Seed of the new conversation ([`ConversationFleet::cold_request`]).
pub const COLD_SEED: u64 = 0x6b76_726f_7574_6503;
/// Seed of the store events ([`StoreWorkload::new`]).
pub const EVENTS_SEED: u64 = 0x6b76_726f_7574_6504;
/// Workers of the store (ingest) benches.
pub const STORE_WORKERS: usize = 512;
/// Store events of the ingest benches (replayed per measured iteration).
pub const STORE_EVENTS: usize = 256;

/// Tokens per block in every benchmark (the index's default).
pub const BLOCK_SIZE: usize = 16;
/// Blocks of the system prompt every worker holds.
pub const SYSTEM_PROMPT_BLOCKS: usize = 32;
/// Blocks of each conversation after the system prompt.
pub const CONVERSATION_BLOCKS: usize = 96;
/// Blocks of a whole request (system prompt + conversation).
pub const REQUEST_BLOCKS: usize = SYSTEM_PROMPT_BLOCKS + CONVERSATION_BLOCKS;
/// Workers that hold each conversation.
pub const REPLICAS_PER_CONVERSATION: usize = 2;
/// Conversations each worker holds.
pub const CONVERSATIONS_PER_WORKER: usize = 8;

/// The seeded generator of every workload here (SplitMix64, shared with the tests).
pub use kvroute_testkit::SplitMix64;

/// The hasher every benchmark uses: [`BLOCK_SIZE`] tokens, default namespace.
pub fn hasher() -> BlockHasher {
    BlockHasher::new(BLOCK_SIZE, HashNamespace::DEFAULT)
}

/// An index configuration for `workers` slots sized for `expected_blocks` distinct blocks.
pub fn config(workers: usize, expected_blocks: usize) -> IndexConfig {
    {
        let mut c = IndexConfig::default();
        c.worker_slots = workers;
        c.block_size = BLOCK_SIZE;
        c.expected_blocks = expected_blocks;
        c
    }
}

/// Chained hashes of `tokens` (full blocks) from the start of a sequence.
pub fn sequence_hashes(tokens: &[u32]) -> Vec<SequenceHash> {
    let mut out = Vec::with_capacity(tokens.len() / BLOCK_SIZE);
    hasher().sequence_hashes_into(tokens, None, &mut out);
    out
}

/// The `match_prefix` benchmark shape at a given worker count, with its token ids and chained
/// hashes (built once, then stored into an index with [`ConversationFleet::build_index`]).
#[derive(Clone, Debug)]
pub struct ConversationFleet {
    /// Number of workers (slots `0..workers`).
    pub workers: usize,
    /// Token ids of the shared system prompt (`SYSTEM_PROMPT_BLOCKS` blocks).
    pub system_tokens: Vec<u32>,
    /// Token ids of each conversation body (`CONVERSATION_BLOCKS` blocks each).
    pub conversation_tokens: Vec<Vec<u32>>,
    /// Chained hashes of each whole request (system prompt + conversation), 128 each.
    pub requests: Vec<Vec<SequenceHash>>,
    /// The two workers holding each conversation.
    pub holders: Vec<[usize; REPLICAS_PER_CONVERSATION]>,
}

impl ConversationFleet {
    /// The fleet of `workers` workers (at least 8). Conversation `c` lives on workers
    /// `c % workers` and `(c % workers + workers / 2 + c / workers) % workers`, so every
    /// worker holds exactly [`CONVERSATIONS_PER_WORKER`] conversations and the two holders
    /// of a conversation are far apart (often in different 64-slot words).
    pub fn new(workers: usize, seed: u64) -> Self {
        assert!(workers >= 8, "the shape needs at least 8 workers");
        let mut rng = SplitMix64::new(seed);
        let system_tokens = rng.tokens(SYSTEM_PROMPT_BLOCKS * BLOCK_SIZE);
        let system_hashes = sequence_hashes(&system_tokens);
        let conversations = workers * CONVERSATIONS_PER_WORKER / REPLICAS_PER_CONVERSATION;
        let h = hasher();
        let mut conversation_tokens = Vec::with_capacity(conversations);
        let mut requests = Vec::with_capacity(conversations);
        let mut holders = Vec::with_capacity(conversations);
        for c in 0..conversations {
            let tokens = rng.tokens(CONVERSATION_BLOCKS * BLOCK_SIZE);
            let mut hashes = system_hashes.clone();
            h.sequence_hashes_into(&tokens, system_hashes.last().copied(), &mut hashes);
            let a = c % workers;
            let b = (a + workers / 2 + c / workers) % workers;
            conversation_tokens.push(tokens);
            requests.push(hashes);
            holders.push([a, b]);
        }
        Self {
            workers,
            system_tokens,
            conversation_tokens,
            requests,
            holders,
        }
    }

    /// Distinct blocks of the fleet (one system prompt, plus every conversation body).
    pub fn distinct_blocks(&self) -> usize {
        SYSTEM_PROMPT_BLOCKS + self.requests.len() * CONVERSATION_BLOCKS
    }

    /// (worker, block) residencies of the fleet.
    pub fn residencies(&self) -> usize {
        self.workers * SYSTEM_PROMPT_BLOCKS
            + self.requests.len() * REPLICAS_PER_CONVERSATION * CONVERSATION_BLOCKS
    }

    /// Engine hash of block `i` of the system prompt on `worker`. Engines' hashes are opaque
    /// to the index; these are unique per (worker, block), as a real engine's would be.
    pub fn system_engine_hash(worker: usize, i: usize) -> EngineHash {
        EngineHash(((worker as u64) << 40) | i as u64)
    }

    /// Engine hash of block `i` of conversation `c` on `worker`.
    pub fn conversation_engine_hash(worker: usize, c: usize, i: usize) -> EngineHash {
        EngineHash(((worker as u64) << 40) | (1 << 39) | ((c as u64) << 8) | i as u64)
    }

    /// An index holding the fleet, with `expected_blocks` = [`Self::distinct_blocks`].
    /// Each worker stores the system prompt, then each of its conversations with the system
    /// prompt's last block as parent, through [`PrefixIndex::store_hashes`].
    pub fn build_index(&self) -> PrefixIndex {
        self.build_index_with(config(self.workers, self.distinct_blocks()))
    }

    /// Like [`Self::build_index`] with an explicit configuration.
    pub fn build_index_with(&self, config: IndexConfig) -> PrefixIndex {
        let index = PrefixIndex::new(config).expect("valid bench config");
        self.populate(&index);
        index
    }

    /// Stores the fleet into `index` (slots `0..workers` must exist).
    pub fn populate(&self, index: &PrefixIndex) {
        self.each_store(|slot, _, pairs| {
            index.store_hashes(slot, pairs).expect("slot");
        });
    }

    /// Calls `store(slot, parent, pairs)` for every store of the fleet, in order: each
    /// worker's system prompt (no parent), then each conversation on each of its holders
    /// (parent: the worker's last system-prompt block).
    fn each_store(
        &self,
        mut store: impl FnMut(Slot, Option<EngineHash>, &[(EngineHash, SequenceHash)]),
    ) {
        let system = &self.requests[0][..SYSTEM_PROMPT_BLOCKS];
        let mut pairs = Vec::with_capacity(REQUEST_BLOCKS);
        for w in 0..self.workers {
            pairs.clear();
            pairs.extend(
                system
                    .iter()
                    .enumerate()
                    .map(|(i, &s)| (Self::system_engine_hash(w, i), s)),
            );
            store(Slot(w as u32), None, &pairs);
        }
        for (c, (hashes, holders)) in self.requests.iter().zip(&self.holders).enumerate() {
            for &w in holders {
                pairs.clear();
                pairs.extend(
                    hashes[SYSTEM_PROMPT_BLOCKS..]
                        .iter()
                        .enumerate()
                        .map(|(i, &s)| (Self::conversation_engine_hash(w, c, i), s)),
                );
                let parent = Self::system_engine_hash(w, SYSTEM_PROMPT_BLOCKS - 1);
                store(Slot(w as u32), Some(parent), &pairs);
            }
        }
    }

    /// A [`RunIndex`] holding the fleet, stored as [`Self::populate`] stores it (each
    /// conversation after its worker's last system-prompt block).
    pub fn build_run_index(&self) -> RunIndex {
        let index = RunIndex::new(config(self.workers, self.distinct_blocks()))
            .expect("valid bench config");
        self.populate_runs(&index);
        index
    }

    /// Stores the fleet into a [`RunIndex`] (slots `0..workers` must exist).
    pub fn populate_runs(&self, index: &RunIndex) {
        self.each_store(|slot, parent, pairs| {
            index.store_hashes(slot, parent, pairs).expect("slot");
        });
    }

    /// A query for a *new* conversation: the shared system prompt followed by 96 blocks no
    /// worker holds (the match walks 32 levels with every worker alive, then misses).
    pub fn cold_request(&self, seed: u64) -> Vec<SequenceHash> {
        let mut rng = SplitMix64::new(seed);
        let tokens = rng.tokens(CONVERSATION_BLOCKS * BLOCK_SIZE);
        let mut hashes = self.requests[0][..SYSTEM_PROMPT_BLOCKS].to_vec();
        hasher().sequence_hashes_into(&tokens, hashes.last().copied(), &mut hashes);
        hashes
    }

    /// A fixed pseudo-random visiting order of the conversations (so consecutive queries do
    /// not walk neighbouring, cache-warm conversations).
    pub fn query_order(&self, seed: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.requests.len()).collect();
        let mut rng = SplitMix64::new(seed);
        for i in (1..order.len()).rev() {
            order.swap(i, rng.range(0, i));
        }
        order
    }
}

/// One `BlockStored` event of [`StoreWorkload`], with everything both store paths need.
#[derive(Clone, Debug)]
pub struct StoreEvent {
    /// The storing worker's slot.
    pub slot: Slot,
    /// Parent engine hash: the worker's last system-prompt block (always resident).
    pub parent: EngineHash,
    /// Engine hashes of the stored blocks (unique for this worker).
    pub engine_hashes: Vec<EngineHash>,
    /// `BLOCK_SIZE × blocks` token ids.
    pub token_ids: Vec<u32>,
    /// (engine hash, chained hash) pairs for [`PrefixIndex::store_hashes`].
    pub pairs: Vec<(EngineHash, SequenceHash)>,
}

impl StoreEvent {
    /// The event as [`PrefixIndex::store`] takes it.
    pub fn block_store(&self) -> BlockStore<'_> {
        BlockStore {
            parent: Some(self.parent),
            block_hashes: &self.engine_hashes,
            token_ids: &self.token_ids,
            block_size: BLOCK_SIZE,
            namespace: HashNamespace::DEFAULT,
        }
    }

    /// Blocks in the event.
    pub fn blocks(&self) -> usize {
        self.engine_hashes.len()
    }
}

/// Realistic store events against a populated [`ConversationFleet`].
///
/// Each event is a worker storing the blocks of a request after its cached system prompt
/// (parent = the worker's last system-prompt block), 16 to 512 blocks long (uniform). Half
/// of the events continue a conversation that two *other* workers already hold (its first
/// up-to-96 blocks hit existing nodes: only a bit is set), half are brand-new content (every
/// block inserts a node). Blocks past a conversation's 96 are fresh. A worker never stores a
/// block it already holds (real engines only announce newly cached blocks).
#[derive(Clone, Debug)]
pub struct StoreWorkload {
    /// The events, in replay order.
    pub events: Vec<StoreEvent>,
}

impl StoreWorkload {
    /// `n` events on `fleet` (seeded).
    pub fn new(fleet: &ConversationFleet, n: usize, seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let h = hasher();
        let system_last = fleet.requests[0][SYSTEM_PROMPT_BLOCKS - 1];
        let events = (0..n)
            .map(|e| {
                let w = rng.range(0, fleet.workers - 1);
                let blocks = rng.range(16, 512);
                let mut tokens = Vec::with_capacity(blocks * BLOCK_SIZE);
                if rng.next_u64() % 2 == 0 {
                    // Continue a conversation this worker does not hold.
                    let c = loop {
                        let c = rng.range(0, fleet.requests.len() - 1);
                        if !fleet.holders[c].contains(&w) {
                            break c;
                        }
                    };
                    let shared = blocks.min(CONVERSATION_BLOCKS);
                    tokens.extend_from_slice(&fleet.conversation_tokens[c][..shared * BLOCK_SIZE]);
                }
                let fresh = blocks * BLOCK_SIZE - tokens.len();
                tokens.extend(rng.tokens(fresh));
                let mut seq = Vec::with_capacity(blocks);
                h.sequence_hashes_into(&tokens, Some(system_last), &mut seq);
                // Unique per (worker, event, block); disjoint from the fleet's engine hashes.
                let engine_hashes: Vec<EngineHash> = (0..blocks)
                    .map(|i| EngineHash((1 << 63) | ((e as u64) << 20) | i as u64))
                    .collect();
                let pairs = engine_hashes.iter().copied().zip(seq).collect();
                StoreEvent {
                    slot: Slot(w as u32),
                    parent: ConversationFleet::system_engine_hash(w, SYSTEM_PROMPT_BLOCKS - 1),
                    engine_hashes,
                    token_ids: tokens,
                    pairs,
                }
            })
            .collect();
        Self { events }
    }

    /// Blocks over all events.
    pub fn total_blocks(&self) -> usize {
        self.events.iter().map(StoreEvent::blocks).sum()
    }
}

/// Data where each block is held by exactly one worker: `workers` workers, each with
/// `sequences_per_worker` unrelated sequences of `blocks_per_sequence` blocks (no shared
/// prefix at all), as (engine hash, chained hash) store batches per worker slot.
#[derive(Clone, Debug)]
pub struct OneOwnerData {
    /// One store batch per (worker, sequence).
    pub batches: Vec<(Slot, Vec<(EngineHash, SequenceHash)>)>,
}

impl OneOwnerData {
    /// The data set (seeded).
    pub fn new(
        workers: usize,
        sequences_per_worker: usize,
        blocks_per_sequence: usize,
        seed: u64,
    ) -> Self {
        let mut rng = SplitMix64::new(seed);
        let mut batches = Vec::with_capacity(workers * sequences_per_worker);
        for w in 0..workers {
            for c in 0..sequences_per_worker {
                let tokens = rng.tokens(blocks_per_sequence * BLOCK_SIZE);
                let pairs = sequence_hashes(&tokens)
                    .into_iter()
                    .enumerate()
                    .map(|(i, s)| (ConversationFleet::conversation_engine_hash(w, c, i), s))
                    .collect();
                batches.push((Slot(w as u32), pairs));
            }
        }
        Self { batches }
    }

    /// Distinct blocks (= residencies: one owner each).
    pub fn distinct_blocks(&self) -> usize {
        self.batches.iter().map(|(_, b)| b.len()).sum()
    }

    /// Stores the data into `index`.
    pub fn populate(&self, index: &PrefixIndex) {
        for (slot, pairs) in &self.batches {
            index.store_hashes(*slot, pairs).expect("slot");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleet_shape_is_as_documented() {
        let fleet = ConversationFleet::new(16, 1);
        assert_eq!(fleet.requests.len(), 64);
        let mut per_worker = [0usize; 16];
        for [a, b] in &fleet.holders {
            assert_ne!(a, b);
            per_worker[*a] += 1;
            per_worker[*b] += 1;
        }
        assert!(per_worker.iter().all(|&n| n == CONVERSATIONS_PER_WORKER));
        let index = fleet.build_index();
        let stats = index.stats();
        assert_eq!(stats.nodes as usize, fleet.distinct_blocks());
        assert_eq!(stats.residencies as usize, fleet.residencies());
        let mut out = index.new_overlaps();
        index.match_prefix(&fleet.requests[5], &mut out);
        for w in 0..16 {
            let want = if fleet.holders[5].contains(&w) {
                REQUEST_BLOCKS
            } else {
                SYSTEM_PROMPT_BLOCKS
            };
            assert_eq!(out.get(Slot(w as u32)) as usize, want);
        }
        index.match_prefix(&fleet.cold_request(9), &mut out);
        assert!(out.iter().all(|o| o as usize == SYSTEM_PROMPT_BLOCKS));
    }

    #[test]
    fn store_events_apply_and_remove_cleanly() {
        let fleet = ConversationFleet::new(16, 1);
        let index = fleet.build_index();
        let before = index.stats();
        let load = StoreWorkload::new(&fleet, 8, 2);
        for (i, e) in load.events.iter().enumerate() {
            let out = if i % 2 == 0 {
                index.store(e.slot, &e.block_store()).unwrap()
            } else {
                index.store_hashes(e.slot, &e.pairs).unwrap()
            };
            assert_eq!(out.new_blocks, e.blocks());
            let removed = index.remove(e.slot, &e.engine_hashes).unwrap();
            assert_eq!(removed.removed, e.blocks());
        }
        let after = index.stats();
        assert_eq!(after.nodes, before.nodes);
        assert_eq!(after.residencies, before.residencies);
    }
}
