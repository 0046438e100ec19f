//! The real engines as oracles: a real vLLM 0.33.0 and a real SGLang 0.5.23 KV event stream
//! (`shared/data/kv_events/*.jsonl.xz`, format in `shared/data/README.md`) are decoded
//! batch by batch into one worker of a `PrefixIndex` (block size 16). For every request
//! record, the index's prefix match over the request's rebuilt prompt, capped as the
//! engine caps it, must equal the engine's own hit; at the snapshot record, the index's
//! residency, its engine-hash map (`PrefixIndex::engine_hashes`) and an independent
//! engine-hash model must each give the engine's cached-hash count, copy count and SHA-256
//! over the sorted hashes. Records are read by `kvroute_testkit::stream`. Every batch must
//! have been read by the decoder's fast path (none handed to serde).
//!
//! Streams are decompressed and decoded line by line (197 MB raw for vLLM). Release-mode
//! run time and throughput are printed.

use std::collections::HashMap;
use std::time::Instant;

use kvroute_core::{HashNamespace, Slot};
use kvroute_index::BlockHasher;
use kvroute_index::index::{IndexConfig, PrefixIndex};
use kvroute_testkit::data_file;
use kvroute_testkit::stream::{Engine, STREAM_BLOCK_SIZE as BLOCK, records, unhex};
use kvroute_wire::{KvEvent, Medium, WireCounters};

mod support;
use support::block_store;

const SLOT: Slot = Slot(0);

struct Mismatch {
    request: u64,
    input_length: usize,
    engine_hit: usize,
    predicted: usize,
    uncapped_blocks: u32,
}

fn replay(engine: Engine) {
    let file = engine.stream_file();
    let Some(path) = data_file(file) else {
        return;
    };
    let start = Instant::now();
    let index = PrefixIndex::new({
        let mut c = IndexConfig::default();
        c.worker_slots = 1;
        c.block_size = BLOCK;
        c.expected_blocks = 1 << 19;
        c.max_blocks_per_worker = 1 << 22;
        c
    })
    .unwrap();
    let counters = WireCounters::new();
    let hasher = BlockHasher::new(BLOCK, HashNamespace::DEFAULT);
    let mut overlaps = index.new_overlaps();
    let mut keys = Vec::new();
    // Independent model of the engine's cache: engine hash -> copies.
    let mut model: HashMap<u64, u32> = HashMap::new();
    let (mut next_seq, mut requests, mut snapshots, mut ends) = (0u64, 0usize, 0usize, 0usize);
    let mut mismatches: Vec<Mismatch> = Vec::new();
    let mut store_errors = Vec::new();
    let (mut hit_tokens_sum, mut non_device) = (0usize, 0usize);
    for rec in records(&path) {
        match rec.kind.as_str() {
            "batch" => {
                assert_eq!(rec.seq, Some(next_seq), "batch sequence not contiguous");
                next_seq += 1;
                let batch = counters.decode_payload(&rec.payload()).unwrap_or_else(|e| {
                    panic!("batch {}: {e}", next_seq - 1);
                });
                assert_eq!(batch.dp_rank, Some(0));
                for ev in &batch.events {
                    match ev {
                        KvEvent::BlockStored(s) => {
                            if s.medium != Medium::Gpu || !s.is_main_group() {
                                non_device += 1;
                                continue;
                            }
                            for h in &s.block_hashes {
                                *model.entry(h.0).or_default() += 1;
                            }
                            if let Err(e) = index.store(SLOT, &block_store(s)) {
                                store_errors.push(format!("batch {}: {e}", next_seq - 1));
                            }
                        }
                        KvEvent::BlockRemoved(r) => {
                            for h in &r.block_hashes {
                                match model.get_mut(&h.0) {
                                    Some(c) if *c > 1 => *c -= 1,
                                    Some(_) => {
                                        model.remove(&h.0);
                                    }
                                    None => panic!("engine removed unknown hash {:#x}", h.0),
                                }
                            }
                            index.remove(SLOT, &r.block_hashes).unwrap();
                        }
                        KvEvent::AllBlocksCleared => {
                            model.clear();
                            index.clear(SLOT).unwrap();
                        }
                        KvEvent::Unknown { tag } => panic!("unknown event {tag}"),
                        other => panic!("unexpected event {other:?}"),
                    }
                }
            }
            "request" => {
                requests += 1;
                let n = rec.input_length.unwrap();
                let tokens = rec.prompt();
                keys.clear();
                hasher.sequence_hashes_into(&tokens, None, &mut keys);
                index.match_prefix(&keys, &mut overlaps);
                let blocks = overlaps.get(SLOT);
                let predicted = (blocks as usize * BLOCK).min(engine.cap_tokens(n));
                let engine_hit = rec.engine_hit_tokens.unwrap();
                hit_tokens_sum += engine_hit;
                if predicted != engine_hit {
                    mismatches.push(Mismatch {
                        request: rec.index.unwrap(),
                        input_length: n,
                        engine_hit,
                        predicted,
                        uncapped_blocks: blocks,
                    });
                }
            }
            "snapshot" => {
                snapshots += 1;
                let want = rec.num_cached_hashes.unwrap();
                assert_eq!(model.len(), want, "model's distinct hashes vs engine");
                let copies: usize = model.values().map(|&c| c as usize).sum();
                assert_eq!(
                    Some(copies),
                    rec.num_cached_blocks,
                    "model's copies vs engine"
                );
                let digest = unhex(rec.cached_hashes_sha256.as_deref().unwrap());
                assert_eq!(
                    engine.cached_hashes_digest(model.keys().copied()),
                    digest,
                    "sorted cached hashes digest"
                );
                // The index's own engine-hash map, compared with the engine's listing.
                let indexed = index.engine_hashes(SLOT);
                assert_eq!(
                    engine.cached_hashes_digest(indexed.iter().map(|(h, _)| h.0)),
                    digest,
                    "index's engine hashes digest"
                );
                let indexed_copies: usize = indexed.iter().map(|&(_, c)| c as usize).sum();
                assert_eq!(Some(indexed_copies), rec.num_cached_blocks, "index copies");
                let stats = index.stats();
                assert_eq!(index.worker_blocks(SLOT), want, "index engine hashes");
                assert_eq!(stats.residencies as usize, want, "index residencies");
            }
            "end" => {
                ends += 1;
                assert_eq!(rec.engine_hit_tokens, Some(hit_tokens_sum), "end totals");
            }
            _ => {}
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let stats = counters.stats();
    let blocks = stats.stored_blocks + stats.removed_blocks;
    eprintln!(
        "{file}: {requests} requests, {} matched, {} mismatched; {} batches, {} stored + {} \
         removed blocks, {} clears; engine hit tokens {hit_tokens_sum}; {secs:.1} s total \
         ({:.0} batches/s, {:.0} blocks/s incl. xz, JSON and hex); index {:?}",
        requests - mismatches.len(),
        mismatches.len(),
        stats.batches,
        stats.stored_blocks,
        stats.removed_blocks,
        stats.clears,
        stats.batches as f64 / secs,
        blocks as f64 / secs,
        index.stats(),
    );
    assert_eq!(stats.total_errors(), 0);
    // Every real batch is one of the common shapes: the fast path read each one (so these
    // engine-checked results are the fast path's), serde none.
    assert_eq!((stats.fast_reads, stats.serde_reads), (stats.batches, 0));
    assert!(store_errors.is_empty(), "store errors: {store_errors:?}");
    assert_eq!(non_device, 0, "the streams carry device blocks only");
    assert_eq!((snapshots, ends), (1, 1));
    assert!(requests > 0);
    // After the final AllBlocksCleared the index is empty.
    assert_eq!(index.stats().residencies, 0);
    if !mismatches.is_empty() {
        let detail: Vec<String> = mismatches
            .iter()
            .take(20)
            .map(|m| {
                format!(
                    "request {} (input {} tokens): engine hit {}, predicted {} (uncapped {} blocks)",
                    m.request, m.input_length, m.engine_hit, m.predicted, m.uncapped_blocks
                )
            })
            .collect();
        panic!(
            "{} of {requests} requests mismatch:\n{}",
            mismatches.len(),
            detail.join("\n")
        );
    }
}

#[test]
fn vllm_0_33_stream_hits_match_the_engine() {
    replay(Engine::Vllm);
}

#[test]
fn sglang_0_5_23_stream_hits_match_the_engine() {
    replay(Engine::Sglang);
}
