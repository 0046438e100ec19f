//! A sweep's plots (plotters, SVG backend): per metric, `WORKLOAD-sweep-METRIC.svg`, the
//! metric against the rate scale (log axis), one line per policy through its means and a
//! shaded band over its 95 % interval. Non-finite means (an infinite imbalance) leave a gap.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::report::ReportError;
use crate::report::svg::file_stem;
use crate::report::sweep::{SWEEP_METRICS, SweepSummary};

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

fn plot_metric(path: &Path, summary: &SweepSummary, j: usize) -> Result<(), ReportError> {
    let metric = SWEEP_METRICS[j];
    let all: Vec<Vec<(f64, f64, f64, f64)>> = (0..summary.policies.len())
        .map(|p| points(summary, p, j))
        .collect();
    let lo = all
        .iter()
        .flatten()
        .map(|p| p.1)
        .fold(f64::INFINITY, f64::min);
    let hi = all
        .iter()
        .flatten()
        .map(|p| p.3)
        .fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if lo.is_finite() && hi.is_finite() {
        let pad = ((hi - lo) * 0.05).max(1e-9);
        (lo - pad, hi + pad)
    } else {
        (0.0, 1.0)
    };
    let xs = &summary.rate_scales;
    let xmin = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let xmax = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (xmin, xmax) = if xmin.is_finite() && xmax > xmin {
        (xmin / 1.1, xmax * 1.1)
    } else {
        (0.5, 2.0)
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
        .build_cartesian_2d((xmin..xmax).log_scale(), lo..hi)
        .map_err(plot_err(path))?;
    chart
        .configure_mesh()
        .x_desc("rate scale (x trace rate, log)")
        .y_desc(metric.header())
        .draw()
        .map_err(plot_err(path))?;
    for (p, pts) in all.iter().enumerate() {
        let color = Palette99::pick(p).to_rgba();
        if pts.len() >= 2 {
            let band: Vec<(f64, f64)> = pts
                .iter()
                .map(|q| (q.0, q.3))
                .chain(pts.iter().rev().map(|q| (q.0, q.1)))
                .collect();
            chart
                .draw_series(std::iter::once(Polygon::new(band, color.mix(0.15))))
                .map_err(plot_err(path))?;
        }
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|q| (q.0, q.2)),
                color.stroke_width(2),
            ))
            .map_err(plot_err(path))?
            .label(summary.policies[p].as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
        chart
            .draw_series(
                pts.iter()
                    .map(|q| Circle::new((q.0, q.2), 3, color.filled())),
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
