//! Replays a Mooncake-format request trace through the prefix index.
//!
//! Every request's prompt is rebuilt from its `hash_ids` (token `t` of trace block `h` is
//! `h * 512 + t`, cut to `input_length`), hashed in blocks of 16 tokens, matched against the
//! index, sent to a worker, and its blocks stored on that worker as the engine's store
//! events would (caches are unbounded here: no eviction). Two placements are compared:
//! `deepest-overlap` (the worker with the longest cached prefix; ties to the worker with the
//! fewest prompt tokens so far) and `round-robin`. The reported hit rate counts cached
//! tokens the way vLLM does: at most `(input_length - 1) / 16` blocks per request.
//!
//! With `--workers 1` the hit rate is the trace's ideal single-cache reuse (37.4% for the
//! conversation trace, as its publishers measured). With more workers, `deepest-overlap`
//! shows the failure kvroute exists to prevent: every request of the trace shares its
//! first block, so pure cache affinity sends every request to one worker.

use std::io::BufRead;
use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use kvroute_core::EngineHash;
use kvroute_core::{HashNamespace, SequenceHash, Slot};
use kvroute_index::BlockHasher;
use kvroute_index::index::{IndexConfig, PrefixIndex};
use serde::Deserialize;

const BLOCK: usize = 16;

#[derive(Parser)]
#[command(about = "Replay a Mooncake JSONL trace through kvroute's prefix index")]
struct Args {
    /// Mooncake-format JSONL trace (timestamp, input_length, output_length, hash_ids).
    trace: Option<PathBuf>,
    /// Number of workers.
    #[arg(long, default_value_t = 16)]
    workers: usize,
    /// Replay only the first N requests.
    #[arg(long)]
    limit: Option<usize>,
}

#[derive(Deserialize)]
struct Request {
    input_length: usize,
    hash_ids: Vec<u64>,
}

/// `$KVROUTE_DATA_DIR/traces/...`, else the shared data beside the checkout.
fn default_trace() -> PathBuf {
    let data = std::env::var_os("KVROUTE_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data"));
    data.join("traces/mooncake_conversation_trace.jsonl")
}

/// Rebuilds the prompt's token ids; `None` when the request is inconsistent (an id whose
/// tokens do not fit in `u32`, or `input_length` not covered by the blocks).
fn tokens_of(r: &Request, out: &mut Vec<u32>) -> Option<()> {
    out.clear();
    if r.input_length > r.hash_ids.len() * 512 {
        return None;
    }
    for &h in &r.hash_ids {
        let first = h.checked_mul(512)?;
        u32::try_from(first.checked_add(511)?).ok()?;
        out.extend((0..512u64).map(|t| (first + t) as u32));
    }
    out.truncate(r.input_length);
    Some(())
}

struct Outcome {
    hit_tokens: u64,
    prompt_tokens: u64,
    per_worker_requests: Vec<u64>,
}

fn replay(requests: &[Request], workers: usize, deepest: bool) -> Outcome {
    let index = PrefixIndex::new({
        let mut c = IndexConfig::default();
        c.worker_slots = workers;
        c.block_size = BLOCK;
        c.expected_blocks = 1 << 16;
        c.max_blocks_per_worker = u32::MAX as usize;
        c
    })
    .expect("valid config");
    let hasher = BlockHasher::new(BLOCK, HashNamespace::DEFAULT);
    let mut overlaps = index.new_overlaps();
    let mut tokens = Vec::new();
    let mut hashes: Vec<SequenceHash> = Vec::new();
    let mut pairs = Vec::new();
    let mut load = vec![0u64; workers];
    let mut out = Outcome {
        hit_tokens: 0,
        prompt_tokens: 0,
        per_worker_requests: vec![0; workers],
    };
    for (i, r) in requests.iter().enumerate() {
        tokens_of(r, &mut tokens).expect("requests are validated when read");
        hashes.clear();
        hasher.sequence_hashes_into(&tokens, None, &mut hashes);
        index.match_prefix(&hashes, &mut overlaps);
        let chosen = if deepest {
            (0..workers)
                .max_by_key(|&w| (overlaps.get(Slot(w as u32)), std::cmp::Reverse(load[w])))
                .expect("at least one worker")
        } else {
            i % workers
        };
        let cap = (r.input_length.saturating_sub(1) / BLOCK) as u64;
        let hit = u64::from(overlaps.get(Slot(chosen as u32))).min(cap);
        out.hit_tokens += hit * BLOCK as u64;
        out.prompt_tokens += r.input_length as u64;
        out.per_worker_requests[chosen] += 1;
        load[chosen] += r.input_length as u64;
        pairs.clear();
        pairs.extend(hashes.iter().map(|h| (EngineHash(h.0), *h)));
        index
            .store_hashes(Slot(chosen as u32), &pairs)
            .expect("slot in range");
    }
    out
}

fn main() {
    let args = Args::parse();
    let path = args.trace.unwrap_or_else(default_trace);
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("cannot open trace {}: {e}", path.display());
            std::process::exit(2);
        }
    };
    let mut requests = Vec::new();
    let mut scratch = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                eprintln!("line {}: unreadable: {e}", n + 1);
                std::process::exit(2);
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Request>(&line) {
            Ok(r) if tokens_of(&r, &mut scratch).is_some() => requests.push(r),
            Ok(_) => {
                eprintln!(
                    "line {}: input_length exceeds its hash_ids' blocks, or a hash id too large",
                    n + 1
                );
                std::process::exit(2);
            }
            Err(e) => {
                eprintln!("line {}: not a Mooncake request: {e}", n + 1);
                std::process::exit(2);
            }
        }
        if args.limit.is_some_and(|l| requests.len() >= l) {
            break;
        }
    }
    if args.workers == 0 {
        eprintln!("--workers must be at least 1");
        std::process::exit(2);
    }
    println!(
        "{} requests from {}, {} workers, block size {BLOCK}",
        requests.len(),
        path.display(),
        args.workers
    );
    println!(
        "{:<16} {:>10} {:>14} {:>10}",
        "placement", "hit rate", "busiest share", "seconds"
    );
    for (name, deepest) in [("deepest-overlap", true), ("round-robin", false)] {
        let t = Instant::now();
        let o = replay(&requests, args.workers, deepest);
        let busiest = o.per_worker_requests.iter().max().copied().unwrap_or(0);
        println!(
            "{:<16} {:>9.2}% {:>13.1}% {:>10.2}",
            name,
            100.0 * o.hit_tokens as f64 / o.prompt_tokens.max(1) as f64,
            100.0 * busiest as f64 / requests.len().max(1) as f64,
            t.elapsed().as_secs_f64()
        );
    }
}
