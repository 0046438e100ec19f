//! The concurrent block-hash prefix index: which worker holds which KV block.
//!
//! # Shape
//! Every distinct block is one node addressed by its chained [`SequenceHash`]. Because the
//! chained hash of block `i` commits to blocks `0..=i`, the set of nodes *is* a prefix trie
//! whose edges are implicit: the child of node `h` for a block with local hash `l` is the
//! node `chain(h, l)`. A node carries one bit per worker slot (`worker_slots.div_ceil(64)` atomic 64-bit
//! words, in the node's one allocation) and a holder count. Nodes are found through an open-addressing table (`table`) that readers probe
//! without locks and that grows and shrinks with the number of blocks.
//!
//! # Semantics
//! A worker's overlap with a request `h[0..D]` is the length of the longest run `h[0..k]`
//! that it holds, exactly as a per-worker hash set would say, in every state, including
//! states that are not prefix-closed (a worker that lost block 3 but kept block 4 matches 3).
//!
//! # Writers and readers
//! * Events of one worker are applied by one writer at a time (the worker's mutex, which no
//!   reader takes); writers of different workers run concurrently.
//! * Each worker keeps a map from the engine's own block hash to its node, so removals and
//!   parent references resolve; it counts copies (a real vLLM engine can store the same
//!   block twice and removes each copy separately), and a block stays resident until its
//!   last copy goes. Removing an unknown hash is counted, not fatal.
//! * [`PrefixIndex::match_prefix`] takes no lock and never waits.
//! * A node whose last holder leaves is unlinked and freed after an epoch grace period
//!   (`crossbeam-epoch`): the nodes an event releases go to the collector as one batch, and
//!   the event's writer drains it before returning (`reclaim`), so garbage never piles up
//!   behind the collector's own pace; after every worker clears, the index holds no node
//!   and its per-worker maps are freed, so memory returns to the empty baseline (buckets
//!   only) without [`PrefixIndex::collect_garbage`].
//! * [`IndexStats::heap_bytes`] counts every allocation of the index, garbage waiting for
//!   the grace period included.
//! * Removals shrink a worker's maps only with hysteresis (below 1/8 full, above 112
//!   entries), so an engine's steady state of storing and evicting does not free and regrow
//!   them every event; [`PrefixIndex::collect_garbage`] gives the rest back.
//!
//! # Bounded memory
//! Each worker may hold at most `max_blocks_per_worker` blocks. A store that would exceed it
//! first evicts 1/16 of the worker's blocks: among the least recently *stored* 1/8, the
//! deepest half (re-storing a block refreshes it; matches do not, so the read path writes
//! nothing). Taking deep blocks first keeps a shared prefix that was stored once, long ago,
//! ahead of the conversation tails that hang off it, as the engines' own leaf-first
//! eviction does. Evicting only ever makes
//! the index *under*-state a worker's cache, never claim a block the worker lacks, and a
//! runaway stream from one worker can only evict that worker's own blocks.
//!
//! # Orderings
//! This module uses atomics only for gauges and counters (`Relaxed`: they are statistics
//! with no data published through them) and for `active_words` (`Relaxed` `fetch_max`
//! before a worker's first bit in a word is set; a reader that loads a stale, smaller value
//! misses only bits set concurrently with its match, which is a valid linearisation).
//! The node, table and reclamation protocols are documented in their own modules.

pub(crate) mod matching;
// `pub(crate)` for the loom models (`crate::loom_models`).
pub(crate) mod node;
pub(crate) mod reclaim;
pub(crate) mod table;
mod types;
mod worker;

use kvroute_core::sync::Mutex;
use kvroute_core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

pub use matching::{OverlapParts, Overlaps, TAIL_SLOTS};
pub use types::{
    BLOCK_SIZE, BlockStore, EXPECTED_BLOCKS, IndexConfig, IndexCounters, IndexError, IndexStats,
    MAX_BLOCKS_PER_WORKER, MAX_WORKER_SLOTS, RemoveOutcome, StoreOutcome, WORKER_SLOTS,
};

use crate::hash::{chain_hash, fold_extra_keys, local_block_hash};
use kvroute_core::EngineHash;
use kvroute_core::ExtraKeysDigest;
use kvroute_core::SequenceHash;
use kvroute_core::Slot;
use node::{Head, Node};
use reclaim::Guard;
use table::{Table, Writer};
use worker::{Entry, WorkerState};

/// Blocks of one event whose table slots are prefetched together.
const BATCH: usize = 16;

/// Rounds of pin and flush that [`PrefixIndex::collect_garbage`] and dropping the index
/// spend, at most, waiting for deferred garbage (each round can advance the epoch once).
const GARBAGE_DRAIN_ROUNDS: usize = 1024;

/// Gauge changes of one event, applied to the shared gauges once at its end.
#[derive(Default)]
struct Delta {
    nodes: i64,
    residencies: i64,
    /// Nodes this event unlinked (handed to the epoch collector).
    unlinked: u64,
    /// Nodes this event allocated and linked.
    inserted: usize,
}

impl Delta {
    /// Applies the gauge changes, hands the nodes this event released to the epoch
    /// collector as one batch (`Guard::seal`) and, when the event unlinked nodes, asks the
    /// collector to run what is due (`Guard::flush`: seal this thread's bag, advance the
    /// epoch if every pinned thread allows, free up to a few bags). The writer then drains
    /// the batch once its guard is dropped ([`PrefixIndex::drain_event_garbage`]).
    fn settle(self, index: &PrefixIndex, guard: &Guard) {
        let flush = self.unlinked > 0;
        let mem = index.table.memory();
        mem.nodes_allocated(self.inserted);
        self.apply(index);
        guard.seal(mem);
        if flush {
            guard.flush();
        }
    }

    fn apply(self, index: &PrefixIndex) {
        let add = |g: &AtomicU64, d: i64| {
            if d > 0 {
                g.fetch_add(d as u64, Ordering::Relaxed);
            } else if d < 0 {
                g.fetch_sub(d.unsigned_abs(), Ordering::Relaxed);
            }
        };
        add(&index.nodes, self.nodes);
        add(&index.residencies, self.residencies);
    }
}

/// Checks a store event's shape against the index's block size: each failure is counted
/// and returned, leaving the index unchanged.
pub(crate) fn validate_store(
    config: &IndexConfig,
    counters: &IndexCounters,
    event: &BlockStore<'_>,
    extra_keys: &[Option<ExtraKeysDigest>],
) -> Result<(), IndexError> {
    let bs = config.block_size;
    if event.block_size != bs {
        IndexCounters::bump(&counters.block_size_mismatches, 1);
        return Err(IndexError::BlockSizeMismatch {
            expected: bs,
            got: event.block_size,
        });
    }
    if event.token_ids.len() != bs * event.block_hashes.len() {
        IndexCounters::bump(&counters.token_count_mismatches, 1);
        return Err(IndexError::TokenCountMismatch {
            blocks: event.block_hashes.len(),
            block_size: bs,
            tokens: event.token_ids.len(),
        });
    }
    if !extra_keys.is_empty() && extra_keys.len() != event.block_hashes.len() {
        IndexCounters::bump(&counters.extra_keys_count_mismatches, 1);
        return Err(IndexError::ExtraKeysCountMismatch {
            blocks: event.block_hashes.len(),
            extra_keys: extra_keys.len(),
        });
    }
    Ok(())
}

/// A validated store event's blocks as (engine hash, chained hash) pairs, chained from
/// `parent` (the parent block's chained hash; none for a chain's first block), each
/// block's extra-keys digest folded into its local hash first.
pub(crate) fn chain_blocks<'a>(
    event: &'a BlockStore<'a>,
    extra_keys: &'a [Option<ExtraKeysDigest>],
    block_size: usize,
    parent: Option<SequenceHash>,
) -> impl ExactSizeIterator<Item = (EngineHash, SequenceHash)> + 'a {
    let mut prev = parent;
    event
        .block_hashes
        .iter()
        .zip(event.token_ids.chunks_exact(block_size))
        .enumerate()
        .map(move |(j, (eh, tokens))| {
            let mut local = local_block_hash(tokens, event.namespace);
            if let Some(&Some(digest)) = extra_keys.get(j) {
                local = fold_extra_keys(local, digest);
            }
            let seq = match prev {
                None => SequenceHash(local.0),
                Some(p) => chain_hash(p, local),
            };
            prev = Some(seq);
            (*eh, seq)
        })
}

/// The concurrent block-hash prefix index; see the module docs.
pub struct PrefixIndex {
    config: IndexConfig,
    table: Table,
    workers: Box<[Mutex<WorkerState>]>,
    /// Number of 64-slot words any worker has ever used (highest slot / 64 + 1).
    active_words: AtomicUsize,
    nodes: AtomicU64,
    residencies: AtomicU64,
    counters: IndexCounters,
}

impl core::fmt::Debug for PrefixIndex {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PrefixIndex")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish()
    }
}

impl PrefixIndex {
    /// An empty index.
    ///
    /// # Errors
    /// [`OutOfRange`](kvroute_core::OutOfRange) naming the first field out of range.
    pub fn new(config: IndexConfig) -> Result<Self, kvroute_core::OutOfRange> {
        config.validate()?;
        let words = config.worker_slots.div_ceil(64);
        let mix = {
            use core::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(0x006b_7672_6f75_7465);
            h.finish()
        };
        Ok(Self {
            table: Table::new(config.expected_blocks, words as u32, mix),
            workers: (0..config.worker_slots)
                .map(|_| Mutex::new(WorkerState::default()))
                .collect(),
            active_words: AtomicUsize::new(0),
            nodes: AtomicU64::new(0),
            residencies: AtomicU64::new(0),
            counters: IndexCounters::default(),
            config,
        })
    }

    /// The configuration the index was built with.
    pub fn config(&self) -> &IndexConfig {
        &self.config
    }

    /// An [`Overlaps`] buffer sized for this index.
    pub fn new_overlaps(&self) -> Overlaps {
        Overlaps::new(self.config.worker_slots)
    }

    fn active_words(&self) -> usize {
        self.active_words.load(Ordering::Relaxed)
    }

    fn worker(
        &self,
        slot: Slot,
    ) -> Result<kvroute_core::sync::MutexGuard<'_, WorkerState>, IndexError> {
        match self.workers.get(slot.index()) {
            // A writer that panicked mid-event leaves a consistent state for every block it
            // finished; keep serving rather than poisoning the worker forever.
            Some(m) => Ok(m.lock().unwrap_or_else(|p| p.into_inner())),
            None => {
                IndexCounters::bump(&self.counters.slot_out_of_range, 1);
                Err(IndexError::SlotOutOfRange {
                    slot,
                    worker_slots: self.config.worker_slots,
                })
            }
        }
    }

    /// Applies a `BlockStored` event of the worker in `slot`: re-hashes `token_ids` with the
    /// index's scheme (chaining from the parent's hash) and marks every block resident.
    ///
    /// # Errors
    /// [`IndexError::SlotOutOfRange`], [`IndexError::BlockSizeMismatch`],
    /// [`IndexError::TokenCountMismatch`], [`IndexError::UnknownParent`]; each is counted
    /// and leaves the index unchanged.
    pub fn store(&self, slot: Slot, event: &BlockStore<'_>) -> Result<StoreOutcome, IndexError> {
        self.store_with_extra_keys(slot, event, &[])
    }

    /// [`store`](PrefixIndex::store) for blocks whose engine hashed extra keys with their
    /// tokens: `extra_keys[j]` is the digest of block `j`'s keys (`None`: the block has
    /// none), folded into its local hash before chaining ([`fold_extra_keys`]), so that
    /// block and every block chained after it are found only by prompts that present the
    /// same keys. `extra_keys` is empty (no block has keys) or has one entry per block.
    ///
    /// # Errors
    /// Those of `store`, and [`IndexError::ExtraKeysCountMismatch`] when `extra_keys` is
    /// neither empty nor one entry per block; each is counted and leaves the index
    /// unchanged.
    pub fn store_with_extra_keys(
        &self,
        slot: Slot,
        event: &BlockStore<'_>,
        extra_keys: &[Option<ExtraKeysDigest>],
    ) -> Result<StoreOutcome, IndexError> {
        validate_store(&self.config, &self.counters, event, extra_keys)?;
        let mut state = self.worker(slot)?;
        let mut parent_node = None;
        let mut first_depth = 0u16;
        let prev = match event.parent {
            None => None,
            Some(p) => match state.entries.get(&p.0) {
                Some(e) => {
                    parent_node = Some(e.node);
                    first_depth = e.depth.saturating_add(1);
                    Some(SequenceHash(e.head().key))
                }
                None => {
                    IndexCounters::bump(&self.counters.unknown_parent_stores, 1);
                    return Err(IndexError::UnknownParent {
                        parent: p,
                        blocks: event.block_hashes.len(),
                    });
                }
            },
        };
        let blocks = chain_blocks(event, extra_keys, self.config.block_size, prev);
        Ok(self.store_locked(slot, &mut state, parent_node, first_depth, blocks))
    }

    /// Applies a store whose chained hashes the caller computed already: each pair is
    /// (engine hash, chained hash of that block). For producers that share kvroute's
    /// hashing scheme, and for tests.
    ///
    /// # Errors
    /// [`IndexError::SlotOutOfRange`].
    pub fn store_hashes(
        &self,
        slot: Slot,
        blocks: &[(EngineHash, SequenceHash)],
    ) -> Result<StoreOutcome, IndexError> {
        let mut state = self.worker(slot)?;
        Ok(self.store_locked(slot, &mut state, None, 0, blocks.iter().copied()))
    }

    /// Applies one event's blocks under the worker's lock. `parent` is the node of the block
    /// before the first one, if known; each block's node becomes the successor of the one
    /// before it (see `node`), so matches can walk the event's blocks without lookups.
    fn store_locked(
        &self,
        slot: Slot,
        state: &mut WorkerState,
        parent: Option<*const Head>,
        first_depth: u16,
        blocks: impl Iterator<Item = (EngineHash, SequenceHash)>,
    ) -> StoreOutcome {
        let s = slot.index();
        self.active_words.fetch_max(s / 64 + 1, Ordering::Relaxed);
        let guard = reclaim::pin();
        let mut w = self.table.writer(s);
        let words = self.table.words as usize;
        let mut out = StoreOutcome::default();
        let mut d = Delta::default();
        // The previous block's node. Every node seen in this call stays allocated until
        // `guard` is dropped (a node released meanwhile is freed only after the grace
        // period), so the pointer stays valid even if eviction releases that block.
        let mut prev: Option<*const Head> = parent;
        let mut depth = first_depth;
        let mut blocks = blocks;
        let mut batch = [(EngineHash(0), SequenceHash(0)); BATCH];
        loop {
            // Take up to BATCH blocks and start loading their table slots together, so
            // their cache misses overlap instead of being paid one after another.
            let mut n = 0;
            for b in blocks.by_ref().take(BATCH) {
                batch[n] = b;
                n += 1;
            }
            if n == 0 {
                break;
            }
            for (_, seq) in &batch[..n] {
                w.prefetch(seq.0, &guard);
            }
            for &(eh, seq) in &batch[..n] {
                let stamp = state.tick();
                if let Some(e) = state.entries.get_mut(&eh.0) {
                    if e.head().key == seq.0 {
                        e.copies = e.copies.saturating_add(1);
                        e.stamp = stamp;
                        out.extra_copies += 1;
                        prev = Some(e.node);
                        depth = e.depth.saturating_add(1);
                        continue;
                    }
                    // Same engine hash, different content: the engine's latest word wins.
                    let old = state.entries.remove(&eh.0).expect("entry present");
                    self.release_entry(s, state, old, &mut w, &guard, &mut d);
                    out.conflicts += 1;
                    IndexCounters::bump(&self.counters.hash_conflicts, 1);
                }
                if state.entries.len() >= self.config.max_blocks_per_worker {
                    out.evicted += self.evict(s, state, &mut w, &guard, &mut d);
                }
                let (node, inserted) = w.acquire_or_insert(seq.0, &guard);
                if inserted {
                    d.nodes += 1;
                    d.inserted += 1;
                }
                if let Some(p) = prev {
                    // SAFETY: `p` was reached in this call under `guard` (see `prev`), and is
                    // a node of this index's table (allocated with `words`).
                    unsafe { Node::from_thin(p, words) }.link_succ(node, &guard);
                }
                let thin = node.as_thin().cast_const();
                prev = Some(thin);
                if node.set_bit(s) {
                    // This worker already holds the node under another engine hash: keep one
                    // holder reference per worker and count the alias instead.
                    let retired = node.release();
                    debug_assert!(!retired, "the worker's own reference keeps the node");
                    *state.aliases.entry(thin as usize).or_insert(0) += 1;
                } else {
                    d.residencies += 1;
                }
                state.entries.insert(
                    eh.0,
                    Entry {
                        node: thin,
                        copies: 1,
                        depth,
                        stamp,
                    },
                );
                out.new_blocks += 1;
                depth = depth.saturating_add(1);
            }
        }
        d.settle(self, &guard);
        drop(w);
        drop(guard);
        self.drain_event_garbage();
        out
    }

    /// Frees the garbage of the event just applied (this thread's guard dropped), a few
    /// rounds at most (`reclaim::EVENT_DRAIN_ROUNDS`); what a reader pinned from before the
    /// event still holds back is freed by a later event or [`collect_garbage`]
    /// (Self::collect_garbage), and is counted in the heap gauge meanwhile.
    #[inline]
    fn drain_event_garbage(&self) {
        reclaim::drain(self.table.memory(), reclaim::EVENT_DRAIN_ROUNDS);
    }

    /// Drops the worker's reference that `entry` stood for (one engine hash, all copies).
    fn release_entry(
        &self,
        s: usize,
        state: &mut WorkerState,
        entry: Entry,
        w: &mut Writer<'_>,
        guard: &Guard,
        d: &mut Delta,
    ) {
        let key = entry.node as usize;
        if let Some(n) = state.aliases.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                state.aliases.remove(&key);
            }
            return;
        }
        let node: &Node = entry.node(self.table.words as usize);
        node.clear_bit(s);
        d.residencies -= 1;
        if node.release() {
            // SAFETY: `release` returned true, so this thread retired the node (under the
            // writer `w`, with no resize since) and is the only one that will unlink it; it
            // belongs to `self.table`.
            unsafe { w.unlink(node, guard) };
            d.nodes -= 1;
            d.unlinked += 1;
        }
    }

    fn evict(
        &self,
        s: usize,
        state: &mut WorkerState,
        w: &mut Writer<'_>,
        guard: &Guard,
        d: &mut Delta,
    ) -> usize {
        let n = (self.config.max_blocks_per_worker / 16).max(1);
        let victims = state.victims(n);
        for eh in &victims {
            if let Some(e) = state.entries.remove(eh) {
                self.release_entry(s, state, e, w, guard, d);
            }
        }
        IndexCounters::bump(&self.counters.evicted_blocks, victims.len() as u64);
        victims.len()
    }

    /// Applies a `BlockRemoved` event: drops one copy of each engine hash; a block stops
    /// being resident when its last copy goes. Unknown hashes are counted and skipped.
    ///
    /// # Errors
    /// [`IndexError::SlotOutOfRange`].
    pub fn remove(
        &self,
        slot: Slot,
        block_hashes: &[EngineHash],
    ) -> Result<RemoveOutcome, IndexError> {
        let mut state = self.worker(slot)?;
        let s = slot.index();
        let guard = reclaim::pin();
        let mut w = self.table.writer(s);
        let mut out = RemoveOutcome::default();
        let mut d = Delta::default();
        for eh in block_hashes {
            match state.entries.get_mut(&eh.0) {
                None => out.unknown += 1,
                Some(e) if e.copies > 1 => {
                    e.copies -= 1;
                    out.copies_dropped += 1;
                }
                Some(_) => {
                    let e = state.entries.remove(&eh.0).expect("entry present");
                    self.release_entry(s, &mut state, e, &mut w, &guard, &mut d);
                    out.removed += 1;
                }
            }
        }
        state.shrink_if_sparse();
        d.settle(self, &guard);
        drop(w);
        drop(guard);
        self.drain_event_garbage();
        IndexCounters::bump(&self.counters.unknown_removes, out.unknown as u64);
        Ok(out)
    }

    /// Applies `AllBlocksCleared` (or an engine restart): the worker holds nothing any more
    /// and its maps are freed. Returns how many engine hashes it had.
    ///
    /// # Errors
    /// [`IndexError::SlotOutOfRange`].
    pub fn clear(&self, slot: Slot) -> Result<usize, IndexError> {
        let mut state = self.worker(slot)?;
        Ok(self.clear_locked(slot, &mut state))
    }

    /// Forgets the worker in `slot` entirely (residency, maps, store clock), so the slot can
    /// be handed to a new tenant that inherits nothing. Call it before releasing the slot in
    /// the `WorkerRegistry`. Returns how many engine hashes it had.
    /// Clearing and resetting happen under one hold of the worker's lock, so a racing store
    /// of the same worker lands either wholly before (and is cleared) or wholly after.
    ///
    /// # Errors
    /// [`IndexError::SlotOutOfRange`].
    pub fn remove_worker(&self, slot: Slot) -> Result<usize, IndexError> {
        let mut state = self.worker(slot)?;
        let n = self.clear_locked(slot, &mut state);
        *state = WorkerState::default();
        Ok(n)
    }

    fn clear_locked(&self, slot: Slot, state: &mut WorkerState) -> usize {
        let s = slot.index();
        let guard = reclaim::pin();
        let mut w = self.table.writer(s);
        let mut d = Delta::default();
        let entries = core::mem::take(&mut state.entries);
        let n = entries.len();
        for (_, e) in entries {
            self.release_entry(s, state, e, &mut w, &guard, &mut d);
        }
        debug_assert!(state.aliases.is_empty());
        state.aliases = Default::default();
        d.settle(self, &guard);
        drop(w);
        drop(guard);
        self.drain_event_garbage();
        n
    }

    /// Number of engine hashes the worker in `slot` has indexed (0 outside the range).
    pub fn worker_blocks(&self, slot: Slot) -> usize {
        self.workers
            .get(slot.index())
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()).entries.len())
            .unwrap_or(0)
    }

    /// The engine block hashes the worker in `slot` has indexed, each with its copy count
    /// (stores of that hash minus removals, at least 1, saturating at 65,535), in no
    /// particular order; empty outside the slot range. For inspection (comparing a worker's
    /// residency with the engine's own cache listing, tests): it copies the worker's map
    /// under the worker's lock, `O(blocks)`, so it is not for the hot path.
    pub fn engine_hashes(&self, slot: Slot) -> Vec<(EngineHash, u32)> {
        self.workers
            .get(slot.index())
            .map(|m| {
                let state = m.lock().unwrap_or_else(|p| p.into_inner());
                state
                    .entries
                    .iter()
                    .map(|(&h, e)| (EngineHash(h), u32::from(e.copies)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Asks the epoch collector to free retired nodes now, and gives back the spare
    /// capacity of every worker's maps (an empty map is freed, one at most a quarter full
    /// shrinks; removals alone keep up to 112 entries' worth per worker, see the index
    /// docs). Each event's writer frees its own garbage before returning unless a reader
    /// pinned meanwhile holds it back; this is for tests, memory gauges and idle moments: it
    /// takes each worker's lock in turn (`O(worker_slots)`). A freed node can release its
    /// successor, which is then freed a grace period later, so this flushes repeatedly
    /// (bounded: garbage a thread pinned forever holds back stays, counted in the gauge).
    pub fn collect_garbage(&self) {
        for w in self.workers.iter() {
            w.lock().unwrap_or_else(|p| p.into_inner()).trim();
        }
        for _ in 0..256 {
            reclaim::pin().flush();
        }
        reclaim::drain(self.table.memory(), GARBAGE_DRAIN_ROUNDS);
    }

    /// Counters and gauges.
    pub fn stats(&self) -> IndexStats {
        let c = &self.counters;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let nodes = r(&self.nodes);
        let maps: usize = self
            .workers
            .iter()
            .map(|w| w.lock().unwrap_or_else(|p| p.into_inner()).heap_bytes())
            .sum();
        let mem = self.table.memory().counts();
        let node_bytes = mem.allocated_nodes * node::node_bytes(self.table.words as usize);
        let workers = self.workers.len() * core::mem::size_of::<Mutex<WorkerState>>();
        IndexStats {
            nodes,
            residencies: r(&self.residencies),
            heap_bytes: (node_bytes
                + mem.deferred_bytes
                + maps
                + workers
                + self.table.fixed_bytes()) as u64,
            allocated_nodes: mem.allocated_nodes as u64,
            deferred_nodes: mem.deferred_nodes as u64,
            deferred_bytes: mem.deferred_bytes as u64,
            slot_out_of_range: r(&c.slot_out_of_range),
            block_size_mismatches: r(&c.block_size_mismatches),
            token_count_mismatches: r(&c.token_count_mismatches),
            extra_keys_count_mismatches: r(&c.extra_keys_count_mismatches),
            unknown_parent_stores: r(&c.unknown_parent_stores),
            unknown_removes: r(&c.unknown_removes),
            hash_conflicts: r(&c.hash_conflicts),
            evicted_blocks: r(&c.evicted_blocks),
            table_resizes: self.table.resizes(),
        }
    }
}

impl Drop for PrefixIndex {
    /// Waits (a bounded number of pin-and-flush rounds) for the garbage deferred by this
    /// index, so that dropping an idle index gives its memory back instead of leaving it in
    /// the collector's queue until some other thread pins; the table's drop then frees the
    /// nodes still linked.
    fn drop(&mut self) {
        reclaim::drain(self.table.memory(), GARBAGE_DRAIN_ROUNDS);
    }
}
