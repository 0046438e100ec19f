//! Drives the prefix index with arbitrary store / remove / clear / remove_worker sequences
//! and checks every match against a per-worker hash-set model after each operation.
#![no_main]

use std::collections::HashMap;

use kvroute_core::EngineHash;
use kvroute_core::{SequenceHash, Slot};
use kvroute_index::index::{IndexConfig, PrefixIndex};
use libfuzzer_sys::fuzz_target;

const SLOTS: [u32; 4] = [0, 1, 64, 130];

/// Engine hash -> (sequence hash, copies), per worker.
type Model = Vec<HashMap<u64, (u64, u32)>>;

fn holds(m: &HashMap<u64, (u64, u32)>, seq: u64) -> bool {
    m.values().any(|&(s, c)| s == seq && c > 0)
}

fuzz_target!(|data: &[u8]| {
    let index = PrefixIndex::new({
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
    // A universe of 8 sequence hashes forming one chain; engine hashes 0..16 map onto it
    // (two engine hashes per block, so aliases happen).
    let chain: Vec<SequenceHash> = (1..=8u64)
        .map(|i| SequenceHash(i * 0x1234_5678_9abc))
        .collect();
    for op in data.chunks_exact(3) {
        let w = (op[0] as usize >> 4) % SLOTS.len();
        let slot = Slot(SLOTS[w]);
        let eh = u64::from(op[1] % 16);
        let seq = chain[(eh % 8) as usize].0;
        match op[0] % 4 {
            0 | 1 => {
                let n = usize::from(op[2] % 4) + 1;
                let pairs: Vec<_> = (0..n as u64)
                    .map(|i| {
                        let e = (eh + i) % 16;
                        (EngineHash(e), chain[(e % 8) as usize])
                    })
                    .collect();
                index.store_hashes(slot, &pairs).unwrap();
                for (e, s) in pairs {
                    let entry = model[w].entry(e.0).or_insert((s.0, 0));
                    entry.1 += 1;
                }
            }
            2 => {
                index.remove(slot, &[EngineHash(eh)]).unwrap();
                if let Some(e) = model[w].get_mut(&eh) {
                    e.1 -= 1;
                    if e.1 == 0 {
                        model[w].remove(&eh);
                    }
                }
            }
            _ => {
                if op[2] % 2 == 0 {
                    index.clear(slot).unwrap();
                } else {
                    index.remove_worker(slot).unwrap();
                }
                model[w].clear();
            }
        }
        let _ = seq;
        for start in [0usize, 2] {
            let query = &chain[start..];
            index.match_prefix(query, &mut out);
            for (w, &s) in SLOTS.iter().enumerate() {
                let want = query.iter().take_while(|h| holds(&model[w], h.0)).count() as u32;
                assert_eq!(out.get(Slot(s)), want, "slot {s}");
            }
        }
    }
});
