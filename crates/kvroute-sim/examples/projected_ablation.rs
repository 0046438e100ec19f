//! Ablation of `projected_time` on the conversation trace: which of its terms keep it from
//! using the cache (`docs/RESULTS.md`).
//!
//! Runs the first 3,000 requests of the trace (16 engines, arrivals 4x faster) through
//! `projected_time` (enforce) four times: as configured; without the hard escape (margin
//! 1,000 s); with vLLM-style telemetry (running, waiting and KV usage only, so no context
//! token figure reaches the decode term); and both. Prints the prefix-cache hit rate, TTFT
//! p50 and the decisions by reason of each.
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
    let policy = Policy::ProjectedTime {
        mode: ProjectedMode::Enforce,
    };
    let variants = [
        ("as configured", TelemetryMode::Full, 2.0f32),
        ("no escape", TelemetryMode::Full, 1_000.0),
        ("vLLM telemetry", TelemetryMode::VllmMetrics, 2.0),
        (
            "vLLM telemetry, no escape",
            TelemetryMode::VllmMetrics,
            1_000.0,
        ),
    ];
    println!("variant                     hit %  TTFT p50 s  decisions by reason");
    for (name, telemetry, escape_margin_s) in variants {
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
        let run_opts = RunOptions {
            score: Some(ScoreConfig {
                policy,
                escape_margin_s,
                ..ScoreConfig::default()
            }),
            ..RunOptions::default()
        };
        let result = run(&workload, policy, &run_opts);
        let m = compute(name, &result);
        println!(
            "{name:<26} {:>6.1}  {:>10.2}  {:?}",
            m.hit_rate * 100.0,
            m.ttft.p50.unwrap_or(f64::NAN),
            result.decisions_by_reason
        );
    }
}
