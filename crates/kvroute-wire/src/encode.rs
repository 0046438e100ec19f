//! Encoding of the engines' wire formats: the inverse of the decoders, for emulated engines
//! and tests, so they need not copy the engines' message classes.
//!
//! What it writes is what vLLM 0.33's and SGLang 0.5.23's own publishers send
//! (`docs/WIRE-FORMAT.md`): a batch is the msgpack array `[ts, events, dp_rank]`; each event
//! is a named map with a `type` key (`BlockStored`, `BlockRemoved`, `AllBlocksCleared`),
//! fields equal to their default (nil) omitted, as msgspec's `omit_defaults` does; a live
//! message is `[topic, seq (8 bytes big-endian), payload]`; the replay end marker is
//! `[topic, 0xFFFF_FFFF_FFFF_FFFF, empty]`; a `LoadStat` is SGLang's tagged array.
//!
//! Block hashes are written as unsigned integers (vLLM's default) or as signed ones
//! (SGLang's, [`HashStyle`]); both decode to the same [`EngineHash`].
//! Encoding cannot fail: every typed value has a wire form.

use crate::event::{BlockRemoved, BlockStored, KvEvent, KvEventBatch, Medium};
use crate::frame::END_OF_REPLAY_SEQ;
use kvroute_core::EngineHash;
use rmp::encode as w;

/// How block hashes are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum HashStyle {
    /// Unsigned 64-bit integers (vLLM's default, `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`).
    #[default]
    Unsigned,
    /// Signed 64-bit integers, the two's-complement reading of the key (SGLang).
    Signed,
}

// Writing into a `Vec<u8>` never fails, so every `rmp` result below is infallible; the
// `let _ =` keeps the encoder panic-free all the same.
fn str(out: &mut Vec<u8>, s: &str) {
    let _ = w::write_str(out, s);
}

/// An array of block hashes in `style`.
fn hashes(out: &mut Vec<u8>, hs: &[EngineHash], style: HashStyle) {
    let _ = w::write_array_len(out, hs.len() as u32);
    for h in hs {
        hash(out, h.0, style);
    }
}

fn hash(out: &mut Vec<u8>, h: u64, style: HashStyle) {
    let _ = match style {
        HashStyle::Unsigned => w::write_uint(out, h).map(|_| ()),
        HashStyle::Signed => w::write_sint(out, h as i64).map(|_| ()),
    };
}

fn medium(m: &Medium) -> Option<&str> {
    match m {
        Medium::Gpu => None,
        Medium::Host => Some("CPU_PINNED"),
        Medium::Disk => Some("DISK"),
        Medium::External => Some("EXTERNAL"),
        Medium::Unknown(s) => Some(s),
    }
}

fn stored(out: &mut Vec<u8>, e: &BlockStored, style: HashStyle) {
    let med = medium(&e.medium);
    let optional = [
        e.parent_block_hash.is_some(),
        e.lora_id.is_some(),
        med.is_some(),
        e.lora_name.is_some(),
        e.cache_salt.is_some(),
        e.group_idx.is_some(),
    ];
    // type, block_hashes, token_ids, block_size, and the optional fields that are set.
    let len = 4 + optional.iter().filter(|&&b| b).count() as u32;
    let _ = w::write_map_len(out, len);
    str(out, "type");
    str(out, "BlockStored");
    str(out, "block_hashes");
    hashes(out, &e.block_hashes, style);
    if let Some(p) = e.parent_block_hash {
        str(out, "parent_block_hash");
        hash(out, p.0, style);
    }
    str(out, "token_ids");
    let _ = w::write_array_len(out, e.token_ids.len() as u32);
    for &t in &e.token_ids {
        let _ = w::write_uint(out, u64::from(t));
    }
    str(out, "block_size");
    let _ = w::write_uint(out, u64::from(e.block_size));
    if let Some(id) = e.lora_id {
        str(out, "lora_id");
        let _ = w::write_sint(out, id);
    }
    if let Some(m) = med {
        str(out, "medium");
        str(out, m);
    }
    if let Some(n) = &e.lora_name {
        str(out, "lora_name");
        str(out, n);
    }
    if let Some(s) = &e.cache_salt {
        str(out, "cache_salt");
        str(out, s);
    }
    if let Some(g) = e.group_idx {
        str(out, "group_idx");
        let _ = w::write_uint(out, u64::from(g));
    }
}

fn removed(out: &mut Vec<u8>, e: &BlockRemoved, style: HashStyle) {
    let med = medium(&e.medium);
    let len = 2 + u32::from(med.is_some()) + u32::from(e.group_idx.is_some());
    let _ = w::write_map_len(out, len);
    str(out, "type");
    str(out, "BlockRemoved");
    str(out, "block_hashes");
    hashes(out, &e.block_hashes, style);
    if let Some(m) = med {
        str(out, "medium");
        str(out, m);
    }
    if let Some(g) = e.group_idx {
        str(out, "group_idx");
        let _ = w::write_uint(out, u64::from(g));
    }
}

/// Appends one event as a named map. `Unknown` events are written as a map holding only
/// their `type`. vLLM's `extra_keys` and the sliding-window fields are not written.
pub fn encode_event(out: &mut Vec<u8>, event: &KvEvent, style: HashStyle) {
    match event {
        KvEvent::BlockStored(e) => stored(out, e, style),
        KvEvent::BlockRemoved(e) => removed(out, e, style),
        KvEvent::AllBlocksCleared => {
            let _ = w::write_map_len(out, 1);
            str(out, "type");
            str(out, "AllBlocksCleared");
        }
        KvEvent::Unknown { tag } => {
            let _ = w::write_map_len(out, 1);
            str(out, "type");
            str(out, tag);
        }
    }
}

/// The msgpack payload of one batch: `[ts, [events as maps], dp_rank | nil]`, as vLLM 0.33
/// and SGLang 0.5.23 encode their `EventBatch`.
pub fn encode_batch(batch: &KvEventBatch, style: HashStyle) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    let _ = w::write_array_len(&mut out, 3);
    let _ = w::write_f64(&mut out, batch.ts);
    let _ = w::write_array_len(&mut out, batch.events.len() as u32);
    for e in &batch.events {
        encode_event(&mut out, e, style);
    }
    match batch.dp_rank {
        Some(r) => {
            let _ = w::write_uint(&mut out, u64::from(r));
        }
        None => {
            let _ = w::write_nil(&mut out);
        }
    }
    out
}

/// The three frames of a live message (or of a newer publisher's replay answer):
/// `[topic, seq as 8 big-endian bytes, payload]`.
pub fn encode_frames(topic: &str, seq: u64, payload: Vec<u8>) -> [Vec<u8>; 3] {
    [
        topic.as_bytes().to_vec(),
        seq.to_be_bytes().to_vec(),
        payload,
    ]
}

/// The replay end marker as the engines send it: `[topic, 0xFFFF_FFFF_FFFF_FFFF, empty]`
/// (vLLM and SGLang send an empty topic frame here).
pub fn encode_end_of_replay(topic: &str) -> [Vec<u8>; 3] {
    encode_frames(topic, END_OF_REPLAY_SEQ, Vec::new())
}

/// SGLang's pushed load gauge: `["LoadStat", running, waiting, num_tokens,
/// max_total_num_tokens, attn_dp_rank]`, the six positions every SGLang sends (0.5.23
/// appends more, which the decoder ignores).
pub fn encode_load_stat(
    running: i64,
    waiting: i64,
    num_tokens: i64,
    max_total_num_tokens: i64,
    dp_rank: u32,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    let _ = w::write_array_len(&mut out, 6);
    str(&mut out, "LoadStat");
    for v in [running, waiting, num_tokens, max_total_num_tokens] {
        let _ = w::write_sint(&mut out, v);
    }
    let _ = w::write_uint(&mut out, u64::from(dp_rank));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{KvMessage, decode_load_stat, decode_message};
    use kvroute_core::EngineHash;

    fn store(hashes: &[u64], parent: Option<u64>) -> KvEvent {
        KvEvent::BlockStored(BlockStored {
            block_hashes: hashes.iter().map(|&h| EngineHash(h)).collect(),
            parent_block_hash: parent.map(EngineHash),
            token_ids: (0..hashes.len() as u32 * 2).collect(),
            block_size: 2,
            lora_id: None,
            medium: Medium::Gpu,
            lora_name: Some("adapter".into()),
            cache_salt: None,
            extra_keys: None,
            group_idx: None,
            kv_cache_spec_kind: None,
            kv_cache_spec_sliding_window: None,
            encoding: crate::EventEncoding::Named,
        })
    }

    #[test]
    fn batches_decode_back_in_both_hash_styles() {
        let batch = KvEventBatch {
            ts: 1_700_000_000.25,
            events: vec![
                KvEvent::AllBlocksCleared,
                store(&[u64::MAX, 7], Some(1 << 63)),
                KvEvent::BlockRemoved(BlockRemoved {
                    block_hashes: vec![EngineHash(7)],
                    medium: Medium::Host,
                    group_idx: None,
                    encoding: crate::EventEncoding::Named,
                }),
            ],
            dp_rank: Some(3),
        };
        for style in [HashStyle::Unsigned, HashStyle::Signed] {
            let [t, s, p] = encode_frames("kv", 41, encode_batch(&batch, style));
            let msg = decode_message(&[&t, &s, &p]).unwrap();
            assert_eq!(
                msg,
                KvMessage::Batch {
                    seq: 41,
                    batch: batch.clone()
                }
            );
        }
        let [t, s, p] = encode_end_of_replay("");
        assert_eq!(decode_message(&[&t, &s, &p]), Ok(KvMessage::EndOfReplay));
    }

    #[test]
    fn load_stat_decodes_back() {
        let st = decode_load_stat(&encode_load_stat(3, 4, 500, 1000, 2)).unwrap();
        assert_eq!(
            (
                st.running,
                st.waiting,
                st.num_tokens,
                st.max_total_num_tokens,
                st.dp_rank
            ),
            (3, 4, 500, 1000, 2)
        );
    }
}
