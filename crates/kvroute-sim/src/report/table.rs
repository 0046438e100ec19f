//! The side-by-side table: one row per policy, plain text, columns aligned.

use std::fmt::Write;

use crate::report::metrics::Metrics;

/// Column headers, in order (units in the legend printed under the table).
pub const COLUMNS: [&str; 17] = [
    "policy",
    "done",
    "out tok/s",
    "TTFT p50",
    "p95",
    "p99",
    "E2E p50",
    "p95",
    "hit %",
    "phantom %",
    "imbal",
    "imb wait",
    "CV",
    "max q",
    "busy",
    "gen min/max %",
    "rejected",
];

/// The legend printed under every table.
pub const LEGEND: &str = "done: finished/routed requests; TTFT, E2E: seconds (nearest-rank \
percentiles); hit: cached/prompt tokens; phantom: predicted but not cached; imbal: busiest/idlest \
mean running (inf: some engine never ran anything); imb wait: the same over the instants \
with a request waiting on some engine (1.00: none waited); CV: of per-engine mean running; max q: most waiting on one engine; busy: mean \
engines running anything while requests arrive (peak); gen: generation share per engine; \
rejected: admission rejections (+N refused: requests the chosen engine could never serve, a \
prompt beyond its context or KV capacity); decisions by reason count every routing decision, so a request \
routed again (after a restart or a rejection) counts more than once";

fn secs(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |s| format!("{s:.2}"))
}

/// One row's cells, in [`COLUMNS`] order.
pub fn row(m: &Metrics) -> Vec<String> {
    vec![
        m.policy.clone(),
        format!("{}/{}", m.finished, m.requests),
        format!("{:.0}", m.output_tokens_per_s),
        secs(m.ttft.p50),
        secs(m.ttft.p95),
        secs(m.ttft.p99),
        secs(m.e2e.p50),
        secs(m.e2e.p95),
        format!("{:.1}", m.hit_rate * 100.0),
        format!("{:.1}", m.phantom_rate * 100.0),
        match m.imbalance {
            Some(v) => format!("{v:.2}"),
            // Infinite when some engine ran something and another nothing on average.
            None if m.mean_running.iter().any(|&r| r > 0.0) => "inf".to_string(),
            None => "-".to_string(),
        },
        m.imbalance_waiting
            .map_or_else(|| "inf".to_string(), |v| format!("{v:.2}")),
        m.running_cv
            .map_or_else(|| "-".to_string(), |v| format!("{v:.2}")),
        m.max_queue.to_string(),
        format!("{:.1} ({})", m.busy_engines_mean, m.busy_engines_peak),
        format!(
            "{:.1}/{:.1}",
            m.generation_share_min * 100.0,
            m.generation_share_max * 100.0
        ),
        if m.refused > 0 {
            format!("{} +{} refused", m.rejections, m.refused)
        } else {
            m.rejections.to_string()
        },
    ]
}

/// Lays out `rows` under `header` (first column left-aligned, the others right-aligned,
/// two spaces between columns, a dashed rule under the header).
pub fn layout(header: &[&str], rows: &[Vec<String>]) -> String {
    let cols = header.len();
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, cell) in width.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (i, cell) in cells.enumerate().take(cols) {
            let pad = width[i].saturating_sub(cell.chars().count());
            if i > 0 {
                s.push_str("  ");
            }
            if i == 0 {
                s.push_str(cell);
                s.extend(std::iter::repeat_n(' ', pad));
            } else {
                s.extend(std::iter::repeat_n(' ', pad));
                s.push_str(cell);
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(&mut out, &mut header.iter().copied());
    let total: usize = width.iter().sum::<usize>() + 2 * cols.saturating_sub(1);
    out.push_str(&"-".repeat(total));
    out.push('\n');
    for r in rows {
        line(&mut out, &mut r.iter().map(String::as_str));
    }
    out
}

/// The table for one workload: a title line, one row per run, the decisions by reason per
/// policy, and the legend.
pub fn render(title: &str, runs: &[Metrics]) -> String {
    let rows: Vec<Vec<String>> = runs.iter().map(row).collect();
    let mut out = format!("{title}\n");
    out.push_str(&layout(&COLUMNS, &rows));
    let name_w = runs
        .iter()
        .map(|m| m.policy.chars().count())
        .max()
        .unwrap_or(0);
    out.push_str("decisions by reason:\n");
    for m in runs {
        let mut line = format!("  {:<name_w$} ", m.policy);
        if m.decisions_by_reason.is_empty() {
            line.push_str(" -");
        }
        for (reason, n) in &m.decisions_by_reason {
            let _ = write!(line, " {reason}={n}");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    for line in wrap(LEGEND, 100) {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Greedy word wrap of `text` at `width` characters (a longer word gets its own line).
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}
