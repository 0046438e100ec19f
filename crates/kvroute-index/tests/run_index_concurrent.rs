//! Readers racing the writer of a [`RunIndex`]: every match a reader takes while the writer
//! stores, removes, heals, appends and splits must show each worker at an overlap one of the
//! writer's states allows (a torn view, a freed key buffer or a lost run would show another
//! value, or crash).
//!
//! One chain `C` of 48 blocks. Worker 0 toggles between holding `C[0..40)` and `C[0..20)`
//! (removing the tail one block at a time, newest first, then storing it back after its
//! parent), so its overlap is always in `[20, 40]`. Worker 1 toggles between `C[0..10)` and
//! `C[0..30)` the same way (`[10, 30]`). Workers 2 to 13 hold `C[0..d)` for twelve
//! different depths `d` (more than eight partial holders, so the run splits) and churn
//! their last block (`[d - 1, d]`). Worker 14 grows `C[0..48)` block by block past every
//! other holder and shrinks back to nothing (any overlap in `[0, 48]`, but never more than
//! the query).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use kvroute_core::{EngineHash, HashNamespace, SequenceHash, Slot};
use kvroute_index::BlockHasher;
use kvroute_index::index::IndexConfig;
use kvroute_index::runs::RunIndex;

const LEN: usize = 48;

fn eh(w: usize, i: usize) -> EngineHash {
    EngineHash(((w as u64) << 32) | i as u64)
}

/// Stores `C[from..to)` for worker `w` after its block `from - 1`.
fn store(index: &RunIndex, chain: &[SequenceHash], w: usize, from: usize, to: usize) {
    let pairs: Vec<(EngineHash, SequenceHash)> = (from..to).map(|i| (eh(w, i), chain[i])).collect();
    let parent = (from > 0).then(|| eh(w, from - 1));
    index
        .store_hashes(Slot(w as u32), parent, &pairs)
        .expect("parent indexed");
}

fn remove(index: &RunIndex, w: usize, i: usize) {
    let out = index.remove(Slot(w as u32), &[eh(w, i)]).expect("slot");
    assert_eq!(out.removed, 1, "worker {w} block {i} was held");
}

#[test]
fn readers_see_only_states_the_writer_passes_through() {
    let hasher = BlockHasher::new(2, HashNamespace::DEFAULT);
    let tokens: Vec<u32> = (0..LEN as u32 * 2).collect();
    let mut chain = Vec::new();
    hasher.sequence_hashes_into(&tokens, None, &mut chain);
    let chain = Arc::new(chain);
    let mut config = IndexConfig::new(16, 2);
    config.expected_blocks = 16;
    let index = Arc::new(RunIndex::new(config).expect("valid config"));
    let depths: Vec<usize> = (0..12).map(|i| 2 + 3 * i).collect();
    store(&index, &chain, 0, 0, 40);
    store(&index, &chain, 1, 0, 10);
    for (i, &d) in depths.iter().enumerate() {
        store(&index, &chain, 2 + i, 0, d);
    }
    let done = Arc::new(AtomicBool::new(false));
    let matches = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (index, chain, done, matches) =
                (index.clone(), chain.clone(), done.clone(), matches.clone());
            let depths = depths.clone();
            std::thread::spawn(move || {
                let mut out = index.new_overlaps();
                while !done.load(Ordering::Relaxed) {
                    index.match_prefix(&chain, &mut out);
                    let o = out.to_vec();
                    assert!((20..=40).contains(&o[0]), "worker 0 at {}", o[0]);
                    assert!((10..=30).contains(&o[1]), "worker 1 at {}", o[1]);
                    for (i, &d) in depths.iter().enumerate() {
                        let got = o[2 + i] as usize;
                        assert!(
                            got + 1 >= d && got <= d,
                            "worker {} at {got}, depth {d}",
                            2 + i
                        );
                    }
                    assert!(o[14] as usize <= LEN);
                    assert_eq!(o[15], 0);
                    assert_eq!(out.deepest(), o.iter().copied().max().unwrap());
                    matches.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    while matches.load(Ordering::Relaxed) == 0 {
        std::thread::yield_now();
    }
    // At least 300 rounds, and on until the readers have matched 2,000 times.
    let mut round = 0;
    while round < 300 || (matches.load(Ordering::Relaxed) < 2_000 && round < 100_000) {
        round += 1;
        // Worker 0: 40 -> 20 -> 40.
        for i in (20..40).rev() {
            remove(&index, 0, i);
        }
        store(&index, &chain, 0, 20, 40);
        // Worker 1: 10 -> 30 -> 10.
        store(&index, &chain, 1, 10, 30);
        for i in (10..30).rev() {
            remove(&index, 1, i);
        }
        // The partial holders churn their last block.
        for (i, &d) in depths.iter().enumerate() {
            if (round + i) % 3 == 0 {
                remove(&index, 2 + i, d - 1);
                store(&index, &chain, 2 + i, d - 1, d);
            }
        }
        // Worker 14 grows block by block, then leaves.
        if round % 10 == 0 {
            for i in 0..LEN {
                store(&index, &chain, 14, i, i + 1);
            }
            index.clear(Slot(14)).expect("slot");
        }
    }
    done.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("reader");
    }
    assert!(matches.load(Ordering::Relaxed) >= 2_000, "readers ran");
    let st = index.stats();
    assert!(st.splits > 0, "the partial holders split the run");
    index.check_invariants().expect("writer state consistent");
    // Everyone leaves: nothing stays.
    for w in 0..16 {
        index.clear(Slot(w)).expect("slot");
    }
    index.collect_garbage();
    let st = index.stats();
    assert_eq!((st.runs, st.positions, st.residencies), (0, 0, 0));
}
