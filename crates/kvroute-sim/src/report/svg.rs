//! The `--svg` plots (plotters, SVG backend).
//!
//! Per workload and policy, `WORKLOAD-POLICY-engines.svg`: running and waiting requests per
//! engine over time, as one line per engine for up to [`LINE_PLOT_MAX_ENGINES`] engines and
//! as a heatmap (engine × time, darker = more) above that. Per workload,
//! `WORKLOAD-ttft-cdf.svg`: the TTFT CDF of each policy (log time axis). Names keep ASCII
//! letters, digits, `-` and `_`; other characters become `_`.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::report::series::{EngineSeries, engine_series, ttft_cdf};
use crate::report::{PolicyRun, ReportError, WorkloadRuns};

/// Above this many engines the occupancy plot is a heatmap.
pub const LINE_PLOT_MAX_ENGINES: u32 = 8;

/// Most time columns of a heatmap: one per sampling instant up to this many, else samples
/// are averaged into this many bins.
pub const HEATMAP_COLUMNS: usize = 200;

const SIZE: (u32, u32) = (1100, 800);

/// Picks one quantity (running or waiting) out of an engine's series.
type Pick = fn(&EngineSeries) -> &[u32];

/// `name` with every character other than ASCII letters, digits, `-` and `_` replaced by `_`.
pub fn file_stem(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Writes every plot for `workloads` into `dir` (created if missing); returns the files
/// written.
///
/// # Errors
/// [`ReportError::Io`] when the folder cannot be created, [`ReportError::Plot`] when a
/// plot cannot be drawn or written.
pub fn write_all(dir: &Path, workloads: &[WorkloadRuns]) -> Result<Vec<PathBuf>, ReportError> {
    std::fs::create_dir_all(dir).map_err(|source| ReportError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut files = Vec::new();
    for w in workloads {
        for run in &w.runs {
            let path = dir.join(format!(
                "{}-{}-engines.svg",
                file_stem(&w.name),
                file_stem(&run.label)
            ));
            engines_plot(&path, w, run)?;
            files.push(path);
        }
        let path = dir.join(format!("{}-ttft-cdf.svg", file_stem(&w.name)));
        ttft_plot(&path, w)?;
        files.push(path);
    }
    Ok(files)
}

fn plot_err<E: std::fmt::Display>(path: &Path) -> impl Fn(E) -> ReportError + '_ {
    move |e| ReportError::Plot {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Running and waiting per engine over time for one run.
fn engines_plot(path: &Path, w: &WorkloadRuns, run: &PolicyRun) -> Result<(), ReportError> {
    let series = engine_series(&run.result);
    let end = run.result.end_s.max(1e-3);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err(path))?;
    let title = format!("{} / {}", w.name, run.label);
    let root = root
        .titled(&title, ("sans-serif", 22))
        .map_err(plot_err(path))?;
    let (top, bottom) = root.split_vertically(SIZE.1 / 2 - 20);
    let panels: [(&DrawingArea<SVGBackend, Shift>, &str, Pick); 2] = [
        (&top, "running", |s| &s.running),
        (&bottom, "waiting", |s| &s.waiting),
    ];
    for (area, what, pick) in panels {
        if w.engines <= LINE_PLOT_MAX_ENGINES {
            lines(path, area, what, end, &series, pick)?;
        } else {
            let scale = if what == "running" {
                w.max_running.max(1)
            } else {
                series
                    .iter()
                    .flat_map(|s| pick(s).iter().copied())
                    .max()
                    .unwrap_or(0)
                    .max(1)
            };
            heatmap(path, area, what, end, &series, pick, scale)?;
        }
    }
    root.present().map_err(plot_err(path))
}

fn lines(
    path: &Path,
    area: &DrawingArea<SVGBackend, Shift>,
    what: &str,
    end: f64,
    series: &[EngineSeries],
    pick: Pick,
) -> Result<(), ReportError> {
    let ymax = series
        .iter()
        .flat_map(|s| pick(s).iter().copied())
        .max()
        .unwrap_or(0)
        .max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(what, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..end, 0.0..f64::from(ymax) * 1.05)
        .map_err(plot_err(path))?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("requests")
        .draw()
        .map_err(plot_err(path))?;
    for s in series {
        let color = Palette99::pick(s.engine as usize).to_rgba();
        chart
            .draw_series(LineSeries::new(
                s.t_s.iter().zip(pick(s)).map(|(&t, &v)| (t, f64::from(v))),
                color.stroke_width(2),
            ))
            .map_err(plot_err(path))?
            .label(format!("engine {}", s.engine))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err(path))
}

/// White (0) to dark red (1).
fn heat(v: f64) -> RGBColor {
    let v = v.clamp(0.0, 1.0);
    let lerp = |a: f64, b: f64| (a + (b - a) * v).round() as u8;
    RGBColor(lerp(255.0, 128.0), lerp(255.0, 0.0), lerp(255.0, 0.0))
}

#[allow(clippy::too_many_arguments)]
fn heatmap(
    path: &Path,
    area: &DrawingArea<SVGBackend, Shift>,
    what: &str,
    end: f64,
    series: &[EngineSeries],
    pick: Pick,
    scale: u32,
) -> Result<(), ReportError> {
    let engines = series.len().max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{what} (darkest = {scale})"), ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..end, 0.0..engines as f64)
        .map_err(plot_err(path))?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("time (s)")
        .y_desc("engine")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(plot_err(path))?;
    // One column per sampling instant, at most HEATMAP_COLUMNS (averaging when more).
    let instants = series.iter().map(|s| s.t_s.len()).max().unwrap_or(0);
    let columns = instants.clamp(1, HEATMAP_COLUMNS);
    let bin = end / columns as f64;
    for s in series {
        let mut sum = vec![0.0f64; columns];
        let mut count = vec![0u32; columns];
        for (&t, &v) in s.t_s.iter().zip(pick(s)) {
            let c = ((t / bin) as usize).min(columns - 1);
            sum[c] += f64::from(v);
            count[c] += 1;
        }
        let y = f64::from(s.engine);
        // Empty cells stay white (the background), which keeps idle fleets' files small.
        chart
            .draw_series(
                (0..columns)
                    .filter(|&c| count[c] > 0 && sum[c] > 0.0)
                    .map(|c| {
                        let mean = sum[c] / f64::from(count[c]);
                        let x = c as f64 * bin;
                        Rectangle::new(
                            [(x, y), (x + bin, y + 1.0)],
                            heat(mean / f64::from(scale)).filled(),
                        )
                    }),
            )
            .map_err(plot_err(path))?;
    }
    Ok(())
}

/// The TTFT CDF of every policy on one workload.
fn ttft_plot(path: &Path, w: &WorkloadRuns) -> Result<(), ReportError> {
    let cdfs: Vec<(&str, Vec<(f64, f64)>)> = w
        .runs
        .iter()
        .map(|r| (r.label.as_str(), ttft_cdf(&r.result)))
        .collect();
    let floor = 1e-3;
    let xmax = cdfs
        .iter()
        .flat_map(|(_, c)| c.last().map(|p| p.0))
        .fold(1.0f64, f64::max);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err(path))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{}: TTFT CDF", w.name), ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((floor..xmax * 1.1).log_scale(), 0.0..1.0)
        .map_err(plot_err(path))?;
    chart
        .configure_mesh()
        .x_desc("TTFT (s, log)")
        .y_desc("fraction of requests")
        .draw()
        .map_err(plot_err(path))?;
    for (i, (label, cdf)) in cdfs.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                cdf.iter().map(|&(x, p)| (x.max(floor), p)),
                color.stroke_width(2),
            ))
            .map_err(plot_err(path))?
            .label(*label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err(path))?;
    root.present().map_err(plot_err(path))
}
