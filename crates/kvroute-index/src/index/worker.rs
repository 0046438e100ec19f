//! What one worker holds, as its own writer sees it: engine hash -> node, copy counts,
//! store recency for eviction.
//!
//! Only the worker's writer touches this state (behind the worker's mutex), so it is plain
//! data. Every entry owns one holder reference on its node *per distinct node*: when two
//! engine hashes of one worker resolve to the same node (an alias), the second one is
//! recorded in `aliases` instead of acquiring again, so the node's holder count stays one
//! per worker.

use hashbrown::HashMap;

use super::node::Node;

/// One engine block hash of this worker.
#[derive(Clone, Copy)]
pub(crate) struct Entry {
    /// The node this engine hash resolves to. The worker holds a reference on it (directly,
    /// or through the alias count), so the node is live while the entry exists.
    pub(crate) node: *const Node,
    /// Physical copies the engine reported (a second `BlockStored` of the same hash adds one;
    /// each `BlockRemoved` drops one). Saturates at 65,535 (real engines keep at most two).
    pub(crate) copies: u16,
    /// Position of the block in its sequence (0 = first block), saturating at 65,535: the
    /// parent's depth + 1 when the store named a known parent. Eviction takes deep blocks
    /// (conversation tails) before shallow ones (shared prefixes).
    pub(crate) depth: u16,
    /// Store clock at the last store of this hash (for least-recently-stored eviction).
    pub(crate) stamp: u32,
}

impl Entry {
    /// The node this entry resolves to.
    #[inline]
    pub(crate) fn node(&self) -> &Node {
        // SAFETY:
        // - `node` was obtained from the table's `acquire_or_insert`, so it points to a node
        //   allocated by the table;
        // - the worker holds a holder reference on it for as long as any of its entries
        //   points to it (directly or through the alias count), so it is neither retired
        //   nor freed while this entry (and the borrow of it) exists.
        unsafe { &*self.node }
    }
}

#[derive(Default)]
pub(crate) struct WorkerState {
    pub(crate) entries: HashMap<u64, Entry>,
    /// Extra engine hashes resolving to a node this worker already holds: node -> count.
    pub(crate) aliases: HashMap<usize, u32>,
    /// Store clock, advanced once per stored block.
    pub(crate) clock: u32,
}

// SAFETY: `WorkerState` is only reached through its worker's mutex. The raw node pointers
// it holds refer to nodes kept alive by this worker's holder references; they are
// dereferenced only to read the node's key and atomics, which are `Sync`.
unsafe impl Send for WorkerState {}

impl WorkerState {
    /// Advances the store clock; renumbers stamps compactly when it nears overflow.
    pub(crate) fn tick(&mut self) -> u32 {
        if self.clock == u32::MAX {
            self.renumber();
        }
        self.clock += 1;
        self.clock
    }

    fn renumber(&mut self) {
        let mut stamps: Vec<(u32, u64)> = self.entries.iter().map(|(k, e)| (e.stamp, *k)).collect();
        stamps.sort_unstable();
        for (rank, (_, k)) in stamps.iter().enumerate() {
            if let Some(e) = self.entries.get_mut(k) {
                e.stamp = rank as u32 + 1;
            }
        }
        self.clock = stamps.len() as u32 + 1;
    }

    /// Engine hashes of the `n` entries to evict: among the `2n` least recently stored, the
    /// `n` deepest (ties: least recently stored first). Leaf-first within the cold part, as
    /// engines evict, so a shared prefix stored long ago is not dropped before the
    /// conversation tails that hang off it.
    pub(crate) fn victims(&self, n: usize) -> Vec<u64> {
        if n == 0 {
            return Vec::new();
        }
        let mut cold: Vec<(u32, u16, u64)> = self
            .entries
            .iter()
            .map(|(k, e)| (e.stamp, e.depth, *k))
            .collect();
        let pool = (2 * n).min(cold.len());
        if pool < cold.len() {
            cold.select_nth_unstable(pool - 1);
            cold.truncate(pool);
        }
        // Deepest first, then oldest.
        cold.sort_unstable_by_key(|&(stamp, depth, _)| (core::cmp::Reverse(depth), stamp));
        cold.truncate(n);
        cold.into_iter().map(|(_, _, k)| k).collect()
    }

    /// Heap bytes of the worker's maps.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.entries.allocation_size() + self.aliases.allocation_size()
    }

    /// Gives memory back when the maps are empty or at most a quarter full, so a worker
    /// whose blocks are removed one by one returns to its empty footprint.
    pub(crate) fn shrink_if_sparse(&mut self) {
        if self.entries.is_empty() {
            self.entries = HashMap::default();
        } else if self.entries.len() * 4 < self.entries.capacity() {
            self.entries.shrink_to(self.entries.len() * 2);
        }
        if self.aliases.is_empty() {
            self.aliases = HashMap::default();
        } else if self.aliases.len() * 4 < self.aliases.capacity() {
            self.aliases.shrink_to(self.aliases.len() * 2);
        }
    }
}
