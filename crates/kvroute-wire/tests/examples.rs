//! One test per encoded example in `shared/data/kv_events/engine_examples.json` (encoded by
//! vLLM 0.33.0's and SGLang 0.5.23's own classes) and `examples.json` (older generations):
//! the payload (and the ZMQ frames, where given) decode to the documented decoded form, and
//! re-hashing each store's token ids gives the hashes an independent XXH3 computation
//! gives, which are also the keys the prefix index matches on.

mod support;

use kvroute_core::{SequenceHash, Slot};
use kvroute_index::BlockHasher;
use kvroute_index::index::{IndexConfig, PrefixIndex};
use kvroute_wire::{
    BlockStored, EventEncoding, ExtraKey, KvEvent, KvEventBatch, KvMessage, Medium, decode_message,
    decode_payload,
};
use serde_json::Value;
use support::{block_store, chained, data_file, local_hashes, seed, unhex};

const BR_FIELDS: [&str; 3] = ["block_hashes", "medium", "group_idx"];

fn example(file: &str, name: &str) -> Option<Value> {
    let path = data_file(&format!("kv_events/{file}"))?;
    let all: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    Some(all[name].clone())
}

/// The documented hash as a `u64`: integers as their two's-complement bits; binary
/// (`{"bin": hex}` or `"bin:hex"`) as the last 8 bytes big-endian.
fn doc_hash(v: &Value) -> u64 {
    if let Some(u) = v.as_u64() {
        return u;
    }
    if let Some(i) = v.as_i64() {
        return i as u64;
    }
    let hex = match v {
        Value::Object(o) => o["bin"].as_str().unwrap(),
        Value::String(s) => s.strip_prefix("bin:").unwrap(),
        _ => panic!("unexpected hash {v}"),
    };
    let b = unhex(hex);
    assert_eq!(b.len(), 32);
    b[24..]
        .iter()
        .fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
}

fn doc_medium(v: &Value) -> Medium {
    match v.as_str() {
        None | Some("GPU") => Medium::Gpu,
        Some("CPU") | Some("CPU_PINNED") => Medium::Host,
        Some("DISK") | Some("STORAGE") => Medium::Disk,
        Some(other) => panic!("unexpected medium {other}"),
    }
}

/// The documented event as a field map, plus its positional length (`None` for a map).
fn fields(ev: &Value) -> (String, serde_json::Map<String, Value>, Option<usize>) {
    match ev {
        Value::Array(a) => {
            let tag = a[0].as_str().unwrap().to_string();
            let names: &[&str] = match tag.as_str() {
                "BlockStored" => &support::STORE_FIELDS,
                "BlockRemoved" => &BR_FIELDS,
                _ => &[],
            };
            let map = names
                .iter()
                .zip(&a[1..])
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect();
            (tag, map, Some(a.len()))
        }
        Value::Object(o) => (o["type"].as_str().unwrap().to_string(), o.clone(), None),
        _ => panic!("unexpected event {ev}"),
    }
}

fn opt_str(m: &serde_json::Map<String, Value>, k: &str) -> Option<String> {
    m.get(k).and_then(Value::as_str).map(str::to_string)
}

fn opt_u64(m: &serde_json::Map<String, Value>, k: &str) -> Option<u64> {
    m.get(k).and_then(Value::as_u64)
}

fn check_store(got: &BlockStored, m: &serde_json::Map<String, Value>) {
    let hashes: Vec<u64> = m["block_hashes"]
        .as_array()
        .unwrap()
        .iter()
        .map(doc_hash)
        .collect();
    assert_eq!(
        got.block_hashes.iter().map(|h| h.0).collect::<Vec<_>>(),
        hashes
    );
    let parent = m
        .get("parent_block_hash")
        .filter(|v| !v.is_null())
        .map(doc_hash);
    assert_eq!(got.parent_block_hash.map(|h| h.0), parent);
    let tokens: Vec<u32> = m["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| u32::try_from(t.as_u64().unwrap()).unwrap())
        .collect();
    assert_eq!(got.token_ids, tokens);
    assert_eq!(u64::from(got.block_size), m["block_size"].as_u64().unwrap());
    assert_eq!(got.lora_id, m.get("lora_id").and_then(Value::as_i64));
    assert_eq!(
        got.medium,
        doc_medium(m.get("medium").unwrap_or(&Value::Null))
    );
    assert_eq!(got.lora_name, opt_str(m, "lora_name"));
    assert_eq!(got.cache_salt, opt_str(m, "cache_salt"));
    assert_eq!(got.group_idx.map(u64::from), opt_u64(m, "group_idx"));
    assert_eq!(got.kv_cache_spec_kind, opt_str(m, "kv_cache_spec_kind"));
    assert_eq!(
        got.kv_cache_spec_sliding_window.map(u64::from),
        opt_u64(m, "kv_cache_spec_sliding_window")
    );
    match m.get("extra_keys").filter(|v| !v.is_null()) {
        None => assert_eq!(got.extra_keys, None),
        Some(v) => {
            let want: Vec<Option<Vec<ExtraKey>>> = v
                .as_array()
                .unwrap()
                .iter()
                .map(|b| {
                    b.as_array().map(|keys| {
                        keys.iter()
                            .map(|k| ExtraKey::Str(k.as_str().unwrap().to_string()))
                            .collect()
                    })
                })
                .collect();
            assert_eq!(got.extra_keys.as_ref(), Some(&want));
        }
    }
}

/// Compares a decoded batch with its documented form.
fn check_batch(got: &KvEventBatch, doc: &Value) {
    let doc = doc.as_array().unwrap();
    // serde_json's default float parsing may be off by one ulp from the shortest
    // round-trip text the examples carry; the msgpack float itself is exact.
    let ts = doc[0].as_f64().unwrap();
    assert!(
        (got.ts - ts).abs() <= ts.abs() * f64::EPSILON,
        "{} vs {ts}",
        got.ts
    );
    assert_eq!(
        got.dp_rank.map(u64::from),
        doc.get(2).and_then(Value::as_u64)
    );
    let events = doc[1].as_array().unwrap();
    assert_eq!(got.events.len(), events.len());
    for (g, d) in got.events.iter().zip(events) {
        let (tag, m, len) = fields(d);
        let enc = len.map_or(EventEncoding::Named, EventEncoding::Positional);
        match (g, tag.as_str()) {
            (KvEvent::BlockStored(s), "BlockStored") => {
                assert_eq!(s.encoding, enc);
                check_store(s, &m);
            }
            (KvEvent::BlockRemoved(r), "BlockRemoved") => {
                assert_eq!(r.encoding, enc);
                let hashes: Vec<u64> = m["block_hashes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(doc_hash)
                    .collect();
                assert_eq!(
                    r.block_hashes.iter().map(|h| h.0).collect::<Vec<_>>(),
                    hashes
                );
                assert_eq!(
                    r.medium,
                    doc_medium(m.get("medium").unwrap_or(&Value::Null))
                );
                assert_eq!(r.group_idx.map(u64::from), opt_u64(&m, "group_idx"));
            }
            (KvEvent::AllBlocksCleared, "AllBlocksCleared") => {}
            (g, t) => panic!("decoded {g:?}, documented {t}"),
        }
    }
}

/// Re-hashes every store: `BlockHasher` equals the independent XXH3 computation, and a
/// sequence-start store lands in the index under exactly those keys.
fn check_hashes(batch: &KvEventBatch) {
    for ev in &batch.events {
        let KvEvent::BlockStored(s) = ev else {
            continue;
        };
        let bs = s.block_size as usize;
        // The documented rule: the LoRA name, else the decimal `lora_id`.
        let lora = s.lora_name.clone().or(s.lora_id.map(|id| id.to_string()));
        let seed = seed(lora.as_deref(), s.cache_salt.as_deref());
        assert_eq!(s.namespace().seed(), seed);
        let local = local_hashes(&s.token_ids, bs, seed);
        let hasher = BlockHasher::new(bs, s.namespace());
        let mut mine = Vec::new();
        hasher.local_hashes_into(&s.token_ids, &mut mine);
        assert_eq!(mine.iter().map(|h| h.0).collect::<Vec<_>>(), local);
        if s.parent_block_hash.is_some() {
            continue; // chained from a block outside the example
        }
        let want = chained(&local);
        let mut seq = Vec::new();
        hasher.sequence_hashes_into(&s.token_ids, None, &mut seq);
        assert_eq!(seq.iter().map(|h| h.0).collect::<Vec<_>>(), want);
        let idx = PrefixIndex::new({
            let mut c = IndexConfig::default();
            c.worker_slots = 1;
            c.block_size = bs;
            c
        })
        .unwrap();
        idx.store(Slot(0), &block_store(s)).unwrap();
        let keys: Vec<SequenceHash> = want.iter().map(|&h| SequenceHash(h)).collect();
        let mut out = idx.new_overlaps();
        idx.match_prefix(&keys, &mut out);
        assert_eq!(out.get(Slot(0)) as usize, keys.len());
    }
}

fn run(file: &str, name: &str) {
    let Some(ex) = example(file, name) else {
        return;
    };
    let payload = unhex(ex["payload_hex"].as_str().unwrap());
    let batch = decode_payload(&payload).unwrap();
    check_batch(&batch, &ex["decoded"]);
    check_hashes(&batch);
    if let Some(frames) = ex.get("zmq_frames_hex").and_then(Value::as_array) {
        let frames: Vec<Vec<u8>> = frames.iter().map(|f| unhex(f.as_str().unwrap())).collect();
        let seq = frames[1].iter().fold(0u64, |a, &b| (a << 8) | u64::from(b));
        let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        assert_eq!(
            decode_message(&refs).unwrap(),
            KvMessage::Batch {
                seq,
                batch: batch.clone()
            }
        );
        // The same batch as an older replay message (no topic).
        assert_eq!(
            decode_message(&refs[1..]).unwrap(),
            KvMessage::Batch { seq, batch }
        );
    }
}

macro_rules! examples {
    ($($test:ident => $file:literal, $name:literal;)*) => {
        $(
            #[test]
            fn $test() {
                run($file, $name);
            }
        )*
    };
}

examples! {
    engine_vllm_0_33_store_remove_clear => "engine_examples.json", "vllm_0.33.0_store_remove_clear";
    engine_vllm_0_33_child_with_parent_lora_group => "engine_examples.json", "vllm_0.33.0_child_with_parent_lora_group";
    engine_vllm_0_33_bytes_hashes_cpu_tier => "engine_examples.json", "vllm_0.33.0_bytes_hashes_cpu_tier";
    engine_sglang_0_5_23_store_remove_clear => "engine_examples.json", "sglang_0.5.23_store_remove_clear";
    vllm_legacy_array_pre42892 => "examples.json", "vllm_legacy_array_pre42892";
    vllm_legacy_array_v0_10 => "examples.json", "vllm_legacy_array_v0_10";
    vllm_current_map_events => "examples.json", "vllm_current_map_events";
    sglang_array => "examples.json", "sglang_array";
    vllm_legacy_bytes_hashes => "examples.json", "vllm_legacy_bytes_hashes";
}

/// The binary-hash rule reproduces vLLM's integer form: the same two blocks published as
/// integers (`vllm_legacy_array_v0_10`) and as 32-byte digests (`vllm_legacy_bytes_hashes`)
/// get the same engine hashes.
#[test]
fn binary_and_integer_hashes_of_the_same_blocks_agree() {
    let (Some(a), Some(b)) = (
        example("examples.json", "vllm_legacy_array_v0_10"),
        example("examples.json", "vllm_legacy_bytes_hashes"),
    ) else {
        return;
    };
    let hashes = |ex: &Value| match &decode_payload(&unhex(ex["payload_hex"].as_str().unwrap()))
        .unwrap()
        .events[0]
    {
        KvEvent::BlockStored(s) => s.block_hashes.clone(),
        e => panic!("{e:?}"),
    };
    let (ha, hb) = (hashes(&a), hashes(&b));
    assert_eq!(ha, hb);
    assert_eq!(ha[0].0, 4_496_472_097_645_117_931);
}
