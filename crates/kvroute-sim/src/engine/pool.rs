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

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasherDefault, Hasher};

/// "No block" in the free queue's links.
const NIL: u32 = u32::MAX;

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

/// One physical block's state (one cache line holds several).
#[derive(Clone, Copy, Debug)]
struct Meta {
    /// The block's hash while it is cached.
    hash: u64,
    refs: u32,
    prev: u32,
    next: u32,
    cached: bool,
}

const FREE_META: Meta = Meta {
    hash: 0,
    refs: 0,
    prev: NIL,
    next: NIL,
    cached: false,
};

/// The pool.
#[derive(Debug)]
pub(crate) struct BlockPool {
    /// Blocks handed out at least once (index = block id; block 0 is the null block).
    meta: Vec<Meta>,
    head: u32,
    tail: u32,
    /// Blocks in the linked part of the free queue.
    listed: u32,
    /// Number of physical blocks (block 0 included).
    total: u32,
    /// Hash → first cached copy.
    cached: HashMapId<u32>,
    /// Hash → further copies, in caching order (rare).
    extra: HashMapId<Vec<u32>>,
}

impl BlockPool {
    /// A pool of `blocks` physical blocks (block 0 reserved), every usable block free.
    /// Blocks `meta.len()..total` were never handed out: they form the front of the free
    /// queue, in id order (ahead of every freed block), so they need no links and no state
    /// until first used.
    ///
    /// The block states and the hash map are sized for every block up front: a replay
    /// fills the pool, so growing them by doubling only copied them and faulted in fresh
    /// pages for every intermediate size. Reserving touches only the map's control bytes
    /// (one per bucket); the rest of a page is touched when a block first uses it.
    pub(crate) fn new(blocks: u32) -> Self {
        let mut meta = Vec::with_capacity(blocks.max(1) as usize);
        meta.push(FREE_META);
        Self {
            meta,
            head: NIL,
            tail: NIL,
            listed: 0,
            total: blocks,
            cached: HashMapId::with_capacity_and_hasher(blocks as usize, Default::default()),
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
        let tail = self.tail;
        let m = &mut self.meta[b as usize];
        m.prev = tail;
        m.next = NIL;
        if tail == NIL {
            self.head = b;
        } else {
            self.meta[tail as usize].next = b;
        }
        self.tail = b;
        self.listed += 1;
    }

    fn unlink(&mut self, b: u32) {
        let m = &mut self.meta[b as usize];
        let (p, n) = (m.prev, m.next);
        m.prev = NIL;
        m.next = NIL;
        if p == NIL {
            self.head = n;
        } else {
            self.meta[p as usize].next = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.meta[n as usize].prev = p;
        }
        self.listed -= 1;
    }

    /// The first cached copy of `hash`.
    pub(crate) fn lookup(&self, hash: u64) -> Option<u32> {
        self.cached.get(&hash).copied()
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
        let b = self.head;
        if b == NIL {
            return None;
        }
        self.unlink(b);
        self.meta[b as usize].refs = 1;
        let evicted = self.evict(b);
        Some((b, evicted))
    }

    fn evict(&mut self, b: u32) -> Option<u64> {
        let m = &mut self.meta[b as usize];
        if !m.cached {
            return None;
        }
        m.cached = false;
        let h = m.hash;
        if self.cached.get(&h) == Some(&b) {
            match self.extra.get_mut(&h) {
                Some(more) if !more.is_empty() => {
                    let first = more.remove(0);
                    if more.is_empty() {
                        self.extra.remove(&h);
                    }
                    self.cached.insert(h, first);
                }
                _ => {
                    self.cached.remove(&h);
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
        match self.cached.entry(hash) {
            Entry::Vacant(v) => {
                v.insert(b);
            }
            Entry::Occupied(_) => self.extra.entry(hash).or_default().push(b),
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
}
