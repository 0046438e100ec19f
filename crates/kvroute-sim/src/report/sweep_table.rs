//! A sweep summary as text (one Markdown table per rate scale) and as the `--json`
//! document.
//!
//! A cell reads `mean ±half-width mark`: the mean over the seeds, the half-width of its
//! 95 % interval, and the mark against the reference policy ([`crate::report::sweep`],
//! "Marks"). JSON: the [`SweepSummary`] as serde writes it, non-finite numbers as `null`.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use crate::report::ReportError;
use crate::report::sweep::{Cell, SWEEP_METRICS, SweepSummary};

/// The legend printed under the tables.
pub const LEGEND: &str = "mean over the seeds ±half-width of its Student-t 95 % interval; \
marks against the reference (paired t-test on the per-seed differences, 5 % two-sided): \
better / worse (significant), tied (not), best (the best mean, significantly better than the \
reference; on the reference: better than every other policy), n/a (a value missing or \
infinite, or a single seed); imbalance: busiest/idlest mean running (inf: an engine ran \
nothing); gen min: the smallest per-engine share of generated tokens; wait %: share of the sample instants with a \
request waiting on some engine; imb wait: the imbalance over those instants only (1 when no \
request waited)";

/// One cell's text: `mean ±half-width mark` (`inf` / `-` for an infinite or missing mean,
/// no `±` without an interval).
pub fn cell_text(c: &Cell, decimals: usize) -> String {
    let mut s = if c.mean.is_nan() {
        "-".to_string()
    } else if c.mean.is_infinite() {
        "inf".to_string()
    } else {
        format!("{:.*}", decimals, c.mean)
    };
    if let Some(h) = c.half_width {
        let _ = write!(s, " ±{h:.decimals$}");
    }
    let w = c.mark.word();
    if !w.is_empty() {
        s.push(' ');
        s.push_str(w);
    }
    s
}

/// The tables: a heading per rate scale, then one row per policy and one column per
/// metric, then [`LEGEND`].
pub fn render(summary: &SweepSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "== sweep: {}, {} policies x {} rate scales x {} seeds (seeds {}), reference {} ==",
        summary.workload,
        summary.policies.len(),
        summary.rate_scales.len(),
        summary.seeds.len(),
        seeds_text(&summary.seeds),
        summary.reference
    );
    for (s, scale) in summary.rate_scales.iter().enumerate() {
        let _ = writeln!(out, "\nrate x{scale}\n");
        out.push_str("| policy |");
        for m in SWEEP_METRICS {
            let _ = write!(out, " {} |", m.header());
        }
        out.push_str("\n|---|");
        out.push_str(&"---:|".repeat(SWEEP_METRICS.len()));
        out.push('\n');
        for (p, policy) in summary.policies.iter().enumerate() {
            let _ = write!(out, "| {policy} |");
            for (j, m) in SWEEP_METRICS.iter().enumerate() {
                let _ = write!(
                    out,
                    " {} |",
                    cell_text(&summary.cells[p][s][j], m.decimals())
                );
            }
            out.push('\n');
        }
    }
    out.push('\n');
    for line in crate::report::table::wrap(LEGEND, 100) {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// `1..=5` for consecutive seeds, else the list.
fn seeds_text(seeds: &[u64]) -> String {
    match (seeds.first(), seeds.last()) {
        (Some(a), Some(b)) if seeds.windows(2).all(|w| w[1] == w[0] + 1) && a != b => {
            format!("{a}..={b}")
        }
        _ => seeds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// Writes the summary as JSON to `path`.
///
/// # Errors
/// [`ReportError::Io`] when the file cannot be written, [`ReportError::Json`] when
/// serialising fails.
pub fn write_json(path: &Path, summary: &SweepSummary) -> Result<(), ReportError> {
    let io = |source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let text = serde_json::to_string_pretty(summary).map_err(ReportError::Json)?;
    let mut f = std::fs::File::create(path).map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.write_all(b"\n").map_err(io)
}
