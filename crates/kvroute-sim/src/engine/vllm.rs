//! vLLM's v1 scheduler and KV cache manager, step by step (module docs of
//! [`crate::engine`] for the rules and their sources).

use std::collections::VecDeque;

use super::catalog::Catalog;
use super::{Engine, Notice, Seq, StepWork};

/// Block hashes ahead whose table slots a run of lookups or caches prefetches.
const PREFETCH_HASHES: usize = 8;

impl Engine {
    /// Hash of block `k` of `s` (prompt blocks from the catalog, later ones computed as the
    /// sequence grows).
    fn hash_of(cat: &Catalog, s: &Seq, k: usize) -> u64 {
        let ph = cat.prompt_hashes(s.req);
        if k < ph.len() {
            ph[k].0
        } else {
            s.decode_hashes[k - ph.len()]
        }
    }

    /// Makes sure the hashes of the first `n` full blocks of `s` are known.
    fn ensure_hashes(&mut self, cat: &Catalog, si: SeqRef, n: usize) {
        let bs = self.cfg.block_size as usize;
        let s = seq_in(&mut self.running, &mut self.waiting, si);
        let prompt_blocks = cat.prompt_hashes(s.req).len();
        while prompt_blocks + s.decode_hashes.len() < n {
            let k = prompt_blocks + s.decode_hashes.len();
            let parent = (k > 0).then(|| Self::hash_of(cat, s, k - 1));
            let h = cat.block_hash(s.req, (k * bs) as u32, parent, &mut self.scratch);
            s.decode_hashes.push(h);
        }
    }

    fn seq_mut(&mut self, si: SeqRef) -> &mut Seq {
        seq_in(&mut self.running, &mut self.waiting, si)
    }

    /// vLLM `allocate_slots` for a sequence that already holds its hit blocks: allocates
    /// blocks for `new` more tokens (evicting cached blocks from the free queue's front,
    /// each a `BlockRemoved`), then caches the newly full blocks (one `BlockStored`).
    /// Returns `false` (nothing changed) when the free queue is too short.
    fn allocate(&mut self, cat: &Catalog, si: SeqRef, new: u32, evictable_hits: u32) -> bool {
        let bs = self.cfg.block_size;
        let max_len = self.cfg.max_model_len;
        let s = self.seq_mut(si);
        let need_tokens = (s.num_computed + new).min(max_len);
        let need_blocks = need_tokens.div_ceil(bs) as usize;
        let have = s.blocks.len();
        let to_alloc = need_blocks.saturating_sub(have) as u32;
        if to_alloc + evictable_hits > self.pool.free_blocks() {
            return false;
        }
        for _ in 0..to_alloc {
            let (b, evicted) = self.pool.pop().expect("free blocks were counted");
            if let Some(h) = evicted {
                self.events.remove(&[h]);
            }
            self.seq_mut(si).blocks.push(b);
        }
        // Cache the blocks that are now full (their tokens all known).
        let s = self.seq_mut(si);
        let full = ((s.num_computed + new).min(s.num_tokens) / bs) as usize;
        let from = s.cached_blocks as usize;
        if full > from {
            self.ensure_hashes(cat, si, full);
            let s = match si {
                SeqRef::Running(i) => &self.running[i],
                SeqRef::Waiting => self.waiting.front().expect("waiting head"),
            };
            self.hash_buf.clear();
            for k in from..full {
                self.hash_buf.push(Self::hash_of(cat, s, k));
            }
            let parent = (from > 0).then(|| Self::hash_of(cat, s, from - 1));
            let req = s.req;
            let blocks = std::mem::take(&mut self.seq_mut(si).blocks);
            for &h in self.hash_buf.iter().take(PREFETCH_HASHES) {
                self.pool.prefetch_hash(h);
            }
            for (i, (&b, &h)) in blocks[from..full].iter().zip(&self.hash_buf).enumerate() {
                if let Some(&ahead) = self.hash_buf.get(i + PREFETCH_HASHES) {
                    self.pool.prefetch_hash(ahead);
                }
                self.pool.cache(b, h);
            }
            self.seq_mut(si).blocks = blocks;
            self.events
                .store_request(&self.hash_buf, parent, req, from as u32 * bs);
            self.seq_mut(si).cached_blocks = full as u32;
        }
        true
    }

    /// Frees a sequence's blocks, last block first (vLLM frees in reverse so that a
    /// sequence's tail is evicted before its prefix).
    pub(super) fn free_blocks_of(&mut self, s: &mut Seq) {
        self.pool.release(s.blocks.iter().rev().copied());
        s.blocks.clear();
        s.cached_blocks = 0;
    }

    /// The prefix hit of the waiting head: blocks cached for its leading block hashes, at
    /// most `(num_tokens − 1) / block_size` of them (the last token is always recomputed).
    fn lookup_head(&mut self, cat: &Catalog) -> (u32, u32) {
        let bs = self.cfg.block_size;
        let s = self.waiting.front().expect("waiting head");
        let max_blocks = ((s.num_tokens - 1) / bs) as usize;
        self.ensure_hashes(cat, SeqRef::Waiting, max_blocks);
        let s = self.waiting.front().expect("waiting head");
        self.hit_buf.clear();
        for k in 0..max_blocks.min(PREFETCH_HASHES) {
            self.pool.prefetch_hash(Self::hash_of(cat, s, k));
        }
        for k in 0..max_blocks {
            if k + PREFETCH_HASHES < max_blocks {
                self.pool
                    .prefetch_hash(Self::hash_of(cat, s, k + PREFETCH_HASHES));
            }
            match self.pool.lookup(Self::hash_of(cat, s, k)) {
                Some(b) => self.hit_buf.push(b),
                None => break,
            }
        }
        let evictable = self
            .hit_buf
            .iter()
            .filter(|&&b| self.pool.is_free(b))
            .count() as u32;
        (self.hit_buf.len() as u32, evictable)
    }

    /// vLLM's `schedule()`: running requests first (in order; a request that cannot get
    /// blocks preempts the last running one), then waiting requests in FIFO order while
    /// there is token budget, a running slot and room in the KV cache.
    pub(super) fn schedule_vllm(&mut self, cat: &Catalog, notices: &mut Vec<Notice>) -> StepWork {
        let mut budget = self.cfg.chunk_tokens;
        let mut work = StepWork::default();
        let mut preempted = false;
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let s = &self.running[i];
            let new = (s.num_tokens - s.num_computed).min(budget);
            if new == 0 {
                i += 1;
                continue;
            }
            let mut scheduled = true;
            while !self.allocate(cat, SeqRef::Running(i), new, 0) {
                preempted = true;
                let mut victim = self.running.pop().expect("running is not empty");
                self.free_blocks_of(&mut victim);
                victim.num_computed = 0;
                victim.scheduled = 0;
                self.preemptions += 1;
                self.waiting.push_front(victim);
                if i == self.running.len() {
                    scheduled = false;
                    break;
                }
            }
            if !scheduled {
                break;
            }
            self.running[i].scheduled = new;
            budget -= new;
            i += 1;
        }
        while !preempted
            && budget > 0
            && (self.running.len() as u32) < self.cfg.max_running
            && !self.waiting.is_empty()
        {
            let bs = self.cfg.block_size;
            let (hits, evictable) = if self.waiting[0].num_computed == 0 {
                self.lookup_head(cat)
            } else {
                (0, 0)
            };
            let s = &self.waiting[0];
            let computed = hits * bs;
            let new = (s.num_tokens - computed).min(budget);
            // Check room before touching anything (vLLM's get_num_blocks_to_allocate).
            let need = ((computed + new).min(self.cfg.max_model_len)).div_ceil(bs) - hits;
            if need + evictable > self.pool.free_blocks() {
                break;
            }
            let mut s = self.waiting.pop_front().expect("waiting head");
            for &b in &self.hit_buf[..hits as usize] {
                self.pool.touch(b);
            }
            s.blocks.extend_from_slice(&self.hit_buf[..hits as usize]);
            s.cached_blocks = hits;
            s.num_computed = computed;
            if !s.admitted {
                s.admitted = true;
                notices.push(Notice::Admitted {
                    req: s.req,
                    hit_tokens: computed,
                });
            }
            self.running.push(s);
            let at = self.running.len() - 1;
            let ok = self.allocate(cat, SeqRef::Running(at), new, 0);
            debug_assert!(ok, "room was checked");
            self.running[at].scheduled = new;
            budget -= new;
        }
        // update_after_schedule: the scheduled tokens count as computed from now on.
        for s in &mut self.running {
            if s.scheduled == 0 {
                continue;
            }
            if s.generated > 0 && s.scheduled == 1 && s.num_computed + 1 == s.num_tokens {
                work.decode_seqs += 1;
                work.decode_ctx_tokens += u64::from(s.num_computed);
            } else {
                work.prefill_tokens += u64::from(s.scheduled);
            }
            s.num_computed += s.scheduled;
        }
        work
    }
}

/// Which sequence an operation addresses.
#[derive(Clone, Copy, Debug)]
pub(super) enum SeqRef {
    /// `running[i]`.
    Running(usize),
    /// The head of the waiting queue.
    Waiting,
}

fn seq_in<'a>(running: &'a mut [Seq], waiting: &'a mut VecDeque<Seq>, si: SeqRef) -> &'a mut Seq {
    match si {
        SeqRef::Running(i) => &mut running[i],
        SeqRef::Waiting => waiting.front_mut().expect("waiting head"),
    }
}
