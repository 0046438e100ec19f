//! Concurrent writers and lock-free readers on one prefix index (plain threads; the
//! lock-free protocols themselves are loom-checked inside `kvroute-index`).
//!
//! Two writer threads, each owning two workers (one of them in an extension-word slot),
//! store and remove overlapping chains of one small tree of chained hashes (a shared
//! 4-block prefix and 4 branches of 8 blocks), so nodes are shared, retired and re-inserted,
//! and now and then store and remove bursts of a few hundred other blocks, so the node table
//! grows and shrinks, while two reader threads run `match_prefix` without pause. What this
//! proves:
//!
//! * every writer operation returns exactly what the reference model (`index_common`) of
//!   that writer's own workers predicts, whatever the other writer does concurrently;
//! * during the run, every match sees the three *stable* workers (never written during the
//!   run, holding blocks the writers also churn) at exactly their hand-computed overlaps,
//!   never reports a slot without a worker, never exceeds the query length, and its
//!   `deepest` is the maximum of its overlaps;
//! * once quiescent, the index equals the merged model of the final state: every overlap
//!   of a set of queries, `worker_blocks`, nodes, residencies and the counters; and clearing
//!   the writers' workers leaves exactly the stable workers' nodes.
//!
//! A second test races `remove_worker` of one worker against stores of that same worker
//! (the registry's removal of a worker while its last event batches are still being
//! applied) and checks that a final, quiescent `remove_worker` leaves nothing of it.
//!
//! No timing is asserted. Ops per writer: `KVROUTE_CONCURRENT_OPS` (default 100,000 in
//! release builds, 20,000 in debug builds).

mod index_common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use index_common::tree::{BRANCHES, BS, DEPTH, PREFIX, Tree};
use index_common::{Model, Rng, check_matches, check_stats};
use kvroute_core::EngineHash;
use kvroute_core::{HashNamespace, SequenceHash, Slot};
use kvroute_index::index::{BlockStore, IndexConfig, PrefixIndex};

const SLOTS: usize = 130;
/// Stable workers and what they hold (see `stable_setup`).
const STABLE: [u32; 3] = [2, 65, 128];
const WRITER_SLOTS: [[u32; 2]; 2] = [[0, 64], [1, 129]];
/// First engine hash of the writers' bursts of unqueried blocks.
const NOISE_EH: u64 = 1 << 32;

/// The stable workers: slot 2 holds branch 0 whole; slot 65 holds branch 1 except block 7;
/// slot 128 holds branch 2 except block 0.
fn stable_setup(index: &PrefixIndex, model: &mut Model, tree: &Tree) {
    let plan: [(u32, usize, &[usize]); 3] = [
        (2, 0, &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]),
        (65, 1, &[0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11]),
        (128, 2, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]),
    ];
    for (slot, b, blocks) in plan {
        let pairs: Vec<_> = blocks
            .iter()
            .map(|&p| (Tree::eh(b, p), tree.chains[b][p]))
            .collect();
        assert_eq!(
            index.store_hashes(Slot(slot), &pairs),
            model.store_hashes(Slot(slot), &pairs)
        );
    }
}

/// The stable workers' overlap with the query of branch `q`, by hand.
fn stable_overlap(slot: u32, q: usize) -> u32 {
    match (slot, q) {
        (2, 0) => 12,
        (2, _) => 4,
        (65, 1) => 7,
        (65, _) => 4,
        _ => 0,
    }
}

fn ops_per_writer() -> usize {
    std::env::var("KVROUTE_CONCURRENT_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) {
            20_000
        } else {
            100_000
        })
}

/// One writer: random ops on its two workers, each checked against its own model.
fn writer(index: &PrefixIndex, tree: &Tree, slots: [u32; 2], seed: u64, ops: usize) -> Model {
    let mut model = Model::new(SLOTS, BS, 1 << 20);
    let mut rng = Rng::new(seed);
    for i in 0..ops {
        let slot = Slot(slots[rng.below(2) as usize]);
        let b = rng.below(BRANCHES as u64) as usize;
        let kind = rng.below(1000);
        let ctx = |what: &str| format!("writer {slots:?} op {i} ({what}) on slot {}", slot.0);
        match kind {
            // A prefix of branch b, as one store of hashes.
            0..=239 => {
                let k = 1 + rng.below(DEPTH as u64) as usize;
                let pairs: Vec<_> = (0..k)
                    .map(|p| (Tree::eh(b, p), tree.chains[b][p]))
                    .collect();
                let got = index.store_hashes(slot, &pairs);
                assert_eq!(got, model.store_hashes(slot, &pairs), "{}", ctx("prefix"));
            }
            // Blocks from..to of branch b through `store`, chained on block from - 1.
            240..=429 => {
                let from = rng.below(DEPTH as u64) as usize;
                let to = from + 1 + rng.below((DEPTH - from) as u64) as usize;
                let hashes: Vec<_> = (from..to).map(|p| Tree::eh(b, p)).collect();
                let ev = BlockStore {
                    parent: from.checked_sub(1).map(|p| Tree::eh(b, p)),
                    block_hashes: &hashes,
                    token_ids: &tree.tokens[b][from * BS..to * BS],
                    block_size: BS,
                    namespace: HashNamespace::DEFAULT,
                };
                assert_eq!(
                    index.store(slot, &ev),
                    model.store(slot, &ev),
                    "{}",
                    ctx("chained")
                );
            }
            // Random blocks anywhere in the tree (non-prefix-closed states).
            430..=529 => {
                let pairs: Vec<_> = (0..1 + rng.below(4))
                    .map(|_| {
                        let (b, p) = (rng.below(4) as usize, rng.below(DEPTH as u64) as usize);
                        (Tree::eh(b, p), tree.chains[b][p])
                    })
                    .collect();
                let got = index.store_hashes(slot, &pairs);
                assert_eq!(got, model.store_hashes(slot, &pairs), "{}", ctx("scatter"));
            }
            // Aliases and conflicts: a small range of extra engine hashes on random blocks.
            530..=579 => {
                let (b2, p) = (rng.below(4) as usize, rng.below(DEPTH as u64) as usize);
                let pairs = [(EngineHash(1000 + rng.below(6)), tree.chains[b2][p])];
                let got = index.store_hashes(slot, &pairs);
                assert_eq!(got, model.store_hashes(slot, &pairs), "{}", ctx("alias"));
            }
            // Leaf-first removal of a suffix of branch b.
            580..=769 => {
                let k = rng.below(DEPTH as u64) as usize;
                let hashes: Vec<_> = (k..DEPTH).rev().map(|p| Tree::eh(b, p)).collect();
                assert_eq!(
                    index.remove(slot, &hashes),
                    model.remove(slot, &hashes),
                    "{}",
                    ctx("suffix")
                );
            }
            // Random removals, unknown and aliased hashes included.
            770..=969 => {
                let hashes: Vec<_> = (0..1 + rng.below(5))
                    .map(|_| match rng.below(5) {
                        0 => EngineHash(1000 + rng.below(8)),
                        _ => Tree::eh(rng.below(4) as usize, rng.below(DEPTH as u64) as usize),
                    })
                    .collect();
                assert_eq!(
                    index.remove(slot, &hashes),
                    model.remove(slot, &hashes),
                    "{}",
                    ctx("remove")
                );
            }
            // A burst of blocks nobody queries, under a fixed range of engine hashes: grows
            // the node table (and later removals and clears shrink it) while readers match.
            970..=979 => {
                let n = 64 + rng.below(192);
                let pairs: Vec<_> = (0..n)
                    .map(|j| (EngineHash(NOISE_EH + j), SequenceHash(rng.next_u64() | 1)))
                    .collect();
                let got = index.store_hashes(slot, &pairs);
                assert_eq!(got, model.store_hashes(slot, &pairs), "{}", ctx("burst"));
            }
            980..=989 => {
                let hashes: Vec<_> = (0..256).map(|j| EngineHash(NOISE_EH + j)).collect();
                assert_eq!(
                    index.remove(slot, &hashes),
                    model.remove(slot, &hashes),
                    "{}",
                    ctx("unburst")
                );
            }
            _ => {
                if rng.below(10) == 0 {
                    assert_eq!(
                        index.remove_worker(slot),
                        model.remove_worker(slot),
                        "{}",
                        ctx("remove_worker")
                    );
                } else {
                    assert_eq!(index.clear(slot), model.clear(slot), "{}", ctx("clear"));
                }
            }
        }
    }
    model
}

/// One reader: matches every branch query until told to stop (at least once).
fn reader(index: &PrefixIndex, tree: &Tree, stop: &AtomicBool, matches: &AtomicU64) {
    let mut out = index.new_overlaps();
    let active: Vec<u32> = STABLE
        .iter()
        .chain(WRITER_SLOTS.iter().flatten())
        .copied()
        .collect();
    loop {
        for (q, query) in tree.chains.iter().enumerate() {
            for len in [DEPTH, PREFIX + 2] {
                index.match_prefix(&query[..len], &mut out);
                let o = out.to_vec();
                assert_eq!(o.len(), SLOTS);
                for &s in &STABLE {
                    assert_eq!(
                        o[s as usize],
                        stable_overlap(s, q).min(len as u32),
                        "stable slot {s}, branch {q}, query length {len}"
                    );
                }
                for (slot, &v) in o.iter().enumerate() {
                    assert!(v as usize <= len, "slot {slot}: overlap {v} > {len}");
                    if !active.contains(&(slot as u32)) {
                        assert_eq!(v, 0, "slot {slot} has no worker");
                    }
                }
                assert_eq!(out.deepest(), o.iter().copied().max().unwrap());
                matches.fetch_add(1, Ordering::Relaxed);
            }
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
    }
}

#[test]
fn concurrent_writers_and_readers_end_in_the_model_state() {
    // Sized for 16 blocks (64 table slots): bursts grow the table, removals shrink it.
    let index = PrefixIndex::new({
        let mut c = IndexConfig::default();
        c.worker_slots = SLOTS;
        c.block_size = BS;
        c.expected_blocks = 16;
        c.max_blocks_per_worker = 1 << 20;
        c
    })
    .unwrap();
    let tree = Tree::new();
    let mut model = Model::new(SLOTS, BS, 1 << 20);
    stable_setup(&index, &mut model, &tree);
    let stable_nodes = model.nodes();
    let ops = ops_per_writer();
    let stop = AtomicBool::new(false);
    let matches = AtomicU64::new(0);

    let writer_models = std::thread::scope(|s| {
        let readers: Vec<_> = (0..2)
            .map(|_| s.spawn(|| reader(&index, &tree, &stop, &matches)))
            .collect();
        let writers: Vec<_> = WRITER_SLOTS
            .iter()
            .enumerate()
            .map(|(i, &slots)| {
                let (index, tree) = (&index, &tree);
                s.spawn(move || writer(index, tree, slots, 0x5eed + i as u64, ops))
            })
            .collect();
        let models: Vec<Model> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        models
    });
    assert!(matches.load(Ordering::Relaxed) >= 2 * 8);
    for m in writer_models {
        model.merge(m);
    }

    // Quiescent: the index is the model.
    let mut queries: Vec<Vec<SequenceHash>> = tree.chains.clone();
    queries.extend(tree.chains.iter().map(|c| c[PREFIX..].to_vec()));
    queries.extend(tree.chains.iter().map(|c| c[..PREFIX + 3].to_vec()));
    let mut rng = Rng::new(77);
    queries.extend((0..16).map(|_| {
        (0..DEPTH)
            .map(|p| tree.chains[rng.below(4) as usize][p])
            .collect::<Vec<_>>()
    }));
    let mut all_slots: Vec<Slot> = STABLE.iter().map(|&s| Slot(s)).collect();
    all_slots.extend(WRITER_SLOTS.iter().flatten().map(|&s| Slot(s)));
    let mut out = index.new_overlaps();
    check_matches(&index, &model, &queries, &all_slots, &mut out).unwrap();
    check_stats(&index.stats(), &model).unwrap();
    // The run did reach churned states and resized the table under the readers (so the
    // readers' checks of the stable workers meant something).
    assert!(model.counters.unknown_removes > 0 && model.counters.hash_conflicts > 0);
    let resizes = index.stats().table_resizes;
    assert!(resizes >= 10, "only {resizes} table resizes");
    println!("table resizes during the run: {resizes}");

    // Clearing the writers' workers leaves exactly the stable workers' nodes.
    for &s in WRITER_SLOTS.iter().flatten() {
        assert_eq!(index.clear(Slot(s)), model.clear(Slot(s)));
    }
    index.collect_garbage();
    check_matches(&index, &model, &queries, &all_slots, &mut out).unwrap();
    check_stats(&index.stats(), &model).unwrap();
    assert_eq!(index.stats().nodes, stable_nodes);
    // Branch 0 prefix + branch 0, branch 1 except block 7, branch 2 except block 0.
    assert_eq!(stable_nodes, 4 + 8 + 7 + 8);
}

/// `remove_worker` must be one atomic step for the worker: whatever stores of the same
/// worker run concurrently with it, a later quiescent `remove_worker` leaves the worker
/// holding nothing. (Stores of one worker are serialised by the worker's mutex, so two
/// threads feeding one worker are allowed; the registry removes a worker from another
/// thread than the one applying its events.)
///
/// Fails while `PrefixIndex::remove_worker` clears under one lock of the worker's mutex and
/// resets the worker's state under a second one: a store that takes the mutex in between
/// sets bits and takes holder references that the reset then forgets, so the worker keeps
/// phantom residency (`match_prefix` reports blocks for it while `worker_blocks` is 0) that
/// no later `remove`, `clear` or `remove_worker` can drop, and that the slot's next tenant
/// inherits.
#[test]
fn remove_worker_racing_stores_of_that_worker_leaves_nothing_behind() {
    let index = PrefixIndex::new({
        let mut c = IndexConfig::default();
        c.worker_slots = 4;
        c.block_size = BS;
        c.expected_blocks = 64;
        c.max_blocks_per_worker = 1 << 20;
        c
    })
    .unwrap();
    let tree = Tree::new();
    let chain = &tree.chains[0];
    let w = Slot(1);
    let stop = AtomicBool::new(false);
    let stored = AtomicU64::new(0);
    // Overlap the two loops for a number of *operations* on both sides (not a duration):
    // at least `rounds` removals while at least `rounds` stores complete, bounded above.
    let rounds: u64 = if cfg!(debug_assertions) {
        20_000
    } else {
        100_000
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let p = i % DEPTH;
                index
                    .store_hashes(w, &[(Tree::eh(0, p), chain[p])])
                    .unwrap();
                stored.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        });
        while stored.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        let first = stored.load(Ordering::Relaxed);
        // `alternations`: removals that found stores made since the previous removal, i.e.
        // the two threads really took turns on the worker's mutex.
        let (mut removals, mut alternations) = (0u64, 0u64);
        while removals < 50 * rounds
            && (removals < rounds
                || alternations < rounds / 10
                || stored.load(Ordering::Relaxed) - first < rounds)
        {
            if index.remove_worker(w).unwrap() > 0 {
                alternations += 1;
            }
            removals += 1;
        }
        stop.store(true, Ordering::Relaxed);
    });
    index.remove_worker(w).unwrap();
    let mut out = index.new_overlaps();
    index.match_prefix(chain, &mut out);
    let s = index.stats();
    assert_eq!(
        (index.worker_blocks(w), out.get(w), s.nodes, s.residencies),
        (0, 0, 0, 0),
        "(worker_blocks, overlap, nodes, residencies) after a quiescent remove_worker"
    );
}
