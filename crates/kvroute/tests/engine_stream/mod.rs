//! A real engine KV event stream (`kvroute_testkit::stream`) replayed end to end through the
//! Router: every batch record is framed as the engine's ZMQ message (`[topic "", seq as 8
//! bytes big-endian, payload]`), decoded by `kvroute_wire`, and fed to `Router::ingest`
//! (sequence tracking included) for the engine's worker. Checks, with the expected values
//! taken from the engine's own records:
//! * each `request`: the engine worker's overlap in the index (the prompt hashed with the
//!   router's scheme and matched, read for that worker whatever `route` decides), capped as
//!   the engine caps a hit (`Engine::cap_tokens`), equals the engine's hit (tokens), so an
//!   over-prediction is seen on every request. A second, idle worker makes `route` choose:
//!   it must pick the engine's worker, crediting it that same overlap, whenever the engine
//!   reports a hit;
//! * the `snapshot` (after the last batch before the final `AllBlocksCleared`): the
//!   worker's engine-hash map in the index (`RunIndex::engine_hashes`) has the engine's
//!   cached-hash count, copy count and SHA-256 over the sorted distinct hashes, and the
//!   index holds as many residencies;
//! * after the final `AllBlocksCleared` the worker holds nothing, and the `end` record's
//!   hit total equals the sum of the request records' hits.
#![allow(dead_code)]

use kvroute::{
    BlockHasher, Channel, HashNamespace, RouteRequest, Router, RouterConfig, SequenceHash, WorkerId,
};
use kvroute_testkit::stream::{Engine, STREAM_BLOCK_SIZE as BLOCK, records, unhex};
use kvroute_wire::WireCounters;

use crate::common::{NOW, idle};

/// (request index, input tokens, engine hit, predicted hit).
type Mismatch = (u64, usize, usize, usize);

/// Replays `engine`'s stream through a Router. With `request_limit`, stops after that many
/// requests (the snapshot and end checks then do not run; the caller says so).
pub fn replay_through_router(engine: Engine, request_limit: Option<usize>) {
    let Some(path) = kvroute_testkit::data_file(engine.stream_file()) else {
        return;
    };
    let mut cfg = RouterConfig::new(2, BLOCK);
    cfg.expected_blocks = 1 << 19;
    let r = Router::new(cfg).unwrap();
    let worker = WorkerId::new(33, 0);
    let other = WorkerId::new(34, 0);
    let slot = r.add_worker(worker).unwrap();
    r.add_worker(other).unwrap();
    for w in [worker, other] {
        r.update_load(w, idle(), NOW).unwrap();
    }
    r.publish(NOW).unwrap();

    let hasher = BlockHasher::new(BLOCK, HashNamespace::DEFAULT);
    let mut keys: Vec<SequenceHash> = Vec::new();
    let mut overlaps = r.index().new_overlaps();
    let wire = WireCounters::new();
    let (mut requests, mut batches, mut hit_sum) = (0usize, 0u64, 0usize);
    let (mut snapshots, mut ends, mut after_snapshot_batches) = (0usize, 0usize, 0u64);
    let mut mismatches: Vec<Mismatch> = Vec::new();
    for rec in records(&path) {
        match rec.kind.as_str() {
            "batch" => {
                let seq = rec.seq.unwrap();
                let payload = rec.payload();
                let msg = wire
                    .decode_message(&[b"", &seq.to_be_bytes(), &payload])
                    .unwrap_or_else(|e| panic!("batch {seq}: {e}"));
                let report = r.ingest(worker, Channel::Live, &msg).unwrap();
                assert!(report.trusted, "batch {seq}: {report:?}");
                batches += 1;
                if snapshots > 0 {
                    after_snapshot_batches += 1;
                }
            }
            "request" => {
                let n = rec.input_length.unwrap();
                let prompt = rec.prompt();
                keys.clear();
                hasher.sequence_hashes_into(&prompt, None, &mut keys);
                r.index().match_prefix(&keys, &mut overlaps);
                let blocks = overlaps.get(slot);
                let predicted = (blocks as usize * BLOCK).min(engine.cap_tokens(n));
                let hit = rec.engine_hit_tokens.unwrap();
                hit_sum += hit;
                if predicted != hit {
                    mismatches.push((rec.index.unwrap(), n, hit, predicted));
                }
                let d = r.route(&RouteRequest::tokens(&prompt, 64, NOW)).unwrap();
                if hit > 0 {
                    assert_eq!(
                        (d.worker, d.overlap_blocks),
                        (worker, blocks),
                        "request {}: an engine hit must route to its worker with the index's overlap",
                        rec.index.unwrap()
                    );
                }
                drop(d);
                requests += 1;
                if Some(requests) == request_limit {
                    break;
                }
            }
            "snapshot" => {
                snapshots += 1;
                let hashes = rec.num_cached_hashes.unwrap();
                let indexed = r.index().engine_hashes(slot);
                assert_eq!(indexed.len(), hashes, "distinct engine hashes");
                let copies: usize = indexed.iter().map(|&(_, c)| c as usize).sum();
                assert_eq!(Some(copies), rec.num_cached_blocks, "copies");
                assert_eq!(
                    engine.cached_hashes_digest(indexed.iter().map(|(h, _)| h.0)),
                    unhex(rec.cached_hashes_sha256.as_deref().unwrap()),
                    "SHA-256 over the sorted engine hashes"
                );
                // One worker holds the index: its residencies are its distinct blocks.
                assert_eq!(r.index_stats().residencies as usize, hashes);
            }
            "end" => {
                ends += 1;
                assert_eq!(rec.engine_hit_tokens, Some(hit_sum), "end totals");
            }
            _ => {}
        }
    }
    let s = r.ingest_stats();
    eprintln!("{engine:?}: {requests} requests, {batches} batches; ingest {s:?}");
    assert!(requests > 0);
    assert!(
        mismatches.is_empty(),
        "{} of {requests} requests mismatch (request, input, engine hit, predicted): {:?}",
        mismatches.len(),
        &mismatches[..mismatches.len().min(20)]
    );
    assert_eq!(s.contiguous, batches);
    assert_eq!((s.gaps, s.stale, s.resets, s.rejected_events), (0, 0, 0, 0));
    assert_eq!((s.non_device_blocks, s.unknown_parent_stores), (0, 0));
    assert!(s.stored_blocks > 0);
    assert_eq!(wire.stats().total_errors(), 0);
    if request_limit.is_none() {
        assert_eq!((snapshots, ends), (1, 1));
        // The stream's last batch is the engine's cache reset.
        assert_eq!(after_snapshot_batches, 1);
        assert!(s.clears >= 1);
        assert_eq!(r.index().worker_blocks(slot), 0);
        assert_eq!(r.index_stats().residencies, 0);
    }
}
