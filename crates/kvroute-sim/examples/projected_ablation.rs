//! Ablation of `projected_time` on the conversation trace and on the hot-owner scenarios
//! (`docs/RESULTS.md`): what its hard load escape and its telemetry change.
//!
//! Runs the first 3,000 requests of the trace (16 engines, arrivals 4x faster; a second
//! argument sets another count, 0 for the whole trace) through `projected_time` (enforce)
//! five times: as configured (escape margin 2 s + 2 × the other workers' mean
//! `least_load` seconds); with the fixed 2 s margin alone (`escape_margin_rel` 0); with
//! `escape_margin_rel` 1; without the escape (margin 1,000 s); and with vLLM-style
//! telemetry (running, waiting and KV usage only: no token figures, the throughputs from
//! the engines' configuration). Prints the prefix-cache hit rate, TTFT and E2E p50 and the
//! decisions by reason of each. Then runs `hot-owner-51` and `owner-canary` (seed 1) as
//! configured, with the fixed margin and without the escape, and prints the mean busy
//! engines, output tokens/s, the smallest generation share and the hit rate.
//!
//! Run: `cargo run --release -p kvroute-sim --example projected_ablation [TRACE [LIMIT]]`
//! (default `../shared/data/traces/mooncake_conversation_trace.jsonl`, 3,000).

use kvroute::{Policy, ProjectedMode, ScoreConfig};
use kvroute_sim::driver::{RunOptions, run};
use kvroute_sim::net::TelemetryMode;
use kvroute_sim::report::metrics::{Metrics, compute};
use kvroute_sim::workload::Workload;
use kvroute_sim::workload::trace::{TraceOptions, load_trace};

/// One variant: its name, telemetry, escape margin (seconds) and load-relative margin.
type Variant = (&'static str, TelemetryMode, f32, f32);

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .unwrap_or_else(|| "../shared/data/traces/mooncake_conversation_trace.jsonl".into());
    let limit = match args.next().map(|a| a.parse::<usize>()) {
        None => Some(3_000),
        Some(Ok(0)) => None,
        Some(Ok(n)) => Some(n),
        Some(Err(e)) => {
            eprintln!("LIMIT: {e}");
            std::process::exit(2);
        }
    };
    let d = ScoreConfig::default();
    let variants: [Variant; 5] = [
        (
            "as configured",
            TelemetryMode::Full,
            d.escape_margin_s,
            d.escape_margin_rel,
        ),
        ("fixed margin 2 s", TelemetryMode::Full, 2.0, 0.0),
        ("margin 2 s + 1 x mean", TelemetryMode::Full, 2.0, 1.0),
        ("no escape", TelemetryMode::Full, 1_000.0, 0.0),
        (
            "vLLM telemetry",
            TelemetryMode::VllmMetrics,
            d.escape_margin_s,
            d.escape_margin_rel,
        ),
    ];
    println!("variant                  hit %  TTFT p50 s  E2E p50 s  decisions by reason");
    for (name, telemetry, margin, rel) in variants {
        let mut opts = TraceOptions {
            engines: 16,
            rate_scale: 4.0,
            limit,
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
        let (result, m) = run_projected(&workload, name, margin, rel);
        println!(
            "{name:<23} {:>6.1}  {:>10.2}  {:>9.2}  {:?}",
            m.hit_rate * 100.0,
            m.ttft.p50.unwrap_or(f64::NAN),
            m.e2e.p50.unwrap_or(f64::NAN),
            result.decisions_by_reason
        );
    }
    // The hot-owner scenarios (seed 1): the escape's part in them.
    for scenario in ["hot-owner-51", "owner-canary"] {
        let Some(s) = kvroute_sim::workload::scenarios::find(scenario) else {
            continue;
        };
        let workload = s.build(1);
        println!("\n{scenario:<23} busy (mean)  output tok/s  share min  hit %");
        for (name, _, margin, rel) in [variants[0], variants[1], variants[3]] {
            let (_, m) = run_projected(&workload, name, margin, rel);
            println!(
                "{name:<23} {:>11.1}  {:>12.0}  {:>9.3}  {:>5.1}",
                m.busy_engines_mean,
                m.output_tokens_per_s,
                m.generation_share_min,
                m.hit_rate * 100.0
            );
        }
    }
}

/// One `projected_time` (enforce) run of `workload` with the escape margins under study.
fn run_projected(
    workload: &Workload,
    name: &str,
    escape_margin_s: f32,
    escape_margin_rel: f32,
) -> (kvroute_sim::RunResult, Metrics) {
    let policy = Policy::ProjectedTime {
        mode: ProjectedMode::Enforce,
    };
    let run_opts = RunOptions {
        score: Some({
            let mut c = ScoreConfig::default();
            c.policy = policy;
            c.escape_margin_s = escape_margin_s;
            c.escape_margin_rel = escape_margin_rel;
            c
        }),
        ..RunOptions::default()
    };
    let result = run(workload, policy, &run_opts);
    let m = compute(name, &result);
    (result, m)
}
