//! The `--json` document: the table's metrics plus every engine's time series.
//!
//! Shape (serde): `{ "seed": u64, "workloads": [ { "name", "description", "engines",
//! "routed_requests", "seed"?, "rate_scale"?, "telemetry"?, "engine"?, "predicted_ttl_ms"?,
//! "kv_bound_usage"?, "faults"?, "runs": [ { "policy", "metrics":
//! Metrics, "engines": [EngineSeries] } ] } ] }` (the settings the command line ran the
//! workload with, [`RunSettings`](crate::report::RunSettings), where recorded); times in
//! seconds, throughput in tokens/s, rates as fractions (0..=1). A metric that does not
//! exist (a percentile of nothing, an infinite imbalance) is `null`.

use std::io::Write;
use std::path::Path;

use serde::Serialize;

use crate::report::metrics::Metrics;
use crate::report::series::{EngineSeries, engine_series};
use crate::report::{ReportError, WorkloadRuns};

/// The whole document.
#[derive(Debug, Serialize)]
pub struct JsonReport<'a> {
    /// The seed the workloads were built with.
    pub seed: u64,
    /// One entry per workload.
    pub workloads: Vec<JsonWorkload<'a>>,
}

/// One workload's runs.
#[derive(Debug, Serialize)]
pub struct JsonWorkload<'a> {
    /// Name.
    pub name: &'a str,
    /// What it reproduces.
    pub description: &'a str,
    /// Engines.
    pub engines: u32,
    /// Routed (non-pinned) requests.
    pub routed_requests: u64,
    /// The settings it was run with, where recorded.
    #[serde(flatten)]
    pub settings: &'a crate::report::RunSettings,
    /// One entry per policy.
    pub runs: Vec<JsonRun<'a>>,
}

/// One policy's run.
#[derive(Debug, Serialize)]
pub struct JsonRun<'a> {
    /// The policy's label.
    pub policy: &'a str,
    /// Its metrics (as in the table, plus per-engine vectors).
    pub metrics: &'a Metrics,
    /// Per-engine time series (index = engine).
    pub engines: Vec<EngineSeries>,
}

/// Builds the document for `workloads`.
pub fn document(seed: u64, workloads: &[WorkloadRuns]) -> JsonReport<'_> {
    JsonReport {
        seed,
        workloads: workloads
            .iter()
            .map(|w| JsonWorkload {
                name: &w.name,
                description: &w.description,
                engines: w.engines,
                routed_requests: w.routed_requests,
                settings: &w.settings,
                runs: w
                    .runs
                    .iter()
                    .map(|r| JsonRun {
                        policy: &r.label,
                        metrics: &r.metrics,
                        engines: engine_series(&r.result),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// Writes the document for `workloads` to `path` (pretty-printed).
///
/// # Errors
/// [`ReportError::Io`] when the file cannot be created or written,
/// [`ReportError::Json`] when serialisation fails.
pub fn write(path: &Path, seed: u64, workloads: &[WorkloadRuns]) -> Result<(), ReportError> {
    let io = |source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::create(path).map_err(io)?;
    let mut w = std::io::BufWriter::new(file);
    serde_json::to_writer_pretty(&mut w, &document(seed, workloads)).map_err(ReportError::Json)?;
    w.write_all(b"\n").map_err(io)?;
    w.flush().map_err(io)
}
