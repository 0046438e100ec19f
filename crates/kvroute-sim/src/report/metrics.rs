//! The policy metrics of one run, computed from its [`RunResult`].
//!
//! Request metrics count routed requests only: pinned requests (a scenario's starting
//! state, see [`crate::SimRequest::pinned`]) are left out. Engine metrics (running, queue,
//! busy engines) come from the engine samples, which include the pinned load, since an
//! engine's occupancy is what the router had to work with.
//!
//! # Percentiles
//! Nearest rank: for `n` values sorted ascending `x[0] ≤ … ≤ x[n−1]`, the `p`-th percentile
//! (`0 < p ≤ 100`) is `x[⌈p/100 · n⌉ − 1]`, the smallest value with at least `p`% of the
//! values at or below it. It is always one of the values (no interpolation); there is none
//! for an empty set.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::result::{ChannelStats, RunResult};

/// The nearest-rank `p`-th percentile of `values` (see the module docs); `None` when
/// `values` is empty or `p` is not in `(0, 100]`. NaNs sort last.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() || !(p > 0.0 && p <= 100.0) {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    Some(percentile_sorted(&v, p))
}

/// As [`percentile`] on values already sorted ascending; `sorted` must not be empty and
/// `p` must be in `(0, 100]`.
fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

/// Three percentiles of one latency (seconds); all `None` when nothing was measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Median (seconds).
    pub p50: Option<f64>,
    /// 95th percentile (seconds).
    pub p95: Option<f64>,
    /// 99th percentile (seconds).
    pub p99: Option<f64>,
}

impl Latency {
    fn of(mut values: Vec<f64>) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        values.sort_by(f64::total_cmp);
        Self {
            p50: Some(percentile_sorted(&values, 50.0)),
            p95: Some(percentile_sorted(&values, 95.0)),
            p99: Some(percentile_sorted(&values, 99.0)),
        }
    }
}

/// What one policy did on one workload.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Metrics {
    /// The policy's label (`"load_aware:0.5"`, `"projected_time:shadow"`, …).
    pub policy: String,
    /// The workload's name.
    pub workload: String,
    /// Routed (non-pinned) requests.
    pub requests: u64,
    /// Routed requests that finished.
    pub finished: u64,
    /// Output tokens of finished routed requests per second of the measuring window:
    /// from the first routed arrival to the last routed finish, or to the end of the run
    /// when some routed request did not finish (tokens/s); 0 for an empty window.
    pub output_tokens_per_s: f64,
    /// The measuring window (seconds).
    pub window_s: f64,
    /// Time to first token of routed requests that got one (seconds).
    pub ttft: Latency,
    /// Arrival to last token of finished routed requests (seconds).
    pub e2e: Latency,
    /// Prefix cache hit rate: prompt tokens the serving engine held at admission over prompt
    /// tokens, summed over routed requests that reached their first token (0..=1; 0 when
    /// none did).
    pub hit_rate: f64,
    /// Predicted overlap the engine did not hold at admission,
    /// `Σ max(0, predicted − cached) / Σ prompt` over the same requests (0..=1): the
    /// router's phantom hits (stale index after a wipe or lost events).
    pub phantom_rate: f64,
    /// Mean running requests per engine over the samples of the measuring window (index =
    /// engine): a scenario's setup before its first routed arrival (a pinned starting
    /// load, a warm-up) is left out; the pinned requests still running inside the window
    /// count. All samples when nothing was routed.
    pub mean_running: Vec<f64>,
    /// Busiest over idlest engine's mean running; `None` when the idlest ran nothing on
    /// average (infinite) or there are no samples.
    pub imbalance: Option<f64>,
    /// Coefficient of variation of the per-engine mean running (population standard
    /// deviation over the mean); `None` when the mean is 0.
    pub running_cv: Option<f64>,
    /// Share of the measuring window's sample instants at which at least one engine had a
    /// waiting request (0..=1; 0 without samples).
    pub waiting_share: f64,
    /// [`imbalance`](Self::imbalance) over only the window's sample instants at which some
    /// engine had a waiting request (busiest over idlest engine's mean running there):
    /// whether the fleet was uneven while requests queued. `Some(1.0)` when no request
    /// ever waited (the condition never held; [`waiting_share`](Self::waiting_share) 0);
    /// `None` when the idlest engine ran nothing at those instants (infinite).
    pub imbalance_waiting: Option<f64>,
    /// Most waiting requests on one engine at one sample of the measuring window (the
    /// samples [`mean_running`](Self::mean_running) reads).
    pub max_queue: u32,
    /// The engine where [`max_queue`](Self::max_queue) was first seen.
    pub max_queue_engine: Option<u32>,
    /// Most engines with at least one running request at one sample instant of the
    /// measuring window.
    pub busy_engines_peak: u32,
    /// Mean number of engines with at least one running request over the sample instants
    /// from the first to the last routed arrival (the time load is offered); 0 without
    /// such samples.
    pub busy_engines_mean: f64,
    /// Share of the finished routed requests' output tokens generated on each engine
    /// (index = engine; 0..=1, summing to 1 when anything finished).
    pub generation_share: Vec<f64>,
    /// Smallest per-engine generation share.
    pub generation_share_min: f64,
    /// Largest per-engine generation share.
    pub generation_share_max: f64,
    /// Admission rejections (events).
    pub rejections: u64,
    /// Routing decisions by reason name.
    pub decisions_by_reason: BTreeMap<String, u64>,
    /// Fallbacks by cause name.
    pub fallbacks: BTreeMap<String, u64>,
    /// Requests given up after their admission retries (pinned included).
    pub rejected_for_good: u64,
    /// Requests the chosen engine refused (prompt beyond its context or KV capacity).
    pub refused: u64,
    /// Follow-ups that never arrived because their parent did not complete.
    pub never_arrived: u64,
    /// Requests lost to an engine restart and routed again.
    pub restarted_requests: u64,
    /// Preemptions for lack of KV blocks.
    pub preemptions: u64,
    /// What went through the event and telemetry channels.
    pub channel: ChannelStats,
    /// Why the run could not start (`None` for a run that ran).
    pub error: Option<String>,
    /// Requests still in flight when the run ended (pinned included).
    pub in_flight_at_end: u64,
    /// Reservations still held when the run ended (0 in a correct run).
    pub reservations_at_end: u64,
    /// Virtual time when the run ended (seconds).
    pub end_s: f64,
    /// Wall-clock time of the run (seconds).
    pub wall_s: f64,
}

/// Computes the metrics of `run` under the label `policy` (see [`Metrics`] for each
/// definition).
pub fn compute(policy: &str, run: &RunResult) -> Metrics {
    let routed: Vec<_> = run.requests.iter().filter(|r| !r.pinned).collect();
    let engines = run.engines as usize;

    let mut finished = 0u64;
    let mut out_tokens = 0u64;
    let mut per_engine_out = vec![0u64; engines];
    let mut ttft = Vec::new();
    let mut e2e = Vec::new();
    let (mut prompt, mut cached, mut phantom) = (0u64, 0u64, 0u64);
    let mut first_arrival = f64::INFINITY;
    let mut last_arrival = f64::NEG_INFINITY;
    let mut last_finish = f64::NEG_INFINITY;
    for r in &routed {
        first_arrival = first_arrival.min(r.arrival_s);
        last_arrival = last_arrival.max(r.arrival_s);
        if let Some(t) = r.first_token_s {
            ttft.push(t - r.arrival_s);
            prompt += u64::from(r.prompt_tokens);
            cached += u64::from(r.cached_tokens);
            phantom += u64::from(r.predicted_cached_tokens.saturating_sub(r.cached_tokens));
        }
        if let Some(f) = r.finish_s {
            finished += 1;
            out_tokens += u64::from(r.output_tokens);
            e2e.push(f - r.arrival_s);
            last_finish = last_finish.max(f);
            if let Some(slot) = r.engine.and_then(|e| per_engine_out.get_mut(e as usize)) {
                *slot += u64::from(r.output_tokens);
            }
        }
    }
    let window_end = if finished == routed.len() as u64 {
        last_finish
    } else {
        run.end_s
    };
    let window_s = if routed.is_empty() {
        0.0
    } else {
        (window_end - first_arrival).max(0.0)
    };
    let output_tokens_per_s = if window_s > 0.0 {
        out_tokens as f64 / window_s
    } else {
        0.0
    };

    let share_total: u64 = per_engine_out.iter().sum();
    let generation_share: Vec<f64> = per_engine_out
        .iter()
        .map(|&t| {
            if share_total == 0 {
                0.0
            } else {
                t as f64 / share_total as f64
            }
        })
        .collect();

    let eng = engine_metrics(
        run,
        engines,
        (first_arrival, window_end),
        (first_arrival, last_arrival),
    );
    Metrics {
        policy: policy.to_string(),
        workload: run.workload.clone(),
        requests: routed.len() as u64,
        finished,
        output_tokens_per_s,
        window_s,
        ttft: Latency::of(ttft),
        e2e: Latency::of(e2e),
        hit_rate: ratio(cached, prompt),
        phantom_rate: ratio(phantom, prompt),
        imbalance: eng.imbalance,
        running_cv: eng.cv,
        waiting_share: eng.waiting_share,
        imbalance_waiting: eng.imbalance_waiting,
        mean_running: eng.mean_running,
        max_queue: eng.max_queue,
        max_queue_engine: eng.max_queue_engine,
        busy_engines_peak: eng.busy_peak,
        busy_engines_mean: eng.busy_mean,
        generation_share_min: if generation_share.is_empty() {
            0.0
        } else {
            generation_share
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min)
        },
        generation_share_max: generation_share.iter().copied().fold(0.0, f64::max),
        generation_share,
        rejections: run.rejections,
        decisions_by_reason: run.decisions_by_reason.clone(),
        fallbacks: run.fallbacks.clone(),
        rejected_for_good: run.rejected_for_good,
        refused: run.refused,
        never_arrived: run.never_arrived,
        restarted_requests: run.restarted_requests,
        preemptions: run.preemptions,
        channel: run.channel.clone(),
        error: run.error.clone(),
        in_flight_at_end: run.in_flight_at_end,
        reservations_at_end: run.reservations_at_end,
        end_s: run.end_s,
        wall_s: run.wall_s,
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

struct EngineMetrics {
    mean_running: Vec<f64>,
    imbalance: Option<f64>,
    waiting_share: f64,
    imbalance_waiting: Option<f64>,
    cv: Option<f64>,
    max_queue: u32,
    max_queue_engine: Option<u32>,
    busy_peak: u32,
    busy_mean: f64,
}

/// Per-engine means of `sum` over `count` (0 where an engine has no sample).
fn means(sum: &[u64], count: &[u64]) -> Vec<f64> {
    sum.iter()
        .zip(count)
        .map(|(&s, &c)| if c == 0 { 0.0 } else { s as f64 / c as f64 })
        .collect()
}

/// The largest of `means` over the smallest; `None` when the smallest is 0 (infinite) or
/// there is none.
fn busiest_over_idlest(means: &[f64]) -> Option<f64> {
    let hi = means.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lo = means.iter().copied().fold(f64::INFINITY, f64::min);
    (lo > 0.0 && lo.is_finite()).then(|| hi / lo)
}

/// Engine figures from `run`'s samples in `window` (all samples when it is empty or not
/// finite, as when nothing was routed): the per-engine means (and so the imbalance and the
/// CV), the figures while requests wait, the queue peak and the busy peak; the busy-engine
/// mean over the instants in `arrivals` (first to last routed arrival).
fn engine_metrics(
    run: &RunResult,
    engines: usize,
    window: (f64, f64),
    arrivals: (f64, f64),
) -> EngineMetrics {
    let (from_s, to_s) = arrivals;
    let in_mean = |t: f64| {
        !(window.0.is_finite() && window.1.is_finite() && window.0 <= window.1)
            || (t >= window.0 && t <= window.1)
    };
    let mut sum = vec![0u64; engines];
    let mut count = vec![0u64; engines];
    let mut max_queue = 0u32;
    let mut max_queue_engine = None;
    // Busy engines per sample instant (samples are in time order).
    let mut busy: BTreeMap<u64, (f64, u32)> = BTreeMap::new();
    for s in run.samples.iter().filter(|s| in_mean(s.t_s)) {
        let e = s.engine as usize;
        if e < engines {
            sum[e] += u64::from(s.running);
            count[e] += 1;
        }
        if max_queue_engine.is_none() || s.waiting > max_queue {
            max_queue = s.waiting;
            max_queue_engine = Some(s.engine);
        }
        let slot = busy.entry(s.t_s.to_bits()).or_insert((s.t_s, 0));
        slot.1 += u32::from(s.running > 0);
    }
    let mean_running = means(&sum, &count);
    let (imbalance, cv) = if run.samples.is_empty() || engines == 0 {
        (None, None)
    } else {
        let mean = mean_running.iter().sum::<f64>() / engines as f64;
        let var = mean_running.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / engines as f64;
        (
            busiest_over_idlest(&mean_running),
            (mean > 0.0).then(|| var.sqrt() / mean),
        )
    };
    // Instants of the window at which some engine had a waiting request, and the
    // per-engine running summed over them.
    let mut waited: BTreeMap<u64, bool> = BTreeMap::new();
    for s in run.samples.iter().filter(|s| in_mean(s.t_s)) {
        *waited.entry(s.t_s.to_bits()).or_insert(false) |= s.waiting > 0;
    }
    let mut sum_w = vec![0u64; engines];
    let mut count_w = vec![0u64; engines];
    for s in &run.samples {
        let e = s.engine as usize;
        if e < engines && waited.get(&s.t_s.to_bits()) == Some(&true) {
            sum_w[e] += u64::from(s.running);
            count_w[e] += 1;
        }
    }
    let waiting_instants = waited.values().filter(|&&w| w).count();
    let waiting_share = if waited.is_empty() {
        0.0
    } else {
        waiting_instants as f64 / waited.len() as f64
    };
    let imbalance_waiting = if waiting_instants == 0 {
        Some(1.0)
    } else {
        busiest_over_idlest(&means(&sum_w, &count_w))
    };
    let busy_peak = busy.values().map(|&(_, b)| b).max().unwrap_or(0);
    let in_window: Vec<u32> = busy
        .values()
        .filter(|&&(t, _)| t >= from_s && t <= to_s)
        .map(|&(_, b)| b)
        .collect();
    let busy_mean = if in_window.is_empty() {
        0.0
    } else {
        in_window.iter().map(|&b| f64::from(b)).sum::<f64>() / in_window.len() as f64
    };
    EngineMetrics {
        mean_running,
        imbalance,
        waiting_share,
        imbalance_waiting,
        cv,
        max_queue,
        max_queue_engine,
        busy_peak,
        busy_mean,
    }
}
