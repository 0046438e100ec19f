//! End to end through the Router's ingest path: the real vLLM 0.33.0 event stream
//! (`shared/data/kv_events/vllm_0.33_conversation_first1000.jsonl.xz`, format in
//! `shared/data/README.md`) is framed as ZMQ messages, decoded by `kvroute_wire`, fed to
//! `Router::ingest` (sequence tracking included), and for each of the first
//! [`REQUESTS`] requests the overlap `route` credits the engine's worker, capped as vLLM caps
//! a hit (`(n - 1) / 16` blocks), must equal the engine's own hit. A second, idle worker
//! makes `route` choose; the decision's overlap is read only when it picked the engine's
//! worker, which it must whenever the engine reports a hit.
//!
//! Skips with a notice without the data (fails under `CI`), as `kvroute_tests::data_file`
//! does. About 4.5 s in release.

mod common;

use std::io::{BufRead, BufReader};

use common::{NOW, idle};
use kvroute::{Channel, RouteRequest, Router, RouterConfig, WorkerId};
use kvroute_wire::WireCounters;
use serde::Deserialize;

const BLOCK: usize = 16;
/// All 1,000 requests in release (evictions, so removals, start after about 200); the first
/// 200 (stores only) in debug builds.
const REQUESTS: usize = if cfg!(debug_assertions) { 200 } else { 1_000 };

#[derive(Deserialize)]
struct Record {
    kind: String,
    seq: Option<u64>,
    payload_hex: Option<String>,
    index: Option<u64>,
    engine_hit_tokens: Option<usize>,
    hash_ids: Option<Vec<u32>>,
    input_length: Option<usize>,
}

fn unhex(s: &str) -> Vec<u8> {
    let nib = |c: u8| match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => panic!("bad hex digit {c}"),
    };
    s.as_bytes()
        .chunks_exact(2)
        .map(|p| (nib(p[0]) << 4) | nib(p[1]))
        .collect()
}

/// Token `t` of trace block `h` is `h * 512 + t`, cut to `input_length`.
fn prompt(hash_ids: &[u32], input_length: usize) -> Vec<u32> {
    let mut t: Vec<u32> = hash_ids
        .iter()
        .flat_map(|&h| (0..512).map(move |i| h * 512 + i))
        .collect();
    t.truncate(input_length);
    t
}

#[test]
fn vllm_stream_through_ingest_matches_the_engine_hits() {
    let Some(path) =
        kvroute_tests::data_file("kv_events/vllm_0.33_conversation_first1000.jsonl.xz")
    else {
        return;
    };
    let mut cfg = RouterConfig::new(2, BLOCK);
    cfg.index.expected_blocks = 1 << 19;
    let r = Router::new(cfg).unwrap();
    let engine = WorkerId::new(33, 0);
    let other = WorkerId::new(34, 0);
    r.add_worker(engine).unwrap();
    r.add_worker(other).unwrap();
    for w in [engine, other] {
        r.update_load(w, idle(), NOW).unwrap();
    }
    r.publish(NOW).unwrap();

    let reader = BufReader::with_capacity(
        1 << 20,
        xz2::read::XzDecoder::new(std::fs::File::open(path).unwrap()),
    );
    let wire = WireCounters::new();
    let (mut requests, mut batches, mut mismatches) = (0usize, 0u64, Vec::new());
    for line in reader.lines() {
        let rec: Record = serde_json::from_str(&line.unwrap()).unwrap();
        match rec.kind.as_str() {
            "batch" => {
                let seq = rec.seq.unwrap().to_be_bytes();
                let payload = unhex(rec.payload_hex.as_deref().unwrap());
                let msg = wire.decode_message(&[b"", &seq, &payload]).unwrap();
                let report = r.ingest(engine, Channel::Live, &msg).unwrap();
                assert!(report.trusted, "batch {}: {report:?}", rec.seq.unwrap());
                batches += 1;
            }
            "request" => {
                let n = rec.input_length.unwrap();
                let tokens = prompt(rec.hash_ids.as_deref().unwrap(), n);
                let d = r.route(&RouteRequest::tokens(&tokens, 64, NOW)).unwrap();
                let blocks = if d.worker == engine {
                    d.overlap_blocks
                } else {
                    0
                };
                let predicted = (blocks as usize * BLOCK).min(n.saturating_sub(1) / BLOCK * BLOCK);
                let hit = rec.engine_hit_tokens.unwrap();
                if predicted != hit {
                    mismatches.push((rec.index.unwrap(), n, hit, predicted));
                }
                drop(d);
                requests += 1;
                if requests == REQUESTS {
                    break;
                }
            }
            _ => {}
        }
    }
    let s = r.ingest_stats();
    eprintln!("{requests} requests, {batches} batches; ingest {s:?}");
    assert_eq!(requests, REQUESTS);
    assert!(
        mismatches.is_empty(),
        "(request, input, engine hit, predicted): {mismatches:?}"
    );
    assert_eq!(s.contiguous, batches);
    assert_eq!((s.gaps, s.stale, s.resets, s.rejected_events), (0, 0, 0, 0));
    assert_eq!((s.non_device_blocks, s.unknown_parent_stores), (0, 0));
    assert!(s.stored_blocks > 0 && wire.stats().total_errors() == 0);
}
