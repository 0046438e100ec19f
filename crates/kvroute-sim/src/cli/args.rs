//! The command line (clap derive).

use std::path::PathBuf;

use clap::builder::PossibleValuesParser;
use clap::{Args, Parser, Subcommand};
use kvroute::Policy;
use kvroute_sim::workload::scenarios::SCENARIOS;

/// kvroute's fleet simulator: runs workloads through the real kvroute Router under every
/// routing policy and prints one table row per policy. With no command, runs the demo
/// (hot-owner-51 plus a slice of zipf-prefixes).
#[derive(Debug, Parser)]
#[command(name = "kvroute-sim", version)]
pub struct Cli {
    /// What to run (default: `demo`).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Flags every command takes.
    #[command(flatten)]
    pub common: Common,
}

/// Flags every command takes.
#[derive(Debug, Args)]
pub struct Common {
    /// Seed of the scenarios' random draws and of the simulation.
    #[arg(long, global = true, default_value_t = 1)]
    pub seed: u64,
    /// Also write the metrics and per-engine time series to this JSON file.
    #[arg(long, global = true, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write plots (engine occupancy over time, TTFT CDF) into this folder.
    #[arg(long, global = true, value_name = "DIR")]
    pub svg: Option<PathBuf>,
    /// No progress bar and no status lines (the tables still go to stdout).
    #[arg(long, short, global = true)]
    pub quiet: bool,
    /// Policies to compare, comma-separated (default: `default_policies` of the `cli`), in
    /// the forms `kvroute::Policy` parses (the help text lists them).
    #[arg(long, global = true, value_delimiter = ',', value_parser = parse_policy, value_name = "LIST", help = policies_help())]
    pub policies: Vec<Policy>,
}

/// `--policies`' help: the default set and every accepted form.
fn policies_help() -> String {
    format!(
        "Policies to compare, comma-separated (default: every policy but \
         projected_time:off). Accepted: {}",
        Policy::accepted_forms()
    )
}

/// One `--policies` entry, surrounding spaces ignored (`kvroute::Policy`'s `FromStr`).
fn parse_policy(s: &str) -> Result<Policy, String> {
    s.trim()
        .parse()
        .map_err(|e: kvroute::ParsePolicyError| e.to_string())
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The default demo: hot-owner-51 plus the first requests of zipf-prefixes.
    Demo,
    /// Run one built-in scenario.
    Scenario {
        /// The scenario (see `list`).
        #[arg(value_parser = PossibleValuesParser::new(SCENARIOS.iter().map(|s| s.name)))]
        name: String,
        /// Keep only the first N requests (follow-ups of dropped requests go too), N >= 1.
        #[arg(long, value_name = "N", value_parser = parse_limit)]
        limit: Option<usize>,
    },
    /// Replay a Mooncake JSONL trace.
    Replay {
        /// The trace file (one JSON object a line: timestamp, input_length, output_length,
        /// hash_ids).
        #[arg(long, value_name = "FILE")]
        trace: PathBuf,
        /// Engines in the fleet (one router worker slot each; the router holds at most
        /// 4,096).
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
        engines: u32,
        /// Arrival-rate multiplier (arrival times are divided by it), 0.001..=1000.
        #[arg(long, default_value_t = 1.0, value_parser = parse_rate_scale, allow_negative_numbers = true)]
        rate_scale: f64,
        /// Keep only the first N requests, N >= 1.
        #[arg(long, value_name = "N", value_parser = parse_limit)]
        limit: Option<usize>,
    },
    /// List the scenarios (with what each reproduces) and the policies.
    List,
}

/// Bounds of `--rate-scale`: slower than 1/1000 would stretch the trace's hour over more
/// than a month of virtual time; faster than 1000x puts every arrival in a few seconds.
const RATE_SCALE_RANGE: core::ops::RangeInclusive<f64> = 0.001..=1000.0;

fn parse_rate_scale(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if RATE_SCALE_RANGE.contains(&v) {
        Ok(v)
    } else {
        Err(format!("rate scale must be within 0.001..=1000, got {s}"))
    }
}

fn parse_limit(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("limit must be a whole number >= 1, got {s}")),
    }
}
