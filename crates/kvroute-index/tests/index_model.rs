//! Differential property tests of the prefix index against a naive reference model
//! (`index_common`: per worker, engine hash -> (sequence hash, copies)).
//!
//! What this proves, for random interleavings of `store_hashes`, `store` (real token ids
//! chained from a parent through `BlockHasher`), `remove` (known, unknown and repeated
//! hashes), duplicate stores (copies), aliases (two engine hashes for one block), conflicts
//! (an engine hash re-stored with other content), `clear`, `remove_worker`, rejected events
//! and out-of-range slots, over a universe of 30 chained hashes so that shared nodes and
//! non-prefix-closed states are the norm:
//!
//! * after every operation, `match_prefix` of 35 queries equals the model's per-slot overlap
//!   (the whole dense array, every slot, and `deepest`);
//! * every operation's result (`StoreOutcome`, `RemoveOutcome`, cleared counts, errors)
//!   equals the model's;
//! * `stats()` (nodes, residencies and every counter) and `worker_blocks` equal the model's;
//! * which engine hashes a worker has indexed equals the model (probed with empty stores
//!   that name each hash as parent: they succeed exactly for indexed hashes);
//!
//! in an index whose node table starts at its smallest size, so that it grows and shrinks
//! during the runs, with the active workers at slots that cross 64-bit word boundaries:
//! {0,1,2} of 3 slots, {0,63,64} of 65, {1,64,256} of 257. A second property adds a small per-worker cap and
//! checks that the cap holds and that the evicted entries are exactly the least recently
//! stored ones (the model evicts by store stamp).
//!
//! Cases: `PROPTEST_CASES` (default 1,024 per property in release builds, 128 in debug
//! builds). With `--nocapture`, each property prints how often it reached each kind of
//! state; a generator that stops reaching one fails the property.

mod index_common;

use std::cell::RefCell;
use std::collections::HashMap;

use index_common::{Model, all_paths, block_tokens, cases, check_matches, check_stats};
use kvroute_core::EngineHash;
use kvroute_core::{HashNamespace, SequenceHash, Slot};
use kvroute_index::BlockHasher;
use kvroute_index::index::{BlockStore, IndexConfig, PrefixIndex};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const BLOCK_SIZE: usize = 2;
/// Engine hashes stores draw from: tiny, so aliases and conflicts are frequent.
const STORE_EHS: u8 = 10;
/// Engine hashes removes draw from: two of them are never stored.
const REMOVE_EHS: u8 = 12;
/// Universe of store_hashes: every path of choices {0,1} of length 1..=4 (30 hashes).
const UNIVERSE_DEPTH: usize = 4;

#[derive(Clone, Debug)]
enum Parent {
    None,
    /// An engine hash from the store range, known to the worker or not.
    Raw(u8),
    /// The n-th (mod len) engine hash the worker has indexed, when it has any.
    Existing(usize),
}

#[derive(Clone, Debug)]
enum Op {
    /// (engine hash, universe index) pairs.
    StoreHashes {
        w: usize,
        blocks: Vec<(u8, usize)>,
    },
    /// A `BlockStore` of the blocks `path` chained from `parent`, engine hashes `ehs`.
    Store {
        w: usize,
        parent: Parent,
        path: Vec<u8>,
        ehs: Vec<u8>,
    },
    Remove {
        w: usize,
        ehs: Vec<u8>,
    },
    /// Removes the n-th (mod len) engine hashes the worker has indexed (repeats allowed).
    RemoveExisting {
        w: usize,
        picks: Vec<usize>,
    },
    /// Removes one copy of an engine hash stored more than once, when there is one.
    RemoveCopy {
        w: usize,
        pick: usize,
    },
    /// Re-stores an existing mapping (engine hash and content): one more copy. Through
    /// `store` (same parent, same tokens, as vLLM does) when the parent resolves.
    Dup {
        w: usize,
        pick: usize,
    },
    /// Stores the content of an existing mapping under engine hash `eh`: an alias (or a
    /// copy, or a conflict, depending on what `eh` maps to).
    Alias {
        w: usize,
        pick: usize,
        eh: u8,
    },
    Clear {
        w: usize,
    },
    RemoveWorker {
        w: usize,
    },
    BadBlockSize {
        w: usize,
    },
    BadTokenCount {
        w: usize,
    },
    /// An operation on a slot outside the index (kind selects which).
    OutOfRange {
        kind: u8,
    },
}

fn op_strategy(workers: usize, universe: usize) -> impl Strategy<Value = Op> {
    let w = 0..workers;
    let eh = 0..STORE_EHS;
    prop_oneof![
        4 => (w.clone(), prop::collection::vec((eh.clone(), 0..universe), 1..5))
            .prop_map(|(w, blocks)| Op::StoreHashes { w, blocks }),
        3 => (
            w.clone(),
            prop_oneof![
                1 => Just(Parent::None),
                1 => eh.clone().prop_map(Parent::Raw),
                2 => any::<usize>().prop_map(Parent::Existing),
            ],
            prop::collection::vec((0..2u8, eh.clone()), 0..4),
        )
            .prop_map(|(w, parent, blocks)| {
                let (path, ehs) = blocks.into_iter().unzip();
                Op::Store { w, parent, path, ehs }
            }),
        2 => (w.clone(), prop::collection::vec(0..REMOVE_EHS, 1..5))
            .prop_map(|(w, ehs)| Op::Remove { w, ehs }),
        2 => (w.clone(), prop::collection::vec(any::<usize>(), 1..4))
            .prop_map(|(w, picks)| Op::RemoveExisting { w, picks }),
        2 => (w.clone(), any::<usize>()).prop_map(|(w, pick)| Op::RemoveCopy { w, pick }),
        2 => (w.clone(), any::<usize>()).prop_map(|(w, pick)| Op::Dup { w, pick }),
        2 => (w.clone(), any::<usize>(), eh).prop_map(|(w, pick, eh)| Op::Alias { w, pick, eh }),
        1 => w.clone().prop_map(|w| Op::Clear { w }),
        1 => w.clone().prop_map(|w| Op::RemoveWorker { w }),
        1 => w.clone().prop_map(|w| Op::BadBlockSize { w }),
        1 => w.clone().prop_map(|w| Op::BadTokenCount { w }),
        1 => (0..5u8).prop_map(|kind| Op::OutOfRange { kind }),
    ]
}

/// Everything one run needs besides the index and the model.
struct Harness {
    hasher: BlockHasher,
    slots: Vec<Slot>,
    worker_slots: usize,
    /// store_hashes universe: chained hash of every path up to `UNIVERSE_DEPTH`.
    universe: Vec<SequenceHash>,
    /// Path of choices of every chained hash the run can produce (for duplicate `store`s).
    paths: HashMap<u64, Vec<u8>>,
    queries: Vec<Vec<SequenceHash>>,
}

impl Harness {
    fn new(worker_slots: usize, slots: &[u32], deep_queries: &[Vec<u8>]) -> Self {
        let hasher = BlockHasher::new(BLOCK_SIZE, HashNamespace::DEFAULT);
        let mut paths = HashMap::new();
        let mut universe = Vec::new();
        for p in all_paths(2, UNIVERSE_DEPTH) {
            let h = *index_common::path_hashes(&hasher, &p).last().unwrap();
            paths.insert(h.0, p);
            universe.push(h);
        }
        // Every full path of depth 5 covers every universe node and one level below it;
        // deeper random paths catch blocks chained by `store` further down.
        let mut queries: Vec<Vec<SequenceHash>> = all_paths(2, UNIVERSE_DEPTH + 1)
            .into_iter()
            .filter(|p| p.len() == UNIVERSE_DEPTH + 1)
            .map(|p| index_common::path_hashes(&hasher, &p))
            .collect();
        queries.extend(
            deep_queries
                .iter()
                .map(|p| index_common::path_hashes(&hasher, p)),
        );
        Self {
            hasher,
            slots: slots.iter().map(|&s| Slot(s)).collect(),
            worker_slots,
            universe,
            paths,
            queries,
        }
    }

    /// Runs one op on both the index and the model and compares the results.
    fn apply(&mut self, index: &PrefixIndex, model: &mut Model, op: &Op) -> Result<(), String> {
        macro_rules! same {
            ($what:expr, $got:expr, $want:expr) => {{
                let (got, want) = ($got, $want);
                if got != want {
                    return Err(format!("{}: index {:?} model {:?}", $what, got, want));
                }
            }};
        }
        match op {
            Op::StoreHashes { w, blocks } => {
                let pairs: Vec<(EngineHash, SequenceHash)> = blocks
                    .iter()
                    .map(|&(eh, u)| (EngineHash(u64::from(eh)), self.universe[u]))
                    .collect();
                let s = self.slots[*w];
                same!(
                    "store_hashes",
                    index.store_hashes(s, &pairs),
                    model.store_hashes(s, &pairs)
                );
            }
            Op::Store {
                w,
                parent,
                path,
                ehs,
            } => {
                let s = self.slots[*w];
                let parent = match parent {
                    Parent::None => None,
                    Parent::Raw(eh) => Some(EngineHash(u64::from(*eh))),
                    Parent::Existing(pick) => {
                        let entries = model.workers.get(&s.0).map(|w| &w.entries);
                        match entries.filter(|e| !e.is_empty()) {
                            Some(e) => e.keys().nth(pick % e.len()).map(|&k| EngineHash(k)),
                            None => None,
                        }
                    }
                };
                let tokens = index_common::path_tokens(path, BLOCK_SIZE);
                let ehs: Vec<EngineHash> = ehs.iter().map(|&e| EngineHash(u64::from(e))).collect();
                let ev = BlockStore {
                    parent,
                    block_hashes: &ehs,
                    token_ids: &tokens,
                    block_size: BLOCK_SIZE,
                    namespace: HashNamespace::DEFAULT,
                };
                // Remember the paths of the blocks this store creates (for later `Dup`s).
                let parent_map = parent.and_then(|p| model.mapping(s, p.0));
                let base = match parent_map {
                    Some(m) => Some(self.paths[&m.seq].clone()),
                    None if parent.is_none() => Some(Vec::new()),
                    None => None,
                };
                same!("store", index.store(s, &ev), model.store(s, &ev));
                if let Some(mut p) = base {
                    for &c in path {
                        p.push(c);
                        let h = *index_common::path_hashes(&self.hasher, &p).last().unwrap();
                        self.paths.entry(h.0).or_insert_with(|| p.clone());
                    }
                }
            }
            Op::Remove { w, ehs } => {
                let s = self.slots[*w];
                let ehs: Vec<EngineHash> = ehs.iter().map(|&e| EngineHash(u64::from(e))).collect();
                same!("remove", index.remove(s, &ehs), model.remove(s, &ehs));
            }
            Op::RemoveExisting { w, picks } => {
                let s = self.slots[*w];
                let keys: Vec<u64> = model
                    .workers
                    .get(&s.0)
                    .map(|w| w.entries.keys().copied().collect())
                    .unwrap_or_default();
                if keys.is_empty() {
                    return Ok(());
                }
                let ehs: Vec<EngineHash> = picks
                    .iter()
                    .map(|p| EngineHash(keys[p % keys.len()]))
                    .collect();
                same!(
                    "remove existing",
                    index.remove(s, &ehs),
                    model.remove(s, &ehs)
                );
            }
            Op::RemoveCopy { w, pick } => {
                let s = self.slots[*w];
                let copied: Vec<u64> = model
                    .workers
                    .get(&s.0)
                    .map(|w| {
                        w.entries
                            .iter()
                            .filter(|(_, m)| m.copies > 1)
                            .map(|(&k, _)| k)
                            .collect()
                    })
                    .unwrap_or_default();
                if copied.is_empty() {
                    return Ok(());
                }
                let ehs = [EngineHash(copied[pick % copied.len()])];
                same!(
                    "remove a copy",
                    index.remove(s, &ehs),
                    model.remove(s, &ehs)
                );
            }
            Op::Dup { w, pick } | Op::Alias { w, pick, .. } => {
                let s = self.slots[*w];
                let Some(entries) = model.workers.get(&s.0).map(|w| w.entries.clone()) else {
                    return Ok(());
                };
                if entries.is_empty() {
                    return Ok(());
                }
                let (&eh0, m) = entries.iter().nth(pick % entries.len()).unwrap();
                let eh = match op {
                    Op::Alias { eh, .. } => u64::from(*eh),
                    _ => eh0,
                };
                let path = &self.paths[&m.seq];
                // Through `store` when some engine hash of this worker maps to the parent
                // block (or the block is the first of its sequence).
                let parent = if path.len() == 1 {
                    Some(None)
                } else {
                    let want = *index_common::path_hashes(&self.hasher, &path[..path.len() - 1])
                        .last()
                        .unwrap();
                    entries
                        .iter()
                        .find(|(_, pm)| pm.seq == want.0)
                        .map(|(&k, _)| Some(EngineHash(k)))
                };
                match parent {
                    Some(parent) => {
                        let tokens = block_tokens(*path.last().unwrap(), BLOCK_SIZE);
                        let ehs = [EngineHash(eh)];
                        let ev = BlockStore {
                            parent,
                            block_hashes: &ehs,
                            token_ids: &tokens,
                            block_size: BLOCK_SIZE,
                            namespace: HashNamespace::DEFAULT,
                        };
                        same!("dup store", index.store(s, &ev), model.store(s, &ev));
                    }
                    None => {
                        let pairs = [(EngineHash(eh), SequenceHash(m.seq))];
                        same!(
                            "dup store_hashes",
                            index.store_hashes(s, &pairs),
                            model.store_hashes(s, &pairs)
                        );
                    }
                }
            }
            Op::Clear { w } => {
                let s = self.slots[*w];
                same!("clear", index.clear(s), model.clear(s));
            }
            Op::RemoveWorker { w } => {
                let s = self.slots[*w];
                same!(
                    "remove_worker",
                    index.remove_worker(s),
                    model.remove_worker(s)
                );
            }
            Op::BadBlockSize { w } => {
                let s = self.slots[*w];
                let tokens = block_tokens(0, BLOCK_SIZE + 1);
                let ev = BlockStore {
                    parent: None,
                    block_hashes: &[EngineHash(1)],
                    token_ids: &tokens,
                    block_size: BLOCK_SIZE + 1,
                    namespace: HashNamespace::DEFAULT,
                };
                same!("bad block size", index.store(s, &ev), model.store(s, &ev));
            }
            Op::BadTokenCount { w } => {
                let s = self.slots[*w];
                let tokens = index_common::path_tokens(&[0, 1], BLOCK_SIZE);
                let ev = BlockStore {
                    parent: None,
                    block_hashes: &[EngineHash(1)],
                    token_ids: &tokens[..tokens.len() - 1],
                    block_size: BLOCK_SIZE,
                    namespace: HashNamespace::DEFAULT,
                };
                same!("bad token count", index.store(s, &ev), model.store(s, &ev));
            }
            Op::OutOfRange { kind } => {
                let s = Slot(self.worker_slots as u32 + u32::from(*kind));
                let pairs = [(EngineHash(1), self.universe[0])];
                let tokens = block_tokens(0, BLOCK_SIZE);
                let ev = BlockStore {
                    parent: None,
                    block_hashes: &[EngineHash(1)],
                    token_ids: &tokens,
                    block_size: BLOCK_SIZE,
                    namespace: HashNamespace::DEFAULT,
                };
                match kind {
                    0 => same!(
                        "oob store_hashes",
                        index.store_hashes(s, &pairs),
                        model.store_hashes(s, &pairs)
                    ),
                    1 => same!("oob store", index.store(s, &ev), model.store(s, &ev)),
                    2 => same!(
                        "oob remove",
                        index.remove(s, &[EngineHash(1)]),
                        model.remove(s, &[EngineHash(1)])
                    ),
                    3 => same!("oob clear", index.clear(s), model.clear(s)),
                    _ => same!(
                        "oob remove_worker",
                        index.remove_worker(s),
                        model.remove_worker(s)
                    ),
                }
            }
        }
        Ok(())
    }

    /// Probes which engine hashes each worker has indexed: an empty store naming `eh` as its
    /// parent succeeds iff `eh` is indexed, and changes nothing but the unknown-parent
    /// counter (which the model tracks the same way).
    fn probe(&self, index: &PrefixIndex, model: &mut Model, ehs: u8) -> Result<(), String> {
        for &s in &self.slots {
            for eh in 0..ehs {
                let ev = BlockStore {
                    parent: Some(EngineHash(u64::from(eh))),
                    block_hashes: &[],
                    token_ids: &[],
                    block_size: BLOCK_SIZE,
                    namespace: HashNamespace::DEFAULT,
                };
                let got = index.store(s, &ev);
                let want = model.store(s, &ev);
                if got != want {
                    return Err(format!(
                        "engine hash {eh} of slot {}: probe {got:?}, model {want:?}",
                        s.0
                    ));
                }
            }
        }
        Ok(())
    }
}

/// How often the generated runs reached the states the property is about; asserted at the
/// end so that a generator that stopped producing them would fail the test.
#[derive(Clone, Copy, Debug, Default)]
struct Coverage {
    /// States where some worker holds a later block of a query but not an earlier one.
    non_prefix_closed: u64,
    /// States where a worker maps two engine hashes to one block.
    aliased: u64,
    /// States where some engine hash has two or more copies.
    multi_copy: u64,
    /// States where one block is held by two or more workers.
    shared: u64,
    /// States where a worker in a slot >= 64 holds a block.
    ext_word: u64,
    /// `store` events chained from a parent that were indexed.
    chained_stores: u64,
    conflicts: u64,
    unknown_parents: u64,
    unknown_removes: u64,
    copies_dropped: u64,
    evicted: u64,
    table_resizes: u64,
}

impl Coverage {
    fn observe(&mut self, model: &Model, queries: &[Vec<SequenceHash>]) {
        let mut holders: HashMap<u64, usize> = HashMap::new();
        for (&slot, w) in &model.workers {
            let held = w.held();
            if held.len() < w.entries.len() {
                self.aliased += 1;
            }
            if w.entries.values().any(|m| m.copies > 1) {
                self.multi_copy += 1;
            }
            if slot >= 64 && !held.is_empty() {
                self.ext_word += 1;
            }
            for h in &held {
                *holders.entry(*h).or_default() += 1;
            }
            if queries.iter().any(|q| {
                let k = model.overlap(slot, q) as usize;
                q[k..].iter().any(|h| held.contains(&h.0))
            }) {
                self.non_prefix_closed += 1;
            }
        }
        if holders.values().any(|&n| n >= 2) {
            self.shared += 1;
        }
    }

    fn finish_case(&mut self, model: &Model) {
        self.conflicts += model.counters.hash_conflicts;
        self.unknown_removes += model.counters.unknown_removes;
        self.evicted += model.counters.evicted_blocks;
    }
}

/// Runs one case: every op on index and model, full comparison after each.
fn run_case(
    worker_slots: usize,
    slots: &[u32],
    cap: usize,
    probe_ehs: u8,
    ops: &[Op],
    deep: &[Vec<u8>],
    coverage: &RefCell<Coverage>,
) -> Result<(), TestCaseError> {
    let mut config = IndexConfig::new(worker_slots, BLOCK_SIZE);
    // The smallest table (16 slots): the universe's 30 blocks and deeper chained ones
    // make it grow and shrink again and again.
    config.expected_blocks = 1;
    config.max_blocks_per_worker = cap;
    let index = PrefixIndex::new(config).expect("valid config");
    let mut model = Model::new(worker_slots, BLOCK_SIZE, cap);
    let mut h = Harness::new(worker_slots, slots, deep);
    let mut out = index.new_overlaps();
    for (i, op) in ops.iter().enumerate() {
        let fail = |e: String| TestCaseError::fail(format!("after op #{i} {op:?}: {e}"));
        let before = model.clone();
        h.apply(&index, &mut model, op).map_err(fail)?;
        {
            let mut c = coverage.borrow_mut();
            if let Op::Store { w, parent, .. } = op {
                let s = h.slots[*w].0;
                let grew = model.workers.get(&s).map(|w| w.clock)
                    != before.workers.get(&s).map(|w| w.clock);
                let had_entries = before.worker_blocks(Slot(s)) > 0;
                let chained = match parent {
                    Parent::None => false,
                    Parent::Raw(_) => true,
                    Parent::Existing(_) => had_entries,
                };
                if grew && chained {
                    c.chained_stores += 1;
                }
                c.unknown_parents +=
                    model.counters.unknown_parent_stores - before.counters.unknown_parent_stores;
            }
            if let Op::Remove { w, .. } | Op::RemoveExisting { w, .. } | Op::RemoveCopy { w, .. } =
                op
            {
                // Engine hashes that lost a copy but stayed indexed.
                let s = h.slots[*w];
                let (b, a) = (before.workers.get(&s.0), model.workers.get(&s.0));
                if let (Some(b), Some(a)) = (b, a) {
                    c.copies_dropped += a
                        .entries
                        .iter()
                        .filter(|(k, m)| b.entries.get(k).is_some_and(|bm| bm.copies > m.copies))
                        .count() as u64;
                }
            }
            c.observe(&model, &h.queries);
        }
        check_matches(&index, &model, &h.queries, &h.slots, &mut out).map_err(fail)?;
        h.probe(&index, &mut model, probe_ehs).map_err(fail)?;
        check_stats(&index.stats(), &model).map_err(fail)?;
        for &s in &h.slots {
            if index.worker_blocks(s) > cap {
                return Err(fail(format!(
                    "worker {} has {} blocks, cap {cap}",
                    s.0,
                    index.worker_blocks(s)
                )));
            }
        }
    }
    coverage.borrow_mut().finish_case(&model);
    coverage.borrow_mut().table_resizes += index.stats().table_resizes;
    Ok(())
}

fn deep_queries() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(0..2u8, 6..9), 3)
}

fn run_model_property(worker_slots: usize, slots: &[u32]) {
    let config = Config {
        cases: runner_cases(),
        // The runner is driven by hand, so there is no source file to persist failures
        // next to; a failure prints the minimal op sequence instead.
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let universe = all_paths(2, UNIVERSE_DEPTH).len();
    let strategy = (
        prop::collection::vec(op_strategy(slots.len(), universe), 1..48),
        deep_queries(),
    );
    let coverage = RefCell::new(Coverage::default());
    let result = runner.run(&strategy, |(ops, deep)| {
        run_case(
            worker_slots,
            slots,
            1 << 20,
            REMOVE_EHS,
            &ops,
            &deep,
            &coverage,
        )
    });
    if let Err(e) = result {
        panic!("worker_slots {worker_slots}, slots {slots:?}: {e}");
    }
    let c = coverage.into_inner();
    println!("coverage over {} cases: {c:?}", runner_cases());
    if runner_cases() >= 64 {
        // Each of these happens several times per case on average; a sixteenth of the
        // case count is a floor that only a broken generator misses.
        let floor = u64::from(runner_cases() / 16);
        let needed = [
            ("non-prefix-closed states", c.non_prefix_closed),
            ("aliased states", c.aliased),
            ("multi-copy states", c.multi_copy),
            ("shared blocks", c.shared),
            ("chained stores", c.chained_stores),
            ("conflicts", c.conflicts),
            ("unknown parents", c.unknown_parents),
            ("unknown removes", c.unknown_removes),
            ("copies dropped", c.copies_dropped),
            ("table resizes", c.table_resizes),
        ];
        for (what, n) in needed {
            assert!(
                n >= 10,
                "the generator reached {what} only {n} times: {c:?}"
            );
        }
        if slots.iter().any(|&s| s >= 64) {
            assert!(c.ext_word >= floor, "slots >= 64 rarely held blocks: {c:?}");
        }
    }
}

fn runner_cases() -> u32 {
    cases(if cfg!(debug_assertions) { 128 } else { 1024 })
}

#[test]
fn index_matches_model_three_workers_in_one_word() {
    run_model_property(3, &[0, 1, 2]);
}

#[test]
fn index_matches_model_workers_across_the_first_word_boundary() {
    run_model_property(65, &[0, 63, 64]);
}

#[test]
fn index_matches_model_workers_in_first_second_and_fifth_words() {
    run_model_property(257, &[1, 64, 256]);
}

/// With a small cap, the cap holds after every op and the index evicts exactly the entries
/// the model's least-recently-stored rule names (checked through the outcomes' `evicted`,
/// the `evicted_blocks` counter, the engine-hash probe and every match).
#[test]
fn eviction_keeps_the_cap_and_drops_the_least_recently_stored() {
    let config = Config {
        cases: runner_cases(),
        // The runner is driven by hand, so there is no source file to persist failures
        // next to; a failure prints the minimal op sequence instead.
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let universe = all_paths(2, UNIVERSE_DEPTH).len();
    // Caps 32 and 34 evict 2 entries at a time (cap / 16); the others evict 1.
    let strategy = (
        prop::sample::select(vec![1usize, 2, 3, 5, 8, 17, 32, 34]),
        prop::collection::vec(eviction_op_strategy(3, universe), 1..64),
        deep_queries(),
    );
    let coverage = RefCell::new(Coverage::default());
    let result = runner.run(&strategy, |(cap, ops, deep)| {
        run_case(65, &[0, 1, 64], cap, EVICTION_EHS, &ops, &deep, &coverage)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let c = coverage.into_inner();
    if runner_cases() >= 64 {
        let floor = u64::from(runner_cases() / 16);
        assert!(c.evicted >= floor, "the generator rarely evicted: {c:?}");
        assert!(
            c.multi_copy >= floor,
            "copies rarely reached eviction: {c:?}"
        );
    }
}

/// Engine hashes of the eviction property: more than the largest cap, so caps are reached.
const EVICTION_EHS: u8 = 40;

fn eviction_op_strategy(workers: usize, universe: usize) -> impl Strategy<Value = Op> {
    let w = 0..workers;
    let eh = 0..EVICTION_EHS;
    prop_oneof![
        6 => (w.clone(), prop::collection::vec((eh.clone(), 0..universe), 1..10))
            .prop_map(|(w, blocks)| Op::StoreHashes { w, blocks }),
        3 => (
            w.clone(),
            prop_oneof![
                1 => Just(Parent::None),
                2 => any::<usize>().prop_map(Parent::Existing),
            ],
            prop::collection::vec((0..2u8, eh.clone()), 1..5),
        )
            .prop_map(|(w, parent, blocks)| {
                let (path, ehs) = blocks.into_iter().unzip();
                Op::Store { w, parent, path, ehs }
            }),
        2 => (w.clone(), prop::collection::vec(eh.clone(), 1..4))
            .prop_map(|(w, ehs)| Op::Remove { w, ehs }),
        1 => (w.clone(), prop::collection::vec(any::<usize>(), 1..4))
            .prop_map(|(w, picks)| Op::RemoveExisting { w, picks }),
        3 => (w.clone(), any::<usize>()).prop_map(|(w, pick)| Op::Dup { w, pick }),
        2 => (w.clone(), any::<usize>(), eh).prop_map(|(w, pick, eh)| Op::Alias { w, pick, eh }),
        1 => w.clone().prop_map(|w| Op::Clear { w }),
    ]
}
