//! The serde layer: msgpack shapes read into permissive raw records, which `batch`
//! validates into typed events. Visitors accept every documented shape (positional arrays
//! of any generation, named maps in any key order, unknown keys ignored); they never judge
//! lengths or ranges, so those failures become typed errors in one place.

use core::fmt;

mod fields;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

pub(crate) use fields::{RawHashes, RawMedium, Tag};

use crate::event::ExtraKey;
use crate::hash::WireHash;

/// Elements of a positional array past the fields this decoder reads (counted, skipped).
fn drain<'de, A: SeqAccess<'de>>(seq: &mut A, mut n: usize) -> Result<usize, A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// A batch as sent: positional (`len` = element count) or named (`len` = `None`). `E` is
/// what holds its events: raw events here, events already validated one by one on the fast
/// path.
#[derive(Debug, Default)]
pub(crate) struct RawBatch<E = Vec<RawEvent>> {
    pub len: Option<usize>,
    pub ts: Option<f64>,
    pub events: Option<E>,
    pub dp_rank: Option<i64>,
}

impl<'de> Deserialize<'de> for RawBatch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(BatchVisitor)
    }
}

struct BatchVisitor;

impl<'de> Visitor<'de> for BatchVisitor {
    type Value = RawBatch;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an event batch (array or map)")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawBatch, A::Error> {
        let mut b = RawBatch::default();
        let mut n = 0;
        if let Some(ts) = seq.next_element::<f64>()? {
            b.ts = Some(ts);
            n += 1;
            if let Some(ev) = seq.next_element::<Vec<RawEvent>>()? {
                b.events = Some(ev);
                n += 1;
                if let Some(rank) = seq.next_element::<Option<i64>>()? {
                    b.dp_rank = rank;
                    n += 1;
                }
            }
        }
        b.len = Some(drain(&mut seq, n)?);
        Ok(b)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawBatch, A::Error> {
        let mut b = RawBatch::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Ts => b.ts = Some(map.next_value()?),
                Key::Events => b.events = Some(map.next_value()?),
                Key::DataParallelRank | Key::AttnDpRank => b.dp_rank = map.next_value()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(b)
    }
}

/// One event as sent, every field optional; `len` is the positional element count.
#[derive(Debug, Default)]
pub(crate) struct RawEvent {
    pub tag: Option<Tag>,
    pub len: Option<usize>,
    pub block_hashes: Option<RawHashes>,
    pub parent: Option<WireHash>,
    pub token_ids: Option<Vec<u32>>,
    pub block_size: Option<i64>,
    pub lora_id: Option<i64>,
    pub medium: Option<RawMedium>,
    pub lora_name: Option<String>,
    pub cache_salt: Option<String>,
    pub extra_keys: Option<Vec<Option<Vec<ExtraKey>>>>,
    pub group_idx: Option<i64>,
    pub spec_kind: Option<String>,
    pub sliding_window: Option<i64>,
}

impl<'de> Deserialize<'de> for RawEvent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(EventVisitor)
    }
}

struct EventVisitor;

/// Reads the next positional element into `slot`; `false` once the array has ended.
fn next<'de, A: SeqAccess<'de>, T: Deserialize<'de>>(
    seq: &mut A,
    n: &mut usize,
    slot: &mut Option<T>,
) -> Result<bool, A::Error> {
    match seq.next_element::<Option<T>>()? {
        Some(v) => {
            *slot = v;
            *n += 1;
            Ok(true)
        }
        None => Ok(false),
    }
}

impl<'de> Visitor<'de> for EventVisitor {
    type Value = RawEvent;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a KV event (tagged array or map)")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawEvent, A::Error> {
        let mut e = RawEvent::default();
        let Some(tag) = seq.next_element::<Tag>()? else {
            e.len = Some(0);
            return Ok(e);
        };
        let mut n = 1;
        match tag {
            Tag::BlockStored => {
                let _ = next(&mut seq, &mut n, &mut e.block_hashes)?
                    && next(&mut seq, &mut n, &mut e.parent)?
                    && next(&mut seq, &mut n, &mut e.token_ids)?
                    && next(&mut seq, &mut n, &mut e.block_size)?
                    && next(&mut seq, &mut n, &mut e.lora_id)?
                    && next(&mut seq, &mut n, &mut e.medium)?
                    && {
                        // vLLM: lora_name (string or nil); older SGLang: metadata map.
                        match seq.next_element::<NameOrMeta>()? {
                            Some(NameOrMeta::Name(name)) => {
                                e.lora_name = name;
                                n += 1;
                                true
                            }
                            Some(NameOrMeta::Meta {
                                cache_salt,
                                lora_name,
                            }) => {
                                e.cache_salt = cache_salt;
                                e.lora_name = lora_name;
                                n += 1;
                                true
                            }
                            None => false,
                        }
                    }
                    && next(&mut seq, &mut n, &mut e.extra_keys)?
                    && next(&mut seq, &mut n, &mut e.group_idx)?
                    && next(&mut seq, &mut n, &mut e.spec_kind)?
                    && next(&mut seq, &mut n, &mut e.sliding_window)?;
            }
            Tag::BlockRemoved => {
                let _ = next(&mut seq, &mut n, &mut e.block_hashes)?
                    && next(&mut seq, &mut n, &mut e.medium)?
                    && next(&mut seq, &mut n, &mut e.group_idx)?;
            }
            _ => {}
        }
        e.tag = Some(tag);
        e.len = Some(drain(&mut seq, n)?);
        Ok(e)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawEvent, A::Error> {
        let mut e = RawEvent::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Type => e.tag = Some(map.next_value()?),
                Key::BlockHashes => e.block_hashes = Some(map.next_value()?),
                Key::ParentBlockHash => e.parent = map.next_value()?,
                Key::TokenIds => e.token_ids = Some(map.next_value()?),
                Key::BlockSize => e.block_size = map.next_value()?,
                Key::LoraId => e.lora_id = map.next_value()?,
                Key::Medium => e.medium = map.next_value()?,
                Key::LoraName => e.lora_name = map.next_value()?,
                Key::CacheSalt => e.cache_salt = map.next_value()?,
                Key::ExtraKeys => e.extra_keys = map.next_value()?,
                Key::GroupIdx => e.group_idx = map.next_value()?,
                Key::KvCacheSpecKind => e.spec_kind = map.next_value()?,
                Key::KvCacheSpecSlidingWindow => e.sliding_window = map.next_value()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(e)
    }
}

/// Position 7 of a positional `BlockStored`: vLLM's `lora_name` or SGLang's metadata map.
enum NameOrMeta {
    Name(Option<String>),
    Meta {
        cache_salt: Option<String>,
        lora_name: Option<String>,
    },
}

impl<'de> Deserialize<'de> for NameOrMeta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NameOrMetaVisitor)
    }
}

struct NameOrMetaVisitor;

impl<'de> Visitor<'de> for NameOrMetaVisitor {
    type Value = NameOrMeta;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a LoRA name, nil, or a metadata map")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<NameOrMeta, E> {
        Ok(NameOrMeta::Name(Some(v.to_owned())))
    }

    fn visit_unit<E: de::Error>(self) -> Result<NameOrMeta, E> {
        Ok(NameOrMeta::Name(None))
    }

    fn visit_none<E: de::Error>(self) -> Result<NameOrMeta, E> {
        Ok(NameOrMeta::Name(None))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NameOrMeta, A::Error> {
        let (mut cache_salt, mut lora_name) = (None, None);
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::CacheSalt => cache_salt = map.next_value()?,
                Key::LoraName => lora_name = map.next_value()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(NameOrMeta::Meta {
            cache_salt,
            lora_name,
        })
    }
}

impl<'de> Deserialize<'de> for ExtraKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ExtraKeyVisitor)
    }
}

struct ExtraKeyVisitor;

impl<'de> Visitor<'de> for ExtraKeyVisitor {
    type Value = ExtraKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an extra key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<ExtraKey, E> {
        Ok(ExtraKey::Str(v.to_owned()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<ExtraKey, E> {
        Ok(ExtraKey::Int(i128::from(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<ExtraKey, E> {
        Ok(ExtraKey::Int(i128::from(v)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<ExtraKey, E> {
        Ok(ExtraKey::Float(v))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<ExtraKey, E> {
        Ok(ExtraKey::Int(i128::from(v)))
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<ExtraKey, E> {
        Ok(ExtraKey::Bytes(v.to_vec()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<ExtraKey, E> {
        Ok(ExtraKey::Nil)
    }

    fn visit_none<E: de::Error>(self) -> Result<ExtraKey, E> {
        Ok(ExtraKey::Nil)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ExtraKey, A::Error> {
        // Each element takes at least one byte of input, so the list grows with the input.
        let mut items = Vec::new();
        while let Some(k) = seq.next_element::<ExtraKey>()? {
            items.push(k);
        }
        Ok(ExtraKey::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ExtraKey, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(ExtraKey::Nested)
    }
}

/// Map keys the decoder knows; anything else (including non-string keys) is `Other`.
enum Key {
    Ts,
    Events,
    DataParallelRank,
    AttnDpRank,
    Type,
    BlockHashes,
    ParentBlockHash,
    TokenIds,
    BlockSize,
    LoraId,
    Medium,
    LoraName,
    CacheSalt,
    ExtraKeys,
    GroupIdx,
    KvCacheSpecKind,
    KvCacheSpecSlidingWindow,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
        Ok(match v {
            "ts" => Key::Ts,
            "events" => Key::Events,
            "data_parallel_rank" => Key::DataParallelRank,
            "attn_dp_rank" => Key::AttnDpRank,
            "type" => Key::Type,
            "block_hashes" => Key::BlockHashes,
            "parent_block_hash" => Key::ParentBlockHash,
            "token_ids" => Key::TokenIds,
            "block_size" | "page_size" => Key::BlockSize,
            "lora_id" => Key::LoraId,
            "medium" => Key::Medium,
            "lora_name" => Key::LoraName,
            "cache_salt" => Key::CacheSalt,
            "extra_keys" => Key::ExtraKeys,
            "group_idx" => Key::GroupIdx,
            "kv_cache_spec_kind" => Key::KvCacheSpecKind,
            "kv_cache_spec_sliding_window" => Key::KvCacheSpecSlidingWindow,
            _ => Key::Other,
        })
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Key, E> {
        Ok(Key::Other)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Key, E> {
        Ok(Key::Other)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Key, E> {
        Ok(Key::Other)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Key, E> {
        Ok(Key::Other)
    }

    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Key, E> {
        Ok(Key::Other)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Key, E> {
        Ok(Key::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Key, A::Error> {
        drain(&mut seq, 0)?;
        Ok(Key::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Key, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Key::Other)
    }
}
