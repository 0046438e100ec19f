//! Metrics, the side-by-side table, JSON and SVG output.
//!
//! - [`metrics`]: what one policy did on one workload ([`Metrics`], computed from a
//!   [`RunResult`]).
//! - [`series`]: per-engine time series and the TTFT distribution.
//! - [`table`]: the plain-text table, one row per policy.
//! - [`json`]: the `--json` document (metrics plus per-engine time series).
//! - [`svg`]: the `--svg` plots (engine occupancy over time, TTFT CDF per policy).
//! - [`stats`]: means with Student-t intervals and the paired t-test, over seeds.
//! - [`sweep`]: a sweep's per-seed values summarised per policy, rate scale and metric,
//!   with marks against the reference policy; [`sweep_table`] and [`sweep_svg`] print
//!   and plot it.

pub mod json;
pub mod metrics;
pub mod series;
pub mod stats;
pub mod svg;
pub mod sweep;
pub mod sweep_svg;
pub mod sweep_table;
pub mod table;

use std::fmt;
use std::path::PathBuf;

pub use metrics::{Latency, Metrics, compute, percentile};

use crate::result::RunResult;
use crate::workload::Workload;

/// One policy's run over one workload, with its metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyRun {
    /// The policy's label (its `Display`: `"load_aware:0.5"`, `"projected_time:shadow"`,
    /// …).
    pub label: String,
    /// What the run recorded.
    pub result: RunResult,
    /// Its metrics ([`compute`] of `result`).
    pub metrics: Metrics,
}

impl PolicyRun {
    /// Wraps a run, computing its metrics.
    pub fn new(label: &str, result: RunResult) -> Self {
        let metrics = compute(label, &result);
        Self {
            label: label.to_string(),
            result,
            metrics,
        }
    }
}

/// Every policy's run over one workload.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadRuns {
    /// The workload's name.
    pub name: String,
    /// What it reproduces.
    pub description: String,
    /// Engines in its fleet.
    pub engines: u32,
    /// Running-request cap per engine (scales the occupancy heatmap).
    pub max_running: u32,
    /// Routed (non-pinned) requests in the workload.
    pub routed_requests: u64,
    /// How the command line ran it (in the table's title and the JSON document).
    pub settings: RunSettings,
    /// The runs, in the order the policies were given.
    pub runs: Vec<PolicyRun>,
}

/// The settings a workload was run with, as the command line gave them; `None` where it
/// did not record one (a run built in code).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct RunSettings {
    /// `--seed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// `--rate-scale`: arrival rate multiplier (1: the workload's own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_scale: Option<f64>,
    /// `--telemetry`: `full` or `gauges`; `workload` where the workload's own modes held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<String>,
    /// `--engine`: the preset every engine ran; `None` where the workload's own engine ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// `--predicted-ttl-ms`: the router's predicted residency TTL (milliseconds); `None`
    /// where it was off (the router's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_ttl_ms: Option<u64>,
    /// `--kv-bound-usage`: the router's KV-bound switch (mean KV usage, 0..=2); `None`
    /// where the router's default held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_bound_usage: Option<f32>,
    /// `--faults`: the fault program's file, as given; `None` without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<String>,
}

impl fmt::Display for RunSettings {
    /// `seed 1, rate scale 4, telemetry gauges, engine llama-8b-h100, predicted TTL 10000
    /// ms, KV-bound usage 0.85, faults f.json` (the recorded ones, in that order).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(s) = self.seed {
            parts.push(format!("seed {s}"));
        }
        if let Some(r) = self.rate_scale {
            parts.push(format!("rate scale {r}"));
        }
        if let Some(t) = &self.telemetry {
            parts.push(format!("telemetry {t}"));
        }
        if let Some(e) = &self.engine {
            parts.push(format!("engine {e}"));
        }
        if let Some(ms) = self.predicted_ttl_ms {
            parts.push(format!("predicted TTL {ms} ms"));
        }
        if let Some(u) = self.kv_bound_usage {
            parts.push(format!("KV-bound usage {u}"));
        }
        if let Some(p) = &self.faults {
            parts.push(format!("faults {p}"));
        }
        f.write_str(&parts.join(", "))
    }
}

impl WorkloadRuns {
    /// An empty set of runs for `workload`.
    pub fn new(workload: &Workload) -> Self {
        Self {
            name: workload.name.clone(),
            description: workload.description.clone(),
            engines: workload.fleet.engines,
            max_running: workload.fleet.engine.max_running,
            routed_requests: workload.routed_requests() as u64,
            settings: RunSettings::default(),
            runs: Vec::new(),
        }
    }

    /// The side-by-side table of the runs (see [`table::render`]).
    pub fn table(&self) -> String {
        let settings = self.settings.to_string();
        let title = if settings.is_empty() {
            format!(
                "== {}: {} engines, {} routed requests ==",
                self.name, self.engines, self.routed_requests
            )
        } else {
            format!(
                "== {}: {} engines, {} routed requests ({settings}) ==",
                self.name, self.engines, self.routed_requests
            )
        };
        let metrics: Vec<Metrics> = self.runs.iter().map(|r| r.metrics.clone()).collect();
        table::render(&title, &metrics)
    }
}

/// Why an output file could not be written.
#[derive(Debug)]
pub enum ReportError {
    /// Creating or writing `path` failed.
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Serialising the JSON document failed.
    Json(serde_json::Error),
    /// Drawing a plot into `path` failed.
    Plot {
        /// The SVG file.
        path: PathBuf,
        /// The plotting library's message.
        message: String,
    },
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReportError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            ReportError::Json(e) => write!(f, "JSON output: {e}"),
            ReportError::Plot { path, message } => {
                write!(f, "{}: plotting failed: {message}", path.display())
            }
        }
    }
}

impl std::error::Error for ReportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReportError::Io { source, .. } => Some(source),
            ReportError::Json(e) => Some(e),
            ReportError::Plot { .. } => None,
        }
    }
}
