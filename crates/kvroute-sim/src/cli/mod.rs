//! The command line: arguments, the parallel runner, and what each command does.

pub mod args;
pub mod runner;
pub mod sweep;

use std::fmt::Write;
use std::process::ExitCode;

use kvroute::{Policy, ProjectedMode};
use kvroute_sim::driver::{self, RunOptions};
use kvroute_sim::report::{RunSettings, WorkloadRuns, json, svg, table};
use kvroute_sim::workload::Workload;
use kvroute_sim::workload::arrivals::{jitter_arrivals, scale_arrivals};
use kvroute_sim::workload::generated::GENERATED;
use kvroute_sim::workload::scenarios::{self, SCENARIOS};
use kvroute_sim::workload::synth::truncate;
use kvroute_sim::workload::trace::{TraceOptions, load_trace};

use args::{Cli, Command, Common};

/// Runs the parsed command line; the exit code is 1 on an error (already printed).
pub fn main(cli: Cli) -> ExitCode {
    match dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// Writes `text` to standard output, an error (a full disk, a closed file) as a message
/// instead of `print!`'s panic. A closed pipe ends the process before this returns
/// (`SIGPIPE`, restored in `main`).
pub(crate) fn emit(text: &str) -> Result<(), String> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing the results to standard output: {e}"))
}

fn dispatch(cli: Cli) -> Result<(), String> {
    let common = cli.common;
    let command = cli.command.unwrap_or(Command::Demo);
    let rate_scale = match &command {
        Command::Scenario { rate_scale, .. } | Command::Replay { rate_scale, .. } => *rate_scale,
        _ => 1.0,
    };
    let mut workloads = match command {
        Command::List => {
            return emit(&list());
        }
        Command::Demo => scenarios::demo(common.seed),
        Command::Sweep(args) => return sweep::run(&common, &args),
        Command::Scenario {
            name,
            limit,
            rate_scale,
        } => {
            let s = kvroute_sim::workload::find_named(&name)
                .ok_or_else(|| format!("unknown scenario `{name}`"))?;
            let w = s.build(common.seed);
            let mut w = match limit {
                Some(n) => truncate(w, n),
                None => w,
            };
            scale_arrivals(&mut w, rate_scale).map_err(|e| e.to_string())?;
            vec![w]
        }
        Command::Replay {
            trace,
            engines,
            rate_scale,
            limit,
            arrival_jitter,
        } => {
            let opts = TraceOptions {
                engines,
                rate_scale,
                limit,
                ..Default::default()
            };
            let (mut w, stats) =
                load_trace(&trace, &opts).map_err(|e| format!("{}: {e}", trace.display()))?;
            jitter_arrivals(&mut w, arrival_jitter, common.seed).map_err(|e| e.to_string())?;
            if !common.quiet {
                eprintln!(
                    "read {} requests from {} ({} lines, {} blank)",
                    stats.requests,
                    trace.display(),
                    stats.lines,
                    stats.blank_lines
                );
            }
            vec![w]
        }
    };
    let faults = common.fault_program()?;
    for w in &mut workloads {
        common.apply_engine(w);
        if let Some(f) = &faults {
            common.add_program(w, f, rate_scale)?;
        }
    }
    run_and_report(&common, &workloads, rate_scale)
}

fn run_and_report(common: &Common, workloads: &[Workload], rate_scale: f64) -> Result<(), String> {
    let policies: Vec<Policy> = if common.policies.is_empty() {
        default_policies()
    } else {
        // A policy named twice runs once.
        let mut unique: Vec<Policy> = Vec::new();
        for p in &common.policies {
            if !unique.contains(p) {
                unique.push(*p);
            }
        }
        unique
    };
    if let Some(w) = workloads.iter().find(|w| w.routed_requests() == 0) {
        return Err(format!(
            "workload `{}` has no request to route (an empty trace, or a limit that keeps \
             only a scenario's pinned background requests)",
            w.name
        ));
    }
    check_outputs(common)?;
    let started = std::time::Instant::now();
    let seed = common.seed;
    let predicted = common.predicted();
    let telemetry = common.telemetry();
    let threads = runner::threads(common.jobs, workloads.len() * policies.len());
    let mut runs: Vec<WorkloadRuns> = runner::run_all(
        workloads,
        &policies,
        threads,
        common.quiet,
        |w, hashes, p, progress| {
            let opts = RunOptions {
                seed,
                progress: Some(progress),
                prompt_hashes: Some(hashes),
                predicted,
                telemetry,
                score: common.score(),
                ..Default::default()
            };
            driver::run(w, p, &opts)
        },
    );
    for w in &mut runs {
        w.settings = RunSettings {
            seed: Some(seed),
            rate_scale: Some(rate_scale),
            ..common.settings()
        };
    }
    let failed: Vec<String> = runs
        .iter()
        .flat_map(|w| {
            w.runs.iter().filter_map(move |r| {
                r.result
                    .error
                    .as_ref()
                    .map(|e| format!("{} / {}: {e}", w.name, r.label))
            })
        })
        .collect();
    for (i, w) in runs.iter().enumerate() {
        if i > 0 {
            emit("\n")?;
        }
        emit(&w.table())?;
    }
    // Always on standard error, `--quiet` or not: a fault the runs never reached is not
    // to pass unseen.
    for (w, workload) in runs.iter().zip(workloads) {
        for note in unapplied_faults(w, workload) {
            eprintln!("note: {note}");
        }
    }
    if !common.quiet {
        let n = workloads.len() * policies.len();
        eprintln!(
            "{n} run{} in {:.1} s wall time",
            if n == 1 { "" } else { "s" },
            started.elapsed().as_secs_f64()
        );
    }
    if let Some(path) = &common.json {
        json::write(path, common.seed, &runs).map_err(|e| e.to_string())?;
        if !common.quiet {
            eprintln!("wrote {}", path.display());
        }
    }
    if let Some(dir) = &common.svg {
        let files = svg::write_all(dir, &runs).map_err(|e| e.to_string())?;
        if !common.quiet {
            eprintln!("wrote {} plots into {}", files.len(), dir.display());
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "some runs could not start:\n  {}",
            failed.join("\n  ")
        ))
    }
}

/// Fails early, before any simulation runs, when an output could not be written: the
/// `--json` file cannot be created (created empty here, written at the end) or the
/// `--svg` folder cannot be created.
fn check_outputs(common: &Common) -> Result<(), String> {
    if let Some(path) = &common.json {
        std::fs::File::create(path).map_err(|e| format!("--json {}: {e}", path.display()))?;
    }
    if let Some(dir) = &common.svg {
        std::fs::create_dir_all(dir).map_err(|e| format!("--svg {}: {e}", dir.display()))?;
    }
    Ok(())
}

/// The policies run when `--policies` is not given: one per label
/// ([`Policy::LABELED`]: `load_aware` with its default beta), but `projected_time:off`,
/// which dispatches exactly as `least_load`.
pub fn default_policies() -> Vec<Policy> {
    Policy::LABELED
        .into_iter()
        .filter(|p| {
            *p != Policy::ProjectedTime {
                mode: ProjectedMode::Off,
            }
        })
        .collect()
}

/// The `list` output: every scenario with what it reproduces, then the default policies
/// and every accepted form.
fn list() -> String {
    let mut out = String::from("scenarios:\n");
    for s in &SCENARIOS {
        let _ = writeln!(out, "  {}", s.name);
        for line in table::wrap(s.reproduces, 76) {
            let _ = writeln!(out, "      {line}");
        }
    }
    out.push_str("\ngenerated workloads (scenario NAME, sweep --workload NAME):\n");
    for s in &GENERATED {
        let _ = writeln!(out, "  {}", s.name);
        for line in table::wrap(s.reproduces, 76) {
            let _ = writeln!(out, "      {line}");
        }
    }
    out.push_str("\nengine presets (--engine NAME; default: each workload's own engine):\n");
    for p in kvroute_sim::engine::EngineConfig::PRESETS {
        let _ = writeln!(out, "  {}", p.name);
        for line in table::wrap(p.what, 76) {
            let _ = writeln!(out, "      {line}");
        }
    }
    out.push_str("\npolicies (--policies a,b,c; these by default):\n");
    for p in default_policies() {
        let _ = writeln!(out, "  {p}");
    }
    out.push_str("accepted:\n");
    for line in table::wrap(&Policy::accepted_forms(), 76) {
        let _ = writeln!(out, "  {line}");
    }
    out
}

/// One line per fault of `workload` that some of its runs `w` ended before: how many, and
/// when the latest of them ended.
fn unapplied_faults(w: &WorkloadRuns, workload: &Workload) -> Vec<String> {
    let mut late: std::collections::BTreeMap<usize, (usize, f64)> = Default::default();
    for r in &w.runs {
        for &i in &r.result.faults_after_end {
            let e = late.entry(i).or_insert((0, 0.0));
            e.0 += 1;
            e.1 = e.1.max(r.result.end_s);
        }
    }
    late.into_iter()
        .map(|(i, (n, end))| {
            let (engine, at) = workload
                .faults
                .get(i)
                .map_or((0, f64::NAN), |f| (f.engine, f.at_s));
            format!(
                "{}: scheduled fault {i} (the workload's own faults first, then --faults'; \
                 engine {engine}, at {at:.1} s of the run) was not applied in {n} of {} runs: \
                 each ended first (the latest at {end:.1} s)",
                w.name,
                w.runs.len()
            )
        })
        .collect()
}
