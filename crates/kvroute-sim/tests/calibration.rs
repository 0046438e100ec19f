//! Calibration of the simulated engine against real engines' recorded prefix hits.
//!
//! `shared/data/kv_events` holds a real vLLM 0.33.0 stream (the first 1,000 requests of the
//! conversation trace through vLLM's own scheduler and KV cache manager: 300,000 blocks of
//! 16 tokens, 32 running, 8,192-token chunks) and a real SGLang 0.5.23 stream (the first 300
//! requests, 125,000 pages of 16), each with every request's own prefix-cache hit
//! (`engine_hit_tokens`). Both CPU runs fed requests at the trace's timestamps and advanced a
//! clock of 10 ms plus 0.02 ms per scheduled token per step (their `meta` records).
//!
//! Each test replays the same requests, at the trace's timestamps, on one simulated engine
//! with the same capacity and clock (`EngineConfig::vllm_calibration`,
//! `EngineConfig::sglang_calibration`), through the whole driver (router, msgpack events,
//! telemetry), and requires the simulated per-request hits to equal the recorded ones for at
//! least 95 % of the requests and the total hit rate to be within 1 point of the recorded
//! one. The recorded totals are checked first (17.1 % and 5.0 %, `shared/data/README.md`
//! and the streams' `end` records), so the comparison is against the data described.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::Arc;

use kvroute::Policy;
use kvroute_sim::driver::{RunOptions, run};
use kvroute_sim::engine::EngineConfig;
use kvroute_sim::fault::Fault;
use kvroute_sim::net::ChannelConfig;
use kvroute_sim::workload::{FleetSpec, Workload};
use kvroute_sim::{PromptSpec, SimRequest};
use kvroute_testkit::stream::{Engine, Record, records};
use serde_json::Value;

/// A recorded request: its trace line and the engine's own hit (tokens).
struct Recorded {
    index: usize,
    hash_ids: Vec<u32>,
    input_length: u32,
    output_length: u32,
    hit: u32,
}

/// The request records (in trace order) and the `end` record of a stream (an empty record
/// when it has none).
fn read_stream(path: &Path) -> (Vec<Recorded>, Record) {
    let mut out = Vec::new();
    let mut end = Record::default();
    for rec in records(path) {
        match rec.kind.as_str() {
            "request" => {
                assert_eq!(
                    rec.num_prompt_tokens.expect("num_prompt_tokens"),
                    rec.input_length.expect("input_length")
                );
                out.push(Recorded {
                    index: rec.index.expect("index") as usize,
                    hash_ids: rec.hash_ids.expect("hash_ids"),
                    input_length: rec.input_length.expect("input_length") as u32,
                    output_length: rec.output_length.expect("output_length") as u32,
                    hit: rec.engine_hit_tokens.expect("engine_hit_tokens") as u32,
                });
            }
            "end" => end = rec,
            _ => {}
        }
    }
    out.sort_by_key(|r| r.index);
    (out, end)
}

/// Arrival times (seconds) of the first `n` trace requests.
fn trace_arrivals(path: &Path, n: usize) -> Vec<f64> {
    let file = std::fs::File::open(path).expect("open trace");
    BufReader::new(file)
        .lines()
        .take(n)
        .map(|l| {
            let v: Value = serde_json::from_str(&l.expect("read trace")).expect("trace line");
            v["timestamp"].as_f64().expect("timestamp") / 1000.0
        })
        .collect()
}

/// Replays the stream `source` recorded on one engine of `engine` and checks the bounds.
fn calibrate(source: Engine, engine: EngineConfig, expected_rate: f64) {
    let stream = source.stream_file();
    let (Some(stream_path), Some(trace_path)) = (
        kvroute_testkit::data_file(stream),
        kvroute_testkit::data_file("traces/mooncake_conversation_trace.jsonl"),
    ) else {
        return;
    };
    let (recorded, end) = read_stream(&stream_path);
    let n = recorded.len();
    assert!(n > 0, "no request records in {stream}");
    for (i, r) in recorded.iter().enumerate() {
        assert_eq!(r.index, i, "request records are the first {n} trace lines");
    }
    let arrivals = trace_arrivals(&trace_path, n);
    let prompt_total: u64 = recorded.iter().map(|r| u64::from(r.input_length)).sum();
    let real_hits: u64 = recorded.iter().map(|r| u64::from(r.hit)).sum();
    let real_rate = real_hits as f64 / prompt_total as f64;
    assert!(
        (real_rate - expected_rate).abs() < 0.001,
        "recorded hit rate {real_rate:.4}, documented {expected_rate}"
    );
    assert_eq!(end.engine_hit_tokens.map(|h| h as u64), Some(real_hits));

    let requests = recorded
        .iter()
        .zip(&arrivals)
        .map(|(r, &arrival_s)| SimRequest {
            id: r.index as u64,
            arrival_s,
            prompt: PromptSpec::TraceBlocks {
                hash_ids: Arc::from(r.hash_ids.clone()),
                input_length: r.input_length,
            },
            output_tokens: r.output_length,
            follows: None,
            pinned: None,
        })
        .collect();
    let workload = Workload {
        name: format!("calibration {stream}"),
        description: "one engine replaying a recorded engine stream".to_owned(),
        requests,
        fleet: FleetSpec {
            engines: 1,
            engine,
            channels: ChannelConfig::default(),
        },
        faults: Vec::<Fault>::new(),
        load_start_s: 0.0,
    };
    let opts = RunOptions {
        sample_interval_s: 0.0,
        ..RunOptions::default()
    };
    let result = run(&workload, Policy::RoundRobin, &opts);
    assert_eq!(result.error, None);
    assert_eq!(result.completed, n as u64);
    assert_eq!(
        result.channel.decode_errors + result.channel.ingest_errors,
        0
    );

    let sim_hits: u64 = result
        .requests
        .iter()
        .map(|r| u64::from(r.cached_tokens))
        .sum();
    let sim_rate = sim_hits as f64 / prompt_total as f64;
    let agree = result
        .requests
        .iter()
        .zip(&recorded)
        .filter(|(s, r)| s.cached_tokens == r.hit)
        .count();
    let mismatches: Vec<String> = result
        .requests
        .iter()
        .zip(&recorded)
        .filter(|(s, r)| s.cached_tokens != r.hit)
        .take(20)
        .map(|(s, r)| {
            format!(
                "#{}: simulated {} recorded {}",
                r.index, s.cached_tokens, r.hit
            )
        })
        .collect();
    let clock = end.sim_clock_s.unwrap_or(f64::NAN);
    eprintln!(
        "{stream}: {agree}/{n} requests agree ({:.1} %); hit rate simulated {:.2} %, \
         recorded {:.2} %; last token at {:.3} s (recorded clock {clock:.3} s); {} preemptions; \
         first mismatches: {mismatches:?}",
        100.0 * agree as f64 / n as f64,
        100.0 * sim_rate,
        100.0 * real_rate,
        result.end_s,
        result.preemptions,
    );
    assert!(
        agree * 100 >= n * 95,
        "{agree}/{n} simulated hits equal the recorded ones (need 95 %): {mismatches:?}"
    );
    assert!(
        (sim_rate - real_rate).abs() <= 0.01,
        "hit rate {sim_rate:.4} vs recorded {real_rate:.4}"
    );
}

#[test]
fn vllm_prefix_hits_match_the_recorded_stream() {
    calibrate(Engine::Vllm, EngineConfig::vllm_calibration(), 0.1712);
}

#[test]
fn sglang_prefix_hits_match_the_recorded_stream() {
    calibrate(Engine::Sglang, EngineConfig::sglang_calibration(), 0.0504);
}
