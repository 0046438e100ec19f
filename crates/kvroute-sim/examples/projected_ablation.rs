//! Ablation of `projected_time` on the conversation trace: which of its terms keep it from
//! using the cache (`docs/RESULTS.md`).
//!
//! Runs the first 3,000 requests of the trace (16 engines, arrivals 4x faster) through
//! `projected_time` (enforce) six times: as configured; without the hard escape (margin
//! 1,000 s); with vLLM-style telemetry (running, waiting and KV usage only, so no context
//! token figure reaches the decode term); both; and with `decode_full_batch_only` (the
//! decode term only for full batches), with and without the escape. Prints the
//! prefix-cache hit rate, TTFT p50 and the decisions by reason of each; then runs
//! `hot-owner-51` (seed 1) with and without `decode_full_batch_only` and prints the mean
//! busy engines and output tokens/s.
//!
//! Run: `cargo run --release -p kvroute-sim --example projected_ablation [TRACE]` (default
//! `../shared/data/traces/mooncake_conversation_trace.jsonl`).

use kvroute::{Policy, ProjectedMode, ScoreConfig};
use kvroute_sim::driver::{RunOptions, run};
use kvroute_sim::net::TelemetryMode;
use kvroute_sim::report::metrics::compute;
use kvroute_sim::workload::trace::{TraceOptions, load_trace};

fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "../shared/data/traces/mooncake_conversation_trace.jsonl".into());
    let variants = [
        ("as configured", TelemetryMode::Full, 2.0f32, false),
        ("no escape", TelemetryMode::Full, 1_000.0, false),
        ("vLLM telemetry", TelemetryMode::VllmMetrics, 2.0, false),
        (
            "vLLM telemetry, no escape",
            TelemetryMode::VllmMetrics,
            1_000.0,
            false,
        ),
        ("decode if batch full", TelemetryMode::Full, 2.0, true),
        (
            "decode if full, no escape",
            TelemetryMode::Full,
            1_000.0,
            true,
        ),
    ];
    println!("variant                     hit %  TTFT p50 s  decisions by reason");
    for (name, telemetry, escape_margin_s, decode_full_batch_only) in variants {
        let mut opts = TraceOptions {
            engines: 16,
            rate_scale: 4.0,
            limit: Some(3_000),
            ..Default::default()
        };
        opts.channels.telemetry = telemetry;
        let (workload, _) = match load_trace(std::path::Path::new(&path), &opts) {
            Ok(w) => w,
            Err(e) => {
                eprintln!("cannot read {path}: {e}");
                std::process::exit(2);
            }
        };
        let (result, m) = run_projected(&workload, name, escape_margin_s, decode_full_batch_only);
        println!(
            "{name:<26} {:>6.1}  {:>10.2}  {:?}",
            m.hit_rate * 100.0,
            m.ttft.p50.unwrap_or(f64::NAN),
            result.decisions_by_reason
        );
    }
    // The scenario the knob trades against: incident A's hot owner (seed 1).
    let Some(hot) = kvroute_sim::workload::scenarios::find("hot-owner-51") else {
        return;
    };
    let workload = hot.build(1);
    println!("\nhot-owner-51                 busy (mean)  output tok/s");
    for (name, decode_full_batch_only) in [("as configured", false), ("decode if batch full", true)]
    {
        let default_margin = ScoreConfig::default().escape_margin_s;
        let (_, m) = run_projected(&workload, name, default_margin, decode_full_batch_only);
        println!(
            "{name:<26} {:>12.1}  {:>12.0}",
            m.busy_engines_mean, m.output_tokens_per_s
        );
    }
}

/// One `projected_time` (enforce) run of `workload` with the two knobs under study.
fn run_projected(
    workload: &kvroute_sim::workload::Workload,
    name: &str,
    escape_margin_s: f32,
    decode_full_batch_only: bool,
) -> (
    kvroute_sim::RunResult,
    kvroute_sim::report::metrics::Metrics,
) {
    let policy = Policy::ProjectedTime {
        mode: ProjectedMode::Enforce,
    };
    let run_opts = RunOptions {
        score: Some(ScoreConfig {
            policy,
            escape_margin_s,
            decode_full_batch_only,
            ..ScoreConfig::default()
        }),
        ..RunOptions::default()
    };
    let result = run(workload, policy, &run_opts);
    let m = compute(name, &result);
    (result, m)
}
