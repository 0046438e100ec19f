//! Memory of the run-compressed index ([`RunIndex`]), measured with a counting global
//! allocator (live heap bytes of the whole process), as `index_memory` measures
//! `PrefixIndex`'s:
//!
//! * teardown: 70 worker slots (so the views of slots 64..70 use a second bit word) store
//!   a 32-block shared prefix and 7 of 10 96-block conversations each, chained on the
//!   prefix's last block, with a duplicate store and an alias per conversation, into an
//!   index sized for 64 blocks (its head table must grow, and shrink back); then every
//!   worker lets go of everything by `clear`, `remove_worker` or `remove` of every engine
//!   hash once per copy, and live bytes come back *exactly* to the value measured right
//!   after the index was built (after `collect_garbage` and single crossbeam flushes,
//!   bounded, as in `index_memory`);
//! * eviction: one worker with a cap of 16,384 blocks stores 32 times as many in chains of
//!   1, 8 or 128 blocks; the gauge equals the allocator's count all along (within
//!   [`TOLERANCE`]) and memory stops growing once the cap binds;
//! * store + clear cycles and worker churn: after each clear or `remove_worker`, with no
//!   `collect_garbage`, live bytes are back at the empty index's and the gauge says so;
//! * an index dropped while a reader holds its last garbage back gives everything back.
//!
//! # The one allowance
//! As in `index_memory`: crossbeam-epoch's own bookkeeping (the thread's registration and
//! its queue of sealed garbage bags) is not the index's. The baseline is taken after a
//! throw-away index brought the collector to its steady cycle; where a checkpoint is taken
//! without flushing to the baseline, two sealed bags of `(64 * 4 + 3) * 8 = 2,072` bytes
//! may differ ([`TOLERANCE`]): the one the queue alternates by, and the one the last drain
//! sealed. Each event hands the collector one deferred function (its garbage batch).
//!
//! No libtest harness (`harness = false`): the allocator counts every thread; each case
//! runs in a child process of its own (`kvroute_testkit::heap::run_cases`).

use kvroute_core::{EngineHash, SequenceHash, Slot};
use kvroute_index::index::{IndexConfig, RemoveOutcome, StoreOutcome};
use kvroute_index::runs::RunIndex;
use kvroute_testkit::heap::{Case, Counting, live, run_cases};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One sealed garbage bag of crossbeam-epoch's queue (see the module docs).
const SEALED_BAG: isize = (64 * 4 + 3) * 8;
/// Allowed difference between live bytes and the gauge: two sealed bags.
const TOLERANCE: isize = 2 * SEALED_BAG;
/// Bound on flush rounds while waiting for deferred frees.
const MAX_FLUSH_ROUNDS: usize = 2000;

const WORKERS: u32 = 70;
const SYSTEM_BLOCKS: u64 = 32;
const CONVERSATIONS: u64 = 10;
const CONVERSATION_BLOCKS: u64 = 96;
const CONVERSATIONS_PER_WORKER: u64 = 7;

/// The chained hash of block `k` of a synthetic stream (distinct for distinct `k`).
fn seq(k: u64) -> SequenceHash {
    SequenceHash(k.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
}

/// Fills `buf` with the `len` blocks `first..first + len` as one chain.
fn chain(buf: &mut Vec<(EngineHash, SequenceHash)>, first: u64, len: u64) {
    buf.clear();
    buf.extend((first..first + len).map(|k| (EngineHash(k), seq(k))));
}

/// One crossbeam-epoch flush on this thread.
fn single_flush() {
    crossbeam_epoch::pin().flush();
}

/// The lowest live-bytes value over a window of single flushes.
fn settled_minimum() -> isize {
    let mut lowest = live();
    for _ in 0..64 {
        single_flush();
        lowest = lowest.min(live());
    }
    lowest
}

/// Flushes (bounded) until live bytes equal `baseline`; returns the last `live - baseline`.
fn drain_to(index: &RunIndex, baseline: isize) -> isize {
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

/// Live bytes above `baseline`, or an error when they are further than the tolerance from
/// the gauge (`when` is formatted only on failure).
fn gauge_matches(
    index: &RunIndex,
    baseline: isize,
    when: impl Fn() -> String,
) -> Result<isize, String> {
    let s = index.stats();
    let heap = live() - baseline;
    let diff = heap - s.heap_bytes as isize;
    if diff.abs() > TOLERANCE {
        return Err(format!(
            "{}: live heap of the index {heap} bytes, gauge {} bytes ({} runs, {} positions, \
             {} evicted, {} deferred): {diff} bytes apart, tolerance {TOLERANCE}",
            when(),
            s.heap_bytes,
            s.runs,
            s.positions,
            s.evicted_blocks,
            s.deferred_bytes
        ));
    }
    Ok(heap)
}

/// Registers this thread with crossbeam-epoch and brings its collector to its steady
/// cycle with garbage of the same kind, before any baseline.
fn warm_collector() {
    let warm = RunIndex::new(IndexConfig::new(WORKERS as usize, 4)).unwrap();
    let mut buf = Vec::new();
    for w in [0u32, 65] {
        chain(&mut buf, 1, 2);
        warm.store_hashes(Slot(w), None, &buf).unwrap();
        warm.clear(Slot(w)).unwrap();
    }
    for _ in 0..256 {
        warm.collect_garbage();
        single_flush();
    }
}

fn warmed(f: fn() -> Result<(), String>) -> Result<(), String> {
    warm_collector();
    f()
}

/// One store of a teardown scenario: parent, blocks, expected outcome.
type Store = (
    Option<EngineHash>,
    Vec<(EngineHash, SequenceHash)>,
    StoreOutcome,
);

/// Every store and removal of a teardown scenario, built before the baseline.
struct Workload {
    /// Per worker: its stores, (parent, blocks, expected outcome).
    stores: Vec<Vec<Store>>,
    /// Per worker: every engine hash once per copy.
    removals: Vec<Vec<EngineHash>>,
    /// Per worker: engine hashes (distinct).
    blocks: Vec<usize>,
    query: Vec<SequenceHash>,
}

fn outcome(new_blocks: usize, extra_copies: usize) -> StoreOutcome {
    StoreOutcome {
        new_blocks,
        extra_copies,
        ..StoreOutcome::default()
    }
}

impl Workload {
    fn new() -> Self {
        let conv_key = |c: u64, i: u64| seq(1_000_000 + c * 1_000 + i);
        let mut w = Workload {
            stores: Vec::new(),
            removals: Vec::new(),
            blocks: Vec::new(),
            query: (0..SYSTEM_BLOCKS).map(seq).collect(),
        };
        w.query
            .extend((0..CONVERSATION_BLOCKS).map(|i| conv_key(0, i)));
        for worker in 0..u64::from(WORKERS) {
            let eh = |n: u64| EngineHash((worker << 32) | n);
            let mut stores = Vec::new();
            let mut removals = Vec::new();
            let system: Vec<_> = (0..SYSTEM_BLOCKS).map(|i| (eh(i), seq(i))).collect();
            removals.extend(system.iter().map(|p| p.0));
            stores.push((None, system, outcome(SYSTEM_BLOCKS as usize, 0)));
            let parent = Some(eh(SYSTEM_BLOCKS - 1));
            for j in 0..CONVERSATIONS_PER_WORKER {
                let c = (worker + j) % CONVERSATIONS;
                let base = 1_000 + c * 1_000;
                let blocks: Vec<_> = (0..CONVERSATION_BLOCKS)
                    .map(|i| (eh(base + i), conv_key(c, i)))
                    .collect();
                removals.extend(blocks.iter().map(|p| p.0));
                // The duplicate store of the conversation's first block (a second copy)
                // and an alias of it (another engine hash for the same block).
                let first = blocks[0];
                let alias = (eh(base + 999), first.1);
                removals.push(first.0);
                removals.push(alias.0);
                stores.push((parent, blocks, outcome(CONVERSATION_BLOCKS as usize, 0)));
                stores.push((parent, vec![first], outcome(0, 1)));
                stores.push((parent, vec![alias], outcome(1, 0)));
            }
            w.blocks.push(
                (SYSTEM_BLOCKS + CONVERSATIONS_PER_WORKER * (CONVERSATION_BLOCKS + 1)) as usize,
            );
            w.stores.push(stores);
            w.removals.push(removals);
        }
        w
    }
}

#[derive(Clone, Copy, Debug)]
enum Teardown {
    Clear,
    RemoveWorker,
    RemoveEveryBlock,
}

fn scenario(kind: Teardown) -> Result<(), String> {
    let work = Workload::new();
    let mut config = IndexConfig::new(WORKERS as usize, 4);
    config.expected_blocks = 64;
    config.max_blocks_per_worker = 1 << 20;
    let index = RunIndex::new(config).unwrap();
    let mut out = index.new_overlaps();
    let baseline = settled_minimum();

    for w in 0..WORKERS {
        for (parent, blocks, want) in &work.stores[w as usize] {
            assert_eq!(index.store_hashes(Slot(w), *parent, blocks), Ok(*want));
        }
    }
    let s = index.stats();
    let distinct = SYSTEM_BLOCKS + CONVERSATIONS * CONVERSATION_BLOCKS;
    let per_worker = SYSTEM_BLOCKS + CONVERSATIONS_PER_WORKER * CONVERSATION_BLOCKS;
    assert_eq!(s.blocks, distinct);
    assert_eq!(s.residencies, u64::from(WORKERS) * per_worker);
    assert_eq!(s.residencies, 49_280);
    index.match_prefix(&work.query, &mut out);
    assert_eq!(out.get(Slot(0)), work.query.len() as u32);
    // Slot 63 holds no copy of conversation 0 (its conversations are 3..=9), slot 69 does.
    assert_eq!(out.get(Slot(63)), SYSTEM_BLOCKS as u32);
    assert_eq!(out.get(Slot(69)), work.query.len() as u32);
    let grown = live() - baseline;

    for w in 0..WORKERS {
        let slot = Slot(w);
        let n = work.blocks[w as usize];
        match kind {
            Teardown::Clear => assert_eq!(index.clear(slot), Ok(n)),
            Teardown::RemoveWorker => assert_eq!(index.remove_worker(slot), Ok(n)),
            Teardown::RemoveEveryBlock => assert_eq!(
                index.remove(slot, &work.removals[w as usize]),
                Ok(RemoveOutcome {
                    removed: n,
                    copies_dropped: CONVERSATIONS_PER_WORKER as usize,
                    unknown: 0,
                })
            ),
        }
    }
    let s = index.stats();
    if (s.runs, s.positions, s.blocks, s.residencies) != (0, 0, 0, 0) {
        return Err(format!("{kind:?}: stats after teardown: {s:?}"));
    }
    for w in 0..WORKERS {
        if index.worker_blocks(Slot(w)) != 0 {
            return Err(format!("{kind:?}: worker {w} still has blocks"));
        }
    }
    index.match_prefix(&work.query, &mut out);
    if out.deepest() != 0 {
        return Err(format!("{kind:?}: a match still finds {}", out.deepest()));
    }
    let residue = drain_to(&index, baseline);
    if residue != 0 {
        return Err(format!(
            "{kind:?}: live heap is {residue} bytes above the baseline after teardown and \
             {MAX_FLUSH_ROUNDS} flush rounds (the workload had grown it by {grown} bytes; \
             gauge {} bytes)",
            index.stats().heap_bytes
        ));
    }
    Ok(())
}

/// One worker of a 64-slot index with a cap of `C = 16,384` blocks stores 32 C distinct
/// blocks in chains of `len`, so the cap evicts most of them. At every C/4 blocks stored
/// the gauge equals the live bytes (within [`TOLERANCE`]); once 24 C blocks are stored,
/// the live bytes never pass the highest level seen while storing blocks 16 C to 24 C
/// (plus the tolerance): eviction keeps memory from growing.
///
/// The level is not the held blocks' alone: evicting the deepest first shaves runs from
/// their ends, and a run keeps its key buffer (and its positions, in the `positions`
/// gauge) while any of its positions is held. With 128-block chains the plateau (reached
/// after about 12 C blocks) has ~1,270 runs and ~162,000 positions for ~16,000 held
/// blocks, about 2.5 MB; with 1-block chains, ~8.8 MB (one run, view and record per
/// block).
fn eviction(len: u64) -> Result<(), String> {
    const C: usize = 16_384;
    let total = 32 * C as u64;
    let mut buf = Vec::with_capacity(len as usize);
    let mut c = IndexConfig::new(64, 16);
    c.max_blocks_per_worker = C;
    let baseline = settled_minimum();
    let index = RunIndex::new(c).unwrap();
    gauge_matches(&index, baseline, || "empty".into())?;
    let (mut k, mut next_check) = (0u64, C as u64 / 4);
    let (mut plateau, mut highest) = (0isize, 0isize);
    while k < total {
        chain(&mut buf, k, len);
        index.store_hashes(Slot(0), None, &buf).unwrap();
        k += len;
        if index.worker_blocks(Slot(0)) > C {
            return Err(format!("after {k} blocks the worker is above the cap"));
        }
        if k >= next_check {
            next_check += C as u64 / 4;
            let heap = gauge_matches(&index, baseline, || format!("after {k} blocks"))?;
            if (16 * C as u64..24 * C as u64).contains(&k) {
                plateau = plateau.max(heap);
            } else if k >= 24 * C as u64 {
                highest = highest.max(heap);
                if heap > plateau + TOLERANCE {
                    return Err(format!(
                        "after {k} blocks ({} evicted): live heap {heap} bytes, above the \
                         level {plateau} reached by 24 C blocks",
                        index.stats().evicted_blocks
                    ));
                }
            }
        }
    }
    let s = index.stats();
    let held = index.worker_blocks(Slot(0)) as u64;
    if s.evicted_blocks != total - held || s.residencies != held {
        return Err(format!(
            "{held} held, stats {s:?} (want {} evicted)",
            total - held
        ));
    }
    println!(
        "  highest live heap {highest} bytes, plateau {plateau}; {} runs, {} positions, {} \
         held",
        s.runs, s.positions, s.blocks
    );
    Ok(())
}

/// 300 rounds of "store 8,192 blocks (64 chains of 128), clear": after each clear, with
/// no `collect_garbage`, live bytes are back at the empty index's (within [`TOLERANCE`])
/// and the gauge says so; dropping the index then gives back everything.
fn store_and_clear_cycles() -> Result<(), String> {
    let mut buf = Vec::with_capacity(128);
    let baseline = settled_minimum();
    let index = RunIndex::new(IndexConfig::new(64, 16)).unwrap();
    let empty = gauge_matches(&index, baseline, || "empty".into())?;
    let empty_gauge = index.stats().heap_bytes;
    for round in 0..300u64 {
        for c in 0..64 {
            chain(&mut buf, (round * 64 + c) * 128, 128);
            index.store_hashes(Slot(0), None, &buf).unwrap();
        }
        index.clear(Slot(0)).unwrap();
        let heap = gauge_matches(&index, baseline, || format!("round {round}"))?;
        let s = index.stats();
        if (heap - empty).abs() > TOLERANCE || s.heap_bytes != empty_gauge || s.positions != 0 {
            return Err(format!(
                "round {round}: live heap of the index {heap} bytes, the empty index's \
                 {empty} (gauge {} bytes, empty {empty_gauge}, {} positions)",
                s.heap_bytes, s.positions
            ));
        }
    }
    drop(index);
    let left = live() - baseline;
    if left.abs() > TOLERANCE {
        return Err(format!(
            "{left} bytes still live after the index was dropped"
        ));
    }
    Ok(())
}

/// 2,000 rounds of "a worker stores 1,024 blocks (8 chains of 128), is removed", over the
/// 64 slots in turn: after each removal, with no `collect_garbage`, live bytes are back at
/// the empty index's (within [`TOLERANCE`]).
fn worker_churn() -> Result<(), String> {
    let mut buf = Vec::with_capacity(128);
    let baseline = settled_minimum();
    let index = RunIndex::new(IndexConfig::new(64, 16)).unwrap();
    let empty = gauge_matches(&index, baseline, || "empty".into())?;
    for round in 0..2_000u64 {
        let slot = Slot((round % 64) as u32);
        for c in 0..8 {
            chain(&mut buf, (round * 8 + c) * 128, 128);
            index.store_hashes(slot, None, &buf).unwrap();
        }
        index.remove_worker(slot).unwrap();
        let heap = gauge_matches(&index, baseline, || format!("round {round}"))?;
        if (heap - empty).abs() > TOLERANCE {
            return Err(format!(
                "round {round}: live heap of the index {heap} bytes, the empty index's {empty}"
            ));
        }
    }
    Ok(())
}

/// A worker's reserved block map is in the gauge from the reservation on (10,000 blocks:
/// 14,336 lane slots of 12 bytes, the least size by quarters of at least 4/3 of them),
/// keeps that size while 9,000 blocks are stored and removed again, where an index given
/// the same events without the reservation ends its stores at 12,288 slots and its
/// removals at 128 (the bytes apart are exactly those slots); a `clear` keeps it (the
/// index's bytes are the empty index's plus the reserved map), and `remove_worker` frees
/// it: live bytes back at the empty index's.
fn reserved_map_is_counted_and_freed_by_remove_worker() -> Result<(), String> {
    let mut buf = Vec::with_capacity(100);
    let baseline = settled_minimum();
    let index = RunIndex::new(IndexConfig::new(64, 16)).unwrap();
    let empty = gauge_matches(&index, baseline, || "empty".into())?;
    let empty_gauge = index.stats().heap_bytes;
    index.reserve_worker(Slot(3), 10_000).unwrap();
    gauge_matches(&index, baseline, || "reserved".into())?;
    let reserved = index.stats().heap_bytes - empty_gauge;
    if reserved != 14_336 * 12 {
        return Err(format!("reserved {reserved} bytes, want {}", 14_336 * 12));
    }
    let plain = RunIndex::new(IndexConfig::new(64, 16)).unwrap();
    let apart = |want: u64, when: &str| -> Result<(), String> {
        let (a, b) = (index.stats().heap_bytes, plain.stats().heap_bytes);
        if a.checked_sub(b) != Some(want) {
            return Err(format!(
                "{when}: {a} bytes reserved, {b} not, want {want} apart"
            ));
        }
        Ok(())
    };
    for c in 0..90 {
        chain(&mut buf, c * 100, 100);
        index.store_hashes(Slot(3), None, &buf).unwrap();
        plain.store_hashes(Slot(3), None, &buf).unwrap();
    }
    apart((14_336 - 12_288) * 12, "9,000 blocks stored")?;
    for c in 0..90u64 {
        let hashes: Vec<EngineHash> = (c * 100..c * 100 + 100).map(EngineHash).collect();
        index.remove(Slot(3), &hashes).unwrap();
        plain.remove(Slot(3), &hashes).unwrap();
    }
    apart((14_336 - 128) * 12, "every block removed")?;
    drop(plain);
    index.clear(Slot(3)).unwrap();
    let heap = gauge_matches(&index, baseline, || "cleared".into())?;
    if (heap - empty - 14_336 * 12).abs() > TOLERANCE {
        return Err(format!(
            "cleared: live heap of the index {heap} bytes, want the empty index's {empty} \
             and the reserved map's {}",
            14_336 * 12
        ));
    }
    index.remove_worker(Slot(3)).unwrap();
    let heap = gauge_matches(&index, baseline, || "removed".into())?;
    if (heap - empty).abs() > TOLERANCE {
        return Err(format!(
            "removed: live heap of the index {heap} bytes, the empty index's {empty}"
        ));
    }
    Ok(())
}

/// An index dropped while the garbage of its last event waits behind a pinned reader gives
/// it all back once the reader unpins: nothing of the index stays live.
fn drop_frees_deferred_garbage() -> Result<(), String> {
    let mut buf = Vec::with_capacity(4_096);
    let baseline = settled_minimum();
    let index = RunIndex::new(IndexConfig::new(64, 16)).unwrap();
    chain(&mut buf, 0, 4_096);
    index.store_hashes(Slot(0), None, &buf).unwrap();
    {
        let _reader = crossbeam_epoch::pin();
        index.clear(Slot(0)).unwrap();
        let s = index.stats();
        if s.deferred_bytes < 4_096 * 8 {
            return Err(format!(
                "{} bytes deferred behind a pinned reader (want at least the 4,096 keys)",
                s.deferred_bytes
            ));
        }
        gauge_matches(&index, baseline, || "garbage held back by a reader".into())?;
    }
    drop(index);
    let left = live() - baseline;
    if left.abs() > TOLERANCE {
        return Err(format!(
            "{left} bytes still live after the index was dropped"
        ));
    }
    Ok(())
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
    (
        "eviction_keeps_memory_bounded_and_in_the_gauge_with_1_block_chains",
        || warmed(|| eviction(1)),
    ),
    (
        "eviction_keeps_memory_bounded_and_in_the_gauge_with_8_block_chains",
        || warmed(|| eviction(8)),
    ),
    (
        "eviction_keeps_memory_bounded_and_in_the_gauge_with_128_block_chains",
        || warmed(|| eviction(128)),
    ),
    (
        "store_and_clear_cycles_return_to_the_empty_footprint_at_once",
        || warmed(store_and_clear_cycles),
    ),
    (
        "worker_churn_returns_to_the_empty_footprint_at_once",
        || warmed(worker_churn),
    ),
    (
        "a_reserved_map_is_counted_holds_its_size_and_is_freed_by_remove_worker",
        || warmed(reserved_map_is_counted_and_freed_by_remove_worker),
    ),
    ("dropping_an_index_frees_its_deferred_garbage", || {
        warmed(drop_frees_deferred_garbage)
    }),
];

fn main() {
    run_cases(
        "run_index_memory: live-heap checks of RunIndex (counting global allocator, one \
         process per case)",
        CASES,
    );
}
