//! The Mooncake trace reader (FAST'25 release format).
//!
//! One JSON object per line: `timestamp` (milliseconds since the trace start),
//! `input_length` and `output_length` (tokens) and `hash_ids` (ids of 512-token blocks; the
//! prompt is those blocks concatenated and cut to `input_length`, so
//! `len(hash_ids) == ceil(input_length / 512)`). Other keys are ignored. Each line becomes
//! one [`SimRequest`] with a [`PromptSpec::TraceBlocks`] prompt, so the simulated engines
//! and the router hash real token ids (token `t` of block `h` is `h * 512 + t`).
//!
//! Arrival times are divided by the rate scale: `arrival_s = timestamp / 1000 / rate_scale`
//! (a scale of 2 replays the trace twice as fast).

use std::fmt;
use std::io::BufRead;
use std::path::Path;

use serde::Deserialize;

use crate::engine::EngineConfig;
use crate::net::ChannelConfig;
use crate::request::{PromptSpec, SimRequest, TRACE_BLOCK_TOKENS};
use crate::workload::{FleetSpec, Workload};

/// How to turn a trace into a workload.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceOptions {
    /// Number of engines (at least 1).
    pub engines: u32,
    /// Arrival-rate multiplier (finite, > 0): arrival times are divided by it.
    pub rate_scale: f64,
    /// Keep only the first this many requests (`None`: all).
    pub limit: Option<usize>,
    /// Every engine's configuration.
    pub engine: EngineConfig,
    /// The channels between engines and router.
    pub channels: ChannelConfig,
}

impl Default for TraceOptions {
    fn default() -> Self {
        Self {
            engines: 16,
            rate_scale: 1.0,
            limit: None,
            engine: EngineConfig::default(),
            channels: ChannelConfig::default(),
        }
    }
}

/// What a successful read saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceStats {
    /// Lines read (including blank ones), up to the limit.
    pub lines: u64,
    /// Blank lines skipped (whitespace only).
    pub blank_lines: u64,
    /// Requests produced.
    pub requests: u64,
}

/// One trace line, as serialised.
#[derive(Deserialize)]
struct TraceLine {
    timestamp: u64,
    input_length: u32,
    output_length: u32,
    hash_ids: Vec<u32>,
}

/// Why a trace could not be read.
#[derive(Debug)]
pub enum TraceError {
    /// The options are invalid (`engines == 0`, or a rate scale that is not finite and
    /// positive); no line was read.
    Options(&'static str),
    /// Reading failed at `line` (1-based).
    Io {
        /// Line number (1-based).
        line: u64,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Line `line` is not a trace record (bad JSON, a missing or mistyped key).
    Json {
        /// Line number (1-based).
        line: u64,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// Line `line` has `input_length == 0` or `output_length == 0`.
    EmptyLength {
        /// Line number (1-based).
        line: u64,
    },
    /// Line `line`'s `hash_ids` does not hold `ceil(input_length / 512)` blocks.
    BlockCount {
        /// Line number (1-based).
        line: u64,
        /// Blocks `input_length` needs.
        expected: usize,
        /// Blocks listed.
        got: usize,
    },
    /// Line `line`'s timestamp is earlier than the previous line's (milliseconds).
    TimeBackwards {
        /// Line number (1-based).
        line: u64,
        /// The previous record's timestamp (ms).
        previous_ms: u64,
        /// This record's timestamp (ms).
        timestamp_ms: u64,
    },
}

impl TraceError {
    /// The 1-based line number the error is about (`None` for [`TraceError::Options`]).
    pub fn line(&self) -> Option<u64> {
        match self {
            TraceError::Options(_) => None,
            TraceError::Io { line, .. }
            | TraceError::Json { line, .. }
            | TraceError::EmptyLength { line }
            | TraceError::BlockCount { line, .. }
            | TraceError::TimeBackwards { line, .. } => Some(*line),
        }
    }
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Options(why) => write!(f, "invalid trace options: {why}"),
            TraceError::Io { line: 0, source } => write!(f, "cannot open: {source}"),
            TraceError::Io { line, source } => write!(f, "line {line}: read error: {source}"),
            TraceError::Json { line, source } => {
                write!(f, "line {line}: not a trace record: {source}")
            }
            TraceError::EmptyLength { line } => {
                write!(
                    f,
                    "line {line}: input_length and output_length must be positive"
                )
            }
            TraceError::BlockCount {
                line,
                expected,
                got,
            } => write!(
                f,
                "line {line}: hash_ids holds {got} blocks, input_length needs {expected} (512 tokens each)"
            ),
            TraceError::TimeBackwards {
                line,
                previous_ms,
                timestamp_ms,
            } => write!(
                f,
                "line {line}: timestamp {timestamp_ms} ms is before the previous {previous_ms} ms"
            ),
        }
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TraceError::Io { source, .. } => Some(source),
            TraceError::Json { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Reads a Mooncake JSONL trace from `reader` into a workload named `name`.
///
/// Request ids are 0, 1, 2, … in line order (blank lines skipped and counted).
///
/// # Errors
/// [`TraceError`] for invalid options or the first bad line (with its 1-based number);
/// nothing is returned for a trace with a bad line.
pub fn read_trace<R: BufRead>(
    reader: R,
    name: &str,
    opts: &TraceOptions,
) -> Result<(Workload, TraceStats), TraceError> {
    if opts.engines == 0 {
        return Err(TraceError::Options("engines must be at least 1"));
    }
    if !(opts.rate_scale.is_finite() && opts.rate_scale > 0.0) {
        return Err(TraceError::Options(
            "rate scale must be finite and positive",
        ));
    }
    let limit = opts.limit.unwrap_or(usize::MAX);
    let mut stats = TraceStats::default();
    let mut requests = Vec::new();
    let mut previous_ms = 0u64;
    for (i, text) in reader.lines().enumerate() {
        if requests.len() >= limit {
            break;
        }
        let line = i as u64 + 1;
        stats.lines += 1;
        let text = text.map_err(|source| TraceError::Io { line, source })?;
        if text.trim().is_empty() {
            stats.blank_lines += 1;
            continue;
        }
        let rec: TraceLine =
            serde_json::from_str(&text).map_err(|source| TraceError::Json { line, source })?;
        if rec.input_length == 0 || rec.output_length == 0 {
            return Err(TraceError::EmptyLength { line });
        }
        let expected = rec.input_length.div_ceil(TRACE_BLOCK_TOKENS) as usize;
        if rec.hash_ids.len() != expected {
            return Err(TraceError::BlockCount {
                line,
                expected,
                got: rec.hash_ids.len(),
            });
        }
        if rec.timestamp < previous_ms {
            return Err(TraceError::TimeBackwards {
                line,
                previous_ms,
                timestamp_ms: rec.timestamp,
            });
        }
        previous_ms = rec.timestamp;
        requests.push(SimRequest {
            id: requests.len() as u64,
            arrival_s: rec.timestamp as f64 / 1000.0 / opts.rate_scale,
            prompt: PromptSpec::TraceBlocks {
                hash_ids: rec.hash_ids.into(),
                input_length: rec.input_length,
            },
            output_tokens: rec.output_length,
            follows: None,
            pinned: None,
        });
    }
    stats.requests = requests.len() as u64;
    let workload = Workload {
        name: name.to_string(),
        description: format!(
            "Mooncake trace replay: {} requests on {} engines, arrivals sped up {}x",
            requests.len(),
            opts.engines,
            opts.rate_scale
        ),
        requests,
        fleet: FleetSpec {
            engines: opts.engines,
            engine: opts.engine.clone(),
            channels: opts.channels,
        },
        faults: Vec::new(),
        load_start_s: 0.0,
    };
    Ok((workload, stats))
}

/// Opens and reads a trace file; the workload is named after the file's stem.
///
/// # Errors
/// [`TraceError::Io`] (line 0) when the file cannot be opened; otherwise as
/// [`read_trace`].
pub fn load_trace(path: &Path, opts: &TraceOptions) -> Result<(Workload, TraceStats), TraceError> {
    let file = std::fs::File::open(path).map_err(|source| TraceError::Io { line: 0, source })?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace".to_string());
    read_trace(std::io::BufReader::new(file), &name, opts)
}
