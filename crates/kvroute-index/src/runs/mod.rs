//! The run-compressed prefix index: blocks stored as runs of consecutive chain positions,
//! each run one key buffer and one coverage view, instead of one node per block.
//!
//! # Shape
//! The engines' blocks form chains (every block names its parent), and the chains of a
//! fleet form a trie keyed by chained block hash. [`RunIndex`] stores that trie as *runs*:
//! stretches of consecutive positions of one chain, each with a buffer of its chained
//! hashes and a *view* of who holds it: a bitset of workers holding every position, and a
//! short list of workers holding only its first `cutoff` positions. A chain that diverges
//! from a run at any offset is a run of its own, found by its first key in the *head
//! table*; the run it leaves is not split. A run is split only when its list of partial
//! holders grows past a few entries, so a prefix that many workers hold to the same depth
//! ends up as one run every holder covers in full (see `write`).
//!
//! # Semantics
//! The same as [`PrefixIndex`](crate::index::PrefixIndex)'s for chains: a worker's overlap
//! with a request `h[0..D]` is the largest `k` such that it holds every one of `h[0..k]`,
//! holes and non-prefix-closed states included (a worker that lost a block in the middle
//! of a run holds, for a match, only the positions before it). What it relies on that a
//! per-block index does not: the blocks of one store are consecutive blocks of one chain,
//! the first one the child of the store's parent (or, without a parent, a chain's first
//! block or the first key of a run), as every engine's `BlockStored` event is.
//!
//! # Readers and writers
//! * [`RunIndex::match_prefix`] takes no lock, never waits and allocates nothing: it pins
//!   the epoch, finds the run of the request's first block in the head table, compares the
//!   request's hashes with the run's keys in a row, intersects the surviving workers with
//!   the run's view, and looks the next block up as the first key of a run. It records
//!   the overlaps by word of 64 slots ([`Overlaps`]' layout): a depth per word for the
//!   workers that drop out together, entries only for the few that differ.
//! * Writers take one lock for the whole index (events of every worker are applied one at
//!   a time); they never block readers. A change to a run publishes a new view (and a new
//!   key buffer when the run outgrows its own); the old ones are freed through the epoch
//!   collector after every reader that could see them has unpinned. An event's garbage
//!   goes to the collector as one batch; an event that unlinked a run (or replaced a key
//!   buffer or the head table's array) then drains the collector, a few rounds of pin and
//!   flush after releasing the lock, so its garbage is normally freed before it returns
//!   (it stays only while a reader pinned from before the event holds it back, and a later
//!   event or [`RunIndex::collect_garbage`] frees it).
//!
//! # Memory
//! [`RunIndexStats::heap_bytes`] counts every allocation of the index: the head table's
//! array, the run arena and each run's key buffer, members, covers and anchors, the
//! published views, each worker's lane map and copy and alias maps, the writer's scratch
//! buffers, the shared garbage gauge, and garbage waiting for the epoch collector (each
//! batch's items, record and buffer). Not counted: crossbeam-epoch's own bookkeeping (the
//! thread's registration and its queue of sealed bags). When every worker has let go of
//! every block, the index frees its run arena and scratch buffers and each cleared worker's
//! maps, so memory returns to the empty index's (head table, worker records) without
//! [`RunIndex::collect_garbage`]; removals of single blocks keep a worker's lane map (it
//! shrinks with hysteresis) until `collect_garbage` gives the rest back.
//!
//! # Bounded memory
//! Each worker may hold at most `max_blocks_per_worker` engine hashes after every event. A
//! store that leaves it above evicts the excess and 1/16 of the cap more: among the twice
//! as many least recently stored (a worker's recency is kept per run: its last store into
//! that run), the deepest first, as engines evict leaf-first. Evicting only ever makes the
//! index under-state a worker's cache, and a runaway stream of one worker evicts only its
//! own blocks.
//!
//! # Input that breaks the chain property
//! Stores whose blocks are not one chain cannot be told apart from chains without their
//! tokens. They leave the index memory-safe and consistent: a key may then sit at two
//! positions (a worker holding it at each counts twice in `residencies`), a run whose
//! first key another run already has stays out of the head table
//! ([`RunIndexStats::duplicate_heads`]), and a match may miss such blocks but never
//! credits a block a worker does not hold (`tests/run_index_bad_input.rs`, also under
//! AddressSanitizer).
//!
//! # Status
//! The index the router (`kvroute::Router`) uses. The differential property tests
//! (`tests/run_index_model.rs`), the readers-against-writer test
//! (`tests/run_index_concurrent.rs`), the bad-input tests, the memory tests
//! (`tests/run_index_memory.rs`), the `run_index_ops` fuzz target and the loom models of
//! the publication (`loom_models/runs.rs`) cover it.
//!
//! # Orderings
//! The head table's orderings are documented in `heads`; views and key buffers are
//! immutable once published (below a buffer's high-water mark), so readers load them as
//! plain memory after the `Acquire` load of the view pointer. The gauges and counters are
//! `Relaxed` statistics.

mod cover;
mod epoch;
mod heads;
mod lanes;
mod view;
mod walk;
mod write;

use kvroute_core::sync::Mutex;
use kvroute_core::{EngineHash, ExtraKeysDigest, OutOfRange, SequenceHash, Slot};

use crate::index::{
    BlockStore, IndexConfig, IndexCounters, IndexError, Overlaps, RemoveOutcome, StoreOutcome,
    chain_blocks, validate_store,
};
use std::sync::Arc;

use heads::Heads;
use write::{Ctx, Deferred, Writer};

/// Rounds of pin and flush an event that freed a key buffer or an array runs after
/// releasing the writer lock (each round advances the epoch at most once; a batch expires
/// two advances after it was sealed).
const EVENT_DRAIN_ROUNDS: usize = 6;

/// Rounds of pin and flush [`RunIndex::collect_garbage`] spends, at most.
const GARBAGE_DRAIN_ROUNDS: usize = 256;

/// Gauges of a [`RunIndex`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunIndexStats {
    /// Runs linked in the head table.
    pub runs: u64,
    /// Key positions of the runs in the index: the linked runs (distinct blocks, plus any
    /// position of a linked run that no worker holds any more) and the runs left out of the
    /// head table ([`duplicate_heads`](Self::duplicate_heads)), whose keys are kept until
    /// their holders remove them.
    pub positions: u64,
    /// Distinct blocks that at least one worker holds (the held positions of the linked
    /// runs; [`IndexStats::nodes`](crate::index::IndexStats::nodes) of a node-per-block
    /// index). At most `positions`.
    pub blocks: u64,
    /// (worker, block) pairs held.
    pub residencies: u64,
    /// Heap bytes of the index: head table, run records, key buffers, views, covers,
    /// worker lanes, scratch buffers, and garbage waiting for the epoch collector (every
    /// allocation the index makes; see the module docs, "Memory").
    pub heap_bytes: u64,
    /// Of `heap_bytes`, garbage waiting for the epoch collector.
    pub deferred_bytes: u64,
    /// Hash conflicts (an engine hash re-stored with other content).
    pub hash_conflicts: u64,
    /// Runs split so far (a run whose partial holders passed the bound).
    pub splits: u64,
    /// Runs left out of the head table because another run starts with the same key (or
    /// with the key the table files in its place: a first key of 0 and its stand-in share
    /// a table slot): stores that broke the chain property of [`RunIndex::store_hashes`],
    /// each run counted once, however often it is published again. Their blocks are not
    /// found by matches (the index under-states what those workers hold, never over-states
    /// it); 0 for every engine stream.
    pub duplicate_heads: u64,
    /// Blocks evicted by the per-worker cap.
    pub evicted_blocks: u64,
    /// Events rejected for a slot outside the index.
    pub slot_out_of_range: u64,
    /// Stores rejected for a parent the worker has not indexed.
    pub unknown_parent_stores: u64,
    /// Removed engine hashes the worker had not indexed.
    pub unknown_removes: u64,
    /// Stores rejected for their block size, token count or extra-keys count (the sum of
    /// the three counts below).
    pub malformed_stores: u64,
    /// Stores rejected because their block size differs from the index's.
    pub block_size_mismatches: u64,
    /// Stores rejected because their token count is not `block_size` per block.
    pub token_count_mismatches: u64,
    /// Stores rejected because their extra-keys list is neither empty nor one per block.
    pub extra_keys_count_mismatches: u64,
}

/// The run-compressed prefix index; see the module docs.
pub struct RunIndex {
    config: IndexConfig,
    heads: Heads,
    writer: Mutex<Writer>,
    counters: IndexCounters,
    deferred: Arc<Deferred>,
    conflicts: kvroute_core::sync::atomic::AtomicU64,
}

impl core::fmt::Debug for RunIndex {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RunIndex")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish()
    }
}

impl RunIndex {
    /// An empty index.
    ///
    /// # Errors
    /// [`OutOfRange`] naming the first field of `config` out of range.
    pub fn new(config: IndexConfig) -> Result<Self, OutOfRange> {
        config.validate()?;
        // One head per run, not per block: a floor sized for one run per 64 expected blocks
        // at half load (the table rebuilds larger as runs arrive and never shrinks below
        // it); one per 16 blocks cost 2 to 3.6 bytes per block of fleets whose runs are
        // 100 blocks long.
        let (heads, counts) = Heads::new(config.expected_blocks / 64);
        // Shared with the garbage closures, which may run after the index is dropped.
        let deferred = Arc::new(Deferred::default());
        Ok(Self {
            heads,
            writer: Mutex::new(Writer::new(
                config.worker_slots,
                counts,
                Arc::clone(&deferred),
            )),
            counters: IndexCounters::default(),
            deferred,
            conflicts: Default::default(),
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

    fn writer(&self, slot: Slot) -> Result<kvroute_core::sync::MutexGuard<'_, Writer>, IndexError> {
        if slot.index() >= self.config.worker_slots {
            IndexCounters::bump(&self.counters.slot_out_of_range, 1);
            return Err(IndexError::SlotOutOfRange {
                slot,
                worker_slots: self.config.worker_slots,
            });
        }
        Ok(self.writer.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Applies a `BlockStored` event of the worker in `slot`: re-hashes `token_ids`
    /// (chaining from the parent's hash) and marks every block resident.
    ///
    /// # Errors
    /// [`IndexError::SlotOutOfRange`], [`IndexError::BlockSizeMismatch`],
    /// [`IndexError::TokenCountMismatch`], [`IndexError::UnknownParent`]; each is counted
    /// and leaves the index unchanged.
    pub fn store(&self, slot: Slot, event: &BlockStore<'_>) -> Result<StoreOutcome, IndexError> {
        self.store_with_extra_keys(slot, event, &[])
    }

    /// [`store`](Self::store) for blocks whose engine hashed extra keys with their tokens,
    /// as [`PrefixIndex::store_with_extra_keys`](crate::index::PrefixIndex::store_with_extra_keys).
    ///
    /// # Errors
    /// Those of `store`, and [`IndexError::ExtraKeysCountMismatch`].
    pub fn store_with_extra_keys(
        &self,
        slot: Slot,
        event: &BlockStore<'_>,
        extra_keys: &[Option<ExtraKeysDigest>],
    ) -> Result<StoreOutcome, IndexError> {
        validate_store(&self.config, &self.counters, event, extra_keys)?;
        let mut w = self.writer(slot)?;
        let s = slot.index();
        let parent = self.parent(&mut w, s, event.parent, event.block_hashes.len())?;
        let blocks = chain_blocks(
            event,
            extra_keys,
            self.config.block_size,
            parent.map(|(_, _, k)| SequenceHash(k)),
        );
        let out = self.apply_store(&mut w, s, parent.map(|(r, o, _)| (r, o)), blocks);
        self.settle(w);
        Ok(out)
    }

    /// Applies a store whose chained hashes the caller computed: `blocks` are (engine
    /// hash, chained hash) pairs of consecutive blocks of one chain, the first one the
    /// child of the block the worker indexed under `parent` (or, with no parent, a chain's
    /// first block, or a block that already starts a run).
    ///
    /// Blocks that are not such a chain (they cannot be told apart from one without their
    /// tokens) are stored as if they were: the index stays memory-safe and consistent, and
    /// a match may then miss some of those blocks, never credit a block a worker does not
    /// hold (counted in [`RunIndexStats::duplicate_heads`] where two runs would start with
    /// one key).
    ///
    /// # Errors
    /// [`IndexError::SlotOutOfRange`]; [`IndexError::UnknownParent`] when `parent` is not
    /// indexed for the worker. Each is counted and leaves the index unchanged.
    pub fn store_hashes(
        &self,
        slot: Slot,
        parent: Option<EngineHash>,
        blocks: &[(EngineHash, SequenceHash)],
    ) -> Result<StoreOutcome, IndexError> {
        let mut w = self.writer(slot)?;
        let s = slot.index();
        let at = self
            .parent(&mut w, s, parent, blocks.len())?
            .map(|(r, o, _)| (r, o));
        let out = self.apply_store(&mut w, s, at, blocks.iter().copied());
        self.settle(w);
        Ok(out)
    }

    /// The position and key of a store's `parent` on worker `s` (none without a parent).
    ///
    /// # Errors
    /// [`IndexError::UnknownParent`] (counted) when the worker has not indexed it.
    fn parent(
        &self,
        w: &mut Writer,
        s: usize,
        parent: Option<EngineHash>,
        blocks: usize,
    ) -> Result<Option<(u32, u32, u64)>, IndexError> {
        let Some(p) = parent else {
            return Ok(None);
        };
        match w.key_of(s, p.0) {
            Some(found) => Ok(Some(found)),
            None => {
                IndexCounters::bump(&self.counters.unknown_parent_stores, 1);
                Err(IndexError::UnknownParent { parent: p, blocks })
            }
        }
    }

    /// Ends an event: releases the writer lock and, when the event freed a key buffer or
    /// an array, drains the epoch collector (see the module docs).
    fn settle(&self, mut w: kvroute_core::sync::MutexGuard<'_, Writer>) {
        let freed = w.take_freed();
        drop(w);
        if freed {
            self.drain(EVENT_DRAIN_ROUNDS);
        }
    }

    /// Up to `rounds` rounds of pin and flush while garbage of this index waits.
    fn drain(&self, rounds: usize) {
        for _ in 0..rounds {
            if self.deferred.get() == 0 {
                return;
            }
            epoch::pin().flush();
        }
    }

    fn apply_store(
        &self,
        w: &mut Writer,
        s: usize,
        at: Option<(u32, u32)>,
        blocks: impl ExactSizeIterator<Item = (EngineHash, SequenceHash)>,
    ) -> StoreOutcome {
        let guard = epoch::pin();
        let cx = Ctx {
            heads: &self.heads,
            guard: &guard,
        };
        let mut out = StoreOutcome::default();
        let mut conflicts = 0;
        w.store(
            &cx,
            s,
            at,
            blocks.map(|(e, k)| (e, k.0)),
            &mut out,
            &mut conflicts,
        );
        out.evicted = w.enforce_cap(s, self.config.max_blocks_per_worker);
        if out.evicted > 0 {
            IndexCounters::bump(&self.counters.evicted_blocks, out.evicted as u64);
        }
        w.publish(&cx);
        if conflicts > 0 {
            IndexCounters::bump(&self.counters.hash_conflicts, conflicts);
            self.conflicts
                .fetch_add(conflicts, kvroute_core::sync::atomic::Ordering::Relaxed);
        }
        out
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
        let mut w = self.writer(slot)?;
        let guard = epoch::pin();
        let cx = Ctx {
            heads: &self.heads,
            guard: &guard,
        };
        let mut out = RemoveOutcome::default();
        w.remove(slot.index(), block_hashes, &mut out);
        w.publish(&cx);
        drop(guard);
        self.settle(w);
        IndexCounters::bump(&self.counters.unknown_removes, out.unknown as u64);
        Ok(out)
    }

    /// Applies `AllBlocksCleared` (or an engine restart): the worker holds nothing any more
    /// and its maps are freed, but for a reservation ([`reserve_worker`](Self::reserve_worker)),
    /// which is allocated again empty: the engine is about to refill its cache. Returns how
    /// many engine hashes it had.
    ///
    /// # Errors
    /// [`IndexError::SlotOutOfRange`].
    pub fn clear(&self, slot: Slot) -> Result<usize, IndexError> {
        self.clear_worker(slot, false)
    }

    /// [`clear`](Self::clear), also dropping the reservation when `forget`.
    fn clear_worker(&self, slot: Slot, forget: bool) -> Result<usize, IndexError> {
        let mut w = self.writer(slot)?;
        let guard = epoch::pin();
        let cx = Ctx {
            heads: &self.heads,
            guard: &guard,
        };
        let n = w.clear(slot.index(), forget);
        w.publish(&cx);
        drop(guard);
        self.settle(w);
        Ok(n)
    }

    /// Forgets the worker in `slot` entirely (residency, lane, copy and alias maps, store
    /// clock, reservation), so the slot can be handed to a new tenant that inherits nothing; as
    /// [`PrefixIndex::remove_worker`](crate::index::PrefixIndex::remove_worker). Call it
    /// before releasing the slot in the `WorkerRegistry`. Returns how many engine hashes
    /// it had. Clearing and resetting happen under one hold of the writer lock, so a racing
    /// store of the same worker lands either wholly before (and is cleared) or wholly after.
    ///
    /// # Errors
    /// [`IndexError::SlotOutOfRange`].
    pub fn remove_worker(&self, slot: Slot) -> Result<usize, IndexError> {
        // The clear resets the worker's maps and clock along with its residency.
        self.clear_worker(slot, true)
    }

    /// Sizes the map of the worker in `slot` (engine hash → position) for `blocks` engine
    /// hashes at once, so that it does not grow while the worker's cache fills: pass the
    /// engine's KV capacity in blocks (vLLM's `num_gpu_blocks`, Dynamo's
    /// `total_kv_blocks`), plus any offload tier the engine reports. The map is allocated
    /// and written at once, under the index's writer lock (stores and removals of every
    /// worker wait for it, a time in proportion to the slots): 12 bytes per slot, the least
    /// size of the growth by quarters at least 4/3 of `blocks`, so 16 to 20 bytes per
    /// reserved block. The map still grows past `blocks` if the worker holds more, never
    /// shrinks below the reservation, and keeps it across [`clear`](Self::clear) (an
    /// `AllBlocksCleared`, a restart: the engine refills); [`remove_worker`](Self::remove_worker)
    /// drops it. The last call sets it: a smaller count lowers it, 0 removes it. `blocks`
    /// above [`IndexConfig::max_blocks_per_worker`] reserve for that cap (a worker never
    /// holds more); an allocation the process cannot make aborts it, as any allocation
    /// does. Without a reservation a map grows by quarters as blocks arrive (each growth
    /// moves every entry).
    ///
    /// # Errors
    /// [`IndexError::SlotOutOfRange`].
    pub fn reserve_worker(&self, slot: Slot, blocks: usize) -> Result<(), IndexError> {
        let mut w = self.writer(slot)?;
        w.reserve_lanes(slot.index(), blocks.min(self.config.max_blocks_per_worker));
        drop(w);
        Ok(())
    }

    /// Number of engine hashes the worker in `slot` has indexed (0 outside the range).
    pub fn worker_blocks(&self, slot: Slot) -> usize {
        match self.writer(slot) {
            Ok(w) => w.worker_blocks(slot.index()),
            Err(_) => 0,
        }
    }

    /// The engine hashes the worker in `slot` has indexed, each with its copy count, in no
    /// particular order; empty outside the slot range. `O(blocks)`, for inspection.
    pub fn engine_hashes(&self, slot: Slot) -> Vec<(EngineHash, u32)> {
        match self.writer(slot) {
            Ok(w) => w.engine_hashes(slot.index()),
            Err(_) => Vec::new(),
        }
    }

    /// Asks the epoch collector to free the garbage it holds for this index, and gives
    /// back spare capacity: each worker's lane map (an empty one is freed, others shrink to
    /// twice their entries), copy and alias maps, the writer's scratch buffers, and the run
    /// arena once nothing is indexed. Each event that unlinks a run frees its own garbage
    /// before returning unless a reader pinned meanwhile holds it back; this is for tests,
    /// memory gauges and idle moments: it takes the writer lock and walks every worker
    /// (`O(worker_slots)`), then runs up to 256 rounds of pin and flush (bounded: garbage a
    /// thread pinned forever holds back stays, counted in the gauge).
    pub fn collect_garbage(&self) {
        self.writer.lock().unwrap_or_else(|p| p.into_inner()).trim();
        self.drain(GARBAGE_DRAIN_ROUNDS);
    }

    /// Gauges and counters; takes the writer lock and walks the run arena and every run's
    /// covers (`O(runs + intervals)`), so it is not for the hot path.
    pub fn stats(&self) -> RunIndexStats {
        let w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let deferred = self.deferred.get();
        let c = &self.counters;
        let r = |a: &kvroute_core::sync::atomic::AtomicU64| {
            a.load(kvroute_core::sync::atomic::Ordering::Relaxed)
        };
        RunIndexStats {
            runs: w.linked,
            positions: w.positions,
            blocks: w.held_positions(),
            residencies: w.residencies,
            heap_bytes: (w.heap_bytes()
                + self.heads.heap_bytes()
                + deferred
                // The shared garbage gauge (`Arc`: two counts, then it).
                + 2 * core::mem::size_of::<usize>()
                + core::mem::size_of::<Deferred>()) as u64,
            deferred_bytes: deferred as u64,
            hash_conflicts: self
                .conflicts
                .load(kvroute_core::sync::atomic::Ordering::Relaxed),
            splits: w.splits,
            duplicate_heads: w.duplicate_heads,
            evicted_blocks: r(&c.evicted_blocks),
            slot_out_of_range: r(&c.slot_out_of_range),
            unknown_parent_stores: r(&c.unknown_parent_stores),
            unknown_removes: r(&c.unknown_removes),
            malformed_stores: r(&c.block_size_mismatches)
                + r(&c.token_count_mismatches)
                + r(&c.extra_keys_count_mismatches),
            block_size_mismatches: r(&c.block_size_mismatches),
            token_count_mismatches: r(&c.token_count_mismatches),
            extra_keys_count_mismatches: r(&c.extra_keys_count_mismatches),
        }
    }

    /// Checks the writer's internal invariants (residency gauge, lanes, covers, aliases);
    /// `O(blocks)`. For tests.
    ///
    /// # Errors
    /// A description of the first invariant that does not hold.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        self.writer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .check()
    }
}

impl Drop for RunIndex {
    fn drop(&mut self) {
        // Garbage already deferred is freed by the collector; what is still linked is
        // freed here (exclusive access: no reader or writer is left).
        let w = self.writer.get_mut().unwrap_or_else(|p| p.into_inner());
        w.free_all();
        for _ in 0..64 {
            epoch::pin().flush();
            if self.deferred.get() == 0 {
                break;
            }
        }
    }
}
