//! What one worker holds, as its own writer sees it: engine hash -> node, copy counts,
//! store recency for eviction.
//!
//! Only the worker's writer touches this state (behind the worker's mutex), so it is plain
//! data. Every entry owns one holder reference on its node *per distinct node*: when two
//! engine hashes of one worker resolve to the same node (an alias), the second one is
//! recorded in `aliases` instead of acquiring again, so the node's holder count stays one
//! per worker.

use core::hash::Hash;

use hashbrown::HashMap;

use super::node::{Head, Node};

/// One engine block hash of this worker.
#[derive(Clone, Copy)]
pub(crate) struct Entry {
    /// The node this engine hash resolves to (its thin pointer). The worker holds a
    /// reference on it (directly, or through the alias count), so the node is live while
    /// the entry exists.
    pub(crate) node: *const Head,
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
    /// The head (key, counts) of the node this entry resolves to.
    #[inline]
    pub(crate) fn head(&self) -> &Head {
        // SAFETY:
        // - `node` was obtained from the table's `acquire_or_insert`, so it points to a node
        //   allocated by the table;
        // - the worker holds a holder reference on it for as long as any of its entries
        //   points to it (directly or through the alias count), so it is neither retired
        //   nor freed while this entry (and the borrow of it) exists.
        unsafe { &*self.node }
    }

    /// The whole node this entry resolves to; `words` is the index's word count.
    #[inline]
    pub(crate) fn node(&self, words: usize) -> &Node {
        // SAFETY: as in `head`; the table allocated the node with the index's `words`.
        unsafe { Node::from_thin(self.node, words) }
    }
}

/// Map capacity (entries) that removals never shrink below, even when the map empties:
/// 112 entries (128 buckets, about 3 KiB for `entries`), so a lightly loaded worker that
/// stores and removes one sequence at a time keeps one small allocation.
pub(crate) const KEEP_ENTRIES: usize = 112;

#[derive(Default)]
pub(crate) struct WorkerState {
    pub(crate) entries: HashMap<u64, Entry>,
    /// Extra engine hashes resolving to a node this worker already holds: node address
    /// (its thin pointer) -> count.
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
    #[inline]
    pub(crate) fn tick(&mut self) -> u32 {
        if self.clock == u32::MAX {
            self.renumber();
        }
        self.clock += 1;
        self.clock
    }

    #[cold]
    #[inline(never)]
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

    /// Gives memory back after removals, with hysteresis so that a worker in the steady
    /// state of an engine (storing and evicting all the time, its block count hovering
    /// around its cache size) does not free and regrow its maps on every event: a map is
    /// shrunk (to twice its length) only once it is less than 1/8 full and larger than
    /// [`KEEP_ENTRIES`]; a small map keeps its allocation even when it empties.
    /// [`trim`](Self::trim) (from `PrefixIndex::collect_garbage`) and clearing the worker
    /// give everything back.
    pub(crate) fn shrink_if_sparse(&mut self) {
        fn shrink<K: Eq + Hash, V>(m: &mut HashMap<K, V>) {
            if m.capacity() > KEEP_ENTRIES && m.len() * 8 < m.capacity() {
                m.shrink_to(m.len() * 2);
            }
        }
        shrink(&mut self.entries);
        shrink(&mut self.aliases);
    }

    /// Gives back all spare map memory: frees empty maps and shrinks those at most a
    /// quarter full, so a worker whose blocks were all removed returns to its empty
    /// footprint.
    pub(crate) fn trim(&mut self) {
        fn trim<K: Eq + Hash, V>(m: &mut HashMap<K, V>) {
            if m.is_empty() {
                *m = HashMap::default();
            } else if m.len() * 4 < m.capacity() {
                m.shrink_to(m.len() * 2);
            }
        }
        trim(&mut self.entries);
        trim(&mut self.aliases);
    }
}

#[cfg(all(test, not(kvroute_loom)))]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            node: core::ptr::null(),
            copies: 1,
            depth: 0,
            stamp: 0,
        }
    }

    fn with_entries(n: u64) -> WorkerState {
        let mut w = WorkerState::default();
        for k in 0..n {
            w.entries.insert(k, entry());
        }
        w
    }

    /// Heap bytes of a fresh map with room for `n` entries (the size a shrink to `n` gives).
    fn bytes_for(n: usize) -> usize {
        HashMap::<u64, Entry>::with_capacity(n).allocation_size()
    }

    fn remove(w: &mut WorkerState, keys: core::ops::Range<u64>) {
        for k in keys {
            w.entries.remove(&k);
        }
    }

    #[test]
    fn removals_shrink_only_below_an_eighth_and_above_the_floor() {
        // 1,000 entries: 2,048 buckets, room for 1,792 (hashbrown's 7/8); removals that
        // leave tombstones lower the room, never below len + 792 (the growth left).
        let mut w = with_entries(1000);
        let full = w.heap_bytes();
        assert_eq!(full, bytes_for(1000));
        // 250 left: 250 * 8 = 2,000 is not below the room, so the map keeps its size.
        remove(&mut w, 250..1000);
        w.shrink_if_sparse();
        assert_eq!(w.heap_bytes(), full);
        // 100 left: 800 is below it: shrink to room for 200 entries.
        remove(&mut w, 100..250);
        w.shrink_if_sparse();
        assert_eq!(w.heap_bytes(), bytes_for(200));
        assert!(bytes_for(200) < full);
        // Emptied: room for 224 entries is above the floor of 112, so the map is freed.
        remove(&mut w, 0..100);
        w.shrink_if_sparse();
        assert_eq!(w.heap_bytes(), 0);
    }

    #[test]
    fn a_small_map_keeps_its_room_until_trimmed() {
        // 100 entries: 128 buckets, room for at most 112 (the floor).
        let mut w = with_entries(100);
        let small = w.heap_bytes();
        assert_eq!(small, bytes_for(KEEP_ENTRIES));
        remove(&mut w, 0..100);
        w.shrink_if_sparse();
        assert_eq!(w.heap_bytes(), small, "kept while empty");
        w.trim();
        assert_eq!(w.heap_bytes(), 0);
    }

    #[test]
    fn trim_shrinks_a_quarter_full_map() {
        let mut w = with_entries(1000);
        remove(&mut w, 250..1000);
        w.shrink_if_sparse();
        assert_eq!(
            w.heap_bytes(),
            bytes_for(1000),
            "250 * 8 is not below the room"
        );
        // The room is at least 250 + 792 (the growth left after 1,000 inserts) whatever
        // tombstones the removals left, and 250 * 4 = 1,000 is below it: trim shrinks to
        // room for 500 entries.
        w.trim();
        assert_eq!(w.heap_bytes(), bytes_for(500));
        assert!(bytes_for(500) < bytes_for(1000));
    }
}
