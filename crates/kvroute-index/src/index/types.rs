//! Configuration, inputs, outcomes, errors and counters of the prefix index.

use core::fmt;

use kvroute_core::sync::atomic::{AtomicU64, Ordering};

use kvroute_core::{Bounds, EngineHash, HashNamespace, OutOfRange, Slot};

/// Construction-time settings of a [`PrefixIndex`](super::PrefixIndex).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexConfig {
    /// Worker slots (lanes) the index can hold: 1 to [`MAX_WORKER_SLOTS`]. Default 1,024.
    pub worker_slots: usize,
    /// Tokens per block; store events with another block size are rejected. Default 16.
    pub block_size: usize,
    /// Distinct blocks the node table is first sized for. The table grows as blocks
    /// arrive and shrinks as they leave, never below this size (16 bytes per slot, slots =
    /// next power of two of `8/3 * expected_blocks`). Default 2^14 (16,384 blocks, 1 MiB).
    pub expected_blocks: usize,
    /// Cap on the blocks one worker may have indexed. A store past the cap first evicts 1/16
    /// of the worker's blocks, deepest first among the least recently stored (see the index
    /// docs). The index
    /// therefore never holds more than `worker_slots * max_blocks_per_worker` residencies,
    /// whatever the event streams do. Default 2^20 (16.7 M tokens at block size 16).
    pub max_blocks_per_worker: usize,
}

/// Largest supported `worker_slots` (64 bit words of 64 workers each on every node).
pub const MAX_WORKER_SLOTS: usize = 4096;

impl IndexConfig {
    /// `worker_slots` slots of `block_size`-token blocks, the other settings at their
    /// defaults. Not validated until [`PrefixIndex::new`](super::PrefixIndex::new).
    pub fn new(worker_slots: usize, block_size: usize) -> Self {
        Self {
            worker_slots,
            block_size,
            ..Self::default()
        }
    }
}

impl Default for IndexConfig {
    fn default() -> Self {
        Self {
            worker_slots: 1024,
            block_size: 16,
            expected_blocks: 1 << 14,
            max_blocks_per_worker: 1 << 20,
        }
    }
}

/// Valid [`IndexConfig::worker_slots`]: `1..=MAX_WORKER_SLOTS`.
pub const WORKER_SLOTS: Bounds = Bounds::ints(1, MAX_WORKER_SLOTS as u64, "");
/// Valid block sizes: `1..=2^20` tokens.
pub const BLOCK_SIZE: Bounds = Bounds::ints(1, 1 << 20, "tokens");
/// Valid [`IndexConfig::expected_blocks`]: `1..=2^32` blocks.
pub const EXPECTED_BLOCKS: Bounds = Bounds::ints(1, 1 << 32, "blocks");
/// Valid [`IndexConfig::max_blocks_per_worker`]: `1..=2^32 - 1` blocks.
pub const MAX_BLOCKS_PER_WORKER: Bounds = Bounds::ints(1, u32::MAX as u64, "blocks");

impl IndexConfig {
    /// Checks every field against its bounds ([`WORKER_SLOTS`], [`BLOCK_SIZE`],
    /// [`EXPECTED_BLOCKS`], [`MAX_BLOCKS_PER_WORKER`]).
    ///
    /// # Errors
    /// [`OutOfRange`] naming the first field out of range.
    pub fn validate(&self) -> Result<(), OutOfRange> {
        WORKER_SLOTS.check_usize("worker_slots", self.worker_slots)?;
        BLOCK_SIZE.check_usize("block_size", self.block_size)?;
        EXPECTED_BLOCKS.check_usize("expected_blocks", self.expected_blocks)?;
        MAX_BLOCKS_PER_WORKER.check_usize("max_blocks_per_worker", self.max_blocks_per_worker)?;
        Ok(())
    }
}

/// One `BlockStored` event as the index needs it.
#[derive(Clone, Copy, Debug)]
pub struct BlockStore<'a> {
    /// Engine hash of the block before `block_hashes[0]`; `None` at the start of a
    /// sequence. It must be a block this worker stored before (and has not removed).
    pub parent: Option<EngineHash>,
    /// The engine's hashes of the stored blocks, in sequence order.
    pub block_hashes: &'a [EngineHash],
    /// `block_size * block_hashes.len()` token ids: what the index hashes.
    pub token_ids: &'a [u32],
    /// The block size the engine reports (tokens); must equal the index's.
    pub block_size: usize,
    /// LoRA adapter / cache salt namespace of these blocks.
    pub namespace: HashNamespace,
}

/// What a store did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreOutcome {
    /// Engine hashes newly mapped on the worker. A block the worker already held under
    /// another engine hash (an alias) counts here too, although its residency is unchanged.
    pub new_blocks: usize,
    /// Blocks already resident under the same engine hash: one more physical copy counted.
    pub extra_copies: usize,
    /// Engine hashes that this worker had mapped to different content: the old mapping was
    /// dropped and the new one kept (also counted in `IndexStats::hash_conflicts`).
    pub conflicts: usize,
    /// Blocks of this worker evicted by the per-worker cap to make room.
    pub evicted: usize,
}

/// What a remove did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoveOutcome {
    /// Engine hashes whose last copy went. The block stops being resident unless another
    /// engine hash of the same worker (an alias) still maps to it.
    pub removed: usize,
    /// Engine hashes with copies left: one copy dropped, block still resident.
    pub copies_dropped: usize,
    /// Engine hashes this worker never stored (or already removed): ignored and counted.
    pub unknown: usize,
}

/// Typed errors of index operations. Each is also counted in [`IndexCounters`], and none
/// changes the index.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IndexError {
    /// The slot is outside `0..worker_slots`.
    SlotOutOfRange {
        /// The slot given.
        slot: Slot,
        /// The index's `worker_slots`.
        worker_slots: usize,
    },
    /// The event's block size differs from the index's.
    BlockSizeMismatch {
        /// The index's block size (tokens).
        expected: usize,
        /// The event's block size (tokens).
        got: usize,
    },
    /// `token_ids.len() != block_size * block_hashes.len()`.
    TokenCountMismatch {
        /// Number of block hashes in the event.
        blocks: usize,
        /// Block size (tokens).
        block_size: usize,
        /// Number of token ids in the event.
        tokens: usize,
    },
    /// The event's per-block extra keys are neither absent nor one entry per block, so
    /// which block each belongs to is unknown.
    ExtraKeysCountMismatch {
        /// Number of block hashes in the event.
        blocks: usize,
        /// Number of extra-keys entries in the event.
        extra_keys: usize,
    },
    /// The parent hash is not a block this worker holds: the stored blocks cannot be placed
    /// in a prefix chain, so they are not indexed (they could never extend a match).
    UnknownParent {
        /// The unknown parent.
        parent: EngineHash,
        /// Blocks of the event that were not indexed.
        blocks: usize,
    },
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SlotOutOfRange { slot, worker_slots } => {
                write!(f, "slot {} outside 0..{worker_slots}", slot.0)
            }
            Self::BlockSizeMismatch { expected, got } => {
                write!(f, "block size {got} tokens, index expects {expected}")
            }
            Self::TokenCountMismatch {
                blocks,
                block_size,
                tokens,
            } => write!(
                f,
                "{tokens} token ids for {blocks} blocks of {block_size} tokens"
            ),
            Self::ExtraKeysCountMismatch { blocks, extra_keys } => {
                write!(f, "{extra_keys} extra-keys entries for {blocks} blocks")
            }
            Self::UnknownParent { parent, blocks } => write!(
                f,
                "parent block {:#x} unknown: {blocks} blocks not indexed",
                parent.0
            ),
        }
    }
}

impl std::error::Error for IndexError {}

/// Monotonic counters of everything the index rejected, ignored or evicted.
#[derive(Debug, Default)]
pub struct IndexCounters {
    pub(crate) slot_out_of_range: AtomicU64,
    pub(crate) block_size_mismatches: AtomicU64,
    pub(crate) token_count_mismatches: AtomicU64,
    pub(crate) extra_keys_count_mismatches: AtomicU64,
    pub(crate) unknown_parent_stores: AtomicU64,
    pub(crate) unknown_removes: AtomicU64,
    pub(crate) hash_conflicts: AtomicU64,
    pub(crate) evicted_blocks: AtomicU64,
}

/// A copy of the counters and gauges at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexStats {
    /// Distinct blocks (nodes) linked in the index.
    pub nodes: u64,
    /// (worker, block) residencies.
    pub residencies: u64,
    /// Heap bytes of the index: every allocated node with its bit words (linked, retired
    /// but still referenced by a successor link, or waiting for the epoch grace period),
    /// the other garbage waiting for the collector (batch records, replaced node-table
    /// arrays), the node table, the writer gates, the per-worker state and maps. It equals
    /// what the allocator holds for the index, bar the epoch collector's own bookkeeping.
    pub heap_bytes: u64,
    /// Nodes whose memory is still allocated: the `nodes` linked in the index, retired
    /// nodes that live nodes' successor links still hold (at most two per live node, see the
    /// index docs), and retired nodes waiting for the epoch grace period (`deferred_nodes`).
    pub allocated_nodes: u64,
    /// Retired nodes handed to the epoch collector and not yet freed.
    pub deferred_nodes: u64,
    /// Other heap bytes waiting for the epoch collector: batch records and replaced
    /// node-table arrays (included in `heap_bytes`).
    pub deferred_bytes: u64,
    /// Operations on a slot outside `0..worker_slots`.
    pub slot_out_of_range: u64,
    /// Stores rejected for a block-size mismatch.
    pub block_size_mismatches: u64,
    /// Stores rejected because the token count did not match the blocks.
    pub token_count_mismatches: u64,
    /// Stores rejected because their extra keys were neither absent nor one entry per
    /// block.
    pub extra_keys_count_mismatches: u64,
    /// Stores rejected because their parent was unknown.
    pub unknown_parent_stores: u64,
    /// Removed engine hashes the worker did not hold.
    pub unknown_removes: u64,
    /// Engine hashes re-stored with different content.
    pub hash_conflicts: u64,
    /// Blocks evicted by the per-worker cap.
    pub evicted_blocks: u64,
    /// Times the node table was resized (grown or shrunk).
    pub table_resizes: u64,
}

impl IndexCounters {
    pub(crate) fn bump(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }
}
