//! The command line (clap derive).

use std::path::PathBuf;

use clap::builder::PossibleValuesParser;
use clap::{Args, Parser, Subcommand};
use kvroute::Policy;
use kvroute_sim::report::RunSettings;
use kvroute_sim::workload::arrivals::MAX_ARRIVAL_JITTER_S;

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
    /// Seed of the scenarios' random draws and of the simulation (`sweep`: the first seed).
    #[arg(long, global = true, default_value_t = 1)]
    pub seed: u64,
    /// Also write the results to this JSON file: metrics and per-engine time series
    /// (`sweep`: every per-seed value and the summary).
    #[arg(long, global = true, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write plots into this folder: engine occupancy over time and TTFT CDFs
    /// (`sweep`: each metric against load).
    #[arg(long, global = true, value_name = "DIR")]
    pub svg: Option<PathBuf>,
    /// No progress bar and no status lines (the tables still go to stdout).
    #[arg(long, short, global = true)]
    pub quiet: bool,
    /// Policies to compare, comma-separated (default: `default_policies` of the `cli`), in
    /// the forms `kvroute::Policy` parses (the help text lists them).
    #[arg(long, global = true, value_delimiter = ',', value_parser = parse_policy, value_name = "LIST", help = policies_help())]
    pub policies: Vec<Policy>,
    /// Simulations run at once (independent runs on their own threads), >= 1; default: the
    /// available cores.
    #[arg(long, global = true, value_name = "N", value_parser = parse_jobs)]
    pub jobs: Option<usize>,
    /// Turns on the router's predicted residency (off by default, as in the router): each
    /// decision credits its worker with the routed prompt for this long, or until the
    /// worker's KV events show it (milliseconds, >= 1).
    #[arg(long, global = true, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub predicted_ttl_ms: Option<u64>,
    /// The router's `projected_time` KV-bound switch (`ScoreConfig::kv_bound_usage`): the
    /// fleet's mean KV usage at or above which it decides by the blocks cost, 0..=2 (above
    /// 1: never). Default: the router's (0.9).
    #[arg(long, global = true, value_name = "RATIO", value_parser = parse_kv_bound_usage)]
    pub kv_bound_usage: Option<f32>,
    /// Which load figures every engine reports for the whole run: `full` (queued prefill
    /// and decode tokens, throughputs: SGLang's `/v1/loads`) or `gauges` (vLLM's
    /// Prometheus gauges: running, waiting, KV usage), overriding a scenario's
    /// partial-telemetry faults too; default: the workload's own (full, but for the
    /// engines a partial-telemetry fault names).
    #[arg(long, global = true, value_name = "KIND", value_parser = PossibleValuesParser::new(["full", "gauges"]))]
    pub telemetry: Option<String>,
    /// Every engine of the fleet runs this preset instead of the workload's own engine
    /// (capacity, scheduler limits and step time; `list` describes each, the simulator's
    /// engine docs derive them). Default: the workload's own engine (`sim-default` for
    /// the trace and most workloads; some scenarios size their own).
    #[arg(long, global = true, value_name = "PRESET", value_parser = PossibleValuesParser::new(kvroute_sim::engine::EngineConfig::PRESETS.map(|p| p.name)))]
    pub engine: Option<String>,
    /// A fault program to run the workload through, after its own faults: a JSON array
    /// of `{"at_s", "engine", "kind", ...}` objects, `kind` one of restart, disconnect,
    /// telemetry_blackout, fail_fast, partial_telemetry (each but restart with
    /// `duration_s`), event_loss (`duration_s`, `loss`), slowdown (`duration_s`,
    /// `factor`), flap (`duration_s`, `period_s`, `down_s`); times in seconds of the
    /// workload's own timeline, each start moved with the load by a rate scale (durations
    /// not); refused together with `--telemetry` when it holds partial_telemetry faults
    /// (README, "Fault programs")
    #[arg(long, global = true, value_name = "FILE")]
    pub faults: Option<PathBuf>,
}

impl Common {
    /// The predicted residency these flags ask for (`None`: off).
    pub fn predicted(&self) -> Option<kvroute::PredictedConfig> {
        self.predicted_ttl_ms.map(|ms| {
            let mut p = kvroute::PredictedConfig::default();
            p.ttl = kvroute::Nanos::from_millis(ms);
            p
        })
    }
}

impl Common {
    /// The settings these flags record with a run ([`RunSettings`]): telemetry (`workload`
    /// where the workload's own modes hold), engine preset, predicted residency TTL and
    /// KV-bound switch; seed and rate scale left for the caller (a sweep has several).
    pub fn settings(&self) -> RunSettings {
        RunSettings {
            seed: None,
            rate_scale: None,
            telemetry: Some(self.telemetry.clone().unwrap_or_else(|| "workload".into())),
            engine: self.engine.clone(),
            predicted_ttl_ms: self.predicted_ttl_ms,
            kv_bound_usage: self.kv_bound_usage,
            faults: self.faults.as_ref().map(|p| p.display().to_string()),
        }
    }

    /// The `--faults` program, read and parsed (`None` without the flag).
    ///
    /// # Errors
    /// The file cannot be read or is not a fault program (the message names the file).
    pub fn fault_program(&self) -> Result<Option<Vec<kvroute_sim::fault::Fault>>, String> {
        let Some(path) = &self.faults else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let faults = kvroute_sim::workload::faults::parse_faults(&text)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        // `--telemetry` holds for every engine the whole run: it would drop the program's
        // partial-telemetry faults (as it drops a scenario's), so the two together are
        // refused rather than one silently ignored.
        if let Some(t) = &self.telemetry
            && let Some(i) = faults.iter().position(|f| {
                matches!(
                    f.kind,
                    kvroute_sim::fault::FaultKind::PartialTelemetry { .. }
                )
            })
        {
            return Err(format!(
                "{}: fault {i} (partial_telemetry) contradicts --telemetry {t}, which holds \
                 for every engine the whole run; leave one of them out",
                path.display()
            ));
        }
        Ok(Some(faults))
    }

    /// `add_faults` of the `--faults` program to `w`, an error naming the file.
    ///
    /// # Errors
    /// A fault `w`'s fleet refuses (`Fault::check`).
    pub fn add_program(
        &self,
        w: &mut kvroute_sim::workload::Workload,
        faults: &[kvroute_sim::fault::Fault],
        scale: f64,
    ) -> Result<(), String> {
        let path = self
            .faults
            .as_deref()
            .unwrap_or(std::path::Path::new("--faults"));
        kvroute_sim::workload::faults::add_faults(w, faults, scale)
            .map_err(|e| format!("{}: {e}", path.display()))
    }
}

impl Common {
    /// The scorer knobs these flags change (`None`: the router's defaults).
    pub fn score(&self) -> Option<kvroute::ScoreConfig> {
        self.kv_bound_usage.map(|u| {
            let mut c = kvroute::ScoreConfig::default();
            c.kv_bound_usage = u;
            c
        })
    }
}

/// `--kv-bound-usage`: a ratio within `ScoreConfig::kv_bound_usage`'s bounds.
fn parse_kv_bound_usage(s: &str) -> Result<f32, String> {
    let v: f32 = s
        .trim()
        .parse()
        .map_err(|e| format!("`{s}` is not a number: {e}"))?;
    let mut c = kvroute::ScoreConfig::default();
    c.kv_bound_usage = v;
    c.validate().map_err(|e| e.to_string())?;
    Ok(v)
}

impl Common {
    /// Puts the `--engine` preset, if any, on every engine of `w`.
    pub fn apply_engine(&self, w: &mut kvroute_sim::workload::Workload) {
        if let Some(cfg) = self
            .engine
            .as_deref()
            .and_then(kvroute_sim::engine::EngineConfig::preset)
        {
            w.fleet.engine = cfg;
        }
    }
}

impl Common {
    /// The telemetry mode `--telemetry` asks for (`None`: the workload's).
    pub fn telemetry(&self) -> Option<kvroute_sim::net::TelemetryMode> {
        self.telemetry.as_deref().map(|t| match t {
            "gauges" => kvroute_sim::net::TelemetryMode::VllmMetrics,
            _ => kvroute_sim::net::TelemetryMode::Full,
        })
    }
}

/// `--policies`' help: the default set and every accepted form.
fn policies_help() -> String {
    format!(
        "Policies to compare, comma-separated (default: every policy but \
         projected_time:off; sweep also leaves out projected_time:shadow, which dispatches \
         as least_load). Accepted: {}",
        Policy::accepted_forms()
    )
}

/// One `--policies` entry, surrounding spaces ignored (`kvroute::Policy`'s `FromStr`).
fn parse_policy(s: &str) -> Result<Policy, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err(format!(
            "empty policy name (a stray comma?); accepted: {}",
            Policy::accepted_forms()
        ));
    }
    s.parse()
        .map_err(|e: kvroute::ParsePolicyError| e.to_string())
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The default demo: hot-owner-51 plus the first requests of zipf-prefixes.
    Demo,
    /// Run one built-in scenario or generated workload.
    Scenario {
        /// The scenario or generated workload (see `list`).
        #[arg(value_parser = PossibleValuesParser::new(kvroute_sim::workload::named().map(|s| s.name)))]
        name: String,
        /// Keep only the first N requests (follow-ups of dropped requests go too), N >= 1.
        #[arg(long, value_name = "N", value_parser = parse_limit)]
        limit: Option<usize>,
        /// Arrival-rate multiplier, 0.001..=1000, applied as the sweep applies it: the
        /// timeline after the scenario's setup is compressed, its faults keep their place
        /// in the load (`docs/RESULTS.md`, "The scenarios").
        #[arg(long, default_value_t = 1.0, value_parser = parse_rate_scale, allow_negative_numbers = true)]
        rate_scale: f64,
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
        /// Move every arrival by a seeded uniform draw in [-S, +S] seconds (after the rate
        /// scale), 0..=3600; 0 keeps the trace's own arrivals.
        #[arg(long, value_name = "S", default_value_t = 0.0, value_parser = parse_jitter)]
        arrival_jitter: f64,
    },
    /// Every policy at every rate scale over several seeds: means with 95 % intervals and
    /// marks against the reference policy (`docs/RESULTS.md`, "Sweep").
    Sweep(SweepArgs),
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

/// `sweep`'s arguments: what to run it on, and the matrix.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// A Mooncake JSONL trace to sweep (or `--workload`).
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "workload",
        conflicts_with = "workload"
    )]
    pub trace: Option<PathBuf>,
    /// A scenario or generated workload to sweep instead of a trace (see `list`).
    #[arg(long, value_name = "NAME", value_parser = PossibleValuesParser::new(kvroute_sim::workload::named().map(|s| s.name)))]
    pub workload: Option<String>,
    /// Engines in the fleet for a trace (a named workload brings its own fleet).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub engines: u32,
    /// Arrival-rate multipliers, comma-separated, each 0.001..=1000 (a scenario keeps its
    /// setup and the place of its faults in the load: see `docs/RESULTS.md`, "The scenarios").
    #[arg(long, value_delimiter = ',', value_name = "LIST", default_values_t = [1.0, 2.0, 4.0, 8.0, 16.0], value_parser = parse_rate_scale)]
    pub rate_scales: Vec<f64>,
    /// Seeds per cell, 1..=100: `--seed`, `--seed` + 1, ...
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub seeds: u32,
    /// Keep only the first N requests of the trace, N >= 1 (default: the documented
    /// default slice, see `--whole-trace`); with `--workload`, its first N routed requests
    /// (its pinned setup requests kept; default: all of them).
    #[arg(long, value_name = "N", value_parser = parse_limit, conflicts_with = "whole_trace")]
    pub limit: Option<usize>,
    /// Sweep the whole trace instead of its default slice.
    #[arg(long)]
    pub whole_trace: bool,
    /// Move every arrival by a seeded uniform draw in [-S, +S] seconds (after the rate
    /// scale), 0..=3600.
    #[arg(long, value_name = "S", default_value_t = 0.0, value_parser = parse_jitter)]
    pub arrival_jitter: f64,
    /// The policy every other is compared with (default: the router's default policy); it
    /// runs even when `--policies` leaves it out.
    #[arg(long, value_name = "POLICY", value_parser = parse_policy)]
    pub reference: Option<Policy>,
}

fn parse_jitter(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=MAX_ARRIVAL_JITTER_S).contains(&v) => Ok(v),
        _ => Err(format!(
            "arrival jitter must be a number of seconds within 0..={MAX_ARRIVAL_JITTER_S}, got {s}"
        )),
    }
}

fn parse_jobs(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("jobs must be a whole number >= 1, got {s}")),
    }
}
