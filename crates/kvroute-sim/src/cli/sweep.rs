//! The `sweep` command: policies × rate scales × seeds on a trace or a named workload, every
//! run on its own thread (up to `--jobs`), then the summary table, `--json` and `--svg`.

use std::sync::OnceLock;
use std::time::Instant;

use kvroute::{Policy, ProjectedMode};
use kvroute_sim::driver::{self, PromptHashes, RunOptions};
use kvroute_sim::fault::Fault;
use kvroute_sim::report::sweep::{SWEEP_METRICS, SweepSamples, summarise};
use kvroute_sim::report::{compute, sweep_svg, sweep_table};
use kvroute_sim::workload::Workload;
use kvroute_sim::workload::arrivals::{jitter_arrivals, scale_arrivals};
use kvroute_sim::workload::scenarios::Scenario;
use kvroute_sim::workload::trace::{TraceOptions, load_trace};

use super::args::{Common, SweepArgs};
use super::runner;

/// Requests of a trace the sweep keeps unless told otherwise (`--limit`, `--whole-trace`):
/// the default matrix on the conversation trace must finish within 10 minutes on 2 cores
/// (`docs/RESULTS.md`, "Sweep", has the measurement).
pub const DEFAULT_TRACE_REQUESTS: usize = 3_000;

/// The policies a sweep compares when `--policies` is not given: every labelled policy but
/// `projected_time:off` and `projected_time:shadow`, which dispatch exactly as
/// `least_load` (shadow only records what enforce would have done).
pub fn default_policies() -> Vec<Policy> {
    super::default_policies()
        .into_iter()
        .filter(|p| {
            *p != Policy::ProjectedTime {
                mode: ProjectedMode::Shadow,
            }
        })
        .collect()
}

/// What the sweep runs on: a trace read once at its own rate, or a named workload built
/// for each seed.
enum Source {
    Trace(Box<Workload>),
    /// A named workload, cut to its first `N` routed requests when `--limit N` is given
    /// (as `scenario --limit` cuts it: pinned setup requests kept).
    Named(&'static Scenario, Option<usize>),
}

impl Source {
    /// The workload for one cell: built (named) or copied (trace), its engines replaced
    /// by the `--engine` preset if given, arrivals divided by `scale`, the `--faults`
    /// program added (moved with the load), then jittered by `jitter_s` seeded with
    /// `seed`.
    fn workload(
        &self,
        common: &Common,
        faults: Option<&[Fault]>,
        scale: f64,
        seed: u64,
        jitter_s: f64,
    ) -> Result<Workload, String> {
        let mut w = match self {
            Source::Trace(w) => (**w).clone(),
            Source::Named(s, None) => s.build(seed),
            Source::Named(s, Some(n)) => kvroute_sim::workload::synth::truncate(s.build(seed), *n),
        };
        common.apply_engine(&mut w);
        scale_arrivals(&mut w, scale).map_err(|e| e.to_string())?;
        if let Some(f) = faults {
            common.add_program(&mut w, f, scale)?;
        }
        jitter_arrivals(&mut w, jitter_s, seed).map_err(|e| e.to_string())?;
        Ok(w)
    }
}

fn source(common: &Common, args: &SweepArgs) -> Result<Source, String> {
    if let Some(name) = &args.workload {
        if args.whole_trace {
            return Err(
                "--whole-trace is for --trace; a named workload runs whole unless --limit cuts it"
                    .to_string(),
            );
        }
        return kvroute_sim::workload::find_named(name)
            .map(|s| Source::Named(s, args.limit))
            .ok_or_else(|| format!("unknown workload `{name}`"));
    }
    let Some(trace) = &args.trace else {
        return Err("give --trace FILE or --workload NAME".to_string());
    };
    let limit = match (args.limit, args.whole_trace) {
        (Some(n), _) => Some(n),
        (None, true) => None,
        (None, false) => Some(DEFAULT_TRACE_REQUESTS),
    };
    let opts = TraceOptions {
        engines: args.engines,
        limit,
        ..Default::default()
    };
    let (w, stats) = load_trace(trace, &opts).map_err(|e| format!("{}: {e}", trace.display()))?;
    if !common.quiet {
        eprintln!("read {} requests from {}", stats.requests, trace.display());
    }
    Ok(Source::Trace(Box::new(w)))
}

/// Runs the sweep and prints (and writes) its summary.
pub fn run(common: &Common, args: &SweepArgs) -> Result<(), String> {
    let mut policies: Vec<Policy> = Vec::new();
    let given = if common.policies.is_empty() {
        default_policies()
    } else {
        common.policies.clone()
    };
    let reference = args.reference.unwrap_or_default();
    for p in std::iter::once(reference).chain(given) {
        if !policies.contains(&p) {
            policies.push(p);
        }
    }
    let mut scales: Vec<f64> = Vec::new();
    for &s in &args.rate_scales {
        if !scales.contains(&s) {
            scales.push(s);
        }
    }
    let seeds: Vec<u64> = (0..u64::from(args.seeds))
        .map(|k| common.seed.checked_add(k))
        .collect::<Option<_>>()
        .ok_or("--seed plus --seeds overflows a 64-bit seed")?;
    let src = source(common, args)?;
    let faults = common.fault_program()?;
    let probe = src.workload(
        common,
        faults.as_deref(),
        scales[0],
        seeds[0],
        args.arrival_jitter,
    )?;
    if probe.routed_requests() == 0 {
        return Err(format!("workload `{}` has no request to route", probe.name));
    }
    // The preset and the fault program in the name, so that the table's header and the
    // JSON tell runs on different engines or faults apart.
    let mut extra = Vec::new();
    if let Some(e) = &common.engine {
        extra.push(format!("engine {e}"));
    }
    if let Some(p) = &common.faults {
        extra.push(format!("faults {}", p.display()));
    }
    let name = if extra.is_empty() {
        probe.name.clone()
    } else {
        format!("{} ({})", probe.name, extra.join(", "))
    };
    drop(probe);
    super::check_outputs(common)?;
    let (np, ns, nk) = (policies.len(), scales.len(), seeds.len());
    let runs = np * ns * nk;
    let threads = runner::threads(common.jobs, runs);
    let started = Instant::now();
    // Prompt hashes: a trace's prompts are the same in every cell; a named workload's,
    // the same for one seed at every rate scale. Each is computed by its first run.
    let hashes: Vec<OnceLock<PromptHashes>> = (0..nk).map(|_| OnceLock::new()).collect();
    let order = runner::dispatch_order(runs, |i| runner::dispatch_rank(policies[i / (ns * nk)]));
    let predicted = common.predicted();
    let telemetry = common.telemetry();
    let results = runner::run_in_order(&order, threads, common.quiet, |i, progress| {
        let (p, s, k) = (i / (ns * nk), (i / nk) % ns, i % nk);
        let w = src.workload(
            common,
            faults.as_deref(),
            scales[s],
            seeds[k],
            args.arrival_jitter,
        )?;
        let shared = match src {
            Source::Trace(_) => &hashes[0],
            Source::Named(..) => &hashes[k],
        };
        let h = shared.get_or_init(|| PromptHashes::of(&w));
        let opts = RunOptions {
            seed: seeds[k],
            progress: Some(progress),
            // A workload whose prompts differ from the shared ones hashes its own.
            prompt_hashes: Some(h).filter(|h| h.fit(&w)),
            predicted,
            telemetry,
            score: common.score(),
            ..Default::default()
        };
        let r = driver::run(&w, policies[p], &opts);
        if let Some(e) = r.error {
            return Err(format!(
                "{} at x{} seed {}: {e}",
                policies[p], scales[s], seeds[k]
            ));
        }
        let m = compute(&policies[p].to_string(), &r);
        Ok((
            SWEEP_METRICS.map(|metric| metric.of(&m)),
            r.faults_after_end,
            r.refused,
        ))
    });
    let results: Vec<_> = results.into_iter().collect::<Result<_, String>>()?;
    // Always on standard error: faults some runs never reached (each ended first).
    for (s, scale) in scales.iter().enumerate() {
        let late: Vec<&Vec<usize>> = (results.iter().enumerate())
            .filter(|(i, r)| (i / nk) % ns == s && !r.1.is_empty())
            .map(|(_, r)| &r.1)
            .collect();
        if let Some(first) = late.first() {
            eprintln!(
                "note: {name} at x{scale}: {} of {} runs ended before some of the workload's \
                 faults started (never applied; scheduled faults {first:?} in the first of \
                 them, counting the workload's own faults first, then --faults')",
                late.len(),
                np * nk
            );
        }
    }
    // Always on standard error too: requests the engines could never serve (a prompt past
    // the context or the cache), which no metric of the table counts.
    let refused: u64 = results.iter().map(|r| r.2).sum();
    if refused > 0 {
        let runs_with = results.iter().filter(|r| r.2 > 0).count();
        eprintln!(
            "note: {name}: {refused} requests refused by their engine (a prompt past its \
             context or cache) in {runs_with} of {} runs; the metrics count the served ones",
            results.len()
        );
    }
    let values: Vec<_> = results.into_iter().map(|r| r.0).collect();
    let samples = SweepSamples {
        workload: name,
        policies: policies.iter().map(Policy::to_string).collect(),
        reference: 0,
        rate_scales: scales,
        seeds,
        values,
    };
    let mut summary = summarise(&samples).map_err(|e| e.to_string())?;
    summary.settings = common.settings();
    super::emit(&sweep_table::render(&summary))?;
    if !common.quiet {
        eprintln!(
            "{runs} runs in {:.1} s wall time on {threads} thread{}",
            started.elapsed().as_secs_f64(),
            if threads == 1 { "" } else { "s" }
        );
    }
    if let Some(path) = &common.json {
        sweep_table::write_json(path, &summary).map_err(|e| e.to_string())?;
        if !common.quiet {
            eprintln!("wrote {}", path.display());
        }
    }
    if let Some(dir) = &common.svg {
        let files = sweep_svg::write_all(dir, &summary).map_err(|e| e.to_string())?;
        if !common.quiet {
            eprintln!("wrote {} plots into {}", files.len(), dir.display());
        }
    }
    Ok(())
}
