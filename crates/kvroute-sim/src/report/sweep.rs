//! A sweep's results: every policy at every rate scale over the same seeds, summarised per
//! metric as a mean with its 95 % interval over the seeds and compared with the reference
//! (default) policy by a paired t-test ([`crate::report::stats`]).
//!
//! # Marks
//! Per rate scale and metric, each policy but the reference gets one mark against the
//! reference: `better` or `worse` when the paired difference is significant (in the
//! metric's good direction or against it), `tied` when it is not, `n/a` when a value is
//! not finite (an infinite imbalance: some engine ran nothing) or missing, or when there
//! are fewer than two seeds (no test is possible). The policy with
//! the best mean is marked `best` instead of `better` when it is significantly better
//! than the reference; the reference itself is marked `best` when it has the best mean and
//! every other policy is significantly worse. No `best` in a column means the best mean is
//! not told apart from the reference at 5 %.

use serde::Serialize;

use crate::report::Metrics;
use crate::report::stats::{self, Interval};

/// The metrics a sweep summarises, in table order.
pub const SWEEP_METRICS: [SweepMetric; 11] = [
    SweepMetric::OutputTokensPerS,
    SweepMetric::TtftP50,
    SweepMetric::TtftP95,
    SweepMetric::TtftP99,
    SweepMetric::E2eP50,
    SweepMetric::E2eP95,
    SweepMetric::HitPercent,
    SweepMetric::Imbalance,
    SweepMetric::LowestGenerationShare,
    SweepMetric::WaitingPercent,
    SweepMetric::ImbalanceWaiting,
];

/// One metric of a run, as the sweep reads it from [`Metrics`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepMetric {
    /// Output tokens/s ([`Metrics::output_tokens_per_s`]); higher is better.
    OutputTokensPerS,
    /// Median TTFT (seconds); lower is better.
    TtftP50,
    /// 95th percentile TTFT (seconds); lower is better.
    TtftP95,
    /// 99th percentile TTFT (seconds); lower is better.
    TtftP99,
    /// Median end-to-end latency (seconds); lower is better.
    E2eP50,
    /// 95th percentile end-to-end latency (seconds); lower is better.
    E2eP95,
    /// Prefix hit rate (percent of prompt tokens); higher is better.
    HitPercent,
    /// Busiest over idlest engine's mean running (ratio, infinite when an engine ran
    /// nothing); lower is better.
    Imbalance,
    /// Smallest per-engine share of the generated tokens (percent); higher is better.
    LowestGenerationShare,
    /// Share of the sample instants with a waiting request on some engine
    /// ([`Metrics::waiting_share`], percent); lower is better.
    WaitingPercent,
    /// Imbalance over the instants with a waiting request ([`Metrics::imbalance_waiting`]:
    /// 1 when none waited, infinite when an engine ran nothing then); lower is better.
    ImbalanceWaiting,
}

impl SweepMetric {
    /// Short name (file names, JSON): `out_tok_s`, `ttft_p50`, …
    pub fn name(self) -> &'static str {
        match self {
            Self::OutputTokensPerS => "out_tok_s",
            Self::TtftP50 => "ttft_p50",
            Self::TtftP95 => "ttft_p95",
            Self::TtftP99 => "ttft_p99",
            Self::E2eP50 => "e2e_p50",
            Self::E2eP95 => "e2e_p95",
            Self::HitPercent => "hit_pct",
            Self::Imbalance => "imbalance",
            Self::LowestGenerationShare => "gen_share_min_pct",
            Self::WaitingPercent => "waiting_pct",
            Self::ImbalanceWaiting => "imbalance_waiting",
        }
    }

    /// Column header with its unit.
    pub fn header(self) -> &'static str {
        match self {
            Self::OutputTokensPerS => "out tok/s",
            Self::TtftP50 => "TTFT p50 s",
            Self::TtftP95 => "TTFT p95 s",
            Self::TtftP99 => "TTFT p99 s",
            Self::E2eP50 => "E2E p50 s",
            Self::E2eP95 => "E2E p95 s",
            Self::HitPercent => "hit %",
            Self::Imbalance => "imbalance",
            Self::LowestGenerationShare => "gen min %",
            Self::WaitingPercent => "wait %",
            Self::ImbalanceWaiting => "imb wait",
        }
    }

    /// Whether a larger value is better.
    pub fn higher_is_better(self) -> bool {
        matches!(
            self,
            Self::OutputTokensPerS | Self::HitPercent | Self::LowestGenerationShare
        )
    }

    /// Decimals the table prints.
    pub fn decimals(self) -> usize {
        match self {
            Self::OutputTokensPerS => 0,
            Self::HitPercent | Self::LowestGenerationShare | Self::WaitingPercent => 1,
            _ => 2,
        }
    }

    /// The metric's value in `m`: NaN when it was not measured (a percentile of nothing),
    /// infinity for an infinite imbalance.
    pub fn of(self, m: &Metrics) -> f64 {
        let v = |o: Option<f64>| o.unwrap_or(f64::NAN);
        match self {
            Self::OutputTokensPerS => m.output_tokens_per_s,
            Self::TtftP50 => v(m.ttft.p50),
            Self::TtftP95 => v(m.ttft.p95),
            Self::TtftP99 => v(m.ttft.p99),
            Self::E2eP50 => v(m.e2e.p50),
            Self::E2eP95 => v(m.e2e.p95),
            Self::HitPercent => 100.0 * m.hit_rate,
            Self::Imbalance => m.imbalance.unwrap_or(f64::INFINITY),
            Self::LowestGenerationShare => 100.0 * m.generation_share_min,
            Self::WaitingPercent => 100.0 * m.waiting_share,
            Self::ImbalanceWaiting => m.imbalance_waiting.unwrap_or(f64::INFINITY),
        }
    }
}

/// Every run's metric values: `values[(p · scales + s) · seeds + k][j]` is metric
/// [`SWEEP_METRICS`]`[j]` of policy `p` at rate scale `s` on seed `k`.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepSamples {
    /// The workload's name.
    pub workload: String,
    /// Policy labels, in order.
    pub policies: Vec<String>,
    /// Index of the reference policy in [`policies`](Self::policies).
    pub reference: usize,
    /// Rate scales, in order.
    pub rate_scales: Vec<f64>,
    /// Seeds, in order.
    pub seeds: Vec<u64>,
    /// The values (layout above).
    pub values: Vec<[f64; SWEEP_METRICS.len()]>,
}

impl SweepSamples {
    /// Metric `j`'s values of policy `p` at scale `s`, one per seed (indices and layout
    /// checked by [`summarise`]).
    fn series(&self, p: usize, s: usize, j: usize) -> Vec<f64> {
        let base = (p * self.rate_scales.len() + s) * self.seeds.len();
        self.values[base..base + self.seeds.len()]
            .iter()
            .map(|v| v[j])
            .collect()
    }
}

/// A policy's standing against the reference in one cell (module docs, "Marks").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mark {
    /// The reference policy, not itself the significant best.
    Reference,
    /// The best mean, significantly better than the reference (or the reference, better
    /// than every other policy).
    Best,
    /// Significantly better than the reference, not the best mean.
    Better,
    /// No significant difference.
    Tied,
    /// Significantly worse than the reference.
    Worse,
    /// Not comparable: a value is missing or infinite.
    NotComparable,
}

impl Mark {
    /// The word the table prints (empty for the reference).
    pub fn word(self) -> &'static str {
        match self {
            Self::Reference => "",
            Self::Best => "best",
            Self::Better => "better",
            Self::Tied => "tied",
            Self::Worse => "worse",
            Self::NotComparable => "n/a",
        }
    }
}

/// One policy's summary of one metric at one rate scale.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cell {
    /// Per-seed values (NaN and infinity are written as `null` in JSON).
    pub values: Vec<f64>,
    /// Mean over the seeds (infinite or NaN when a value is).
    pub mean: f64,
    /// Half-width of the 95 % interval; `None` for one seed or a non-finite value.
    pub half_width: Option<f64>,
    /// Mean per-seed difference from the reference (this − reference); `None` for the
    /// reference or a non-finite value.
    pub difference: Option<f64>,
    /// Half-width of the difference's 95 % interval.
    pub difference_half_width: Option<f64>,
    /// Paired t statistic against the reference.
    pub t: Option<f64>,
    /// The mark.
    pub mark: Mark,
}

/// The whole summary: `cells[p][s][j]` for policy `p`, rate scale `s`, metric `j`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweepSummary {
    /// The workload's name.
    pub workload: String,
    /// Policy labels.
    pub policies: Vec<String>,
    /// The reference policy's label.
    pub reference: String,
    /// Rate scales.
    pub rate_scales: Vec<f64>,
    /// Seeds.
    pub seeds: Vec<u64>,
    /// Metric names ([`SweepMetric::name`]), in cell order.
    pub metrics: Vec<&'static str>,
    /// The cells.
    pub cells: Vec<Vec<Vec<Cell>>>,
    /// The settings every run of the sweep had (its seeds and rate scales are the lists
    /// above); the defaults where the caller recorded none.
    pub settings: crate::report::RunSettings,
}

/// Why samples could not be summarised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepError {
    /// `values` does not hold policies × rate scales × seeds entries (expected, held).
    Layout(usize, usize),
    /// The reference index is not a policy's (the index, the number of policies).
    Reference(usize, usize),
    /// No policy, rate scale or seed.
    Empty,
}

impl std::fmt::Display for SweepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Layout(want, got) => write!(f, "{got} sweep values, the matrix needs {want}"),
            Self::Reference(i, n) => write!(f, "reference policy {i} of {n} policies"),
            Self::Empty => f.write_str("a sweep needs a policy, a rate scale and a seed"),
        }
    }
}

impl std::error::Error for SweepError {}

/// Summarises `samples` (module docs).
///
/// # Errors
/// [`SweepError`] when the matrix is empty, `values` does not match its layout or the
/// reference is out of range.
pub fn summarise(samples: &SweepSamples) -> Result<SweepSummary, SweepError> {
    let np = samples.policies.len();
    let ns = samples.rate_scales.len();
    let nk = samples.seeds.len();
    if np == 0 || ns == 0 || nk == 0 {
        return Err(SweepError::Empty);
    }
    if samples.values.len() != np * ns * nk {
        return Err(SweepError::Layout(np * ns * nk, samples.values.len()));
    }
    if samples.reference >= np {
        return Err(SweepError::Reference(samples.reference, np));
    }
    let mut cells: Vec<Vec<Vec<Cell>>> = (0..np)
        .map(|p| {
            (0..ns)
                .map(|s| {
                    (0..SWEEP_METRICS.len())
                        .map(|j| cell(samples, p, s, j))
                        .collect()
                })
                .collect()
        })
        .collect();
    for s in 0..ns {
        for (j, metric) in SWEEP_METRICS.iter().enumerate() {
            mark_best(&mut cells, samples.reference, s, j, *metric);
        }
    }
    Ok(SweepSummary {
        workload: samples.workload.clone(),
        policies: samples.policies.clone(),
        reference: samples.policies[samples.reference].clone(),
        rate_scales: samples.rate_scales.clone(),
        seeds: samples.seeds.clone(),
        metrics: SWEEP_METRICS.iter().map(|m| m.name()).collect(),
        cells,
        settings: crate::report::RunSettings::default(),
    })
}

fn cell(samples: &SweepSamples, p: usize, s: usize, j: usize) -> Cell {
    let values = samples.series(p, s, j);
    let interval: Option<Interval> = stats::t_interval(&values).ok();
    let mean = interval.map_or_else(
        || values.iter().sum::<f64>() / values.len().max(1) as f64,
        |i| i.mean,
    );
    let mut c = Cell {
        values,
        mean,
        half_width: interval.and_then(|i| i.half_width),
        difference: None,
        difference_half_width: None,
        t: None,
        mark: Mark::Reference,
    };
    if p == samples.reference {
        return c;
    }
    let reference = samples.series(samples.reference, s, j);
    c.mark = match stats::paired_t(&c.values, &reference) {
        _ if c.values.len() < 2 => Mark::NotComparable,
        Err(_) => Mark::NotComparable,
        Ok(test) => {
            c.difference = Some(test.difference.mean);
            c.difference_half_width = test.difference.half_width;
            c.t = test.t;
            let up = test.difference.mean > 0.0;
            match (test.significant, up == SWEEP_METRICS[j].higher_is_better()) {
                (false, _) => Mark::Tied,
                (true, true) => Mark::Better,
                (true, false) => Mark::Worse,
            }
        }
    };
    c
}

/// Marks the column's best mean `best` where the module docs' rule allows.
fn mark_best(cells: &mut [Vec<Vec<Cell>>], reference: usize, s: usize, j: usize, m: SweepMetric) {
    let better = |a: f64, b: f64| {
        if m.higher_is_better() { a > b } else { a < b }
    };
    let mut best: Option<usize> = None;
    for (p, policy) in cells.iter().enumerate() {
        let v = policy[s][j].mean;
        if v.is_finite() && best.is_none_or(|b| better(v, cells[b][s][j].mean)) {
            best = Some(p);
        }
    }
    let Some(b) = best else { return };
    if b == reference {
        let all_worse = cells
            .iter()
            .enumerate()
            .all(|(p, c)| p == reference || c[s][j].mark == Mark::Worse);
        if all_worse && cells.len() > 1 {
            cells[b][s][j].mark = Mark::Best;
        }
    } else if cells[b][s][j].mark == Mark::Better {
        cells[b][s][j].mark = Mark::Best;
    }
}
