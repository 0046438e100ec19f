//! Runs independent simulations in parallel on `--jobs` threads (default: the available
//! cores), with one progress bar over all of them once they have taken more than a second.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kvroute::Policy;
use kvroute_sim::RunResult;
use kvroute_sim::driver::PromptHashes;
use kvroute_sim::report::{PolicyRun, WorkloadRuns};
use kvroute_sim::workload::Workload;

/// How long the runs go before the progress bar appears.
const SHOW_AFTER: Duration = Duration::from_secs(1);

/// Steps of the progress bar per run (each run reports the fraction of its requests done).
const STEPS_PER_RUN: u64 = 1000;

/// The progress callback a run gets: the fraction of its requests done (0..=1).
pub type Progress<'a> = &'a (dyn Fn(f64) + Sync);

/// The threads to use: `jobs` if given, else the available cores, never more than the
/// runs and at least one.
pub fn threads(jobs: Option<usize>, runs: usize) -> usize {
    jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .min(runs)
        .max(1)
}

/// How much longer than the others a policy's simulations are expected to run, as a
/// dispatch rank (higher first). `kv_aware_first` sends every request to the first engine
/// reported to hold its prefix, however busy, so one engine carries most of the fleet's
/// queue and its simulation steps through the longest backlog: measured the longest single
/// run of the conversation trace at `--rate-scale 4` (3.7 s against 2.0-3.1 s for the
/// others, `docs/BENCHMARKS.md`, "Simulator: dispatch order"). Every other policy ranks 0.
pub fn dispatch_rank(policy: Policy) -> u8 {
    u8::from(matches!(policy, Policy::KvAwareFirst))
}

/// The order to start jobs `0..runs` in: by `rank(job)` descending, then by index.
/// Starting the longest jobs first keeps a core from idling while the last, long job
/// runs alone (longest-processing-time-first scheduling). The results do not depend on it.
pub fn dispatch_order(runs: usize, rank: impl Fn(usize) -> u8) -> Vec<usize> {
    let mut order: Vec<usize> = (0..runs).collect();
    order.sort_by_key(|&i| core::cmp::Reverse(rank(i)));
    order
}

/// Runs `run(i, progress)` for every job `i` of `order` (a permutation of
/// `0..order.len()`) on `threads` threads, starting them in that order, and returns the
/// results in index order. `quiet` hides the progress bar.
///
/// # Panics
/// If `order` is not a permutation of `0..order.len()`.
pub fn run_in_order<R, F>(order: &[usize], threads: usize, quiet: bool, run: F) -> Vec<R>
where
    R: Send,
    F: Fn(usize, Progress<'_>) -> R + Sync,
{
    let runs = order.len();
    let mut seen = vec![false; runs];
    for &i in order {
        assert!(
            i < runs && !std::mem::replace(&mut seen[i], true),
            "the dispatch order is not a permutation"
        );
    }
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..runs).map(|_| None).collect());
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let steps: Vec<AtomicU64> = (0..runs).map(|_| AtomicU64::new(0)).collect();
    let bar = ProgressBar::with_draw_target(
        Some(runs as u64 * STEPS_PER_RUN),
        ProgressDrawTarget::hidden(),
    );
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {percent:>3}% of {msg} runs (eta {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(runs.to_string());
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= runs {
                        break;
                    }
                    let i = order[k];
                    // Counted even if the run panics, so the progress loop ends and the
                    // scope re-raises the panic.
                    let _count = Done(&done);
                    let progress = |f: f64| {
                        let step = (f.clamp(0.0, 1.0) * STEPS_PER_RUN as f64) as u64;
                        steps[i].store(step, Ordering::Relaxed);
                    };
                    let r = run(i, &progress);
                    steps[i].store(STEPS_PER_RUN, Ordering::Relaxed);
                    results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
                }
            });
        }
        let mut shown = false;
        while done.load(Ordering::Acquire) < runs {
            std::thread::sleep(Duration::from_millis(50));
            if !quiet && !shown && start.elapsed() >= SHOW_AFTER {
                bar.set_draw_target(ProgressDrawTarget::stderr());
                bar.enable_steady_tick(Duration::from_millis(100));
                shown = true;
            }
            bar.set_position(steps.iter().map(|s| s.load(Ordering::Relaxed)).sum());
        }
    });
    bar.finish_and_clear();
    results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .map(|r| r.expect("every job ran"))
        .collect()
}

/// Runs `run(workload, prompt hashes, policy, progress)` for every workload and policy on
/// `threads` threads and collects the results in input order. Each workload's prompt
/// hashes are computed once, by its first run, and shared by the others. `quiet` hides the
/// progress bar.
pub fn run_all<F>(
    workloads: &[Workload],
    policies: &[Policy],
    threads: usize,
    quiet: bool,
    run: F,
) -> Vec<WorkloadRuns>
where
    F: Fn(&Workload, &PromptHashes, Policy, Progress<'_>) -> RunResult + Sync,
{
    let np = policies.len();
    let hashes: Vec<OnceLock<PromptHashes>> = workloads.iter().map(|_| OnceLock::new()).collect();
    let order = dispatch_order(workloads.len() * np, |i| dispatch_rank(policies[i % np]));
    let mut results = run_in_order(&order, threads, quiet, |i, progress| {
        let w = &workloads[i / np];
        let h = hashes[i / np].get_or_init(|| PromptHashes::of(w));
        run(w, h, policies[i % np], progress)
    })
    .into_iter();
    workloads
        .iter()
        .map(|workload| {
            let mut runs = WorkloadRuns::new(workload);
            for policy in policies {
                let result = results.next().expect("every job ran");
                runs.runs.push(PolicyRun::new(&policy.to_string(), result));
            }
            runs
        })
        .collect()
}

/// Counts one finished job when dropped.
struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heavier_jobs_come_first_and_ties_keep_their_index_order() {
        let ranks = [0u8, 1, 0, 2, 1, 0];
        assert_eq!(dispatch_order(6, |i| ranks[i]), vec![3, 1, 4, 0, 2, 5]);
        assert_eq!(dispatch_rank(Policy::KvAwareFirst), 1);
        assert_eq!(dispatch_rank(Policy::KvAware), 0);
        assert_eq!(dispatch_rank(Policy::default()), 0);
    }

    #[test]
    fn jobs_start_in_the_given_order_and_return_in_index_order() {
        let started = Mutex::new(Vec::new());
        let order = [2, 0, 3, 1];
        let out = run_in_order(&order, 1, true, |i, _| {
            started.lock().unwrap().push(i);
            i * 10
        });
        assert_eq!(out, vec![0, 10, 20, 30]);
        assert_eq!(*started.lock().unwrap(), order);
    }

    #[test]
    #[should_panic(expected = "not a permutation")]
    fn an_order_with_a_repeated_job_is_refused() {
        run_in_order(&[0, 0], 1, true, |i, _| i);
    }
}
