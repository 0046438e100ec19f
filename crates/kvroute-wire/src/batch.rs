//! Payload decoding: msgpack bytes to a validated [`KvEventBatch`].
//!
//! Accepted shapes (`docs/WIRE-FORMAT.md`, "Batch", "Events"):
//! * batch: `[ts, events, dp_rank]`, `[ts, events]`, or a map with `ts`, `events` and
//!   `data_parallel_rank` or `attn_dp_rank` (other keys ignored);
//! * `BlockStored` arrays of 6 to 12 elements (tag included; position 7 may be SGLang's
//!   trailing metadata map instead of vLLM's `lora_name`), `BlockRemoved` arrays of 2 to 4,
//!   `AllBlocksCleared` arrays of 1; named maps with a `type` key, unknown keys ignored.
//!
//! Validation is whole-batch: the first bad event rejects the batch.

use std::io::Cursor;

use serde::Deserialize;

use crate::error::WireError;
use crate::event::{BlockRemoved, BlockStored, EventEncoding, KvEvent, KvEventBatch, Medium};
use crate::hash::WireHash;
use crate::raw::{RawBatch, RawEvent, Tag};

/// Deepest msgpack nesting accepted (a batch needs 5 levels; extra keys a few more).
pub const MAX_DEPTH: usize = 32;

/// Deserializes one msgpack value that must span all of `bytes`.
pub(crate) fn from_msgpack<'de, T: Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, WireError> {
    let mut de = rmp_serde::Deserializer::new(Cursor::new(bytes));
    de.set_max_depth(MAX_DEPTH);
    let value = T::deserialize(&mut de).map_err(WireError::malformed)?;
    let used = usize::try_from(de.position()).unwrap_or(usize::MAX);
    match bytes.len().checked_sub(used) {
        Some(0) => Ok(value),
        Some(len) => Err(WireError::TrailingBytes { len }),
        None => Err(WireError::malformed("read past the end")),
    }
}

/// Decodes one msgpack KV event batch payload (the last ZMQ frame).
///
/// The common shapes are read by the fast path (`fast`: a hand-written msgpack reader for
/// the hot shapes); anything it does not recognise goes to serde (`rmp-serde`), so the
/// result, and every error, is the one [`decode_payload_serde`] gives for the same bytes.
///
/// # Errors
/// [`WireError::Malformed`] for msgpack that does not have a batch's shape,
/// [`WireError::TrailingBytes`], and the validation errors of [`WireError`] for a
/// batch or event that breaks the documented shapes; nothing is returned for a batch
/// with any bad event.
pub fn decode_payload(bytes: &[u8]) -> Result<KvEventBatch, WireError> {
    decode_payload_traced(bytes).0
}

/// Which reader turned a payload's msgpack into raw records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DecodePath {
    /// The fast path's hand-written reader recognised the whole payload.
    Fast,
    /// The fast path did not recognise it (an unusual encoding, or malformed bytes); serde
    /// read it.
    Serde,
}

/// [`decode_payload`], also saying which reader read the payload (the result is the
/// same either way): lets tests and [`WireCounters`](crate::WireCounters) see how often
/// the fast path falls back.
///
/// # Errors
/// As [`decode_payload`].
pub fn decode_payload_traced(bytes: &[u8]) -> (Result<KvEventBatch, WireError>, DecodePath) {
    match crate::fast::read_batch(bytes) {
        Some(raw) => (validate_batch(raw, |events| events), DecodePath::Fast),
        None => (decode_payload_serde(bytes), DecodePath::Serde),
    }
}

/// The reference decoder: [`decode_payload`] with serde (`rmp-serde` and the visitors of
/// the raw records) reading every payload, never the fast path. Slower; the result and
/// error [`decode_payload`] must give, for differential tests and the fuzz target.
///
/// # Errors
/// As [`decode_payload`].
pub fn decode_payload_serde(bytes: &[u8]) -> Result<KvEventBatch, WireError> {
    let raw: RawBatch = from_msgpack(bytes)?;
    validate_batch(raw, |events| {
        events.into_iter().map(validate_event).collect()
    })
}

/// Checks a batch's own fields in order (element count, `ts`, `events`, rank), then gives
/// the result of `validate_events` on its events (all valid, or the first event's error).
fn validate_batch<E>(
    raw: RawBatch<E>,
    validate_events: impl FnOnce(E) -> Result<Vec<KvEvent>, WireError>,
) -> Result<KvEventBatch, WireError> {
    const RECORD: &str = "batch";
    if let Some(got) = raw.len {
        if got < 2 {
            return Err(WireError::TooFewFields {
                record: RECORD,
                got,
                min: 2,
            });
        }
        if got > 3 {
            return Err(WireError::TooManyFields {
                record: RECORD,
                got,
                max: 3,
            });
        }
    }
    let ts = raw.ts.ok_or(WireError::MissingField {
        record: RECORD,
        field: "ts",
    })?;
    if !ts.is_finite() {
        return Err(WireError::NonFiniteTimestamp { bits: ts.to_bits() });
    }
    let raw_events = raw.events.ok_or(WireError::MissingField {
        record: RECORD,
        field: "events",
    })?;
    let dp_rank = raw
        .dp_rank
        .map(|r| u32_field("data_parallel_rank", r))
        .transpose()?;
    let events = validate_events(raw_events)?;
    Ok(KvEventBatch {
        ts,
        events,
        dp_rank,
    })
}

fn u32_field(field: &'static str, v: i64) -> Result<u32, WireError> {
    u32::try_from(v).map_err(|_| WireError::OutOfRange {
        field,
        value: v,
        valid: crate::error::U32_RANGE,
    })
}

fn check_len(
    record: &'static str,
    len: Option<usize>,
    min: usize,
    max: usize,
) -> Result<(), WireError> {
    match len {
        Some(got) if got < min => Err(WireError::TooFewFields { record, got, min }),
        Some(got) if got > max => Err(WireError::TooManyFields { record, got, max }),
        _ => Ok(()),
    }
}

/// The typed event of a raw one, or why it is rejected.
pub(crate) fn validate_event(e: RawEvent) -> Result<KvEvent, WireError> {
    let encoding = match e.len {
        Some(n) => EventEncoding::Positional(n),
        None => EventEncoding::Named,
    };
    let Some(tag) = e.tag else {
        return Err(WireError::UnexpectedTag { tag: String::new() });
    };
    match tag {
        Tag::BlockStored => {
            const R: &str = "BlockStored";
            check_len(R, e.len, 6, 12)?;
            let missing = |field| WireError::MissingField { record: R, field };
            let block_hashes = e
                .block_hashes
                .ok_or(missing("block_hashes"))?
                .into_engine_hashes()?;
            let token_ids = e.token_ids.ok_or(missing("token_ids"))?;
            let bs = e.block_size.ok_or(missing("block_size"))?;
            let block_size = match u32::try_from(bs) {
                Ok(v) if v > 0 => v,
                _ => {
                    return Err(WireError::OutOfRange {
                        field: "block_size",
                        value: bs,
                        valid: crate::error::BLOCK_SIZE_RANGE,
                    });
                }
            };
            let expected = (block_size as usize).checked_mul(block_hashes.len());
            if expected != Some(token_ids.len()) {
                return Err(WireError::TokenCount {
                    blocks: block_hashes.len(),
                    block_size,
                    tokens: token_ids.len(),
                });
            }
            Ok(KvEvent::BlockStored(BlockStored {
                block_hashes,
                parent_block_hash: e.parent.map(WireHash::to_engine_hash).transpose()?,
                token_ids,
                block_size,
                lora_id: e.lora_id,
                medium: e.medium.map_or(Medium::Gpu, |m| m.0),
                lora_name: e.lora_name,
                cache_salt: e.cache_salt,
                extra_keys: e.extra_keys,
                group_idx: e.group_idx.map(|g| u32_field("group_idx", g)).transpose()?,
                kv_cache_spec_kind: e.spec_kind,
                kv_cache_spec_sliding_window: e
                    .sliding_window
                    .map(|w| u32_field("kv_cache_spec_sliding_window", w))
                    .transpose()?,
                encoding,
            }))
        }
        Tag::BlockRemoved => {
            const R: &str = "BlockRemoved";
            check_len(R, e.len, 2, 4)?;
            let raw = e.block_hashes.ok_or(WireError::MissingField {
                record: R,
                field: "block_hashes",
            })?;
            Ok(KvEvent::BlockRemoved(BlockRemoved {
                block_hashes: raw.into_engine_hashes()?,
                medium: e.medium.map_or(Medium::Gpu, |m| m.0),
                group_idx: e.group_idx.map(|g| u32_field("group_idx", g)).transpose()?,
                encoding,
            }))
        }
        Tag::AllBlocksCleared => {
            check_len("AllBlocksCleared", e.len, 1, 1)?;
            Ok(KvEvent::AllBlocksCleared)
        }
        Tag::Other(tag) => Ok(KvEvent::Unknown { tag }),
    }
}
