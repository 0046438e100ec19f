//! The real engine KV event streams (`kv_events/*.jsonl.xz` in the shared data; format in
//! the data folder's `README.md`): one reader of their records, the prompt rebuilding rule,
//! each engine's hit cap and the digest of its snapshot record.
//!
//! A stream is xz-compressed JSONL, records in causal order: `meta`, then `batch`es (msgpack
//! payload as hex, `seq` contiguous from 0) and `request`s (the engine's own prefix hit),
//! one `snapshot` of the engine's cache after the last request, a final batch holding
//! `AllBlocksCleared`, and an `end` record with totals. Unknown kinds are kept as records
//! of that kind (callers ignore them).

use std::io::{BufRead, BufReader};
use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// Tokens per block (vLLM) and per page (SGLang) in both streams.
pub const STREAM_BLOCK_SIZE: usize = 16;

/// One record of a stream; the fields of every kind, each present only for its kind.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Record {
    /// `meta`, `batch`, `request`, `snapshot`, `end`, or a kind to ignore.
    pub kind: String,
    /// `batch`: the batch's sequence number (8 bytes big-endian in the ZMQ frame).
    pub seq: Option<u64>,
    /// `batch`: the msgpack payload exactly as the engine's publisher encoded it, in hex.
    pub payload_hex: Option<String>,
    /// `request`: the request's line in the trace (0-based).
    pub index: Option<u64>,
    /// `request`: the engine's own prefix-cache hit (tokens); `end`: their sum.
    pub engine_hit_tokens: Option<usize>,
    /// `request`: the trace's 512-token block ids.
    pub hash_ids: Option<Vec<u32>>,
    /// `request`: prompt length (tokens).
    pub input_length: Option<usize>,
    /// `request`: the prompt length as the engine counted it (tokens; equals
    /// `input_length`).
    pub num_prompt_tokens: Option<usize>,
    /// `request`: the trace's output length (tokens).
    pub output_length: Option<usize>,
    /// `snapshot`: distinct engine block hashes cached.
    pub num_cached_hashes: Option<usize>,
    /// `snapshot`: cached blocks (pages), copies of one hash counted each.
    pub num_cached_blocks: Option<usize>,
    /// `snapshot`: SHA-256 (hex) over the sorted distinct cached hashes, each 8 bytes
    /// big-endian ([`Engine::cached_hashes_digest`]).
    pub cached_hashes_sha256: Option<String>,
    /// `end`: the engine run's simulated clock after its last step (seconds).
    pub sim_clock_s: Option<f64>,
}

impl Record {
    /// The decoded payload bytes of a `batch` record.
    ///
    /// # Panics
    /// When the record has no payload or its hex is malformed.
    pub fn payload(&self) -> Vec<u8> {
        unhex(
            self.payload_hex
                .as_deref()
                .expect("a batch record has a payload"),
        )
    }

    /// The rebuilt prompt of a `request` record ([`prompt`]).
    ///
    /// # Panics
    /// When the record lacks `hash_ids` or `input_length`.
    pub fn prompt(&self) -> Vec<u32> {
        prompt(
            self.hash_ids.as_deref().expect("a request has hash_ids"),
            self.input_length.expect("a request has input_length"),
        )
    }
}

/// The records of the stream at `path`, decompressed and parsed line by line (the vLLM
/// stream is 197 MB raw).
///
/// # Panics
/// On an unreadable file, bad xz data or a line that is not a record.
pub fn records(path: &Path) -> impl Iterator<Item = Record> {
    let file =
        std::fs::File::open(path).unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    BufReader::with_capacity(1 << 20, xz2::read::XzDecoder::new(file))
        .lines()
        .map(|line| {
            let line = line.expect("readable xz stream");
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad record ({e}): {line}"))
        })
}

/// Lower- or upper-case hex to bytes.
///
/// # Panics
/// On an odd length or a non-hex digit.
pub fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex length");
    let nib = |c: u8| match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => panic!("bad hex digit {c}"),
    };
    s.as_bytes()
        .chunks_exact(2)
        .map(|p| (nib(p[0]) << 4) | nib(p[1]))
        .collect()
}

/// The prompt of a trace request: token `t` (0..511) of trace block `h` is `h * 512 + t`;
/// the blocks concatenated and cut to `input_length` tokens.
pub fn prompt(hash_ids: &[u32], input_length: usize) -> Vec<u32> {
    let mut t: Vec<u32> = hash_ids
        .iter()
        .flat_map(|&h| (0..512).map(move |i| h * 512 + i))
        .collect();
    t.truncate(input_length);
    t
}

/// The engine that produced a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// vLLM 0.33.0: unsigned 64-bit block hashes.
    Vllm,
    /// SGLang 0.5.23: signed 64-bit page hashes.
    Sglang,
}

impl Engine {
    /// The stream's path inside the shared data folder.
    pub fn stream_file(self) -> &'static str {
        match self {
            Self::Vllm => "kv_events/vllm_0.33_conversation_first1000.jsonl.xz",
            Self::Sglang => "kv_events/sglang_0.5.23_conversation_first300.jsonl.xz",
        }
    }

    /// The engine's cap on a hit of an `n`-token prompt, in tokens: vLLM counts at most
    /// `(n - 1) / 16` blocks; SGLang matches at most `n - 1` tokens, rounded down to a page.
    /// For a page size of 16 both are `((n - 1) / 16) * 16`; written out per engine all the
    /// same, as each engine states it.
    pub fn cap_tokens(self, n: usize) -> usize {
        match self {
            Self::Vllm => (n.saturating_sub(1) / STREAM_BLOCK_SIZE) * STREAM_BLOCK_SIZE,
            Self::Sglang => {
                let max = n.saturating_sub(1);
                max - max % STREAM_BLOCK_SIZE
            }
        }
    }

    /// The snapshot record's digest of a set of distinct cached hashes (each the 64-bit
    /// pattern of an engine hash): SHA-256 over the hashes sorted ascending, each as 8
    /// bytes big-endian. vLLM sorts them as unsigned, SGLang as signed (two's complement)
    /// integers, as each snapshot record's note says.
    pub fn cached_hashes_digest(self, hashes: impl IntoIterator<Item = u64>) -> Vec<u8> {
        let mut sorted: Vec<u64> = hashes.into_iter().collect();
        match self {
            Self::Vllm => sorted.sort_unstable(),
            Self::Sglang => sorted.sort_unstable_by_key(|&h| h as i64),
        }
        sorted.dedup();
        let mut sha = Sha256::new();
        for h in &sorted {
            sha.update(h.to_be_bytes());
        }
        sha.finalize().to_vec()
    }
}
