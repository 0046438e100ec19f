//! vLLM's block pool: physical KV blocks with reference counts, the free queue that doubles
//! as the LRU eviction order, and the map from block hash to cached blocks.
//!
//! Rules (vLLM v1 `BlockPool`, as measured in `docs/WIRE-FORMAT.md`, "How real engines
//! order their events"):
//! * Block 0 is the null block and never handed out, so `kv_blocks − 1` are usable.
//! * The free queue starts with blocks 1, 2, … (kept implicit until handed out);
//!   allocation takes from its front; a block
//!   that is freed (its last reference gone) goes to its back, so the front is the least
//!   recently freed. A freed block keeps its hash and stays hittable until allocation
//!   reuses it: only then is it evicted, which emits `BlockRemoved`.
//! * A prefix hit on a block in the free queue takes it out of the queue (`touch`).
//! * The same hash can be cached in several physical blocks (a recomputed last block):
//!   each copy is stored and later removed on its own; a lookup finds the first copy.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use kvroute_index::slots::{HashSlots, prefetch};

/// A hasher for keys that are already uniform 64-bit hashes: the key is the hash.
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// A map keyed by block hashes.
pub(crate) type HashMapId<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// Queue entries ahead of the front whose block states are prefetched at each pop, and
/// (half as far) whose hashes' table slots are.
const PREFETCH_AHEAD: usize = 8;

/// Stale entries the free queue may carry beyond twice its live ones before it is
/// compacted.
const STALE_SLACK: usize = 1024;

/// One physical block's state (one cache line holds several).
#[derive(Clone, Copy, Debug)]
struct Meta {
    /// The block's hash while it is cached.
    hash: u64,
    refs: u32,
    /// The block's ticket in the free queue: bumped each time it enters or leaves it, so
    /// only its latest entry there is live. A stale entry leaves the ring within a few
    /// times the pool's blocks of pushes (the ring is compacted before it holds more than
    /// twice its live entries plus `STALE_SLACK`, and pops reach any entry sooner than
    /// that), far fewer than the 2^32 bumps after which a wrapped ticket could match it.
    ticket: u32,
    cached: bool,
}

const FREE_META: Meta = Meta {
    hash: 0,
    refs: 0,
    ticket: 0,
    cached: false,
};

/// The pool.
///
/// The free queue is a ring of `(block, ticket)` entries with lazy deletion: a hit on a
/// block in the queue bumps the block's ticket instead of unlinking it, and popping skips
/// entries whose ticket is no longer the block's. The order is the doubly linked list's
/// (vLLM's `FreeKVCacheBlockQueue`), but the blocks a run of allocations will take are
/// known ahead, in memory order, so their states and hashes are prefetched while earlier
/// ones are evicted. Stale entries are dropped when they outnumber the live ones by more
/// than [`STALE_SLACK`] beyond twice (amortized `O(1)` per operation).
#[derive(Debug)]
pub(crate) struct BlockPool {
    /// Blocks handed out at least once (index = block id; block 0 is the null block).
    meta: Vec<Meta>,
    /// The linked part of the free queue, front first, stale entries included.
    queue: VecDeque<(u32, u32)>,
    /// Live entries of `queue`.
    listed: u32,
    /// Number of physical blocks (block 0 included).
    total: u32,
    /// Hash → first cached copy: one 12-byte slot per entry (key and block together, in
    /// one cache line unless the slot straddles two), at most 3/4 full (slots: the next power of two at or above 4/3 of the
    /// blocks; a full pool of 300,000 blocks fills 57 % of 524,288, where an insert probes
    /// 3.2 slots on average: [`HashSlots`]'s module docs).
    cached: HashSlots<u32>,
    /// Hash → further copies, in caching order (rare).
    extra: HashMapId<Vec<u32>>,
}

impl BlockPool {
    /// A pool of `blocks` physical blocks (block 0 reserved), every usable block free.
    /// Blocks `meta.len()..total` were never handed out: they form the front of the free
    /// queue, in id order (ahead of every freed block), so they need no entries and no
    /// state until first used.
    ///
    /// The block states and the hash table are sized for every block up front: a replay
    /// fills the pool, so growing them by doubling only copied them and faulted in fresh
    /// pages for every intermediate size.
    pub(crate) fn new(blocks: u32) -> Self {
        let mut meta = Vec::with_capacity(blocks.max(1) as usize);
        meta.push(FREE_META);
        Self {
            meta,
            queue: VecDeque::new(),
            listed: 0,
            total: blocks,
            cached: HashSlots::with_slots(
                (blocks.max(2) as usize * 4).div_ceil(3).next_power_of_two(),
            ),
            extra: HashMapId::default(),
        }
    }

    /// Usable blocks (the null block excluded).
    pub(crate) fn usable(&self) -> u32 {
        self.total - 1
    }

    fn fresh(&self) -> u32 {
        self.meta.len() as u32
    }

    /// Blocks in the free queue (free or cached-and-evictable).
    pub(crate) fn free_blocks(&self) -> u32 {
        (self.total - self.fresh()) + self.listed
    }

    /// Distinct hashes cached (any copy, referenced or not).
    pub(crate) fn cached_hashes(&self) -> usize {
        self.cached.len()
    }

    fn push_back(&mut self, b: u32) {
        let m = &mut self.meta[b as usize];
        m.ticket = m.ticket.wrapping_add(1);
        self.queue.push_back((b, m.ticket));
        self.listed += 1;
        if self.queue.len() > 2 * self.listed as usize + STALE_SLACK {
            let meta = &self.meta;
            self.queue.retain(|&(b, t)| meta[b as usize].ticket == t);
        }
    }

    /// Takes `b` out of the free queue (its entry goes stale).
    fn unlink(&mut self, b: u32) {
        let m = &mut self.meta[b as usize];
        m.ticket = m.ticket.wrapping_add(1);
        self.listed -= 1;
    }

    /// The first cached copy of `hash`.
    pub(crate) fn lookup(&self, hash: u64) -> Option<u32> {
        self.cached.get(hash)
    }

    /// Starts loading where [`lookup`](Self::lookup) or [`cache`](Self::cache) of `hash`
    /// will look (for a run of them whose hashes are known ahead).
    pub(crate) fn prefetch_hash(&self, hash: u64) {
        self.cached.prefetch(hash);
    }

    /// Whether block `b` is in the free queue (referenced by nobody).
    pub(crate) fn is_free(&self, b: u32) -> bool {
        self.meta[b as usize].refs == 0
    }

    /// Takes a reference on a cached block (a prefix hit), removing it from the free queue
    /// if it was there.
    pub(crate) fn touch(&mut self, b: u32) {
        if self.meta[b as usize].refs == 0 {
            self.unlink(b);
        }
        self.meta[b as usize].refs += 1;
    }

    /// Pops one block from the front of the free queue for a new allocation. If it was
    /// cached, it is evicted and its hash returned (the caller emits `BlockRemoved`).
    /// Returns `None` when the queue is empty.
    pub(crate) fn pop(&mut self) -> Option<(u32, Option<u64>)> {
        if self.fresh() < self.total {
            let b = self.fresh();
            self.meta.push(Meta {
                refs: 1,
                ..FREE_META
            });
            return Some((b, None));
        }
        loop {
            let (b, t) = self.queue.pop_front()?;
            if let Some(&(ahead, _)) = self.queue.get(PREFETCH_AHEAD) {
                prefetch(&self.meta[ahead as usize]);
            }
            if let Some(&(soon, _)) = self.queue.get(PREFETCH_AHEAD / 2) {
                let m = &self.meta[soon as usize];
                if m.cached {
                    self.cached.prefetch(m.hash);
                }
            }
            if self.meta[b as usize].ticket != t {
                continue;
            }
            self.unlink(b);
            self.meta[b as usize].refs = 1;
            let evicted = self.evict(b);
            return Some((b, evicted));
        }
    }

    fn evict(&mut self, b: u32) -> Option<u64> {
        let m = &mut self.meta[b as usize];
        if !m.cached {
            return None;
        }
        m.cached = false;
        let h = m.hash;
        if self.cached.get(h) == Some(b) {
            match self.extra.get_mut(&h) {
                Some(more) if !more.is_empty() => {
                    let first = more.remove(0);
                    if more.is_empty() {
                        self.extra.remove(&h);
                    }
                    self.cached.set(h, first);
                }
                _ => {
                    self.cached.remove(h);
                }
            }
        } else if let Some(more) = self.extra.get_mut(&h) {
            more.retain(|&x| x != b);
            if more.is_empty() {
                self.extra.remove(&h);
            }
        }
        Some(h)
    }

    /// Marks block `b` cached under `hash` (a full block whose tokens are now known).
    pub(crate) fn cache(&mut self, b: u32, hash: u64) {
        let m = &mut self.meta[b as usize];
        debug_assert!(!m.cached);
        m.hash = hash;
        m.cached = true;
        if !self.cached.insert_new(hash, b) {
            self.extra.entry(hash).or_default().push(b);
        }
    }

    /// Drops one reference to each block, in the order given; blocks left unreferenced go
    /// to the back of the free queue in that order.
    pub(crate) fn release(&mut self, blocks: impl Iterator<Item = u32>) {
        for b in blocks {
            let r = &mut self.meta[b as usize].refs;
            debug_assert!(*r > 0);
            *r -= 1;
            if *r == 0 {
                self.push_back(b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_order_eviction_and_copies() {
        let mut p = BlockPool::new(4); // usable 1, 2, 3
        assert_eq!(p.free_blocks(), 3);
        let (a, e) = p.pop().unwrap();
        assert_eq!((a, e), (1, None));
        let (b, _) = p.pop().unwrap();
        p.cache(a, 10);
        p.cache(b, 11);
        // Freed tail first: b then a, so b is evicted before a.
        p.release([b, a].into_iter());
        assert_eq!(p.free_blocks(), 3);
        // Front is block 3 (never used), then b, then a.
        assert_eq!(p.pop().unwrap(), (3, None));
        assert_eq!(p.pop().unwrap(), (2, Some(11)));
        assert_eq!(p.lookup(11), None);
        assert_eq!(p.lookup(10), Some(1));
        // A hit on block 1 takes it out of the queue.
        p.touch(1);
        assert_eq!(p.free_blocks(), 0);
        assert!(p.pop().is_none());
        // A second copy of hash 10.
        p.release([2].into_iter());
        let (c, _) = p.pop().unwrap();
        p.cache(c, 10);
        assert_eq!(p.lookup(10), Some(1));
        p.release([1].into_iter());
        assert_eq!(p.pop().unwrap(), (1, Some(10)));
        assert_eq!(p.lookup(10), Some(c));
    }

    /// The free queue's order against a plain list (front = next to allocate) under random
    /// allocations, hits and releases, long enough that stale entries are compacted many
    /// times (each hit on a free block leaves one).
    #[test]
    fn free_queue_order_matches_a_list_model() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut p = BlockPool::new(65);
        // The model: the never-used blocks, then the freed ones, front first.
        let mut order: Vec<u32> = (1..65).collect();
        let mut refs = vec![0u32; 65];
        let mut next_hash = 1u64;
        let mut compacted = 0;
        let hit = |p: &mut BlockPool, order: &mut Vec<u32>, refs: &mut [u32], b: u32| {
            if refs[b as usize] == 0 {
                order.retain(|&x| x != b);
            }
            refs[b as usize] += 1;
            p.touch(b);
        };
        let release = |p: &mut BlockPool, order: &mut Vec<u32>, refs: &mut [u32], b: u32| {
            refs[b as usize] -= 1;
            if refs[b as usize] == 0 {
                order.push(b);
            }
            p.release([b].into_iter());
        };
        for _ in 0..200_000 {
            let entries = p.queue.len();
            let handed_out = p.fresh();
            // Pops rare enough that stale entries pile up between them.
            match rng.random_range(0..200) {
                0 if !order.is_empty() => {
                    let want = order.remove(0);
                    let (b, _) = p.pop().expect("the model has a free block");
                    assert_eq!(b, want);
                    refs[b as usize] = 1;
                    p.cache(b, next_hash);
                    next_hash += 1;
                }
                // A request hits a free block and finishes: it moves to the back, and its
                // old entry goes stale.
                1..=120 => {
                    let free: Vec<u32> =
                        order.iter().copied().filter(|&b| b < handed_out).collect();
                    if let Some(&b) = free.get(rng.random_range(0..free.len().max(1))) {
                        hit(&mut p, &mut order, &mut refs, b);
                        release(&mut p, &mut order, &mut refs, b);
                        // One entry appended, unless the release compacted.
                        compacted += usize::from(p.queue.len() <= entries);
                    }
                }
                // A hit on any handed-out block, free or not.
                121..=150 if handed_out > 1 => {
                    let b = rng.random_range(1..handed_out);
                    hit(&mut p, &mut order, &mut refs, b);
                }
                _ => {
                    let held: Vec<u32> =
                        (1..handed_out).filter(|&b| refs[b as usize] > 0).collect();
                    if let Some(&b) = held.get(rng.random_range(0..held.len().max(1))) {
                        release(&mut p, &mut order, &mut refs, b);
                    }
                }
            }
            assert_eq!(p.free_blocks() as usize, order.len());
        }
        assert!(compacted > 10, "{compacted} compactions");
    }
}
