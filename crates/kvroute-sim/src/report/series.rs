//! Time series and distributions for the JSON output and the plots.

use serde::Serialize;

use crate::result::RunResult;

/// One engine's samples over time (parallel vectors, in time order).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EngineSeries {
    /// Engine index.
    pub engine: u32,
    /// Sample times (seconds).
    pub t_s: Vec<f64>,
    /// Running requests.
    pub running: Vec<u32>,
    /// Waiting requests.
    pub waiting: Vec<u32>,
    /// KV usage (0..=1).
    pub kv_usage: Vec<f32>,
}

/// The samples of `run` split per engine (index = engine; engines without samples get
/// empty series; samples of engines `>= run.engines` are ignored).
pub fn engine_series(run: &RunResult) -> Vec<EngineSeries> {
    let mut out: Vec<EngineSeries> = (0..run.engines)
        .map(|engine| EngineSeries {
            engine,
            ..Default::default()
        })
        .collect();
    for s in &run.samples {
        if let Some(e) = out.get_mut(s.engine as usize) {
            e.t_s.push(s.t_s);
            e.running.push(s.running);
            e.waiting.push(s.waiting);
            e.kv_usage.push(s.kv_usage);
        }
    }
    out
}

/// The empirical CDF of the routed requests' TTFT: points `(ttft_s, fraction)` with
/// `fraction = (i + 1) / n` for the `i`-th smallest of the `n` TTFTs of routed requests
/// that got a first token (requests that never did are not in `n`).
pub fn ttft_cdf(run: &RunResult) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = run
        .requests
        .iter()
        .filter(|r| !r.pinned)
        .filter_map(|r| r.first_token_s.map(|t| t - r.arrival_s))
        .collect();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    v.into_iter()
        .enumerate()
        .map(|(i, x)| (x, (i + 1) as f64 / n))
        .collect()
}
