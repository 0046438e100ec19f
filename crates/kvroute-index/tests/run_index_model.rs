//! Differential property test of the run-compressed index ([`RunIndex`]) against the naive
//! reference model (`index_common`: per worker, engine hash -> (chained hash, copies)).
//!
//! Every store is a chain, as engines send them: `store` with real token ids chained from
//! no parent, an indexed parent or an unknown one, and `store_hashes` of chained hashes
//! computed here, from the root or after an indexed parent. Removes (known, unknown and
//! repeated hashes), duplicate stores (copies), aliases (two engine hashes for one block),
//! conflicts (an engine hash re-stored with other content) and clears interleave with them
//! over three block contents, so that shared runs, branches at every offset, holes and
//! non-prefix-closed states are the norm. After every operation:
//!
//! * `match_prefix` of every path of up to 4 blocks, and of every stored path extended by
//!   one block, equals the model's per-slot overlap (every slot, and `deepest`);
//! * every operation's result equals the model's;
//! * `worker_blocks`, `engine_hashes` and the residency gauge equal the model's;
//!
//! with the workers at slots {0, 63, 64} of 65 (a 64-bit word boundary). A second property
//! runs long chains (up to 40 blocks per store, content 0 eleven times in twelve) so that
//! many workers hold different depths of one run and runs split (more than eight partial
//! holders: workers at slots {0, .., 11}); it fails if no case split a run.
//!
//! A third property runs the first with a per-worker cap of 6 engine hashes: after every
//! store the worker is within the cap, the store reports as many evictions as engine hashes
//! left it, and with those dropped from the model every match still equals the model's.
//!
//! Hand-built tests beside them: stretch removals in either order, and long stretches (300
//! blocks) removed in events longer than one round of the removal's unmapping loop.
//!
//! Cases: `PROPTEST_CASES` (default 512 per property).

mod index_common;

use std::collections::{BTreeMap, HashMap};

use index_common::{Model, all_paths, block_tokens, cases};
use kvroute_core::{EngineHash, HashNamespace, SequenceHash, Slot};
use kvroute_index::BlockHasher;
use kvroute_index::index::{BlockStore, IndexConfig, StoreOutcome};
use kvroute_index::runs::RunIndex;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const BLOCK_SIZE: usize = 2;

#[derive(Clone, Debug)]
enum Parent {
    None,
    Raw(u8),
    Existing(usize),
}

#[derive(Clone, Debug)]
enum Op {
    Store {
        w: usize,
        parent: Parent,
        path: Vec<u8>,
        ehs: Vec<u8>,
    },
    /// `store_hashes` after an indexed parent (`Parent::Existing`) or from the root.
    StoreHashes {
        w: usize,
        parent: Option<usize>,
        path: Vec<u8>,
        ehs: Vec<u8>,
    },
    Remove {
        w: usize,
        ehs: Vec<u8>,
    },
    RemoveExisting {
        w: usize,
        picks: Vec<usize>,
    },
    Clear {
        w: usize,
    },
}

/// Ops on `workers` workers; blocks draw their content from `0..contents`, content 0 with
/// probability 1 - 1/`skew` (so that with a large `skew` most stores share long prefixes).
fn op_strategy(
    workers: usize,
    contents: u8,
    skew: u32,
    max_len: usize,
    ehs: u8,
) -> impl Strategy<Value = Op> {
    let w = 0..workers;
    let content = move || {
        prop_oneof![
            skew.saturating_sub(1).max(1) => Just(0u8),
            1 => 0..contents,
        ]
    };
    let path = move || {
        (1..=max_len).prop_flat_map(move |n| {
            (
                prop::collection::vec(content(), n),
                prop::collection::vec(0..ehs, n),
            )
        })
    };
    prop_oneof![
        4 => (
            w.clone(),
            prop_oneof![
                1 => Just(Parent::None),
                1 => (0..ehs).prop_map(Parent::Raw),
                3 => any::<usize>().prop_map(Parent::Existing),
            ],
            path(),
        )
            .prop_map(|(w, parent, (path, ehs))| Op::Store { w, parent, path, ehs }),
        3 => (w.clone(), prop::option::weighted(0.7, any::<usize>()), path())
            .prop_map(|(w, parent, (path, ehs))| Op::StoreHashes { w, parent, path, ehs }),
        2 => (w.clone(), prop::collection::vec(0..ehs + 2, 1..5))
            .prop_map(|(w, ehs)| Op::Remove { w, ehs }),
        3 => (w.clone(), prop::collection::vec(any::<usize>(), 1..6))
            .prop_map(|(w, picks)| Op::RemoveExisting { w, picks }),
        1 => w.prop_map(|w| Op::Clear { w }),
    ]
}

struct Harness {
    /// The per-worker cap of the index, if small enough to bind.
    cap: Option<usize>,
    hasher: BlockHasher,
    slots: Vec<Slot>,
    worker_slots: usize,
    /// The path of contents of every chained hash stored so far.
    paths: HashMap<u64, Vec<u8>>,
    base_queries: Vec<Vec<SequenceHash>>,
}

impl Harness {
    fn new(worker_slots: usize, slots: Vec<u32>, contents: u8) -> Self {
        let hasher = BlockHasher::new(BLOCK_SIZE, HashNamespace::DEFAULT);
        let base_queries = all_paths(contents, 4)
            .into_iter()
            .map(|p| index_common::path_hashes(&hasher, &p))
            .collect();
        Self {
            cap: None,
            hasher,
            slots: slots.into_iter().map(Slot).collect(),
            worker_slots,
            paths: HashMap::new(),
            base_queries,
        }
    }

    fn tokens(path: &[u8]) -> Vec<u32> {
        path.iter()
            .flat_map(|&c| block_tokens(c, BLOCK_SIZE))
            .collect()
    }

    /// Records the paths of the chained hashes of `path` after `parent`'s path.
    fn note(&mut self, parent: Option<u64>, path: &[u8]) -> Vec<SequenceHash> {
        let mut prefix = parent.map(|p| self.paths[&p].clone()).unwrap_or_default();
        let mut out = Vec::new();
        self.hasher
            .sequence_hashes_into(&Self::tokens(path), parent.map(SequenceHash), &mut out);
        for (c, h) in path.iter().zip(&out) {
            prefix.push(*c);
            self.paths.entry(h.0).or_insert_with(|| prefix.clone());
        }
        out
    }

    fn existing(model: &Model, slot: Slot, pick: usize) -> Option<(u64, u64)> {
        let w = model.workers.get(&slot.0)?;
        if w.entries.is_empty() {
            return None;
        }
        let (eh, m) = w.entries.iter().nth(pick % w.entries.len())?;
        Some((*eh, m.seq))
    }

    fn apply(&mut self, index: &RunIndex, model: &mut Model, op: &Op) -> Result<(), String> {
        macro_rules! same {
            ($what:expr, $got:expr, $want:expr) => {{
                let (got, want) = ($got, $want);
                if got != want {
                    return Err(format!("{}: index {:?}, model {:?}", $what, got, want));
                }
            }};
        }
        match op {
            Op::Store {
                w,
                parent,
                path,
                ehs,
            } => {
                let slot = self.slots[*w];
                let (parent_eh, parent_seq) = match parent {
                    Parent::None => (None, None),
                    Parent::Raw(e) => (
                        Some(EngineHash(u64::from(*e))),
                        model.mapping(slot, u64::from(*e)).map(|m| m.seq),
                    ),
                    Parent::Existing(pick) => match Self::existing(model, slot, *pick) {
                        Some((eh, seq)) => (Some(EngineHash(eh)), Some(seq)),
                        None => (None, None),
                    },
                };
                if parent_eh.is_none() || parent_seq.is_some() {
                    self.note(parent_seq, path);
                }
                let tokens = Self::tokens(path);
                let hashes: Vec<EngineHash> =
                    ehs.iter().map(|&e| EngineHash(u64::from(e))).collect();
                let ev = BlockStore {
                    parent: parent_eh,
                    block_hashes: &hashes,
                    token_ids: &tokens,
                    block_size: BLOCK_SIZE,
                    namespace: HashNamespace::DEFAULT,
                };
                let got = index.store(slot, &ev);
                let want = model.store(slot, &ev);
                self.reconcile(index, model, slot, got.as_ref().map_or(0, |o| o.evicted))?;
                same!("store", got.map(|o| StoreOutcome { evicted: 0, ..o }), want);
            }
            Op::StoreHashes {
                w,
                parent,
                path,
                ehs,
            } => {
                let slot = self.slots[*w];
                let (parent_eh, parent_seq) = match parent {
                    None => (None, None),
                    Some(pick) => match Self::existing(model, slot, *pick) {
                        Some((eh, seq)) => (Some(EngineHash(eh)), Some(seq)),
                        None => (None, None),
                    },
                };
                let seqs = self.note(parent_seq, path);
                let pairs: Vec<(EngineHash, SequenceHash)> = ehs
                    .iter()
                    .map(|&e| EngineHash(u64::from(e)))
                    .zip(seqs)
                    .collect();
                let got = index.store_hashes(slot, parent_eh, &pairs);
                let want = model.store_hashes(slot, &pairs);
                self.reconcile(index, model, slot, got.as_ref().map_or(0, |o| o.evicted))?;
                same!(
                    "store_hashes",
                    got.map(|o| StoreOutcome { evicted: 0, ..o }),
                    want
                );
            }
            Op::Remove { w, ehs } => {
                let slot = self.slots[*w];
                let hashes: Vec<EngineHash> =
                    ehs.iter().map(|&e| EngineHash(u64::from(e))).collect();
                same!(
                    "remove",
                    index.remove(slot, &hashes),
                    model.remove(slot, &hashes)
                );
            }
            Op::RemoveExisting { w, picks } => {
                let slot = self.slots[*w];
                let hashes: Vec<EngineHash> = picks
                    .iter()
                    .filter_map(|&p| Self::existing(model, slot, p).map(|(eh, _)| EngineHash(eh)))
                    .collect();
                same!(
                    "remove existing",
                    index.remove(slot, &hashes),
                    model.remove(slot, &hashes)
                );
            }
            Op::Clear { w } => {
                let slot = self.slots[*w];
                same!("clear", index.clear(slot), model.clear(slot));
            }
        }
        self.check(index, model)
    }

    /// With a cap: the engine hashes the index evicted in the last store are dropped from
    /// the model too ([`Model::reconcile_evictions`]). Without one, nothing may be evicted.
    fn reconcile(
        &self,
        index: &RunIndex,
        model: &mut Model,
        slot: Slot,
        evicted: usize,
    ) -> Result<(), String> {
        match self.cap {
            Some(cap) => model.reconcile_evictions(slot, &index.engine_hashes(slot), evicted, cap),
            None if evicted == 0 => Ok(()),
            None => Err(format!("{evicted} evicted without a cap")),
        }
    }

    fn check(&self, index: &RunIndex, model: &Model) -> Result<(), String> {
        index.check_invariants()?;
        let mut out = index.new_overlaps();
        let mut baseline = index.new_overlaps();
        let mut queries: Vec<Vec<SequenceHash>> = self.base_queries.clone();
        for path in self.paths.values() {
            for c in 0..2u8 {
                let mut p = path.clone();
                p.push(c);
                queries.push(index_common::path_hashes(&self.hasher, &p));
            }
        }
        for q in &queries {
            index.match_prefix(q, &mut out);
            // The baseline copy of the walk (the dispatched one is the AVX2 copy on a CPU
            // that has it) writes the same overlaps, deepest and tail.
            index.match_prefix_baseline(q, &mut baseline);
            if baseline.to_vec() != out.to_vec()
                || baseline.deepest() != out.deepest()
                || baseline.tail() != out.tail()
                || baseline.deepest_slot() != out.deepest_slot()
            {
                return Err(format!(
                    "the baseline walk differs from the dispatched one on a {}-block query",
                    q.len()
                ));
            }
            let want = model.overlaps(q);
            if out.to_vec() != want.to_vec() {
                let first = (0..want.len()).find(|&i| out.to_vec()[i] != want[i]);
                return Err(format!(
                    "overlaps of a {}-block query differ at slot {first:?}: index {:?}, model {:?}",
                    q.len(),
                    first.map(|i| out.to_vec()[i]),
                    first.map(|i| want[i]),
                ));
            }
            let deepest = want.iter().copied().max().unwrap_or(0);
            if out.deepest() != deepest {
                return Err(format!("deepest {} vs model {deepest}", out.deepest()));
            }
            // A deepest slot, whenever anything matched, holding the model's deepest.
            match out.deepest_slot() {
                Some(s) if want.get(s.index()) == Some(&deepest) && deepest > 0 => {}
                None if deepest == 0 => {}
                other => {
                    return Err(format!(
                        "deepest slot {other:?} for deepest {deepest} (model {:?})",
                        other.map(|s| want.get(s.index()))
                    ));
                }
            }
            // The tail: sorted distinct slots, at most TAIL_SLOTS, every other slot's model
            // overlap within the bound.
            let (tail, bound) = out.tail();
            if tail.len() > kvroute_index::index::TAIL_SLOTS
                || tail.windows(2).any(|w| w[0] >= w[1])
                || tail.iter().any(|&s| s as usize >= want.len())
            {
                return Err(format!("malformed tail {tail:?}"));
            }
            if let Some(i) =
                (0..want.len()).find(|&i| want[i] > bound && !tail.contains(&(i as u32)))
            {
                return Err(format!(
                    "slot {i} holds {} blocks, past the tail's bound {bound}, and is not in the tail {tail:?}",
                    want[i]
                ));
            }
        }
        for &slot in &self.slots {
            if index.worker_blocks(slot) != model.worker_blocks(slot) {
                return Err(format!("worker_blocks of {slot:?}"));
            }
            let got: BTreeMap<u64, u32> = index
                .engine_hashes(slot)
                .into_iter()
                .map(|(e, c)| (e.0, c))
                .collect();
            let want: BTreeMap<u64, u32> = model
                .workers
                .get(&slot.0)
                .map(|w| w.entries.iter().map(|(e, m)| (*e, m.copies)).collect())
                .unwrap_or_default();
            if got != want {
                return Err(format!("engine hashes of {slot:?}: {got:?} vs {want:?}"));
            }
        }
        let stats = index.stats();
        if stats.residencies != model.residencies() {
            return Err(format!(
                "residencies {} vs model {}",
                stats.residencies,
                model.residencies()
            ));
        }
        let counts = (
            stats.unknown_parent_stores,
            stats.unknown_removes,
            stats.hash_conflicts,
        );
        let want = (
            model.counters.unknown_parent_stores,
            model.counters.unknown_removes,
            model.counters.hash_conflicts,
        );
        if counts != want {
            return Err(format!(
                "(unknown parents, unknown removes, conflicts) {counts:?} vs model {want:?}"
            ));
        }
        let _ = self.worker_slots;
        Ok(())
    }
}

/// Splits seen over every case of a property.
static SPLITS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn run_property(
    worker_slots: usize,
    slots: Vec<u32>,
    contents: u8,
    skew: u32,
    max_len: usize,
    ehs: u8,
    cap: Option<usize>,
) -> u64 {
    SPLITS.store(0, std::sync::atomic::Ordering::Relaxed);
    let mut runner = TestRunner::new(Config {
        cases: cases(512),
        failure_persistence: None,
        ..Config::default()
    });
    let ops = prop::collection::vec(
        op_strategy(slots.len(), contents, skew, max_len, ehs),
        1..60,
    );
    runner
        .run(&ops, |ops| {
            let mut config = IndexConfig::new(worker_slots, BLOCK_SIZE);
            config.expected_blocks = 16;
            if let Some(cap) = cap {
                config.max_blocks_per_worker = cap;
            }
            let index = RunIndex::new(config).expect("valid config");
            let mut model = Model::new(worker_slots, BLOCK_SIZE, usize::MAX);
            let mut h = Harness::new(worker_slots, slots.clone(), contents);
            h.cap = cap;
            for (i, op) in ops.iter().enumerate() {
                h.apply(&index, &mut model, op)
                    .map_err(|e| TestCaseError::fail(format!("op {i} {op:?}: {e}")))?;
            }
            // Clearing every worker leaves no run and no residency.
            for &s in &h.slots {
                index.clear(s).expect("slot in range");
            }
            SPLITS.fetch_add(index.stats().splits, std::sync::atomic::Ordering::Relaxed);
            index.collect_garbage();
            let st = index.stats();
            prop_assert_eq!((st.runs, st.positions, st.residencies), (0, 0, 0));
            Ok(())
        })
        .unwrap();
    SPLITS.load(std::sync::atomic::Ordering::Relaxed)
}

#[test]
fn matches_equal_the_model_across_a_word_boundary() {
    run_property(65, vec![0, 63, 64], 3, 1, 5, 12, None);
}

#[test]
fn matches_equal_the_model_when_runs_split() {
    let splits = run_property(16, (0..12).collect(), 2, 12, 40, 64, None);
    assert!(splits > 0, "the generator never split a run");
}

#[test]
fn matches_equal_the_model_under_a_per_worker_cap() {
    // A cap of 6 engine hashes per worker: stores of up to 5 blocks evict often.
    run_property(65, vec![0, 63, 64], 3, 1, 5, 12, Some(6));
}

/// Hand-worked eviction: a worker stores chain A (10 blocks), then chain B (10 blocks),
/// with a cap of 16. After B it holds 20: it evicts the 4 over the cap plus 16/16 = 1, so 5,
/// among the 10 least recently stored (all of A) the 5 deepest: A keeps its first 5
/// blocks, B all 10.
#[test]
fn the_cap_evicts_the_deepest_of_the_least_recently_stored() {
    let hasher = BlockHasher::new(BLOCK_SIZE, HashNamespace::DEFAULT);
    let mut config = IndexConfig::new(4, BLOCK_SIZE);
    config.max_blocks_per_worker = 16;
    let index = RunIndex::new(config).expect("valid config");
    let chain = |c: u8| index_common::path_hashes(&hasher, &[c; 10]);
    let (a, b) = (chain(0), chain(1));
    let pairs = |h: &[SequenceHash], base: u64| -> Vec<(EngineHash, SequenceHash)> {
        h.iter()
            .enumerate()
            .map(|(i, &s)| (EngineHash(base + i as u64), s))
            .collect()
    };
    let first = index
        .store_hashes(Slot(1), None, &pairs(&a, 100))
        .expect("slot");
    assert_eq!(first.evicted, 0);
    let second = index
        .store_hashes(Slot(1), None, &pairs(&b, 200))
        .expect("slot");
    assert_eq!(second.evicted, 5);
    assert_eq!(index.worker_blocks(Slot(1)), 15);
    let mut out = index.new_overlaps();
    index.match_prefix(&a, &mut out);
    assert_eq!(out.to_vec(), &[0, 5, 0, 0]);
    index.match_prefix(&b, &mut out);
    assert_eq!(out.to_vec(), &[0, 10, 0, 0]);
    assert_eq!(index.stats().evicted_blocks, 5);
}

/// Clears workers 1 and 2 on both sides and stores `pairs` on each again from the root.
fn store_fresh(index: &RunIndex, model: &mut Model, pairs: &[(EngineHash, SequenceHash)]) {
    for w in [Slot(1), Slot(2)] {
        index.clear(w).expect("slot");
        model.clear(w).expect("slot");
        assert_eq!(
            index.store_hashes(w, None, pairs).expect("slot"),
            model.store_hashes(w, pairs).expect("slot")
        );
    }
}

/// Removes `hashes` from worker 1 on both sides, then checks the outcome, the writer's
/// invariants, the overlaps of `chain`'s prefixes of each length in `lengths`, the
/// residencies and worker 1's blocks against the model.
fn remove_and_compare(
    index: &RunIndex,
    model: &mut Model,
    hashes: &[EngineHash],
    chain: &[SequenceHash],
    lengths: impl IntoIterator<Item = usize>,
    case: &str,
) {
    assert_eq!(
        index.remove(Slot(1), hashes),
        model.remove(Slot(1), hashes),
        "{case}"
    );
    index.check_invariants().expect("writer consistent");
    let mut out = index.new_overlaps();
    for n in lengths {
        index.match_prefix(&chain[..n], &mut out);
        assert_eq!(
            out.to_vec(),
            model.overlaps(&chain[..n]).to_vec(),
            "{case}, prefix {n}"
        );
    }
    assert_eq!(index.stats().residencies, model.residencies(), "{case}");
    assert_eq!(
        index.worker_blocks(Slot(1)),
        model.worker_blocks(Slot(1)),
        "{case}"
    );
}

/// Removals of stretches in one event (ascending, descending, and mixed with gaps and
/// repeats) leave exactly the blocks the model keeps.
#[test]
fn stretch_removals_in_either_order_match_the_model() {
    let hasher = BlockHasher::new(BLOCK_SIZE, HashNamespace::DEFAULT);
    let chain = index_common::path_hashes(&hasher, &[2; 20]);
    let index = RunIndex::new(IndexConfig::new(4, BLOCK_SIZE)).expect("valid config");
    let mut model = Model::new(4, BLOCK_SIZE, usize::MAX);
    let pairs: Vec<(EngineHash, SequenceHash)> = chain
        .iter()
        .enumerate()
        .map(|(i, &s)| (EngineHash(100 + i as u64), s))
        .collect();
    let removals: [&[u64]; 4] = [
        &[5, 6, 7, 8, 9, 10, 11, 12, 13, 14],
        &[14, 13, 12, 11, 10, 9, 8, 7, 6, 5],
        &[3, 4, 10, 9, 8, 17, 16, 99, 3],
        &[0, 1, 2, 19, 18],
    ];
    for r in removals {
        store_fresh(&index, &mut model, &pairs);
        let hashes: Vec<EngineHash> = r.iter().map(|&i| EngineHash(100 + i)).collect();
        remove_and_compare(
            &index,
            &mut model,
            &hashes,
            &chain,
            1..=20,
            &format!("{r:?}"),
        );
    }
}

/// Long stretches (300 blocks, stored as one event) removed in events of up to 300
/// hashes, more than one round of the removal's unmapping loop (64 hashes) and its
/// prefetch distance: ascending, descending, a pseudo-random order with repeats and
/// unknown hashes, and a middle part; on a worker with neither copies nor aliases (the
/// plain loop) and on one holding a copy of one block (the general loop). Each leaves
/// exactly the blocks the model keeps.
#[test]
fn long_stretch_removals_across_rounds_match_the_model() {
    const LEN: usize = 300;
    let hasher = BlockHasher::new(BLOCK_SIZE, HashNamespace::DEFAULT);
    let contents: Vec<u8> = (0..LEN).map(|i| (i % 3) as u8).collect();
    let chain = index_common::path_hashes(&hasher, &contents);
    let pairs: Vec<(EngineHash, SequenceHash)> = chain
        .iter()
        .enumerate()
        .map(|(i, &s)| (EngineHash(1_000 + i as u64), s))
        .collect();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let shuffled: Vec<u64> = (0..LEN + 40)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Mostly known hashes (some twice), now and then an unknown one.
            x % (LEN as u64 + 20)
        })
        .collect();
    let removals: [Vec<u64>; 4] = [
        (0..LEN as u64).collect(),
        (0..LEN as u64).rev().collect(),
        shuffled,
        (64..200).collect(),
    ];
    let index = RunIndex::new(IndexConfig::new(4, BLOCK_SIZE)).expect("valid config");
    let mut model = Model::new(4, BLOCK_SIZE, usize::MAX);
    for r in &removals {
        for with_copy in [false, true] {
            store_fresh(&index, &mut model, &pairs);
            if with_copy {
                // A second copy of block 70 sends worker 1's removals down the general loop.
                let again = &pairs[..71];
                assert_eq!(
                    index.store_hashes(Slot(1), None, again).expect("slot"),
                    model.store_hashes(Slot(1), again).expect("slot")
                );
            }
            let hashes: Vec<EngineHash> = r.iter().map(|&i| EngineHash(1_000 + i)).collect();
            let lengths = [1, 63, 64, 65, 128, 199, 200, 201, LEN];
            remove_and_compare(
                &index,
                &mut model,
                &hashes,
                &chain,
                lengths,
                &format!("copy {with_copy}"),
            );
        }
    }
}

/// Hand-worked tail: 100 workers hold a 32-block prefix; 20 of them (slots 0, 5, ..., 95)
/// continue it to 64 blocks, and 2 of those (slots 10 and 70) to 128. The walk has 100
/// alive after the prefix, 20 after 64 blocks (more than `TAIL_SLOTS`), 2 after 128: the
/// tail is slots 10 and 70, and every other worker holds at most 64 blocks.
#[test]
fn the_tail_lists_the_few_deepest_workers_and_bounds_the_rest() {
    let hasher = BlockHasher::new(BLOCK_SIZE, HashNamespace::DEFAULT);
    let index = RunIndex::new(IndexConfig::new(100, BLOCK_SIZE)).expect("valid config");
    let chain = index_common::path_hashes(&hasher, &[3; 128]);
    let pairs = |w: u32, from: usize, to: usize| -> Vec<(EngineHash, SequenceHash)> {
        (from..to)
            .map(|i| (EngineHash(u64::from(w) << 32 | i as u64), chain[i]))
            .collect()
    };
    for w in 0..100u32 {
        let to = match w {
            10 | 70 => 128,
            w if w % 5 == 0 => 64,
            _ => 32,
        };
        index
            .store_hashes(Slot(w), None, &pairs(w, 0, to))
            .expect("slot");
    }
    let mut out = index.new_overlaps();
    index.match_prefix(&chain, &mut out);
    assert_eq!(out.deepest(), 128);
    assert_eq!(out.tail(), (&[10u32, 70][..], 64));
    // 20 deep workers and no narrower stretch: no tail, the bound is the deepest.
    index.match_prefix(&chain[..64], &mut out);
    assert_eq!(out.tail(), (&[][..], 64));
    // A query only the prefix matches: nobody drops below 100 alive, no tail.
    index.match_prefix(&chain[..32], &mut out);
    assert_eq!(out.tail(), (&[][..], 32));
}
