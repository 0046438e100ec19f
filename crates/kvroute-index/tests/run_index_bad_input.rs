//! `RunIndex` fed stores that break the chain property (blocks that are not consecutive
//! blocks of one chain, or a continuation stored without its parent), as a buggy producer
//! of `store_hashes` could send: the index must stay memory-safe and consistent, and a
//! match may under-state what a worker holds but never over-state it.
//!
//! For random interleavings of such stores (random blocks of a 30-hash universe of
//! chained hashes, in random order, with no parent or an indexed one), proper chain stores,
//! removes and clears on workers at slots {0, 63, 64} of 65, after every operation:
//! * the writer's invariants hold (`check_invariants`);
//! * every slot's overlap for every query is at most the reference model's (per worker,
//!   engine hash -> chained hash: the longest prefix all of whose blocks it holds);
//! * the residency gauge is at least the model's (no held block is lost) and at most the
//!   engine hashes indexed (a block stored both as a chain and out of one may sit at two
//!   positions);
//!
//! and once every worker clears, the index holds no run, position or residency. The
//! AddressSanitizer job (`scripts/asan.sh`) runs it too.
//!
//! Cases: `PROPTEST_CASES` (default 256).

mod index_common;

use index_common::{Model, all_paths, cases};
use kvroute_core::{EngineHash, HashNamespace, SequenceHash, Slot};
use kvroute_index::BlockHasher;
use kvroute_index::index::{IndexConfig, IndexError};
use kvroute_index::runs::RunIndex;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

#[derive(Clone, Debug)]
enum Op {
    /// `store_hashes` of universe blocks in the given order, after the n-th mapping of
    /// the worker (when `parent` is set and it has one) or with no parent.
    Scatter {
        w: usize,
        parent: Option<usize>,
        blocks: Vec<(u8, usize)>,
    },
    /// A proper chain from the root: the universe path's blocks in order.
    Chain {
        w: usize,
        path: usize,
        eh: u8,
    },
    Remove {
        w: usize,
        ehs: Vec<u8>,
    },
    Clear {
        w: usize,
    },
}

fn ops(universe: usize) -> impl Strategy<Value = Vec<Op>> {
    let w = 0..3usize;
    let op = prop_oneof![
        4 => (w.clone(), prop::option::of(any::<usize>()), prop::collection::vec((0..12u8, 0..universe), 1..6))
            .prop_map(|(w, parent, blocks)| Op::Scatter { w, parent, blocks }),
        2 => (w.clone(), 0..universe, 0..12u8).prop_map(|(w, path, eh)| Op::Chain { w, path, eh }),
        3 => (w.clone(), prop::collection::vec(0..14u8, 1..5)).prop_map(|(w, ehs)| Op::Remove { w, ehs }),
        1 => w.prop_map(|w| Op::Clear { w }),
    ];
    prop::collection::vec(op, 1..50)
}

#[test]
fn stores_that_break_the_chain_property_never_over_state_a_match() {
    let hasher = BlockHasher::new(2, HashNamespace::DEFAULT);
    let paths = all_paths(2, 4);
    let universe: Vec<Vec<SequenceHash>> = paths
        .iter()
        .map(|p| index_common::path_hashes(&hasher, p))
        .collect();
    let queries: Vec<Vec<SequenceHash>> = all_paths(2, 5)
        .iter()
        .filter(|p| p.len() == 5)
        .map(|p| index_common::path_hashes(&hasher, p))
        .collect();
    let slots = [Slot(0), Slot(63), Slot(64)];
    let mut runner = TestRunner::new(Config {
        cases: cases(256),
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&ops(universe.len()), |ops| {
            let mut config = IndexConfig::new(65, 2);
            config.expected_blocks = 16;
            let index = RunIndex::new(config).expect("valid config");
            let mut model = Model::new(65, 2, usize::MAX);
            let mut out = index.new_overlaps();
            for (i, op) in ops.iter().enumerate() {
                let fail = |e: String| TestCaseError::fail(format!("op {i} {op:?}: {e}"));
                match op {
                    Op::Scatter { w, parent, blocks } => {
                        let slot = slots[*w];
                        let parent = parent.and_then(|pick| {
                            let m = model.workers.get(&slot.0)?;
                            (!m.entries.is_empty())
                                .then(|| *m.entries.keys().nth(pick % m.entries.len()).unwrap())
                        });
                        let pairs: Vec<(EngineHash, SequenceHash)> = blocks
                            .iter()
                            .map(|&(e, u)| (EngineHash(u64::from(e)), *universe[u].last().unwrap()))
                            .collect();
                        let got = index.store_hashes(slot, parent.map(EngineHash), &pairs);
                        let want = model.store_hashes(slot, &pairs);
                        prop_assert_eq!(
                            got.map_err(|e| e.to_string()),
                            want.map_err(|e| e.to_string())
                        );
                    }
                    Op::Chain { w, path, eh } => {
                        let slot = slots[*w];
                        let pairs: Vec<(EngineHash, SequenceHash)> = universe[*path]
                            .iter()
                            .enumerate()
                            .map(|(j, &h)| (EngineHash(u64::from(*eh) + 16 * j as u64), h))
                            .collect();
                        let got = index.store_hashes(slot, None, &pairs);
                        let want = model.store_hashes(slot, &pairs);
                        prop_assert_eq!(
                            got.map_err(|e| e.to_string()),
                            want.map_err(|e| e.to_string())
                        );
                    }
                    Op::Remove { w, ehs } => {
                        let slot = slots[*w];
                        let hashes: Vec<EngineHash> =
                            ehs.iter().map(|&e| EngineHash(u64::from(e))).collect();
                        prop_assert_eq!(index.remove(slot, &hashes), model.remove(slot, &hashes));
                    }
                    Op::Clear { w } => {
                        let slot = slots[*w];
                        prop_assert_eq!(index.clear(slot), model.clear(slot));
                    }
                }
                index.check_invariants().map_err(fail)?;
                for q in &queries {
                    index.match_prefix(q, &mut out);
                    let want = model.overlaps(q);
                    for (s, (&got, &cap)) in out.to_vec().iter().zip(&want).enumerate() {
                        if got > cap {
                            return Err(fail(format!(
                                "slot {s}: overlap {got} over the model's {cap}"
                            )));
                        }
                    }
                }
                // A block stored at two positions (once as a chain, once out of one) is
                // counted at each: at least once per block held, at most once per engine
                // hash.
                let st = index.stats();
                let hashes: usize = slots.iter().map(|&s| index.worker_blocks(s)).sum();
                prop_assert!(
                    model.residencies() <= st.residencies && st.residencies <= hashes as u64,
                    "op {}: residencies {} outside [{}, {}]",
                    i,
                    st.residencies,
                    model.residencies(),
                    hashes
                );
            }
            for &s in &slots {
                index.clear(s).expect("slot");
            }
            index.collect_garbage();
            let st = index.stats();
            prop_assert_eq!((st.runs, st.positions, st.residencies), (0, 0, 0));
            Ok(())
        })
        .unwrap();
}

/// A split whose tail would start with the key of another run: worker 0 stores a 20-block
/// chain; worker 1 stores its block 10 alone, with no parent (a continuation without its
/// parent: it becomes a run of its own); workers 2 to 10 then hold the chain's first 10 to
/// 18 blocks, nine partial holders, so the run splits at 10 and its tail would start with
/// the same key as worker 1's run. The tail stays out of the head table (counted in
/// `duplicate_heads`); nothing is over-stated, the writer stays consistent, and clearing
/// everyone leaves nothing.
#[test]
fn a_split_onto_a_taken_first_key_leaves_the_tail_unlinked() {
    let hasher = BlockHasher::new(2, HashNamespace::DEFAULT);
    let chain = index_common::path_hashes(&hasher, &[1; 20]);
    let mut config = IndexConfig::new(16, 2);
    config.expected_blocks = 16;
    let index = RunIndex::new(config).expect("valid config");
    let mut model = Model::new(16, 2, usize::MAX);
    let mut store = |w: u32, blocks: &[(EngineHash, SequenceHash)]| {
        let got = index.store_hashes(Slot(w), None, blocks).expect("slot");
        let want = model.store_hashes(Slot(w), blocks).expect("slot");
        assert_eq!(got, want);
    };
    let pairs = |w: u64, n: usize| -> Vec<(EngineHash, SequenceHash)> {
        (0..n)
            .map(|i| (EngineHash(w << 32 | i as u64), chain[i]))
            .collect()
    };
    store(0, &pairs(0, 20));
    store(1, &[(EngineHash(1 << 32), chain[10])]);
    for w in 2..=10u64 {
        store(w as u32, &pairs(w, 8 + w as usize));
    }
    let st = index.stats();
    assert!(st.splits >= 1, "nine partial holders split the run");
    assert_eq!(st.duplicate_heads, 1, "the tail found its first key taken");
    index.check_invariants().expect("writer consistent");
    let mut out = index.new_overlaps();
    index.match_prefix(&chain, &mut out);
    let want = model.overlaps(&chain);
    for (s, (&got, &cap)) in out.to_vec().iter().zip(&want).enumerate() {
        assert!(got <= cap, "slot {s}: {got} over the model's {cap}");
    }
    // The head part is still found: every holder of the chain's first 10 blocks.
    for w in [0usize, 2, 5, 10] {
        assert!(out.to_vec()[w] >= 10, "worker {w} at {}", out.to_vec()[w]);
    }
    for w in 0..16 {
        index.clear(Slot(w)).expect("slot");
    }
    index.collect_garbage();
    let st = index.stats();
    assert_eq!((st.runs, st.positions, st.residencies), (0, 0, 0));
}

/// A reservation for a slot past the index's worker slots is refused with a typed error
/// and counted, and changes nothing; one in range is taken.
#[test]
fn a_reservation_outside_the_worker_slots_is_refused_and_counted() {
    let index = RunIndex::new(IndexConfig::new(8, 16)).unwrap();
    let before = index.stats();
    assert_eq!(
        index.reserve_worker(Slot(8), 1_000),
        Err(IndexError::SlotOutOfRange {
            slot: Slot(8),
            worker_slots: 8
        })
    );
    let after = index.stats();
    assert_eq!(after.slot_out_of_range, before.slot_out_of_range + 1);
    assert_eq!(after.heap_bytes, before.heap_bytes);
    assert_eq!(index.reserve_worker(Slot(7), 1_000), Ok(()));
    // 1,000 blocks: the least size by quarters of at least 1,334 slots is 1,536.
    assert_eq!(index.stats().heap_bytes, before.heap_bytes + 1_536 * 12);
    // Any count reserves at most for the per-worker cap (here 1,000): no overflow, no
    // allocation beyond what the worker can hold.
    let mut config = IndexConfig::new(8, 16);
    config.max_blocks_per_worker = 1_000;
    let capped = RunIndex::new(config).unwrap();
    let empty = capped.stats().heap_bytes;
    assert_eq!(capped.reserve_worker(Slot(0), usize::MAX), Ok(()));
    assert_eq!(capped.stats().heap_bytes, empty + 1_536 * 12);
}

/// A store that makes room to append to a run and then appends nothing: worker 0 holds
/// one block `K` (engine hash 1), then stores `[(2, K), (1, K)]` with no parent. Block 0
/// maps engine hash 2 onto the run's only position; the writer makes room to append the
/// rest at the run's end (a new key buffer), but the next engine hash is mapped already
/// (a copy of block 0), so nothing is appended. The run's published view must move to the
/// new buffer before the old one is freed: the writer's invariants hold (every view points
/// into its run's live buffer), the match still finds the block after the old buffer's
/// grace period (under AddressSanitizer, `scripts/asan.sh`, a read of the freed buffer
/// aborts), and the worker holds one block under two engine hashes.
#[test]
fn a_store_that_reserves_and_appends_nothing_keeps_the_view_on_the_live_buffer() {
    let hasher = BlockHasher::new(2, HashNamespace::DEFAULT);
    let chain = index_common::path_hashes(&hasher, &[1, 1]);
    let mut config = IndexConfig::new(4, 2);
    config.expected_blocks = 16;
    let index = RunIndex::new(config).expect("valid config");
    let w = Slot(0);
    index
        .store_hashes(w, None, &[(EngineHash(1), chain[0])])
        .expect("slot");
    index
        .store_hashes(
            w,
            None,
            &[(EngineHash(2), chain[0]), (EngineHash(1), chain[0])],
        )
        .expect("slot");
    index
        .check_invariants()
        .expect("every view on its run's live buffer");
    index.collect_garbage();
    let mut out = index.new_overlaps();
    index.match_prefix(&chain, &mut out);
    assert_eq!(out.to_vec(), &[1, 0, 0, 0]);
    assert_eq!(index.worker_blocks(w), 2, "engine hashes 1 and 2");
    assert_eq!(index.stats().residencies, 1, "one position held");
}

/// A chained key of 0 and the key the head table files it under (`0x9e37_79b9_7f4a_7c15`)
/// are different blocks: worker 0 stores a run starting with 0, worker 1 one starting with
/// the other key, then continues it with key 77. Worker 1 must not be credited with block
/// 0 (its run is left out of the head table instead, a duplicate head, so its own chain
/// is under-stated, never over-stated), and worker 0 keeps its block.
#[test]
fn a_first_key_of_zero_and_the_tables_stand_in_for_it_are_different_runs() {
    const STAND_IN: u64 = 0x9e37_79b9_7f4a_7c15;
    let index = RunIndex::new(IndexConfig::new(2, 2)).expect("valid config");
    let mut out = index.new_overlaps();
    index
        .store_hashes(Slot(0), None, &[(EngineHash(1), SequenceHash(0))])
        .expect("slot");
    index
        .store_hashes(Slot(1), None, &[(EngineHash(2), SequenceHash(STAND_IN))])
        .expect("slot");
    index.match_prefix(&[SequenceHash(0)], &mut out);
    assert_eq!(out.to_vec(), &[1, 0], "only worker 0 holds block 0");
    index
        .store_hashes(
            Slot(1),
            Some(EngineHash(2)),
            &[(EngineHash(3), SequenceHash(77))],
        )
        .expect("slot");
    index.match_prefix(&[SequenceHash(0), SequenceHash(77)], &mut out);
    assert_eq!(
        out.to_vec(),
        &[1, 0],
        "worker 1's chain does not start with 0"
    );
    index.match_prefix(&[SequenceHash(STAND_IN), SequenceHash(77)], &mut out);
    assert_eq!(
        out.to_vec(),
        &[0, 0],
        "worker 1's run is left out: under-stated"
    );
    assert_eq!(index.stats().duplicate_heads, 1);
    index.check_invariants().expect("writer consistent");
    assert_eq!(index.worker_blocks(Slot(1)), 2);
}

/// A run left out of the head table is counted once in `duplicate_heads`, however often
/// its appends publish it again; its positions are counted in `positions`. Worker 0 holds
/// the chain `100..110` (one run of 10); worker 1 holds its block 100, then stores, with no
/// parent, `[(10, 555), (1, 100), (11, 555)]`: key 555 becomes a root run and a run after
/// block 100 in the same event, so one of the two is left out. Worker 1 then appends five
/// blocks after engine hash 10's block: by hand, the linked runs hold 10 + 1 positions and
/// the left-out run 1 + 5 when engine hash 10's run is the one left out, or 10 + 6 and
/// 1 when it is the linked one: 17 either way.
#[test]
fn a_run_left_out_of_the_head_table_is_counted_once() {
    let index = RunIndex::new(IndexConfig::new(2, 2)).expect("valid config");
    let chain: Vec<(EngineHash, SequenceHash)> = (0..10u64)
        .map(|i| (EngineHash(1_000 + i), SequenceHash(100 + i)))
        .collect();
    index.store_hashes(Slot(0), None, &chain).expect("slot");
    index
        .store_hashes(Slot(1), None, &[(EngineHash(1), SequenceHash(100))])
        .expect("slot");
    index
        .store_hashes(
            Slot(1),
            None,
            &[
                (EngineHash(10), SequenceHash(555)),
                (EngineHash(1), SequenceHash(100)),
                (EngineHash(11), SequenceHash(555)),
            ],
        )
        .expect("slot");
    assert_eq!(index.stats().duplicate_heads, 1);
    let mut parent = EngineHash(10);
    for i in 0..5u64 {
        let eh = EngineHash(20 + i);
        index
            .store_hashes(Slot(1), Some(parent), &[(eh, SequenceHash(600 + i))])
            .expect("slot");
        parent = eh;
    }
    index.check_invariants().expect("writer consistent");
    let st = index.stats();
    assert_eq!(st.duplicate_heads, 1, "one run left out, counted once");
    assert_eq!(st.positions, 17);
}
