//! The instruction-count gate: reads the JSON lines gungraun prints for the `hot_paths`
//! benches (`--output-format=json`, one benchmark summary a line) and compares each bench's
//! callgrind instruction count (`Ir`) with the committed baseline, or rewrites the baseline.
//!
//! `scripts/gungraun.sh` builds and runs the benches and calls this; see there and
//! `docs/BENCHMARKS.md` for the procedure.
//!
//! * `check`: exits 1 when any bench's count is more than the tolerance (10 %) above its
//!   baseline, when a baselined bench did not run, or when a bench has no baseline; counts
//!   more than the tolerance *below* the baseline are reported (re-baseline to keep them).
//! * `rebaseline`: writes the counts of this run as the new baseline.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The committed baseline (`benches/kvroute-gungraun/baseline.json`).
#[derive(Debug, Serialize, Deserialize)]
struct Baseline {
    /// What the counts are.
    unit: String,
    /// How far above its baseline a count may go before the gate fails (percent).
    tolerance_percent: f64,
    /// Build and tools the counts were measured with (informative).
    measured_with: String,
    /// Instruction count per bench (`module path` + `id`).
    benches: BTreeMap<String, u64>,
}

#[derive(Parser)]
#[command(about = "kvroute's instruction-count gate over gungraun's JSON output")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compares the run's counts with the baseline; exits 1 on a regression.
    Check {
        /// The baseline file.
        #[arg(long)]
        baseline: PathBuf,
        /// gungraun's JSON lines of this run.
        #[arg(long)]
        summary: PathBuf,
    },
    /// Writes this run's counts as the baseline.
    Rebaseline {
        /// The baseline file (rewritten).
        #[arg(long)]
        baseline: PathBuf,
        /// gungraun's JSON lines of this run.
        #[arg(long)]
        summary: PathBuf,
        /// Allowed rise above baseline (percent).
        #[arg(long, default_value_t = 10.0)]
        tolerance_percent: f64,
        /// Build and tools of this run, recorded in the file.
        #[arg(long)]
        measured_with: String,
    },
}

/// Bench name → instruction count, from gungraun's JSON lines (non-JSON lines are skipped).
///
/// Each line is one benchmark summary (gungraun summary schema v6): the name is
/// `module_path` plus ` id` when present, the count is the Callgrind profile's total `Ir`
/// (`profiles[tool = Callgrind].data.total.metrics.Ir.values.new`).
fn read_counts(path: &Path) -> Result<BTreeMap<String, u64>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut counts = BTreeMap::new();
    for line in text.lines().filter(|l| l.trim_start().starts_with('{')) {
        let v: Value = serde_json::from_str(line).map_err(|e| format!("summary line: {e}"))?;
        let module = v["module_path"]
            .as_str()
            .ok_or("summary without module_path")?;
        let name = match v["id"].as_str() {
            Some(id) => format!("{module} {id}"),
            None => module.to_owned(),
        };
        let ir = v["profiles"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["tool"] == "Callgrind")
            .and_then(|p| this_run(&p["data"]["total"]["metrics"]["Ir"]))
            .ok_or_else(|| format!("{name}: no Callgrind Ir in the summary"))?;
        if counts.insert(name.clone(), ir).is_some() {
            return Err(format!("{name}: reported twice"));
        }
    }
    if counts.is_empty() {
        return Err(format!("{}: no benchmark summary", path.display()));
    }
    Ok(counts)
}

/// This run's value of a metric: `{"values": {"new": n}}`, plus `"old"` (and the
/// differences) when gungraun compared it with an earlier run.
fn this_run(metric: &Value) -> Option<u64> {
    metric["values"]["new"].as_u64()
}

/// Per-bench verdicts of a check; `true` when the gate passes.
fn check(baseline: &Baseline, run: &BTreeMap<String, u64>) -> bool {
    let limit = 1.0 + baseline.tolerance_percent / 100.0;
    let mut pass = true;
    println!(
        "{:<64} {:>14} {:>14} {:>8}",
        "bench", "baseline", "this run", "change"
    );
    for (name, &base) in &baseline.benches {
        let Some(&now) = run.get(name) else {
            println!("{name:<64} {base:>14} {:>14} {:>8}", "missing", "FAIL");
            pass = false;
            continue;
        };
        let change = (now as f64 / base as f64 - 1.0) * 100.0;
        let verdict = if now as f64 > base as f64 * limit {
            pass = false;
            "FAIL: regression"
        } else if (now as f64) < base as f64 / limit {
            "faster: re-baseline to keep it"
        } else {
            "ok"
        };
        println!("{name:<64} {base:>14} {now:>14} {change:>+7.2}% {verdict}");
    }
    for (name, now) in run {
        if !baseline.benches.contains_key(name) {
            println!(
                "{name:<64} {:>14} {now:>14} {:>8}",
                "none", "FAIL: no baseline"
            );
            pass = false;
        }
    }
    pass
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<bool, String> {
    match cli.command {
        Command::Check { baseline, summary } => {
            let text = std::fs::read_to_string(&baseline)
                .map_err(|e| format!("{}: {e}", baseline.display()))?;
            let base: Baseline =
                serde_json::from_str(&text).map_err(|e| format!("{}: {e}", baseline.display()))?;
            let pass = check(&base, &read_counts(&summary)?);
            if pass {
                println!(
                    "instruction counts within {}% of the baseline",
                    base.tolerance_percent
                );
            } else {
                println!(
                    "instruction-count gate FAILED (limit: baseline + {}%); if the change is \
                     intended, re-baseline with `scripts/gungraun.sh --rebaseline` and commit \
                     the baseline",
                    base.tolerance_percent
                );
            }
            Ok(pass)
        }
        Command::Rebaseline {
            baseline,
            summary,
            tolerance_percent,
            measured_with,
        } => {
            let benches = read_counts(&summary)?;
            let b = Baseline {
                unit: "instructions executed (callgrind Ir), one call of the bench function"
                    .to_owned(),
                tolerance_percent,
                measured_with,
                benches,
            };
            let mut text = serde_json::to_string_pretty(&b).map_err(|e| e.to_string())?;
            text.push('\n');
            std::fs::write(&baseline, text).map_err(|e| format!("{}: {e}", baseline.display()))?;
            for (name, n) in &b.benches {
                println!("{name:<64} {n:>14}");
            }
            println!("baseline written: {}", baseline.display());
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn baseline(benches: &[(&str, u64)]) -> Baseline {
        Baseline {
            unit: String::new(),
            tolerance_percent: 10.0,
            measured_with: String::new(),
            benches: benches.iter().map(|(n, c)| (n.to_string(), *c)).collect(),
        }
    }

    fn run(benches: &[(&str, u64)]) -> BTreeMap<String, u64> {
        benches.iter().map(|(n, c)| (n.to_string(), *c)).collect()
    }

    /// 10 % of 1,000 is 100: 1,100 passes, 1,101 fails; a count far below passes.
    #[test]
    fn the_limit_is_ten_percent_above_baseline() {
        let b = baseline(&[("a", 1_000), ("b", 2_000)]);
        assert!(check(&b, &run(&[("a", 1_100), ("b", 1_000)])));
        assert!(!check(&b, &run(&[("a", 1_101), ("b", 2_000)])));
    }

    #[test]
    fn a_missing_or_unknown_bench_fails() {
        let b = baseline(&[("a", 1_000)]);
        assert!(!check(&b, &run(&[])));
        assert!(!check(&b, &run(&[("a", 1_000), ("new", 5)])));
    }

    /// The two shapes gungraun writes for a metric: first run, and compared with the last.
    #[test]
    fn this_run_reads_the_new_value() {
        let first = serde_json::json!({"values": {"new": 1234}});
        let compared = serde_json::json!({"values": {"new": 20, "old": 10}, "diffs": {}});
        assert_eq!(this_run(&first), Some(1234));
        assert_eq!(this_run(&compared), Some(20));
        assert_eq!(this_run(&serde_json::json!({"values": {"old": 3}})), None);
    }
}
