//! SGLang's `GET /v1/loads` JSON to [`SglangRankLoad`]s.
//!
//! Accepted documents: an object with a `loads` array of per-rank objects (and optionally
//! a top-level `timestamp`, used for ranks without their own), a bare array of per-rank
//! objects, or one per-rank object. Per-rank fields, as SGLang names them:
//! `dp_rank` (absent: 0), `num_running_reqs`, `num_waiting_reqs`,
//! `num_waiting_uncached_tokens`, `num_used_tokens`, `max_total_num_tokens` (integers),
//! `token_usage`, `gen_throughput`, `utilization`, `timestamp` (numbers) and
//! `max_running_requests` (integer); unknown fields are ignored. Values are passed as
//! reported; `kvroute-load` validates them.

use super::sglang::SglangRankLoad;
use serde::Deserialize;
use serde_json::Value;

use crate::error::WireError;

#[derive(Deserialize)]
struct RankJson {
    #[serde(default)]
    dp_rank: i64,
    num_running_reqs: i64,
    num_waiting_reqs: i64,
    num_waiting_uncached_tokens: i64,
    num_used_tokens: i64,
    max_total_num_tokens: i64,
    token_usage: f64,
    gen_throughput: f64,
    utilization: f64,
    max_running_requests: i64,
    timestamp: Option<f64>,
}

/// Parses a `/v1/loads` response of engine `engine_id`, one entry per rank in document
/// order.
///
/// # Errors
/// [`WireError::Malformed`] for invalid JSON or a rank object without a required field or
/// with a wrongly typed one; [`WireError::MissingMetric`] for a rank without a timestamp
/// (its own or the document's); [`WireError::OutOfRange`] for a `dp_rank` that is not a
/// `u32`; [`WireError::DuplicateRank`]; [`WireError::NoRanks`].
pub fn parse_sglang_loads(engine_id: u64, json: &str) -> Result<Vec<SglangRankLoad>, WireError> {
    let doc: Value = serde_json::from_str(json).map_err(WireError::malformed)?;
    let (entries, doc_ts) = match doc {
        Value::Array(a) => (a, None),
        Value::Object(mut o) => match o.remove("loads") {
            Some(Value::Array(a)) => (a, o.get("timestamp").and_then(Value::as_f64)),
            Some(_) => return Err(WireError::malformed("`loads` is not an array")),
            None => (vec![Value::Object(o)], None),
        },
        _ => return Err(WireError::malformed("not a JSON object or array")),
    };
    if entries.is_empty() {
        return Err(WireError::NoRanks);
    }
    let mut out: Vec<SglangRankLoad> = Vec::with_capacity(entries.len());
    for entry in entries {
        let r: RankJson = serde_json::from_value(entry).map_err(WireError::malformed)?;
        let dp_rank = u32::try_from(r.dp_rank).map_err(|_| WireError::OutOfRange {
            field: "dp_rank",
            value: r.dp_rank,
            valid: crate::error::U32_RANGE,
        })?;
        if out.iter().any(|o| o.dp_rank == dp_rank) {
            return Err(WireError::DuplicateRank { dp_rank });
        }
        let timestamp = r.timestamp.or(doc_ts).ok_or(WireError::MissingMetric {
            dp_rank,
            metric: "timestamp",
        })?;
        out.push(SglangRankLoad {
            engine_id,
            dp_rank,
            num_running_reqs: r.num_running_reqs,
            num_waiting_reqs: r.num_waiting_reqs,
            num_waiting_uncached_tokens: r.num_waiting_uncached_tokens,
            num_used_tokens: r.num_used_tokens,
            max_total_num_tokens: r.max_total_num_tokens,
            token_usage: r.token_usage,
            gen_throughput: r.gen_throughput,
            utilization: r.utilization,
            max_running_requests: r.max_running_requests,
            timestamp,
        });
    }
    Ok(out)
}
