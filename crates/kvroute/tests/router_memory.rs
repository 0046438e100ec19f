//! The router's memory stays bounded while blocks, workers and engines come and go,
//! measured with a counting global allocator (live heap bytes of the whole process), one
//! child process per case (`kvroute_testkit::heap::run_cases`), no libtest harness.
//!
//! Each case builds a router, runs a few warm-up rounds (so the maps that a steady state
//! keeps, such as the registry's and the publisher's, have their steady capacity), takes
//! the live bytes as its baseline after `collect_garbage`, and then checks after every
//! round, with no `collect_garbage`, that live bytes are back at that baseline within
//! [`TOLERANCE`]:
//!
//! * store + clear: one worker stores 8,192 blocks and clears them, 300 times; the index's
//!   gauge moves with the live bytes, and dropping the router gives back everything;
//! * worker churn: add a worker, store 1,024 blocks, remove it, 2,000 times;
//! * engine churn: add a worker of a new engine, configure the engine, remove the worker,
//!   5,000 times (the engine's configuration goes with its last rank);
//! * mismatch churn: add a worker of a new engine, ingest a store with the wrong block
//!   size, remove the worker, 5,000 times (its mismatch counts go with it).
//!
//! # Tolerance
//! What may differ between two checkpoints is the epoch collector's queue of sealed bags
//! (see the index's `memory_bounds` tests): it alternates by one queue node, and the last
//! event's drain may leave one more, each `(64 * 4 + 3) * 8 = 2,072` bytes
//! (crossbeam-epoch 0.9: 64 deferred functions of 4 words, the bag's length, its epoch and
//! the queue link). Nothing else: one engine configuration or mismatch entry left per
//! round would be 5,000 entries (hundreds of KB) by the end.

use kvroute::{
    Channel, EngineConfig, EngineHash, EngineId, IngestError, Router, RouterConfig, SequenceHash,
    WorkerId,
};
use kvroute_testkit::heap::{Case, Counting, live, run_cases};
use kvroute_wire::{BlockStored, KvEvent, KvEventBatch, KvMessage};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One sealed garbage bag of crossbeam-epoch's queue (see the module docs).
const SEALED_BAG: isize = (64 * 4 + 3) * 8;
/// Allowed difference between two checkpoints' live bytes: two sealed bags.
const TOLERANCE: isize = 2 * SEALED_BAG;
const BS: usize = 16;

fn router() -> Router {
    Router::new(RouterConfig::new(64, BS)).expect("valid config")
}

/// The chained hash of block `k` of a synthetic stream (distinct for distinct `k`).
fn seq(k: u64) -> SequenceHash {
    SequenceHash(k.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
}

/// Stores `chains` chains of 128 distinct blocks, numbered from `first`, for `worker`.
fn store_chains(
    r: &Router,
    worker: WorkerId,
    first: u64,
    chains: u64,
    buf: &mut Vec<(EngineHash, SequenceHash)>,
) {
    for c in 0..chains {
        let base = first + c * 128;
        buf.clear();
        buf.extend((base..base + 128).map(|k| (EngineHash(k), seq(k))));
        r.store_hashes(worker, None, buf).expect("registered");
    }
}

/// Brings the thread's epoch collector to its steady cycle (registration, queue) with a
/// throw-away router, before any baseline.
fn warm_collector() {
    let r = router();
    let w = WorkerId::new(9_999, 0);
    r.add_worker(w).unwrap();
    let mut buf = Vec::with_capacity(128);
    store_chains(&r, w, 0, 2, &mut buf);
    r.clear_blocks(w).unwrap();
    for _ in 0..16 {
        r.index().collect_garbage();
    }
}

/// Live bytes once the collector has run what it can.
fn settled(r: &Router) -> isize {
    r.index().collect_garbage();
    live()
}

fn check(round: u64, baseline: isize, what: &str) -> Result<(), String> {
    let d = live() - baseline;
    if d.abs() > TOLERANCE {
        return Err(format!(
            "round {round}: live heap {d} bytes away from the baseline after {what} \
             (tolerance {TOLERANCE})"
        ));
    }
    Ok(())
}

fn store_and_clear_cycles() -> Result<(), String> {
    warm_collector();
    let mut buf = Vec::with_capacity(128);
    let before = live();
    let r = router();
    let w = WorkerId::new(1, 0);
    r.add_worker(w).unwrap();
    store_chains(&r, w, 0, 64, &mut buf);
    r.clear_blocks(w).unwrap();
    let baseline = settled(&r);
    let gauge = r.index_stats().heap_bytes as isize;
    for round in 1..300u64 {
        store_chains(&r, w, round * 8_192, 64, &mut buf);
        r.clear_blocks(w).unwrap();
        check(round, baseline, "a store of 8,192 blocks and a clear")?;
        let s = r.index_stats();
        if s.positions != 0 || (s.heap_bytes as isize - gauge).abs() > 0 {
            return Err(format!(
                "round {round}: index gauge {} bytes with {} positions (want {gauge} with 0)",
                s.heap_bytes, s.positions
            ));
        }
    }
    drop(r);
    let left = live() - before;
    if left.abs() > TOLERANCE {
        return Err(format!(
            "{left} bytes still live after the router was dropped"
        ));
    }
    Ok(())
}

fn worker_churn() -> Result<(), String> {
    warm_collector();
    let mut buf = Vec::with_capacity(128);
    let r = router();
    let cycle = |round: u64, buf: &mut Vec<(EngineHash, SequenceHash)>| {
        let w = WorkerId::new(100 + round, 0);
        r.add_worker(w).unwrap();
        store_chains(&r, w, round * 1_024, 8, buf);
        r.remove_worker(w).unwrap();
    };
    for round in 0..8 {
        cycle(round, &mut buf);
    }
    let baseline = settled(&r);
    for round in 8..2_000u64 {
        cycle(round, &mut buf);
        check(
            round,
            baseline,
            "adding a worker, storing 1,024 blocks, removing it",
        )?;
    }
    Ok(())
}

fn engine_churn() -> Result<(), String> {
    warm_collector();
    let r = router();
    let cfg = EngineConfig::new()
        .with_max_running_per_rank(8)
        .with_dp_size(1);
    let cycle = |round: u64| {
        let w = WorkerId::new(100 + round, 0);
        r.add_worker(w).unwrap();
        r.configure_engine(EngineId(100 + round), cfg).unwrap();
        r.remove_worker(w).unwrap();
    };
    for round in 0..8 {
        cycle(round);
    }
    let baseline = settled(&r);
    for round in 8..5_000u64 {
        cycle(round);
        check(
            round,
            baseline,
            "adding a worker, configuring its engine, removing it",
        )?;
    }
    Ok(())
}

fn mismatch_churn() -> Result<(), String> {
    warm_collector();
    let r = router();
    // 8 blocks of 8 tokens: the router's blocks are 16.
    let wrong = KvMessage::Batch {
        seq: 0,
        batch: KvEventBatch {
            ts: 0.0,
            events: vec![KvEvent::BlockStored(BlockStored::device(
                (0..8).map(EngineHash).collect(),
                None,
                (0..64).collect(),
                8,
            ))],
            dp_rank: Some(0),
        },
    };
    let cycle = |round: u64| -> Result<(), String> {
        let w = WorkerId::new(100 + round, 0);
        r.add_worker(w).unwrap();
        match r.ingest(w, Channel::Live, &wrong) {
            Err(IngestError::Rejected(_)) => {}
            other => return Err(format!("round {round}: a mismatch gave {other:?}")),
        }
        r.remove_worker(w).unwrap();
        Ok(())
    };
    for round in 0..8 {
        cycle(round)?;
    }
    let baseline = settled(&r);
    for round in 8..5_000u64 {
        cycle(round)?;
        check(
            round,
            baseline,
            "a mismatched store of a worker that was then removed",
        )?;
    }
    let s = r.ingest_stats();
    if !s.block_size_mismatches.is_empty() || s.rejected_events != 5_000 {
        return Err(format!(
            "{} mismatch entries for removed workers (want 0), {} rejected events (want 5,000)",
            s.block_size_mismatches.len(),
            s.rejected_events
        ));
    }
    Ok(())
}

const CASES: &[Case] = &[
    (
        "store_and_clear_cycles_leave_nothing_behind",
        store_and_clear_cycles,
    ),
    ("worker_churn_leaves_nothing_behind", worker_churn),
    (
        "engines_of_removed_workers_leave_no_configuration",
        engine_churn,
    ),
    (
        "removed_workers_leave_no_block_size_mismatch_entries",
        mismatch_churn,
    ),
];

fn main() {
    run_cases(
        "router_memory: live-heap checks (counting global allocator, one process per case)",
        CASES,
    );
}
