//! Index memory returns exactly to its empty baseline once every worker has let go of
//! every block, measured with a counting global allocator (live heap bytes of the whole
//! process).
//!
//! Three teardown scenarios, each on a fresh index of 70 worker slots (so slots 64..70 use the nodes'
//! second bit word): store 49,280 block residencies (a 32-block shared prefix and 7 of 10
//! 96-block conversations per worker, through chained `store` events, with a duplicate store
//! and an alias per conversation) into an index sized for 64 blocks (so its node table must
//! grow, and must shrink back), check the gauges against hand-computed values, then let go
//! of everything by
//!
//! 1. `clear` of every worker,
//! 2. `remove_worker` of every worker,
//! 3. `remove` of every engine hash, once per copy,
//!
//! and check that `stats()` reports no node and no residency, and that live bytes come back
//! to the value measured right after the index was built.
//!
//! # The one allowance: crossbeam-epoch's own bookkeeping, settled before measuring
//! Unlinked nodes are freed by crossbeam-epoch's global collector, whose bookkeeping is
//! process-wide and allocates: the thread's registration (on its first pin) and the queue of
//! sealed garbage bags. Each pop from that queue defers the free of the queue's old sentinel
//! into the thread's bag, so even with no garbage of ours the collector alternates, flush by
//! flush, between two states one queue node (one sealed bag, ~2 KiB) apart. To compare like
//! with like, the test (a) pins and flushes on a throw-away index first, so the thread is
//! registered and the queue is in its steady cycle before any baseline, (b) takes the baseline
//! as the lowest live-bytes value over a window of single flushes right after building the
//! index, and (c) after the teardown, flushes (the index's `collect_garbage` and single
//! crossbeam flushes, bounded) until live bytes equal that baseline exactly. No other
//! allowance: a single leaked node, bit word or map allocation fails the test.
//!
//! The binary has no libtest harness (`harness = false`): the allocator counts every thread,
//! so nothing else may run or print while a scenario measures. Each case runs in a child
//! process of its own (`kvroute_testkit::heap::run_cases`), so the collector's process-wide
//! state after one case never enters another's figures.
//!
//! The cases of module `bounds` check that memory stays bounded while the per-worker cap
//! evicts, and while clears and worker removals come and go, and that the index's
//! `heap_bytes` gauge equals the allocator's count all along (tolerance derived there).

use kvroute_core::EngineHash;
use kvroute_core::{HashNamespace, SequenceHash, Slot};
use kvroute_index::BlockHasher;
use kvroute_index::index::{
    BlockStore, IndexConfig, Overlaps, PrefixIndex, RemoveOutcome, StoreOutcome,
};
use kvroute_testkit::heap::{Case, Counting, live, run_cases};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

mod memory_bounds;
use memory_bounds as bounds;

const WORKERS: u32 = 70;
const BS: usize = 4;
const SYSTEM_BLOCKS: usize = 32;
const CONVERSATIONS: usize = 10;
const CONVERSATION_BLOCKS: usize = 96;
const CONVERSATIONS_PER_WORKER: usize = 7;
/// Bound on flush rounds while waiting for deferred frees (each round is a few flushes).
const MAX_FLUSH_ROUNDS: usize = 2000;

pub(crate) fn config() -> IndexConfig {
    let mut c = IndexConfig::new(WORKERS as usize, BS);
    // Sized for 64 blocks (256 table slots): the workload's 992 blocks must grow the
    // node table, and letting go of them must shrink it back.
    c.expected_blocks = 64;
    c.max_blocks_per_worker = 1 << 20;
    c
}

/// Every event and removal of a scenario, built before the baseline is taken so that the
/// measured window allocates nothing but the index's own memory.
struct Workload {
    system_tokens: Vec<u32>,
    conversation_tokens: Vec<Vec<u32>>,
    /// Per worker: engine hashes of the system prompt blocks.
    system_ehs: Vec<Vec<EngineHash>>,
    /// Per worker: (conversation, engine hashes of its blocks, alias hash of its first block).
    conversations: Vec<Vec<(usize, Vec<EngineHash>, EngineHash)>>,
    /// Per worker: every engine hash once per copy (the duplicate-stored last blocks twice).
    removals: Vec<Vec<EngineHash>>,
    /// A query per conversation: chained hashes of system prompt + conversation.
    queries: Vec<Vec<SequenceHash>>,
}

impl Workload {
    fn new() -> Self {
        let system_tokens: Vec<u32> = (0..(SYSTEM_BLOCKS * BS) as u32).collect();
        let conversation_tokens: Vec<Vec<u32>> = (0..CONVERSATIONS)
            .map(|c| {
                let base = 1_000_000 * (c as u32 + 1);
                (base..base + (CONVERSATION_BLOCKS * BS) as u32).collect()
            })
            .collect();
        let hasher = BlockHasher::new(BS, HashNamespace::DEFAULT);
        let queries = conversation_tokens
            .iter()
            .map(|t| {
                let mut all = system_tokens.clone();
                all.extend_from_slice(t);
                let mut q = Vec::new();
                hasher.sequence_hashes_into(&all, None, &mut q);
                q
            })
            .collect();
        let mut system_ehs = Vec::new();
        let mut conversations = Vec::new();
        let mut removals = Vec::new();
        for w in 0..u64::from(WORKERS) {
            let eh = |block: u64| EngineHash((w << 40) | block);
            let sys: Vec<EngineHash> = (0..SYSTEM_BLOCKS as u64).map(eh).collect();
            let mut convs = Vec::new();
            let mut rem = sys.clone();
            for k in 0..CONVERSATIONS_PER_WORKER {
                let c = (w as usize + 3 * k) % CONVERSATIONS;
                let ehs: Vec<EngineHash> = (0..CONVERSATION_BLOCKS as u64)
                    .map(|b| eh(((c as u64 + 1) << 20) | b))
                    .collect();
                let alias = eh(((c as u64 + 1) << 20) | (1 << 19));
                rem.extend_from_slice(&ehs);
                rem.push(alias);
                convs.push((c, ehs, alias));
            }
            // The second copies of the duplicate-stored last blocks go last.
            rem.extend(convs.iter().map(|(_, ehs, _)| *ehs.last().unwrap()));
            system_ehs.push(sys);
            conversations.push(convs);
            removals.push(rem);
        }
        Self {
            system_tokens,
            conversation_tokens,
            system_ehs,
            conversations,
            removals,
            queries,
        }
    }

    fn ev<'a>(
        &self,
        parent: Option<EngineHash>,
        h: &'a [EngineHash],
        t: &'a [u32],
    ) -> BlockStore<'a> {
        BlockStore {
            parent,
            block_hashes: h,
            token_ids: t,
            block_size: BS,
            namespace: HashNamespace::DEFAULT,
        }
    }

    /// Applies every worker's events, checking each outcome.
    fn store_all(&self, index: &PrefixIndex) {
        for w in 0..WORKERS as usize {
            let slot = Slot(w as u32);
            let sys = &self.system_ehs[w];
            let out = index
                .store(slot, &self.ev(None, sys, &self.system_tokens))
                .unwrap();
            assert_eq!(out, outcome(SYSTEM_BLOCKS, 0));
            let last_sys = *sys.last().unwrap();
            for (c, ehs, alias) in &self.conversations[w] {
                let t = &self.conversation_tokens[*c];
                let out = index.store(slot, &self.ev(Some(last_sys), ehs, t)).unwrap();
                assert_eq!(out, outcome(CONVERSATION_BLOCKS, 0));
                // vLLM's recomputed last block: same hash, same parent, second copy.
                let n = CONVERSATION_BLOCKS;
                let dup = self.ev(Some(ehs[n - 2]), &ehs[n - 1..], &t[(n - 1) * BS..]);
                assert_eq!(index.store(slot, &dup).unwrap(), outcome(0, 1));
                // The first block again under another engine hash: an alias.
                let al = self.ev(Some(last_sys), core::slice::from_ref(alias), &t[..BS]);
                assert_eq!(index.store(slot, &al).unwrap(), outcome(1, 0));
            }
        }
    }

    /// The gauges after `store_all`, computed by hand.
    fn check_full(&self, index: &PrefixIndex, out: &mut Overlaps) {
        let s = index.stats();
        // Every conversation is held by some worker ((w + 3k) % 10 covers 0..10).
        let nodes = SYSTEM_BLOCKS + CONVERSATIONS * CONVERSATION_BLOCKS;
        let per_worker = SYSTEM_BLOCKS + CONVERSATIONS_PER_WORKER * CONVERSATION_BLOCKS;
        assert_eq!(s.nodes, nodes as u64);
        assert!(
            s.table_resizes > 0,
            "992 blocks must outgrow a table sized for 64"
        );
        assert_eq!(s.residencies, u64::from(WORKERS) * per_worker as u64);
        assert_eq!(u64::from(WORKERS) * per_worker as u64, 49_280);
        for w in 0..WORKERS {
            // Engine hashes: the blocks plus one alias per conversation.
            assert_eq!(
                index.worker_blocks(Slot(w)),
                per_worker + CONVERSATIONS_PER_WORKER
            );
        }
        // Worker 69 (a second-word slot) holds conversations 9, 2, 5, 8, 1, 4, 7.
        index.match_prefix(&self.queries[2], out);
        assert_eq!(
            out.get(Slot(69)),
            (SYSTEM_BLOCKS + CONVERSATION_BLOCKS) as u32
        );
        index.match_prefix(&self.queries[3], out);
        assert_eq!(out.get(Slot(69)), SYSTEM_BLOCKS as u32);
    }
}

fn outcome(new_blocks: usize, extra_copies: usize) -> StoreOutcome {
    StoreOutcome {
        new_blocks,
        extra_copies,
        ..StoreOutcome::default()
    }
}

/// One crossbeam-epoch flush on this thread: moves its bag to the global queue and collects.
pub(crate) fn single_flush() {
    crossbeam_epoch::pin().flush();
}

/// The lowest live-bytes value over a window of single flushes (see the module docs).
pub(crate) fn settled_minimum() -> isize {
    let mut lowest = live();
    for _ in 0..64 {
        single_flush();
        lowest = lowest.min(live());
    }
    lowest
}

/// Flushes (bounded) until live bytes equal `baseline`; returns the last `live - baseline`.
fn drain_to(index: &PrefixIndex, baseline: isize) -> isize {
    for _ in 0..MAX_FLUSH_ROUNDS {
        index.collect_garbage();
        if live() == baseline {
            return 0;
        }
        single_flush();
        if live() == baseline {
            return 0;
        }
    }
    live() - baseline
}

#[derive(Clone, Copy, Debug)]
enum Teardown {
    Clear,
    RemoveWorker,
    RemoveEveryBlock,
}

fn scenario(kind: Teardown) -> Result<(), String> {
    let work = Workload::new();
    let index = PrefixIndex::new(config()).unwrap();
    // The match buffer is the caller's memory, not the index's: allocate it before the
    // baseline too.
    let mut out = index.new_overlaps();
    let baseline = settled_minimum();
    let heap_gauge_baseline = index.stats().heap_bytes;

    work.store_all(&index);
    work.check_full(&index, &mut out);
    let grown = live() - baseline;

    for w in 0..WORKERS {
        let slot = Slot(w);
        let n = work.removals[w as usize].len() - CONVERSATIONS_PER_WORKER;
        match kind {
            Teardown::Clear => assert_eq!(index.clear(slot), Ok(n)),
            Teardown::RemoveWorker => assert_eq!(index.remove_worker(slot), Ok(n)),
            Teardown::RemoveEveryBlock => assert_eq!(
                index.remove(slot, &work.removals[w as usize]),
                Ok(RemoveOutcome {
                    removed: n,
                    copies_dropped: CONVERSATIONS_PER_WORKER,
                    unknown: 0,
                })
            ),
        }
    }
    let s = index.stats();
    if (s.nodes, s.residencies) != (0, 0) {
        return Err(format!(
            "{kind:?}: stats after teardown: {} nodes, {} residencies (want 0, 0)",
            s.nodes, s.residencies
        ));
    }
    for w in 0..WORKERS {
        if index.worker_blocks(Slot(w)) != 0 {
            return Err(format!("{kind:?}: worker {w} still has blocks"));
        }
    }
    index.match_prefix(&work.queries[0], &mut out);
    if out.deepest() != 0 {
        return Err(format!(
            "{kind:?}: a match still finds {} blocks",
            out.deepest()
        ));
    }

    let residue = drain_to(&index, baseline);
    if residue != 0 {
        let gauge = index.stats().heap_bytes as i64 - heap_gauge_baseline as i64;
        // Diagnose: does clearing every (already empty) worker give the bytes back?
        for w in 0..WORKERS {
            index.clear(Slot(w)).unwrap();
        }
        let after_clear = drain_to(&index, baseline);
        return Err(format!(
            "{kind:?}: live heap is {residue} bytes above the baseline after teardown and \
             {MAX_FLUSH_ROUNDS} flush rounds (the workload had grown it by {grown} bytes; the \
             index's own heap_bytes gauge is {gauge} bytes above its baseline); after a \
             `clear` of every already-empty worker the residue is {after_clear} bytes"
        ));
    }
    Ok(())
}

/// Rounds of "store one long event, remove all but its first block": the first block's
/// successor link may keep the removed second block allocated (one 40-byte node in one
/// allocation: key 8, holders 4, refs 4, successor pointer 8, and the two bit words of 70
/// slots, 16), but never the chain of removed blocks behind it. Live bytes after each round equal those with the
/// first block alone plus that one node.
fn succ_chain_scenario() -> Result<(), String> {
    const ROUNDS: u64 = 6;
    const LEN: u64 = 2_000;
    const ONE_NODE: isize = 40;
    let index = PrefixIndex::new(config()).unwrap();
    let first = (EngineHash(1), SequenceHash(0x5eed));
    let rounds: Vec<Vec<(EngineHash, SequenceHash)>> = (0..ROUNDS)
        .map(|r| {
            let mut pairs = vec![first];
            pairs.extend((1..LEN).map(|i| {
                let k = 1_000_000 * (r + 1) + i;
                (
                    EngineHash(k),
                    SequenceHash(k.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                )
            }));
            pairs
        })
        .collect();
    let rests: Vec<Vec<EngineHash>> = rounds
        .iter()
        .map(|p| p[1..].iter().map(|x| x.0).collect())
        .collect();
    index.store_hashes(Slot(0), &[first]).unwrap();
    let single = settled_after(&index);
    for (r, (pairs, rest)) in rounds.iter().zip(&rests).enumerate() {
        index.store_hashes(Slot(0), pairs).unwrap();
        index.remove(Slot(0), rest).unwrap();
        let s = index.stats();
        if (s.nodes, s.residencies) != (1, 1) {
            return Err(format!(
                "round {r}: {} nodes, {} residencies",
                s.nodes, s.residencies
            ));
        }
        let residue = drain_to(&index, single + ONE_NODE);
        if residue != 0 {
            return Err(format!(
                "round {r}: live heap {residue} bytes above the first block alone plus one node"
            ));
        }
    }
    Ok(())
}

/// Successor links forming a cycle (caller-chosen hashes: a chain, then its last block
/// stored again as the parent of its first) are broken when the nodes leave the table:
/// rounds of "store the cycle, clear" leave live bytes where the first round left them
/// (a leaked cycle would keep 500 nodes per round).
fn succ_cycle_scenario() -> Result<(), String> {
    const ROUNDS: u64 = 8;
    let index = PrefixIndex::new(config()).unwrap();
    let mut level = None;
    for r in 0..ROUNDS {
        let chain: Vec<(EngineHash, SequenceHash)> = (1..=500u64)
            .map(|i| {
                let k = 1_000 * (r + 1) + i;
                (
                    EngineHash(k),
                    SequenceHash(k.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                )
            })
            .collect();
        let back = [
            (EngineHash(10_000_001), chain[499].1),
            (EngineHash(10_000_002), chain[0].1),
        ];
        index.store_hashes(Slot(0), &chain).unwrap();
        index.store_hashes(Slot(0), &back).unwrap();
        index.clear(Slot(0)).unwrap();
        drop(chain);
        match level {
            None => level = Some(settled_after(&index)),
            Some(l) => {
                let residue = drain_to(&index, l);
                if residue != 0 {
                    return Err(format!(
                        "round {r}: live heap {residue} bytes above the level after round 0"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Successor links forming a cycle among nodes that are still held when the index itself
/// is dropped: the drop breaks the links, so every node is freed and live bytes return to
/// the value before the index was built (a leaked cycle would keep its 500 nodes).
fn succ_cycle_drop_scenario() -> Result<(), String> {
    let chain: Vec<(EngineHash, SequenceHash)> = (1..=500u64)
        .map(|k| {
            (
                EngineHash(k),
                SequenceHash(k.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            )
        })
        .collect();
    let back = [
        (EngineHash(10_000_001), chain[499].1),
        (EngineHash(10_000_002), chain[0].1),
    ];
    let baseline = settled_minimum();
    {
        let index = PrefixIndex::new(config()).unwrap();
        index.store_hashes(Slot(0), &chain).unwrap();
        index.store_hashes(Slot(65), &back).unwrap();
        let s = index.stats();
        if (s.nodes, s.residencies) != (500, 502) {
            return Err(format!("{} nodes, {} residencies", s.nodes, s.residencies));
        }
    }
    for _ in 0..MAX_FLUSH_ROUNDS {
        if live() == baseline {
            return Ok(());
        }
        single_flush();
    }
    Err(format!(
        "live heap {} bytes above the level before the index was built",
        live() - baseline
    ))
}

/// The settled live-bytes level with the index as it is (after flushing its garbage).
fn settled_after(index: &PrefixIndex) -> isize {
    for _ in 0..MAX_FLUSH_ROUNDS {
        index.collect_garbage();
    }
    settled_minimum()
}

/// Registers this thread with crossbeam-epoch and brings its collector to its steady cycle
/// with garbage of the same kind (see the module docs). Every case starts with it.
pub(crate) fn warm_collector() {
    let warm = PrefixIndex::new(config()).unwrap();
    let q = [SequenceHash(1), SequenceHash(2)];
    for w in [0u32, 65] {
        let pairs = [(EngineHash(1), q[0]), (EngineHash(2), q[1])];
        warm.store_hashes(Slot(w), &pairs).unwrap();
        warm.clear(Slot(w)).unwrap();
    }
    for _ in 0..256 {
        warm.collect_garbage();
        single_flush();
    }
}

/// Runs `f` after [`warm_collector`].
fn warmed(f: fn() -> Result<(), String>) -> Result<(), String> {
    warm_collector();
    f()
}

const CASES: &[Case] = &[
    ("memory_returns_to_baseline_after_Clear", || {
        warmed(|| scenario(Teardown::Clear))
    }),
    ("memory_returns_to_baseline_after_RemoveWorker", || {
        warmed(|| scenario(Teardown::RemoveWorker))
    }),
    ("memory_returns_to_baseline_after_RemoveEveryBlock", || {
        warmed(|| scenario(Teardown::RemoveEveryBlock))
    }),
    ("removed_blocks_after_a_kept_first_block_are_freed", || {
        warmed(succ_chain_scenario)
    }),
    ("successor_cycles_are_freed_on_clear", || {
        warmed(succ_cycle_scenario)
    }),
    (
        "successor_cycles_are_freed_when_the_index_is_dropped",
        || warmed(succ_cycle_drop_scenario),
    ),
    (
        "eviction_keeps_memory_bounded_and_in_the_gauge_with_1_block_chains",
        || warmed(|| bounds::eviction(1)),
    ),
    (
        "eviction_keeps_memory_bounded_and_in_the_gauge_with_8_block_chains",
        || warmed(|| bounds::eviction(8)),
    ),
    (
        "eviction_keeps_memory_bounded_and_in_the_gauge_with_128_block_chains",
        || warmed(|| bounds::eviction(128)),
    ),
    (
        "store_and_clear_cycles_return_to_the_empty_footprint_at_once",
        || warmed(bounds::store_and_clear_cycles),
    ),
    (
        "worker_churn_returns_to_the_empty_footprint_at_once",
        || warmed(bounds::worker_churn),
    ),
    ("dropping_an_index_frees_its_deferred_garbage", || {
        warmed(bounds::drop_frees_deferred_garbage)
    }),
];

fn main() {
    // Each case runs in a process of its own (the collector's state is process-wide);
    // the title is printed first, so stdout's buffer exists before any measurement.
    run_cases(
        "index_memory: live-heap checks (counting global allocator, one process per case)",
        CASES,
    );
}
