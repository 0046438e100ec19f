//! Decode + apply throughput of the ingest path: msgpack KV event batches in each wire
//! shape, framed as ZMQ messages, decoded by `kvroute_wire::decode_message` and applied by
//! `Router::ingest` (sequence tracking included); and the real engine streams replayed
//! through a Router.
//!
//! Run: `cargo bench -p kvroute-bench --bench wire_ingest -- --warm-up-time 1 --measurement-time 3`.
//!
//! * `wire_decode/<shape>`: `decode_payload` alone; `wire_ingest/<shape>`: frames →
//!   `decode_message` → `Router::ingest` (one live batch per iteration, sequence +1).
//!   `wire_decode_serde/<shape>` and `wire_ingest_serde/<shape>`: the same through the
//!   serde-only reference decoder (`decode_payload_serde`), the decoder before its fast
//!   path, measured in the same run for a before/after comparison.
//!   Every shape encodes the same logical batch: 4 `BlockStored` of 4 blocks (64 tokens),
//!   each chained on the one before, then 4 `BlockRemoved` of those blocks, so the index
//!   returns to its state after every batch: 8 events, 16 stored + 16 removed blocks.
//!   Throughput counts blocks (32 a batch; events/s = blocks/s / 4).
//!   Shapes: `vllm_positional` (12-element arrays, unsigned hashes), `vllm_named` (named
//!   maps with `extra_keys`, group and spec kind), `sglang_metadata` (8-element arrays with
//!   SGLang's trailing metadata map, signed hashes), `binary_hashes` (vLLM arrays with
//!   32-byte hashes), `signed_named` (SGLang 0.5.23 named maps, signed hashes).
//! * `stream_replay/<engine>`: every batch of a real stream (hex decoded beforehand, so the
//!   time is framing, decoding and applying) into a fresh two-worker Router;
//!   `stream_decode/<engine>` and `stream_decode_serde/<engine>`: every batch decoded
//!   alone, by `decode_payload` and by the serde-only reference. Needs the shared data
//!   (`kv_events/*.jsonl.xz`); skipped with a notice without it.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kvroute::{Channel, Router, RouterConfig, WorkerId};
use kvroute_testkit::msgpack::V;
use kvroute_testkit::stream::{Engine, records};
use kvroute_wire::{
    DecodePath, Frames, KvEvent, KvMessage, decode_message, decode_payload, decode_payload_serde,
    decode_payload_traced,
};

const BS: usize = 16;
const STORES: u32 = 4;
const BLOCKS_PER_STORE: u32 = 4;
/// Blocks a synthetic batch stores and removes.
const BATCH_BLOCKS: u64 = 2 * (STORES * BLOCKS_PER_STORE) as u64;

#[derive(Clone, Copy)]
enum Shape {
    VllmPositional,
    VllmNamed,
    SglangMetadata,
    BinaryHashes,
    SignedNamed,
}

impl Shape {
    const ALL: [Shape; 5] = [
        Shape::VllmPositional,
        Shape::VllmNamed,
        Shape::SglangMetadata,
        Shape::BinaryHashes,
        Shape::SignedNamed,
    ];

    fn name(self) -> &'static str {
        match self {
            Shape::VllmPositional => "vllm_positional",
            Shape::VllmNamed => "vllm_named",
            Shape::SglangMetadata => "sglang_metadata",
            Shape::BinaryHashes => "binary_hashes",
            Shape::SignedNamed => "signed_named",
        }
    }

    /// Block `i`'s hash on the wire.
    fn hash(self, i: u32) -> V {
        let h = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(u64::from(i) + 1);
        match self {
            Shape::VllmPositional | Shape::VllmNamed => V::U(h),
            Shape::SglangMetadata | Shape::SignedNamed => V::I(-((h >> 1) as i64) - 1),
            Shape::BinaryHashes => {
                let mut b = vec![0u8; 32];
                b[24..].copy_from_slice(&h.to_be_bytes());
                b[..8].copy_from_slice(&(!h).to_be_bytes());
                V::B(b)
            }
        }
    }

    fn store(self, first: u32) -> V {
        let hashes = V::A(
            (first..first + BLOCKS_PER_STORE)
                .map(|i| self.hash(i))
                .collect(),
        );
        let parent = if first == 0 {
            V::Nil
        } else {
            self.hash(first - 1)
        };
        let tokens = V::A(
            (first * BS as u32..(first + BLOCKS_PER_STORE) * BS as u32)
                .map(|t| V::U(u64::from(t) + 151_000))
                .collect(),
        );
        let bs = V::U(BS as u64);
        match self {
            Shape::VllmPositional | Shape::BinaryHashes => V::A(vec![
                V::S("BlockStored"),
                hashes,
                parent,
                tokens,
                bs,
                V::Nil,
                V::S("GPU"),
                V::Nil,
                V::Nil,
                V::U(0),
                V::S("full_attention"),
                V::Nil,
            ]),
            Shape::SglangMetadata => V::A(vec![
                V::S("BlockStored"),
                hashes,
                parent,
                tokens,
                bs,
                V::Nil,
                V::S("GPU"),
                V::M(vec![("cache_salt", V::Nil), ("lora_name", V::Nil)]),
            ]),
            Shape::VllmNamed => V::M(vec![
                ("type", V::S("BlockStored")),
                ("block_hashes", hashes),
                ("parent_block_hash", parent),
                ("token_ids", tokens),
                ("block_size", bs),
                ("lora_id", V::Nil),
                ("medium", V::S("GPU")),
                ("lora_name", V::Nil),
                ("extra_keys", V::A(vec![V::Nil; BLOCKS_PER_STORE as usize])),
                ("group_idx", V::U(0)),
                ("kv_cache_spec_kind", V::S("full_attention")),
                ("kv_cache_spec_sliding_window", V::Nil),
            ]),
            Shape::SignedNamed => V::M(vec![
                ("type", V::S("BlockStored")),
                ("block_hashes", hashes),
                ("parent_block_hash", parent),
                ("token_ids", tokens),
                ("block_size", bs),
                ("lora_id", V::Nil),
                ("medium", V::S("GPU")),
            ]),
        }
    }

    fn remove(self, first: u32) -> V {
        let hashes = V::A(
            (first..first + BLOCKS_PER_STORE)
                .map(|i| self.hash(i))
                .collect(),
        );
        match self {
            Shape::VllmPositional | Shape::BinaryHashes => {
                V::A(vec![V::S("BlockRemoved"), hashes, V::S("GPU"), V::U(0)])
            }
            Shape::SglangMetadata => V::A(vec![V::S("BlockRemoved"), hashes, V::S("GPU")]),
            Shape::VllmNamed | Shape::SignedNamed => V::M(vec![
                ("type", V::S("BlockRemoved")),
                ("block_hashes", hashes),
                ("medium", V::S("GPU")),
            ]),
        }
    }

    /// The batch payload: 4 chained stores, then their removals (deepest first).
    fn payload(self) -> Vec<u8> {
        let firsts: Vec<u32> = (0..STORES).map(|s| s * BLOCKS_PER_STORE).collect();
        let mut events: Vec<V> = firsts.iter().map(|&f| self.store(f)).collect();
        events.extend(firsts.iter().rev().map(|&f| self.remove(f)));
        V::A(vec![V::F(1.789e9), V::A(events), V::U(0)]).to_msgpack()
    }
}

fn router() -> (Router, WorkerId) {
    let mut cfg = RouterConfig::new(2, BS);
    cfg.expected_blocks = 1 << 19;
    let r = Router::new(cfg).unwrap();
    let w = WorkerId::new(1, 0);
    r.add_worker(w).unwrap();
    r.add_worker(WorkerId::new(2, 0)).unwrap();
    (r, w)
}

fn shapes(c: &mut Criterion) {
    for (group, decode) in [
        ("wire_decode", decode_payload as Decode),
        ("wire_decode_serde", decode_payload_serde),
    ] {
        let mut g = c.benchmark_group(group);
        g.throughput(Throughput::Elements(BATCH_BLOCKS));
        for shape in Shape::ALL {
            let payload = shape.payload();
            let (batch, path) = decode_payload_traced(&payload);
            // The fast path reads every shape, with the reference's result.
            assert_eq!(path, DecodePath::Fast, "{}", shape.name());
            assert_eq!(batch, decode_payload_serde(&payload));
            assert_eq!(batch.unwrap().events.len(), 2 * STORES as usize);
            g.bench_function(shape.name(), |b| {
                b.iter(|| decode(black_box(&payload)).unwrap())
            });
        }
        g.finish();
    }

    for (group, decode) in [
        ("wire_ingest", message_fast as DecodeMessage),
        ("wire_ingest_serde", message_serde),
    ] {
        let mut g = c.benchmark_group(group);
        g.throughput(Throughput::Elements(BATCH_BLOCKS));
        for shape in Shape::ALL {
            let payload = shape.payload();
            let (r, w) = router();
            let mut seq = 0u64;
            g.bench_function(shape.name(), |b| {
                b.iter(|| {
                    let s = seq.to_be_bytes();
                    seq += 1;
                    let msg = decode(&[b"", &s, black_box(&payload)]);
                    let report = r.ingest(w, Channel::Live, &msg).unwrap();
                    debug_assert!(report.trusted);
                    report.applied.stored_blocks
                })
            });
            // Every batch stored and removed all its blocks.
            let s = r.ingest_stats();
            assert_eq!(s.stored_blocks, s.removed_blocks);
            assert_eq!(r.index().worker_blocks(r.slot_of(w).unwrap()), 0);
        }
        g.finish();
    }
}

type Decode = fn(&[u8]) -> Result<kvroute_wire::KvEventBatch, kvroute_wire::WireError>;
type DecodeMessage = fn(&[&[u8]]) -> KvMessage;

/// `decode_message` (fast path, serde fallback) of a live batch.
fn message_fast(frames: &[&[u8]]) -> KvMessage {
    decode_message(frames).unwrap()
}

/// `decode_message` of a live batch with the serde-only reference decoder.
fn message_serde(frames: &[&[u8]]) -> KvMessage {
    let f = Frames::split(frames).unwrap();
    KvMessage::Batch {
        seq: f.seq,
        batch: decode_payload_serde(f.payload).unwrap(),
    }
}

fn streams(c: &mut Criterion) {
    for engine in [Engine::Vllm, Engine::Sglang] {
        let Some(path) = kvroute_testkit::data_file(engine.stream_file()) else {
            continue;
        };
        let batches: Vec<(u64, Vec<u8>)> = records(&path)
            .filter(|r| r.kind == "batch")
            .map(|r| (r.seq.unwrap(), r.payload()))
            .collect();
        let blocks: u64 = batches
            .iter()
            .flat_map(|(_, p)| decode_payload(p).unwrap().events)
            .map(|e| match e {
                KvEvent::BlockStored(s) => s.block_hashes.len() as u64,
                KvEvent::BlockRemoved(r) => r.block_hashes.len() as u64,
                _ => 0,
            })
            .sum();
        eprintln!(
            "stream_replay/{engine:?}: {} batches, {blocks} blocks per iteration",
            batches.len()
        );
        let id = BenchmarkId::from_parameter(format!("{engine:?}"));
        let mut group = c.benchmark_group("stream_replay");
        group.sample_size(10);
        group.measurement_time(Duration::from_secs(20));
        group.throughput(Throughput::Elements(blocks));
        group.bench_function(id.clone(), |b| {
            b.iter(|| {
                let (r, w) = router();
                for (seq, payload) in &batches {
                    let msg = decode_message(&[b"", &seq.to_be_bytes(), payload]).unwrap();
                    r.ingest(w, Channel::Live, &msg).unwrap();
                }
                r.ingest_stats().contiguous
            })
        });
        group.finish();
        // Decoding alone, fast path and serde-only reference.
        for (name, decode) in [
            ("stream_decode", decode_payload as Decode),
            ("stream_decode_serde", decode_payload_serde),
        ] {
            let mut group = c.benchmark_group(name);
            group.sample_size(10);
            group.measurement_time(Duration::from_secs(10));
            group.throughput(Throughput::Elements(blocks));
            group.bench_function(id.clone(), |b| {
                b.iter(|| {
                    batches
                        .iter()
                        .map(|(_, p)| decode(black_box(p)).unwrap().events.len())
                        .sum::<usize>()
                })
            });
            group.finish();
        }
    }
}

criterion_group!(benches, shapes, streams);
criterion_main!(benches);
