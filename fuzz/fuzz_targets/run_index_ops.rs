//! Drives the run-compressed index (`RunIndex`, the router's) with arbitrary sequences of
//! chain-shaped stores (after a parent the worker holds, or refused), engine hashes re-used
//! for other content, removals, clears and worker removals, over a small tree of three
//! branches sharing a three-block prefix, on workers in slots either side of a 64-bit word.
//! After each operation: the index's own invariants (`check_invariants`), every worker's
//! engine-hash map, and the overlap of every branch's whole path against a model (per
//! worker: engine hash -> (chained hash, copies); an overlap is the leading blocks held).
#![no_main]

use std::collections::HashMap;

use kvroute_core::{EngineHash, SequenceHash, Slot};
use kvroute_index::index::{IndexConfig, IndexError};
use kvroute_index::runs::RunIndex;
use libfuzzer_sys::fuzz_target;

const SLOTS: [u32; 4] = [0, 1, 64, 130];
const BRANCHES: usize = 3;
const PREFIX: usize = 3;
const DEPTH: usize = 8;

/// Engine hash -> (chained hash, copies), per worker.
type Model = Vec<HashMap<u64, (u64, u32)>>;

/// The chained hash of block `k` of branch `b` (the prefix is shared).
fn seq(b: usize, k: usize) -> u64 {
    if k < PREFIX {
        0x1111_0000 + k as u64
    } else {
        0x2222_0000 + (b * 16 + k) as u64
    }
}

/// The engine hash of block `k` of branch `b` (the prefix's is shared).
fn eh(b: usize, k: usize) -> u64 {
    if k < PREFIX {
        k as u64
    } else {
        (100 + b * 16 + k) as u64
    }
}

fuzz_target!(|data: &[u8]| {
    let index = RunIndex::new({
        let mut c = IndexConfig::default();
        c.worker_slots = 131;
        c.block_size = 4;
        c.expected_blocks = 4;
        c.max_blocks_per_worker = 1 << 20;
        c
    })
    .unwrap();
    let mut model: Model = vec![HashMap::new(); SLOTS.len()];
    let mut out = index.new_overlaps();
    for op in data.chunks_exact(3) {
        let w = (op[0] as usize >> 4) % SLOTS.len();
        let slot = Slot(SLOTS[w]);
        let b = usize::from(op[1] >> 4) % BRANCHES;
        let from = usize::from(op[1] & 0xf) % DEPTH;
        match op[0] % 8 {
            0..=3 => {
                // Blocks `from..to` of branch `b` after block `from - 1`; with bit 7 of the
                // third byte, the first block under an engine hash shared with other
                // content (1000 + low bits).
                let to = (from + 1 + usize::from(op[2] & 7)).min(DEPTH);
                let mut pairs: Vec<(EngineHash, SequenceHash)> = (from..to)
                    .map(|k| (EngineHash(eh(b, k)), SequenceHash(seq(b, k))))
                    .collect();
                if op[2] & 0x80 != 0 {
                    pairs[0].0 = EngineHash(1000 + u64::from(op[2] >> 3 & 3));
                }
                let parent = from.checked_sub(1).map(|k| EngineHash(eh(b, k)));
                let known = parent.is_none_or(|p| model[w].contains_key(&p.0));
                let got = index.store_hashes(slot, parent, &pairs);
                if !known {
                    assert!(
                        matches!(got, Err(IndexError::UnknownParent { .. })),
                        "{got:?}"
                    );
                    continue;
                }
                got.expect("a known parent");
                for (e, s) in pairs {
                    match model[w].get_mut(&e.0) {
                        Some(m) if m.0 == s.0 => m.1 += 1,
                        _ => {
                            model[w].insert(e.0, (s.0, 1));
                        }
                    }
                }
            }
            4 | 5 => {
                let e = match op[2] % 4 {
                    0 => 1000 + u64::from(op[2] >> 2 & 3),
                    _ => eh(b, from),
                };
                index.remove(slot, &[EngineHash(e)]).unwrap();
                if let Some(m) = model[w].get_mut(&e) {
                    m.1 -= 1;
                    if m.1 == 0 {
                        model[w].remove(&e);
                    }
                }
            }
            6 => {
                index.clear(slot).unwrap();
                model[w].clear();
            }
            _ => {
                index.remove_worker(slot).unwrap();
                model[w].clear();
            }
        }
        index.check_invariants().unwrap();
        for (w, &s) in SLOTS.iter().enumerate() {
            let mut got = index.engine_hashes(Slot(s));
            got.sort_unstable();
            let mut want: Vec<(EngineHash, u32)> = model[w]
                .iter()
                .map(|(&e, &(_, c))| (EngineHash(e), c))
                .collect();
            want.sort_unstable();
            assert_eq!(got, want, "engine hashes of slot {s}");
        }
        for b in 0..BRANCHES {
            let query: Vec<SequenceHash> = (0..DEPTH).map(|k| SequenceHash(seq(b, k))).collect();
            index.match_prefix(&query, &mut out);
            for (w, &s) in SLOTS.iter().enumerate() {
                let held = |q: &SequenceHash| model[w].values().any(|&(x, _)| x == q.0);
                let want = query.iter().take_while(|q| held(q)).count() as u32;
                assert_eq!(out.get(Slot(s)), want, "branch {b}, slot {s}");
            }
        }
    }
});
