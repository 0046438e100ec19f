//! Builds a KV event batch payload (msgpack, named-map events as vLLM 0.33 and SGLang 0.5.23
//! send them) from a few fuzz bytes, so that the `decode_apply` target reaches router
//! states that random msgpack rarely reaches: 16 engine hashes, 8 block contents, parents,
//! copies and conflicting re-stores, the storage tiers, KV groups, LoRA / salt namespaces,
//! vLLM's per-block extra keys (cache salt, multimodal pairs, the LoRA name, a map, a
//! wrong entry count) and a foreign block size.

use std::collections::BTreeMap;

use serde::Serialize;

/// One vLLM extra key.
#[derive(Serialize)]
#[serde(untagged)]
enum Key {
    Str(&'static str),
    /// A multimodal `(identifier, offset)` pair.
    Mm((&'static str, i64)),
    Map(BTreeMap<&'static str, u8>),
}

/// Engine hash number `i` (0..16) on the wire: spread over the 64 bits.
pub fn engine_hash(i: u8) -> u64 {
    u64::from(i & 15).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[derive(Serialize)]
#[serde(untagged)]
enum Event {
    Stored {
        r#type: &'static str,
        block_hashes: Vec<u64>,
        parent_block_hash: Option<u64>,
        token_ids: Vec<u32>,
        block_size: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        lora_id: Option<i64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        medium: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        lora_name: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_salt: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        extra_keys: Option<Vec<Option<Vec<Key>>>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        group_idx: Option<u32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        kv_cache_spec_kind: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        kv_cache_spec_sliding_window: Option<u32>,
    },
    Removed {
        r#type: &'static str,
        block_hashes: Vec<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        medium: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        group_idx: Option<u32>,
    },
    Cleared {
        r#type: &'static str,
    },
}

fn medium(bits: u8) -> Option<&'static str> {
    [None, Some("GPU"), Some("CPU"), Some("DISK")][usize::from(bits & 3)]
}

/// One event from 4 bytes `[a, b, c, d]`:
/// * `a & 7`: 0-4 store, 5-6 remove, 7 `AllBlocksCleared`; `a >> 3 & 3`: tier (absent,
///   GPU, CPU, DISK); `a >> 5`: KV group (none; 0 full attention; 1 full attention; 1
///   sliding window; 1 without a kind; 0 without a kind; none);
/// * store: `b & 15` first engine hash, `b >> 4 & 3` blocks - 1, `b >> 6 == 3` block size 8
///   (else 16); `c >> 7` no parent, else parent `c & 15`; `c >> 4 & 7` namespace (4: LoRA
///   name, 5: LoRA id, 6: cache salt, 7: both name and salt); block `j` holds content
///   `(d + j) & 7`; `d >> 3 & 7` the extra keys (4: vLLM's salt `"tenant-a"` on block 0,
///   5: a multimodal pair `("img-1", j)` on block `j`, 6: `"adapter-a"` on every block,
///   the LoRA key when the LoRA name is `"adapter-a"`, 7: a map on block 0, else none),
///   one entry fewer than the blocks when `d >> 6 == 3`;
/// * remove: `b & 15` first engine hash, `b >> 4 & 3` hashes - 1.
fn event(e: [u8; 4]) -> Event {
    let [a, b, c, d] = e;
    let hashes = |n: u8| -> Vec<u64> { (0..n).map(|j| engine_hash(b.wrapping_add(j))).collect() };
    let count = (b >> 4 & 3) + 1;
    match a & 7 {
        0..=4 => {
            let block_size: u32 = if b >> 6 == 3 { 8 } else { 16 };
            let token_ids = (0..count)
                .flat_map(|j| {
                    let v = u32::from(d.wrapping_add(j) & 7);
                    (0..block_size).map(move |t| v * block_size + t)
                })
                .collect();
            let (group_idx, kind, window) = match a >> 5 {
                1 => (Some(0), Some("full_attention"), None),
                2 => (Some(1), Some("full_attention"), None),
                3 => (Some(1), Some("sliding_window"), Some(128)),
                4 => (Some(1), None, None),
                5 => (Some(0), None, None),
                _ => (None, None, None),
            };
            let ns = c >> 4 & 7;
            let block_keys = |j: u8| -> Option<Vec<Key>> {
                match d >> 3 & 7 {
                    4 => (j == 0).then(|| vec![Key::Str("tenant-a")]),
                    5 => Some(vec![Key::Mm(("img-1", i64::from(j)))]),
                    6 => Some(vec![Key::Str("adapter-a")]),
                    _ => (j == 0).then(|| vec![Key::Map(BTreeMap::from([("k", 1)]))]),
                }
            };
            let entries = if d >> 6 == 3 { count - 1 } else { count };
            let extra_keys = (d >> 3 & 7 >= 4).then(|| (0..entries).map(block_keys).collect());
            Event::Stored {
                r#type: "BlockStored",
                block_hashes: hashes(count),
                parent_block_hash: (c >> 7 == 0).then(|| engine_hash(c)),
                token_ids,
                block_size,
                lora_id: (ns == 5).then_some(3),
                medium: medium(a >> 3),
                lora_name: matches!(ns, 4 | 7).then_some("adapter-a"),
                cache_salt: matches!(ns, 6 | 7).then_some("tenant-1"),
                extra_keys,
                group_idx,
                kv_cache_spec_kind: kind,
                kv_cache_spec_sliding_window: window,
            }
        }
        5 | 6 => Event::Removed {
            r#type: "BlockRemoved",
            block_hashes: hashes(count),
            medium: medium(a >> 3),
            group_idx: [None, Some(0), Some(1), None][usize::from(a >> 5 & 3)],
        },
        _ => Event::Cleared {
            r#type: "AllBlocksCleared",
        },
    }
}

/// A batch payload: the events of `bytes` (4 bytes each); `count >> 2 & 3` picks the batch
/// shape: a 2-element batch (no DP rank), DP rank 0, DP rank 1, DP rank 0; `count >> 4 & 3`
/// is the batch `ts` (seconds), so that a repeated sequence number is sometimes a copy (same
/// `ts`) and sometimes a restarted engine's batch.
pub fn batch(count: u8, bytes: &[u8]) -> Vec<u8> {
    let events: Vec<Event> = bytes
        .chunks_exact(4)
        .map(|c| event([c[0], c[1], c[2], c[3]]))
        .collect();
    let ts = f64::from(count >> 4 & 3);
    let encoded = match count >> 2 & 3 {
        0 => rmp_serde::to_vec_named(&(ts, events)),
        2 => rmp_serde::to_vec_named(&(ts, events, 1u32)),
        _ => rmp_serde::to_vec_named(&(ts, events, 0u32)),
    };
    encoded.expect("msgpack encoding of plain values")
}
