//! vLLM's `GET /metrics` (Prometheus text exposition format 0.0.4) to a
//! [`VllmLoadUpdate`].
//!
//! Why a line parser here and not a crate: the two maintained Rust parsers of the format
//! checked (`prometheus-parse` 0.2.5, metric names matched by `\w+`; `openmetrics-parser`
//! 0.4.4, names `[a-z][a-z0-9_]*`) both reject the `:` that the format allows in metric
//! names and that every vLLM metric has (`vllm:num_requests_running`), so they would drop
//! exactly the samples needed. The format is line-oriented; this parser follows it:
//! `name{label="value",...} value [timestamp]`, `#` lines are comments (`HELP`, `TYPE`),
//! label values unescape `\\`, `\"` and `\n`, values are floats (`NaN`, `+Inf`, `-Inf`).
//!
//! Only lines of the metrics used are parsed in full; other lines are skipped by name, so
//! an exotic metric elsewhere in the scrape cannot reject the update.
//!
//! Metrics (gauges), per DP rank (label `engine`, absent meaning rank 0):
//! `vllm:num_requests_running`, `vllm:num_requests_waiting` (requests) and
//! `vllm:kv_cache_usage_perc` (a fraction 0..1; vLLM before 0.10 named it
//! `vllm:gpu_cache_usage_perc`, used when the new name is absent). Tensor-parallel workers
//! can export the same gauge more than once for a rank (other labels differ): equal values
//! count once (never summed); different values are a [`WireError::ConflictingSamples`].

use std::collections::BTreeMap;

use super::vllm::{VllmLoadUpdate, VllmRankLoad};

use crate::error::WireError;

const RUNNING: &str = "vllm:num_requests_running";
const WAITING: &str = "vllm:num_requests_waiting";
const USAGE: &str = "vllm:kv_cache_usage_perc";
const USAGE_OLD: &str = "vllm:gpu_cache_usage_perc";
const METRICS: [&str; 4] = [RUNNING, WAITING, USAGE, USAGE_OLD];

/// Parses a vLLM metrics scrape into the update of engine `engine_id`: one
/// [`VllmRankLoad`] per `engine` label value, in ascending rank order. Values are passed
/// as reported; `kvroute-load` validates them (integer counts, usage in 0..1).
///
/// # Errors
/// [`WireError::Prometheus`] for a malformed line of a used metric;
/// [`WireError::OutOfRange`] for an `engine` label that is a number but not a `u32`, and
/// [`WireError::Prometheus`] for one that is not a number;
/// [`WireError::ConflictingSamples`]; [`WireError::MissingMetric`] for a rank without
/// running, waiting or usage; [`WireError::NoRanks`] when no used metric appears.
pub fn parse_vllm_metrics(engine_id: u64, text: &str) -> Result<VllmLoadUpdate, WireError> {
    // rank -> [running, waiting, usage, usage_old]
    let mut ranks: BTreeMap<u32, [Option<f64>; 4]> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_len = line
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(line.len());
        let Some(m) = METRICS.iter().position(|n| *n == &line[..name_len]) else {
            continue;
        };
        let bad = |detail| WireError::Prometheus {
            line: i + 1,
            detail,
        };
        let (labels, rest) = parse_labels(&line[name_len..]).map_err(bad)?;
        let value = parse_value(rest).map_err(bad)?;
        let rank = match labels.iter().find(|(k, _)| *k == "engine") {
            None => 0,
            Some((_, v)) => v.parse::<u32>().map_err(|_| match v.parse::<i64>() {
                // A number, but not a DP rank.
                Ok(value) => WireError::OutOfRange {
                    field: "engine",
                    value,
                    valid: crate::error::U32_RANGE,
                },
                // Not a number at all (`-1` would have been a guess).
                Err(_) => bad("the `engine` label is not a DP rank number"),
            })?,
        };
        let slot = &mut ranks.entry(rank).or_default()[m];
        match *slot {
            Some(old) if old.to_bits() != value.to_bits() => {
                return Err(WireError::ConflictingSamples {
                    dp_rank: rank,
                    metric: METRICS[m],
                });
            }
            _ => *slot = Some(value),
        }
    }
    if ranks.is_empty() {
        return Err(WireError::NoRanks);
    }
    let ranks = ranks
        .into_iter()
        .map(|(dp_rank, [running, waiting, usage, usage_old])| {
            let need =
                |v: Option<f64>, metric| v.ok_or(WireError::MissingMetric { dp_rank, metric });
            Ok(VllmRankLoad {
                dp_rank,
                num_requests_running: need(running, RUNNING)?,
                num_requests_waiting: need(waiting, WAITING)?,
                kv_cache_usage: need(usage.or(usage_old), USAGE)?,
            })
        })
        .collect::<Result<Vec<_>, WireError>>()?;
    Ok(VllmLoadUpdate { engine_id, ranks })
}

type Labels<'a> = Vec<(&'a str, String)>;

/// Parses an optional `{...}` label set; returns the labels and the text after it.
fn parse_labels(s: &str) -> Result<(Labels<'_>, &str), &'static str> {
    let Some(mut rest) = s.strip_prefix('{') else {
        return Ok((Vec::new(), s));
    };
    let mut labels = Vec::new();
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let name_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .ok_or("unterminated label set")?;
        if name_len == 0 {
            return Err("bad label name");
        }
        let name = &rest[..name_len];
        rest = rest[name_len..].trim_start();
        rest = rest
            .strip_prefix('=')
            .ok_or("expected '=' after a label name")?;
        rest = rest.trim_start();
        rest = rest.strip_prefix('"').ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value"),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    _ => return Err("bad escape in label value"),
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.push((name, value));
        rest = rest[end + 1..].trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if !rest.starts_with('}') {
            return Err("expected ',' or '}' in label set");
        }
    }
}

/// Parses ` value [timestamp]`.
fn parse_value(s: &str) -> Result<f64, &'static str> {
    if !s.starts_with([' ', '\t']) {
        return Err("expected whitespace before the value");
    }
    let mut parts = s.split_ascii_whitespace();
    let value = parts.next().ok_or("missing value")?;
    let value = value.parse::<f64>().map_err(|_| "value is not a number")?;
    if let Some(ts) = parts.next() {
        ts.parse::<i64>()
            .map_err(|_| "timestamp is not an integer")?;
    }
    if parts.next().is_some() {
        return Err("text after the timestamp");
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_unescape() {
        let (l, rest) = parse_labels(r#"{a="x\"y\\z\n",b = "2",} 1"#).unwrap();
        assert_eq!(
            l,
            vec![("a", "x\"y\\z\n".to_string()), ("b", "2".to_string())]
        );
        assert_eq!(rest, " 1");
        assert!(parse_labels(r#"{a="x} 1"#).is_err());
        assert!(parse_labels(r#"{a=x} 1"#).is_err());
    }

    #[test]
    fn values() {
        assert_eq!(parse_value(" 3"), Ok(3.0));
        assert_eq!(parse_value(" +Inf"), Ok(f64::INFINITY));
        assert!(parse_value(" NaN").unwrap().is_nan());
        assert_eq!(parse_value(" 1.5 1700000000000"), Ok(1.5));
        assert!(parse_value("3").is_err());
        assert!(parse_value(" x").is_err());
    }
}
