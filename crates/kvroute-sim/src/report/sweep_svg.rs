//! A sweep's plots (plotters, SVG backend): per metric, `WORKLOAD-sweep-METRIC.svg`, the
//! metric against the rate scale (log axis), one line per policy through its means and a
//! shaded band over its 95 % interval. Latencies use a log axis when every mean is
//! positive. Non-finite means (an infinite imbalance) are left out.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::report::ReportError;
use crate::report::svg::file_stem;
use crate::report::sweep::{SWEEP_METRICS, SweepMetric, SweepSummary};

const SIZE: (u32, u32) = (1000, 700);

fn plot_err<E: std::fmt::Display>(path: &Path) -> impl Fn(E) -> ReportError + '_ {
    move |e| ReportError::Plot {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Writes one plot per metric into `dir` (created if missing); returns the files written.
///
/// # Errors
/// [`ReportError::Io`] when the folder cannot be created, [`ReportError::Plot`] when a
/// plot cannot be drawn or written.
pub fn write_all(dir: &Path, summary: &SweepSummary) -> Result<Vec<PathBuf>, ReportError> {
    std::fs::create_dir_all(dir).map_err(|source| ReportError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut files = Vec::new();
    for (j, metric) in SWEEP_METRICS.iter().enumerate() {
        let path = dir.join(format!(
            "{}-sweep-{}.svg",
            file_stem(&summary.workload),
            metric.name()
        ));
        plot_metric(&path, summary, j)?;
        files.push(path);
    }
    Ok(files)
}

/// `(scale, low, mean, high)` of policy `p`'s finite means for metric `j`; the band is the
/// mean itself without an interval.
fn points(summary: &SweepSummary, p: usize, j: usize) -> Vec<(f64, f64, f64, f64)> {
    summary
        .rate_scales
        .iter()
        .zip(&summary.cells[p])
        .filter(|(_, c)| c[j].mean.is_finite())
        .map(|(&x, c)| {
            let h = c[j].half_width.unwrap_or(0.0);
            (x, c[j].mean - h, c[j].mean, c[j].mean + h)
        })
        .collect()
}

/// How values map onto the vertical axis: linear, or log10 for latencies whose means are
/// all positive (the loads span two orders of magnitude of latency).
#[derive(Clone, Copy)]
struct YAxis {
    log: bool,
    /// Floor of a log axis (half the smallest mean), so that a band reaching 0 stays drawn.
    floor: f64,
}

impl YAxis {
    fn at(self, v: f64) -> f64 {
        if self.log {
            v.max(self.floor).log10()
        } else {
            v
        }
    }

    fn label(self, v: f64) -> String {
        let v = if self.log { 10f64.powf(v) } else { v };
        if v.abs() >= 100.0 {
            format!("{v:.0}")
        } else if v.abs() >= 1.0 {
            format!("{v:.1}")
        } else {
            format!("{v:.2}")
        }
    }
}

fn plot_metric(path: &Path, summary: &SweepSummary, j: usize) -> Result<(), ReportError> {
    let metric = SWEEP_METRICS[j];
    let all: Vec<Vec<(f64, f64, f64, f64)>> = (0..summary.policies.len())
        .map(|p| points(summary, p, j))
        .collect();
    let latency = !matches!(
        metric,
        SweepMetric::OutputTokensPerS
            | SweepMetric::HitPercent
            | SweepMetric::Imbalance
            | SweepMetric::LowestGenerationShare
    );
    let min_mean = all
        .iter()
        .flatten()
        .map(|p| p.2)
        .fold(f64::INFINITY, f64::min);
    let y = YAxis {
        log: latency && min_mean > 0.0 && min_mean.is_finite(),
        floor: min_mean / 2.0,
    };
    let lo = all
        .iter()
        .flatten()
        .map(|p| y.at(p.1))
        .fold(f64::INFINITY, f64::min);
    let hi = all
        .iter()
        .flatten()
        .map(|p| y.at(p.3))
        .fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if lo.is_finite() && hi.is_finite() {
        let pad = ((hi - lo) * 0.05).max(1e-9);
        (lo - pad, hi + pad)
    } else {
        (0.0, 1.0)
    };
    // Rate scales at log2 positions, labelled with the scale itself.
    let xs: Vec<f64> = summary.rate_scales.iter().map(|s| s.log2()).collect();
    let xmin = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let xmax = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (xmin, xmax) = if xmin.is_finite() && xmax > xmin {
        let pad = (xmax - xmin) * 0.05;
        (xmin - pad, xmax + pad)
    } else {
        (xmin - 1.0, xmin + 1.0)
    };
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err(path))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{}: {} vs load ({} seeds, 95 % interval)",
                summary.workload,
                metric.header(),
                summary.seeds.len()
            ),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(xmin..xmax, lo..hi)
        .map_err(plot_err(path))?;
    let x_label = |v: &f64| {
        let s = 2f64.powf(*v);
        if (s - s.round()).abs() < 1e-6 {
            format!("x{}", s.round())
        } else {
            format!("x{s:.2}")
        }
    };
    let y_label = |v: &f64| y.label(*v);
    let y_desc = if y.log {
        format!("{} (log)", metric.header())
    } else {
        metric.header().to_string()
    };
    chart
        .configure_mesh()
        .x_desc("rate scale (x the trace's rate; log)")
        .y_desc(y_desc)
        .x_labels(summary.rate_scales.len().max(2))
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .draw()
        .map_err(plot_err(path))?;
    for (p, pts) in all.iter().enumerate() {
        let color = Palette99::pick(p).to_rgba();
        if pts.len() >= 2 {
            let band: Vec<(f64, f64)> = pts
                .iter()
                .map(|q| (q.0.log2(), y.at(q.3)))
                .chain(pts.iter().rev().map(|q| (q.0.log2(), y.at(q.1))))
                .collect();
            chart
                .draw_series(std::iter::once(Polygon::new(band, color.mix(0.15))))
                .map_err(plot_err(path))?;
        }
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|q| (q.0.log2(), y.at(q.2))),
                color.stroke_width(2),
            ))
            .map_err(plot_err(path))?
            .label(summary.policies[p].as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
        chart
            .draw_series(
                pts.iter()
                    .map(|q| Circle::new((q.0.log2(), y.at(q.2)), 3, color.filled())),
            )
            .map_err(plot_err(path))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err(path))?;
    root.present().map_err(plot_err(path))
}
