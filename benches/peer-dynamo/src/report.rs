//! The side-by-side table: the medians criterion saved during this run, per row, and for each
//! peer the ratio peer time / kvroute time.
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

/// One row of the table: the same work measured on kvroute and on one or both peers.
#[derive(Clone, Debug)]
pub struct Row {
    /// What the row measures.
    pub label: String,
    /// kvroute's bench.
    pub kvroute: BenchRef,
    /// `dynamo-kv-router`'s bench, if the row has one.
    pub peer: Option<BenchRef>,
    /// `kv-index`'s bench, if the row has one.
    pub kv_index: Option<BenchRef>,
    /// The same work on kvroute's run-compressed `RunIndex`, if the row has it.
    pub runs: Option<BenchRef>,
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

/// The markdown table of every row measured since `since` (rows without kvroute's figure or
/// without any peer figure are skipped), with each peer's ratio peer / kvroute (`—` where a
/// row has no figure for that peer).
pub fn table(rows: &[Row], dir: &Path, since: SystemTime) -> String {
    let mut out = String::new();
    out.push_str(
        "| row | kvroute | dynamo-kv-router | dynamo / kvroute | kv-index | kv-index / kvroute \
         | kvroute `RunIndex` | kv-index / `RunIndex` | dynamo / `RunIndex` |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in rows {
        let Some(k) = median_ns(&r.kvroute.estimates_path(dir), since) else {
            continue;
        };
        let median = |b: &Option<BenchRef>| {
            b.as_ref()
                .and_then(|b| median_ns(&b.estimates_path(dir), since))
        };
        let (d, x) = (median(&r.peer), median(&r.kv_index));
        if d.is_none() && x.is_none() {
            continue;
        }
        let cell = |ns: f64| match r.blocks {
            Some(b) => format!("{} ({})", fmt_time(ns), fmt_rate(b, ns)),
            None => fmt_time(ns),
        };
        let pair = |p: Option<f64>| match p {
            Some(p) => (cell(p), format!("{:.1}x", p / k)),
            None => ("—".to_owned(), "—".to_owned()),
        };
        let ((ds, dr), (xs, xr)) = (pair(d), pair(x));
        let (rs, rx, rd) = match median(&r.runs) {
            Some(n) => (
                cell(n),
                x.map_or("—".to_owned(), |x| format!("{:.1}x", x / n)),
                d.map_or("—".to_owned(), |d| format!("{:.1}x", d / n)),
            ),
            None => ("—".to_owned(), "—".to_owned(), "—".to_owned()),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {ds} | {dr} | {xs} | {xr} | {rs} | {rx} | {rd} |",
            r.label,
            cell(k)
        );
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

    #[test]
    fn table_shows_each_peer_and_dashes_a_missing_one() {
        let dir = std::env::temp_dir().join(format!("peer-table-{}", std::process::id()));
        let since = SystemTime::now() - std::time::Duration::from_secs(1);
        let write = |b: &BenchRef, ns: f64| {
            let p = b.estimates_path(&dir);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            let json = format!("{{\"median\":{{\"point_estimate\":{ns}}}}}");
            std::fs::write(p, json).unwrap();
        };
        let k = BenchRef::new("g", "kvroute", None);
        let d = BenchRef::new("g", "dynamo", None);
        let x = BenchRef::new("g", "kv_index", None);
        write(&k, 100.0);
        write(&d, 400.0);
        write(&x, 250.0);
        write(&BenchRef::new("g", "runs", None), 50.0);
        let both = Row {
            label: "both".into(),
            kvroute: k.clone(),
            peer: Some(d),
            kv_index: Some(x.clone()),
            runs: Some(BenchRef::new("g", "runs", None)),
            blocks: None,
        };
        let one = Row {
            label: "one".into(),
            kvroute: k,
            peer: None,
            kv_index: Some(x),
            runs: None,
            blocks: None,
        };
        let t = table(&[both, one], &dir, since);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            t.contains("| both | 100 ns | 400 ns | 4.0x | 250 ns | 2.5x | 50.0 ns | 5.0x | 8.0x |"),
            "{t}"
        );
        assert!(
            t.contains("| one | 100 ns | — | — | 250 ns | 2.5x | — | — | — |"),
            "{t}"
        );
    }
}
