//! SGLang's pushed load frames (ZMQ topic `load`): msgpack
//! `["LoadStat", running, waiting, num_tokens, max_total_num_tokens, attn_dp_rank]`.
//! A shorter array is malformed ([`WireError::TooFewFields`]), never zero-filled. Positions
//! after the sixth are ignored: SGLang 0.5.23's `LoadStat`
//! (`sglang/srt/managers/scheduler_components/load_publisher.py`) appends
//! `num_waiting_uncached_tokens`, `num_total_tokens`, `max_running_requests`,
//! `total_prefill_uncached_tokens` and `total_prefill_busy_us`, and says routers ignore
//! appended fields.

use core::fmt;
use kvroute_core::load::{TokenCapacity, check_token_capacity, int_count as count};

use kvroute_core::{LoadSample, UpdateError, WorkerId};
use serde::de::{Deserialize, Deserializer, IgnoredAny, SeqAccess, Visitor};

use crate::batch::from_msgpack;
use crate::error::WireError;

/// One decoded `LoadStat` frame, values as reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SglangLoadStat {
    /// Requests running (requests).
    pub running: i64,
    /// Requests waiting (requests).
    pub waiting: i64,
    /// KV tokens in use (tokens).
    pub num_tokens: i64,
    /// KV token capacity (tokens).
    pub max_total_num_tokens: i64,
    /// The attention DP rank.
    pub dp_rank: u32,
}

const FIELDS: usize = 6;

struct Raw {
    tag: Option<String>,
    nums: [i64; FIELDS - 1],
    len: usize,
}

impl<'de> Deserialize<'de> for Raw {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RawVisitor)
    }
}

struct RawVisitor;

impl<'de> Visitor<'de> for RawVisitor {
    type Value = Raw;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a LoadStat array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Raw, A::Error> {
        let mut raw = Raw {
            tag: None,
            nums: [0; FIELDS - 1],
            len: 0,
        };
        raw.tag = seq.next_element::<String>()?;
        if raw.tag.is_none() {
            return Ok(raw);
        }
        raw.len = 1;
        for slot in raw.nums.iter_mut() {
            match seq.next_element::<i64>()? {
                Some(v) => {
                    *slot = v;
                    raw.len += 1;
                }
                None => return Ok(raw),
            }
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {
            raw.len += 1;
        }
        Ok(raw)
    }
}

/// Decodes a `LoadStat` payload.
///
/// # Errors
/// [`WireError::Malformed`] (not an array, a non-integer field), [`WireError::UnexpectedTag`],
/// [`WireError::TooFewFields`], [`WireError::OutOfRange`]
/// for a rank that is not a `u32`, [`WireError::TrailingBytes`].
pub fn decode_load_stat(payload: &[u8]) -> Result<SglangLoadStat, WireError> {
    const R: &str = "LoadStat";
    let raw: Raw = from_msgpack(payload)?;
    if raw.tag.as_deref() != Some(R) {
        return Err(WireError::UnexpectedTag {
            tag: raw.tag.unwrap_or_default(),
        });
    }
    if raw.len < FIELDS {
        return Err(WireError::TooFewFields {
            record: R,
            got: raw.len,
            min: FIELDS,
        });
    }
    let [running, waiting, num_tokens, max_total_num_tokens, rank] = raw.nums;
    let dp_rank = u32::try_from(rank).map_err(|_| WireError::OutOfRange {
        field: "attn_dp_rank",
        value: rank,
        valid: crate::error::U32_RANGE,
    })?;
    Ok(SglangLoadStat {
        running,
        waiting,
        num_tokens,
        max_total_num_tokens,
        dp_rank,
    })
}

impl SglangLoadStat {
    /// The load sample of rank `dp_rank` of engine `engine_id`, with the engine's
    /// configured cap on running requests (`max_running`, which the frame does not carry):
    /// running and waiting as sent, `kv_usage = num_tokens / max_total_num_tokens`,
    /// active decode tokens = `num_tokens`; nothing else reported.
    ///
    /// # Errors
    /// [`UpdateError::Negative`] / [`UpdateError::TooLarge`] for a count outside `u32`;
    /// [`UpdateError::ZeroCap`] for a zero capacity or cap;
    /// [`UpdateError::Inconsistent`] when `num_tokens > max_total_num_tokens`.
    pub fn to_sample(&self, engine_id: u64, max_running: u32) -> Result<LoadSample, UpdateError> {
        let w = WorkerId::new(engine_id, self.dp_rank);
        let running = count(w, "running", self.running)?;
        let waiting = count(w, "waiting", self.waiting)?;
        let used = count(w, "num_tokens", self.num_tokens)?;
        let total = count(w, "max_total_num_tokens", self.max_total_num_tokens)?;
        check_token_capacity(
            w,
            TokenCapacity {
                used,
                total,
                cap: max_running,
                cap_field: "max_running",
                overflow: "num_tokens exceeds max_total_num_tokens",
            },
        )?;
        let sample = {
            let mut c = LoadSample::new(
                running,
                waiting,
                max_running,
                (f64::from(used) / f64::from(total)) as f32,
            );
            c.active_decode_tokens = Some(used);
            c
        };
        sample.validate(w)?;
        Ok(sample)
    }
}
