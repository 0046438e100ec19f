//! The fast path of payload decoding: the batch and event shapes engines send, read by a
//! hand-written msgpack reader ([`reader`]) into the raw records of the serde layer
//! ([`crate::raw`]), each event validated by `batch` as soon as it is read and the batch's
//! own fields as serde's are.
//!
//! Shapes read (`docs/WIRE-FORMAT.md`): the batch as `[ts, events, dp_rank, ...]` or a
//! map; events as positional arrays (`["BlockStored", hashes, parent, token_ids,
//! block_size, lora_id, medium, lora_name | SGLang metadata map, extra_keys, group_idx,
//! kv_cache_spec_kind, kv_cache_spec_sliding_window, ...]`, `["BlockRemoved", hashes,
//! medium, group_idx, ...]`, any other tag) or named maps (vLLM 0.33 and SGLang 0.5.23),
//! with the same field rules as the serde visitors: nil for any optional field, last value
//! of a repeated key, unknown keys and trailing elements skipped.
//!
//! The reader gives up ([`read_batch`] returns `None`) on anything it does not recognise:
//! a marker other than the ones the field's serde type reads in the common encodings (a
//! token id that is not a positive fixint or `uint 8/16/32`, a timestamp that is not a
//! `float 64`, a string sent as binary, a non-string map key, an extension), truncated or
//! trailing bytes, invalid UTF-8, an integer out of its field's range, or nesting past
//! [`reader::MAX_NESTING`]. The payload then goes to serde from its start, so every error,
//! and every value of an unusual encoding, is serde's own.

mod reader;

use reader::Reader;

use crate::batch::validate_event;
use crate::error::WireError;
use crate::event::KvEvent;
use crate::raw::{RawBatch, RawEvent, Tag};

/// A batch whose events are validated as they are read: all of them, or the first error.
pub(crate) type FastBatch = RawBatch<Result<Vec<KvEvent>, WireError>>;

/// Container nesting of an event's fields (batch array 1, events array 2, event 3).
const EVENT_DEPTH: usize = 3;

/// The raw batch of a whole payload, or `None` when the payload is not one the fast path
/// recognises (see the module doc) and must go to serde.
pub(crate) fn read_batch(bytes: &[u8]) -> Option<FastBatch> {
    let mut r = Reader::new(bytes);
    let b = batch(&mut r)?;
    r.at_end().then_some(b)
}

fn batch(r: &mut Reader<'_>) -> Option<FastBatch> {
    let mut b = FastBatch {
        len: None,
        ts: None,
        events: None,
        dp_rank: None,
    };
    if r.at_map() {
        for _ in 0..r.map_len()? {
            match r.key()? {
                b"ts" => b.ts = Some(r.f64()?),
                b"events" => b.events = Some(events(r)?),
                b"data_parallel_rank" | b"attn_dp_rank" => b.dp_rank = r.opt(Reader::i64)?,
                _ => r.skip(1)?,
            }
        }
        return Some(b);
    }
    let n = r.array_len()?;
    b.len = Some(n);
    if n >= 1 {
        b.ts = Some(r.f64()?);
    }
    if n >= 2 {
        b.events = Some(events(r)?);
    }
    if n >= 3 {
        b.dp_rank = r.opt(Reader::i64)?;
    }
    r.skip_n(n.saturating_sub(3), 1)?;
    Some(b)
}

/// The events array, each event validated as soon as it is read (no vector of raw events);
/// after the first invalid one the rest are still read, so that the whole payload is known
/// to be one the fast path recognises, but not validated.
fn events(r: &mut Reader<'_>) -> Option<Result<Vec<KvEvent>, WireError>> {
    let n = r.array_len()?;
    let mut out = Ok(Vec::with_capacity(n.min(1024)));
    for _ in 0..n {
        let raw = if r.at_map() {
            named(r)?
        } else {
            positional(r)?
        };
        if let Ok(events) = &mut out {
            match validate_event(raw) {
                Ok(e) => events.push(e),
                Err(e) => out = Err(e),
            }
        }
    }
    Some(out)
}

/// A field reader of a positional event: reads one element into the event.
type Field = fn(&mut Reader<'_>, &mut RawEvent) -> Option<()>;

/// `BlockStored` after its tag, in wire order.
const STORED: [Field; 11] = [
    |r, e| {
        e.block_hashes = r.opt(Reader::hashes)?;
        Some(())
    },
    |r, e| {
        e.parent = r.opt(Reader::hash)?;
        Some(())
    },
    |r, e| {
        e.token_ids = r.opt(Reader::tokens)?;
        Some(())
    },
    |r, e| {
        e.block_size = r.opt(Reader::i64)?;
        Some(())
    },
    |r, e| {
        e.lora_id = r.opt(Reader::i64)?;
        Some(())
    },
    |r, e| {
        e.medium = r.opt(Reader::medium)?;
        Some(())
    },
    name_or_meta,
    |r, e| {
        e.extra_keys = r.opt(extra_keys)?;
        Some(())
    },
    |r, e| {
        e.group_idx = r.opt(Reader::i64)?;
        Some(())
    },
    |r, e| {
        e.spec_kind = r.opt(Reader::string)?;
        Some(())
    },
    |r, e| {
        e.sliding_window = r.opt(Reader::i64)?;
        Some(())
    },
];

/// `BlockRemoved` after its tag, in wire order.
const REMOVED: [Field; 3] = [
    |r, e| {
        e.block_hashes = r.opt(Reader::hashes)?;
        Some(())
    },
    |r, e| {
        e.medium = r.opt(Reader::medium)?;
        Some(())
    },
    |r, e| {
        e.group_idx = r.opt(Reader::i64)?;
        Some(())
    },
];

fn positional(r: &mut Reader<'_>) -> Option<RawEvent> {
    let n = r.array_len()?;
    let mut e = RawEvent {
        len: Some(n),
        ..RawEvent::default()
    };
    if n == 0 {
        return Some(e);
    }
    let tag = r.tag()?;
    let fields: &[Field] = match tag {
        Tag::BlockStored => &STORED,
        Tag::BlockRemoved => &REMOVED,
        _ => &[],
    };
    let read = fields.len().min(n - 1);
    for f in &fields[..read] {
        f(r, &mut e)?;
    }
    r.skip_n(n - 1 - read, EVENT_DEPTH)?;
    e.tag = Some(tag);
    Some(e)
}

/// Position 7 of a positional `BlockStored`: vLLM's `lora_name` (string or nil) or older
/// SGLang's metadata map (`cache_salt`, `lora_name`; other keys skipped).
fn name_or_meta(r: &mut Reader<'_>, e: &mut RawEvent) -> Option<()> {
    if !r.at_map() {
        e.lora_name = r.opt(Reader::string)?;
        return Some(());
    }
    let (mut cache_salt, mut lora_name) = (None, None);
    for _ in 0..r.map_len()? {
        match r.key()? {
            b"cache_salt" => cache_salt = r.opt(Reader::string)?,
            b"lora_name" => lora_name = r.opt(Reader::string)?,
            _ => r.skip(EVENT_DEPTH + 1)?,
        }
    }
    e.cache_salt = cache_salt;
    e.lora_name = lora_name;
    Some(())
}

fn named(r: &mut Reader<'_>) -> Option<RawEvent> {
    let mut e = RawEvent::default();
    for _ in 0..r.map_len()? {
        match r.key()? {
            b"type" => e.tag = Some(r.tag()?),
            b"block_hashes" => e.block_hashes = Some(r.hashes()?),
            b"parent_block_hash" => e.parent = r.opt(Reader::hash)?,
            b"token_ids" => e.token_ids = Some(r.tokens()?),
            b"block_size" | b"page_size" => e.block_size = r.opt(Reader::i64)?,
            b"lora_id" => e.lora_id = r.opt(Reader::i64)?,
            b"medium" => e.medium = r.opt(Reader::medium)?,
            b"lora_name" => e.lora_name = r.opt(Reader::string)?,
            b"cache_salt" => e.cache_salt = r.opt(Reader::string)?,
            b"extra_keys" => e.extra_keys = r.opt(extra_keys)?,
            b"group_idx" => e.group_idx = r.opt(Reader::i64)?,
            b"kv_cache_spec_kind" => e.spec_kind = r.opt(Reader::string)?,
            b"kv_cache_spec_sliding_window" => e.sliding_window = r.opt(Reader::i64)?,
            _ => r.skip(EVENT_DEPTH)?,
        }
    }
    Some(e)
}

/// vLLM's per-block `extra_keys`: an array of (nil or an array of keys).
fn extra_keys(r: &mut Reader<'_>) -> Option<Vec<Option<Vec<crate::event::ExtraKey>>>> {
    let n = r.array_len()?;
    let mut out = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        out.push(r.opt(|r| {
            let k = r.array_len()?;
            let mut keys = Vec::with_capacity(k.min(64));
            for _ in 0..k {
                keys.push(r.extra_key(EVENT_DEPTH + 2)?);
            }
            Some(keys)
        })?);
    }
    Some(out)
}
