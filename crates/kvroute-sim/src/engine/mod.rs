//! One simulated inference engine: continuous batching, an engine-side prefix cache, and
//! the KV events a real engine publishes, in the order it publishes them.
//!
//! The engine advances in *steps* on the virtual clock. At the start of a step the
//! scheduler picks the batch and the KV cache manager allocates and caches blocks (which
//! queues the step's events); the step lasts [`EngineConfig::step_time`] of its work
//! (module [`config`]: the formula, the presets and their sources); at its end the
//! batch's tokens are produced, finished requests leave, and the step's events are
//! published as one msgpack batch (none if the step produced no event), with sequence
//! numbers 0, 1, 2, … per engine incarnation.
//!
//! # Scheduler and cache: vLLM's v1 rules
//! As measured on vLLM 0.33.0's own scheduler and KV cache manager
//! (`docs/WIRE-FORMAT.md`, "How real engines order their events"):
//! * **Batching.** Running requests are scheduled first, in admission order, each taking
//!   what it still needs (a prefill chunk, or one decode token) out of a token budget of
//!   [`EngineConfig::chunk_tokens`] per step. Then waiting requests are admitted in FIFO
//!   order while budget, a running slot (at most [`EngineConfig::max_running`]) and KV
//!   blocks remain; a long prompt is prefilled in chunks over several steps. A request that
//!   does not fit in the free blocks blocks the queue behind it. A running request that
//!   cannot get a block preempts the last running one (recompute: its blocks are freed, it
//!   goes back to the front of the queue and prefills everything again), and no waiting
//!   request is admitted in that step.
//! * **Prefix hits.** At admission the engine looks its own cache up block by block from
//!   the start of the prompt, counting at most `(n − 1) / block_size` blocks for an
//!   `n`-token prompt (the last token is always recomputed). That hit is what
//!   [`RequestRecord::cached_tokens`](crate::RequestRecord) records; only the rest of the
//!   prompt costs prefill time.
//! * **Blocks and eviction.** [`EngineConfig::kv_blocks`] blocks, one of them kept back
//!   as the null block. A finished request's blocks go to the back of the free queue, last
//!   block first, and stay hittable; an allocation takes the front of the queue (the least
//!   recently freed; a conversation's tail before its prefix) and only then is a cached
//!   block evicted. A hit on a block in the free queue takes it out of the queue.
//! * **Events.** Blocks are cached, and `BlockStored` queued, when the chunk that fills them
//!   is *scheduled* (a request admitted later in the same step already hits them): one
//!   store per prefill chunk, its `parent_block_hash` linking to the previous chunk; one
//!   single-block store each time a decode step completes a block (token ids mixing the
//!   prompt's tail and output; the last output token is never cached). Finishing emits
//!   nothing. `BlockRemoved` (one hash per event) comes only when an allocation reuses a
//!   cached block. Per request, an allocation's removals come before its store. A fully
//!   cached prompt whose length is a multiple of the block size recomputes its last block
//!   into a second copy, stored again; each copy is later removed on its own.
//! * **Hashes and tokens.** A prompt's token ids come from
//!   [`PromptSpec::tokens_into`](crate::PromptSpec::tokens_into); output token `j` of
//!   request `id` is [`output_token`](crate::request::output_token)`(id, j)`. The engine's
//!   own block hashes are kvroute's chained XXH3 hashes of those tokens (any scheme would do:
//!   the router re-hashes the token ids of each store and maps engine hashes to its own
//!   keys for removals); each prompt is hashed once per run.
//! * **Limits.** A prompt of [`EngineConfig::max_model_len`] tokens or more, or one that
//!   cannot fit in an empty cache, is refused when it reaches the engine; output stops at
//!   the context length, or where the sequence alone fills the usable cache when that is
//!   shorter (vLLM refuses to start with a context its cache cannot hold).
//!
//! # Calibration
//! `tests/calibration.rs` replays the requests of the two recorded real engine streams in
//! `shared/data/kv_events`, at the trace's timestamps, on one simulated engine of the same
//! capacity, through the whole driver, and compares every request's prefix hit with the
//! real engine's `engine_hit_tokens`. Both recordings ran the engine's own code on CPU with
//! a step clock of 10 ms + 0.02 ms per scheduled token, reproduced by
//! [`EngineConfig::vllm_calibration`] and [`EngineConfig::sglang_calibration`].
//!
//! | stream | requests | hits equal | hit rate simulated / recorded | last token / recorded clock |
//! |---|---:|---:|---:|---:|
//! | vLLM 0.33.0, 300,000 blocks of 16, 32 running | 1,000 | 1,000 (100 %) | 17.12 % / 17.12 % | 356.279 s / 356.279 s |
//! | SGLang 0.5.23, 125,000 pages of 16, 32 running | 300 | 295 (98.3 %) | 4.93 % / 5.04 % | 136.5 s / 140.3 s |
//!
//! What produces these hits is the scheduling, not just the cache size: the recorded engine
//! was saturated (requests queued for up to 19 s), so a hit depends on which requests share
//! a step, in what order blocks were freed, and when the 300,000 blocks filled (about
//! 140 s in). Scheduling running requests before waiting ones, caching at schedule time
//! (request 1 hits request 0's first block in the very first step), the chunk budget shared
//! with decodes, and the free queue's order reproduce every recorded vLLM hit and its clock
//! to the step.
//!
//! SGLang differs, and the simulator does not model the differences; its hits still meet
//! the bounds because the differences rarely change a hit on this trace: SGLang inserts a
//! prompt's pages into its radix cache *after* the prefill ran (so request 1, admitted in
//! the same step as request 0, hits nothing there: the first of the 5 mismatches), stores
//! decode pages only when a request finishes, runs prefill and decode in separate steps,
//! aligns chunks to pages, and evicts least recently *used* leaves (the 4 other
//! mismatches: SGLang still held a conversation's earlier turn that the free-queue order
//! had evicted, so it hit 1,024–2,560 tokens where the simulation hits 512). Its events
//! are also merged differently (one store of up to ~1,000 pages, removals in sweeps).
//!
//! # Restart
//! A restart wipes the cache and forgets every request on the engine (the driver
//! decides what happens to them), restarts the batch sequence at 0 and queues an
//! `AllBlocksCleared` as the first event of the new incarnation, as SGLang does at start
//! (and vLLM on a cache reset).

mod catalog;
pub mod config;
mod pool;
mod vllm;
mod wire;

use std::collections::VecDeque;

pub(crate) use catalog::Catalog;
pub use config::{ConfigError, EngineConfig, Preset};
use pool::BlockPool;
use wire::EventBuf;

/// What a step (or an arrival) tells the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Notice {
    /// The request was admitted (first time only) with this prefix hit (tokens).
    Admitted {
        /// Catalog index.
        req: u32,
        /// Prompt tokens found in the engine's cache (tokens).
        hit_tokens: u32,
    },
    /// The request produced its first output token at the end of this step.
    FirstToken {
        /// Catalog index.
        req: u32,
    },
    /// The request produced its last output token at the end of this step.
    Finished {
        /// Catalog index.
        req: u32,
        /// Output tokens it produced (tokens).
        generated: u32,
    },
}

/// One request on the engine.
#[derive(Debug)]
pub(crate) struct Seq {
    req: u32,
    prompt_len: u32,
    /// Output tokens to produce (capped by the context length).
    output_len: u32,
    /// Tokens known: prompt plus output so far.
    num_tokens: u32,
    /// Tokens whose KV is computed (or scheduled to be, during a step).
    num_computed: u32,
    generated: u32,
    /// Physical blocks, in sequence order.
    blocks: Vec<u32>,
    /// Leading blocks cached (hashed) so far.
    cached_blocks: u32,
    /// Chained hashes of full blocks past the prompt's.
    decode_hashes: Vec<u64>,
    /// Tokens scheduled in the step in flight.
    scheduled: u32,
    admitted: bool,
}

/// The work of one step, for its duration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StepWork {
    /// Prefill tokens scheduled (tokens).
    pub prefill_tokens: u64,
    /// Decoding requests scheduled (one token each).
    pub decode_seqs: u32,
    /// Context tokens of those decoding requests (tokens).
    pub decode_ctx_tokens: u64,
}

/// What the engine reports as load telemetry.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct LoadFigures {
    /// Running requests.
    pub running: u32,
    /// Waiting requests.
    pub waiting: u32,
    /// Fraction of usable blocks held by requests (vLLM `kv_cache_usage_perc`).
    pub kv_usage: f32,
    /// Prompt tokens not yet computed of waiting and prefilling requests (tokens).
    pub waiting_prefill_tokens: u64,
    /// KV tokens held by running requests (tokens).
    pub active_decode_tokens: u64,
}

/// One engine.
#[derive(Debug)]
pub(crate) struct Engine {
    cfg: EngineConfig,
    dp_rank: u32,
    pool: BlockPool,
    running: Vec<Seq>,
    waiting: VecDeque<Seq>,
    events: EventBuf,
    in_step: bool,
    /// Bumped by a restart: a step end of an older incarnation is ignored.
    epoch: u64,
    next_seq: u64,
    generated: u64,
    preemptions: u64,
    // Scratch buffers.
    scratch: Vec<u32>,
    hash_buf: Vec<u64>,
    hit_buf: Vec<u32>,
    spare: Vec<Seq>,
}

impl Engine {
    /// A fresh engine (empty cache, batch sequence at 0). `cfg` must be valid.
    pub(crate) fn new(cfg: &EngineConfig, dp_rank: u32) -> Self {
        Self {
            cfg: cfg.clone(),
            dp_rank,
            pool: BlockPool::new(cfg.kv_blocks),
            running: Vec::new(),
            waiting: VecDeque::new(),
            events: EventBuf::new(cfg.block_size),
            in_step: false,
            epoch: 0,
            next_seq: 0,
            generated: 0,
            preemptions: 0,
            scratch: Vec::new(),
            hash_buf: Vec::new(),
            hit_buf: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// The configuration.
    pub(crate) fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Whether a prompt of `prompt_len` tokens can ever be served: shorter than the context
    /// length and fitting in the cache with its first output token.
    pub(crate) fn accepts(&self, prompt_len: u32) -> bool {
        prompt_len > 0
            && prompt_len < self.cfg.max_model_len
            && (prompt_len + 1).div_ceil(self.cfg.block_size) <= self.pool.usable()
    }

    /// Output tokens this engine generates for a prompt of `prompt_len` tokens asking for
    /// `requested`: capped by the context, `context − prompt_len`, at least 1. The context
    /// is `max_model_len`, or the tokens the usable cache holds where that is less: vLLM
    /// refuses to start when one sequence of `max_model_len` cannot fit the cache, so such
    /// an engine serves as if started with the context lowered to the cache, and a sequence
    /// alone never outgrows it (it would preempt itself at every step).
    pub(crate) fn output_len(&self, prompt_len: u32, requested: u32) -> u32 {
        let cache = u64::from(self.pool.usable()) * u64::from(self.cfg.block_size);
        let context = u64::from(self.cfg.max_model_len).min(cache) as u32;
        requested.min(context.saturating_sub(prompt_len)).max(1)
    }

    /// Queues request `req` (catalog index). The caller checked [`accepts`](Self::accepts).
    pub(crate) fn enqueue(&mut self, cat: &Catalog, req: u32) {
        let e = cat.entry(req);
        let output_len = self.output_len(e.prompt_len, e.output_len);
        let mut s = self.spare.pop().unwrap_or_else(|| Seq {
            req: 0,
            prompt_len: 0,
            output_len: 0,
            num_tokens: 0,
            num_computed: 0,
            generated: 0,
            blocks: Vec::new(),
            cached_blocks: 0,
            decode_hashes: Vec::new(),
            scheduled: 0,
            admitted: false,
        });
        s.req = req;
        s.prompt_len = e.prompt_len;
        s.output_len = output_len;
        s.num_tokens = e.prompt_len;
        s.num_computed = 0;
        s.generated = 0;
        s.blocks.clear();
        s.cached_blocks = 0;
        s.decode_hashes.clear();
        s.scheduled = 0;
        s.admitted = false;
        self.waiting.push_back(s);
    }

    /// Whether a step is in flight.
    pub(crate) fn in_step(&self) -> bool {
        self.in_step
    }

    /// The incarnation (bumped by every restart).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Starts a step: schedules the batch (admissions are reported in `notices`) and
    /// returns its duration (seconds), or `None` when nothing could be scheduled.
    pub(crate) fn begin_step(&mut self, cat: &Catalog, notices: &mut Vec<Notice>) -> Option<f64> {
        debug_assert!(!self.in_step);
        let work = self.schedule_vllm(cat, notices);
        if work == StepWork::default() {
            return None;
        }
        self.in_step = true;
        Some(self.cfg.step_time(
            work.prefill_tokens,
            work.decode_seqs,
            work.decode_ctx_tokens,
        ))
    }

    /// Ends the step in flight: every request whose scheduled tokens completed its known
    /// tokens produces one output token; finished requests free their blocks.
    pub(crate) fn end_step(&mut self, notices: &mut Vec<Notice>) {
        debug_assert!(self.in_step);
        self.in_step = false;
        let mut any_finished = false;
        for s in &mut self.running {
            if s.scheduled == 0 {
                continue;
            }
            s.scheduled = 0;
            if s.num_computed < s.num_tokens {
                continue;
            }
            s.generated += 1;
            s.num_tokens += 1;
            self.generated += 1;
            if s.generated == 1 {
                notices.push(Notice::FirstToken { req: s.req });
            }
            if s.generated >= s.output_len {
                notices.push(Notice::Finished {
                    req: s.req,
                    generated: s.generated,
                });
                any_finished = true;
            }
        }
        if any_finished {
            let mut kept = Vec::with_capacity(self.running.len());
            for mut s in std::mem::take(&mut self.running) {
                if s.generated >= s.output_len {
                    self.free_blocks_of(&mut s);
                    self.spare.push(s);
                } else {
                    kept.push(s);
                }
            }
            self.running = kept;
        }
    }

    /// Takes the events queued since the last call, encoded as one batch `[ts, events,
    /// dp_rank]` into `out`, and returns its sequence number; `None` (and `out` untouched)
    /// when there are none.
    pub(crate) fn take_batch(&mut self, cat: &Catalog, ts: f64, out: &mut Vec<u8>) -> Option<u64> {
        if self.events.is_empty() {
            return None;
        }
        self.events.encode(cat, ts, self.dp_rank, out);
        self.events.clear();
        let seq = self.next_seq;
        self.next_seq += 1;
        Some(seq)
    }

    /// Restarts the engine: cache wiped, every request dropped (returned, running first,
    /// then waiting, each in order), any step in flight abandoned, batch sequence back to
    /// 0, and an `AllBlocksCleared` queued as the new incarnation's first event.
    pub(crate) fn restart(&mut self) -> Vec<u32> {
        let mut lost: Vec<u32> = self.running.iter().map(|s| s.req).collect();
        lost.extend(self.waiting.iter().map(|s| s.req));
        self.running.clear();
        self.waiting.clear();
        self.pool = BlockPool::new(self.cfg.kv_blocks);
        self.events.clear();
        self.events.clear_all();
        self.in_step = false;
        self.epoch += 1;
        self.next_seq = 0;
        lost
    }

    /// The engine's load figures now.
    pub(crate) fn load(&self) -> LoadFigures {
        let mut f = LoadFigures {
            running: self.running.len() as u32,
            waiting: self.waiting.len() as u32,
            kv_usage: 1.0 - self.pool.free_blocks() as f32 / self.pool.usable() as f32,
            ..LoadFigures::default()
        };
        for s in &self.running {
            if s.num_computed < s.prompt_len {
                f.waiting_prefill_tokens += u64::from(s.num_tokens - s.num_computed);
            }
            f.active_decode_tokens += u64::from(s.num_computed);
        }
        for s in &self.waiting {
            f.waiting_prefill_tokens += u64::from(s.num_tokens - s.num_computed);
        }
        f
    }

    /// Output tokens produced since the engine was created (tokens).
    pub(crate) fn generated(&self) -> u64 {
        self.generated
    }

    /// Requests preempted (recompute) so far.
    pub(crate) fn preemptions(&self) -> u64 {
        self.preemptions
    }

    /// Distinct block hashes the engine's cache holds.
    pub(crate) fn cached_blocks(&self) -> usize {
        self.pool.cached_hashes()
    }
}
