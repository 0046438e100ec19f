//! The side-by-side table: the medians criterion saved during this run, per row, and the
//! ratio peer time / kvroute time.
//!
//! criterion keeps each bench's estimates in `<dir>/<group>/<function>/<value>/new/
//! estimates.json` (each part made file-name safe); rows whose files were not written
//! during this run (filtered out, or a stale earlier run) are left out.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// One bench of a row: criterion group, function and optional value.
#[derive(Clone, Debug)]
pub struct BenchRef {
    /// Group name.
    pub group: String,
    /// Function name.
    pub function: String,
    /// Value (the parameter of a `BenchmarkId`), if any.
    pub value: Option<String>,
}

impl BenchRef {
    /// A reference to `group/function[/value]`.
    pub fn new(group: &str, function: &str, value: Option<&str>) -> Self {
        Self {
            group: group.to_owned(),
            function: function.to_owned(),
            value: value.map(str::to_owned),
        }
    }

    /// Where criterion saves this bench's latest estimates under `dir`.
    pub fn estimates_path(&self, dir: &Path) -> PathBuf {
        let mut p = dir.join(safe(&self.group)).join(safe(&self.function));
        if let Some(v) = &self.value {
            p.push(safe(v));
        }
        p.join("new").join("estimates.json")
    }
}

/// criterion's file-name rule: these characters become `_`.
fn safe(s: &str) -> String {
    s.replace(
        &['?', '"', '/', '\\', '*', '<', '>', ':', '|', '^'][..],
        "_",
    )
}

/// One row of the table: the same work measured on both sides.
#[derive(Clone, Debug)]
pub struct Row {
    /// What the row measures.
    pub label: String,
    /// kvroute's bench.
    pub kvroute: BenchRef,
    /// The peer's bench.
    pub peer: BenchRef,
    /// Blocks per iteration, for rows that report a rate (blocks/s) too.
    pub blocks: Option<u64>,
}

/// The median time of one iteration (ns) from criterion's `estimates.json`, if it was
/// written at or after `since`.
pub fn median_ns(path: &Path, since: SystemTime) -> Option<f64> {
    let modified = std::fs::metadata(path).ok()?.modified().ok()?;
    if modified < since {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("median")?.get("point_estimate")?.as_f64()
}

/// A time in ns as `512 ns`, `15.6 µs` or `3.41 ms` (three significant digits).
pub fn fmt_time(ns: f64) -> String {
    let (v, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "µs")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    let digits = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$} {unit}")
}

/// A rate in blocks/s as `2.87 M` blocks/s.
pub fn fmt_rate(blocks: u64, ns: f64) -> String {
    format!("{:.2} M/s", blocks as f64 / ns * 1e3)
}

/// The markdown table of every row measured since `since` (rows without both figures are
/// skipped), with the ratio peer / kvroute.
pub fn table(rows: &[Row], dir: &Path, since: SystemTime) -> String {
    let mut out = String::new();
    out.push_str("| row | kvroute | dynamo-kv-router | peer / kvroute |\n");
    out.push_str("|---|---:|---:|---:|\n");
    for r in rows {
        let k = median_ns(&r.kvroute.estimates_path(dir), since);
        let p = median_ns(&r.peer.estimates_path(dir), since);
        let (Some(k), Some(p)) = (k, p) else {
            continue;
        };
        let (ks, ps) = match r.blocks {
            Some(b) => (
                format!("{} ({})", fmt_time(k), fmt_rate(b, k)),
                format!("{} ({})", fmt_time(p), fmt_rate(b, p)),
            ),
            None => (fmt_time(k), fmt_time(p)),
        };
        let _ = writeln!(out, "| {} | {ks} | {ps} | {:.1}x |", r.label, p / k);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_criterion_layout() {
        let dir = Path::new("/x");
        let b = BenchRef::new("decision/warm", "kvroute", Some("512"));
        assert_eq!(
            b.estimates_path(dir),
            Path::new("/x/decision_warm/kvroute/512/new/estimates.json")
        );
        let b = BenchRef::new("ingest", "store", None);
        assert_eq!(
            b.estimates_path(dir),
            Path::new("/x/ingest/store/new/estimates.json")
        );
    }

    #[test]
    fn times_and_rates_format() {
        assert_eq!(fmt_time(502.0), "502 ns");
        assert_eq!(fmt_time(15_600.0), "15.6 µs");
        assert_eq!(fmt_time(1_234_567.0), "1.23 ms");
        // 68,197 blocks in 23.76 ms = 2.87 M blocks/s.
        assert_eq!(fmt_rate(68_197, 23.76e6), "2.87 M/s");
    }
}
