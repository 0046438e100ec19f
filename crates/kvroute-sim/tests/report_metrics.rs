//! Metrics on hand-built runs, against values computed by hand in the comments.

use std::collections::BTreeMap;

use kvroute_sim::report::{compute, percentile};
use kvroute_sim::{EngineSample, RequestRecord, RunResult};

#[allow(clippy::too_many_arguments)]
fn rec(
    id: u64,
    engine: Option<u32>,
    pinned: bool,
    arrival_s: f64,
    first_token_s: Option<f64>,
    finish_s: Option<f64>,
    prompt_tokens: u32,
    cached_tokens: u32,
    predicted_cached_tokens: u32,
    output_tokens: u32,
) -> RequestRecord {
    RequestRecord {
        id,
        engine,
        pinned,
        arrival_s,
        first_token_s,
        finish_s,
        prompt_tokens,
        cached_tokens,
        predicted_cached_tokens,
        output_tokens,
        rejections: 0,
        reason: if pinned { "pinned" } else { "cached_owner" }.to_string(),
    }
}

fn samples(engine: u32, running: &[u32], waiting: &[u32]) -> Vec<EngineSample> {
    running
        .iter()
        .zip(waiting)
        .enumerate()
        .map(|(i, (&running, &waiting))| EngineSample {
            t_s: i as f64,
            engine,
            running,
            waiting,
            kv_usage: 0.5,
        })
        .collect()
}

/// Two engines, one pinned request (left out), four routed ones (one never started), samples
/// at t = 0, 1, 2, 3.
pub fn hand_run() -> RunResult {
    let mut s = Vec::new();
    let e0 = samples(0, &[2, 4, 4, 2], &[0, 3, 5, 1]);
    let e1 = samples(1, &[0, 1, 2, 1], &[0, 0, 0, 6]);
    for (a, b) in e0.into_iter().zip(e1) {
        s.push(a);
        s.push(b);
    }
    RunResult {
        workload: "hand".into(),
        policy: "kv_aware".into(),
        engines: 2,
        end_s: 8.0,
        requests: vec![
            rec(0, Some(0), true, 0.0, Some(1.0), Some(5.0), 100, 0, 0, 50),
            rec(
                1,
                Some(0),
                false,
                1.0,
                Some(1.5),
                Some(4.0),
                200,
                150,
                200,
                100,
            ),
            rec(2, Some(1), false, 2.0, Some(2.2), Some(3.0), 100, 0, 0, 20),
            rec(
                3,
                Some(0),
                false,
                2.5,
                Some(4.5),
                Some(6.0),
                300,
                300,
                256,
                80,
            ),
            rec(4, Some(1), false, 3.0, None, None, 50, 0, 0, 30),
        ],
        samples: s,
        generated_tokens: vec![230, 20],
        decisions_by_reason: BTreeMap::from([("cached_owner".into(), 2), ("least_load".into(), 2)]),
        fallbacks: BTreeMap::new(),
        rejections: 7,
        in_flight_at_end: 1,
        reservations_at_end: 0,
        wall_s: 0.25,
        ..Default::default()
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn nearest_rank_percentiles() {
    // The classic nearest-rank example: {15, 20, 35, 40, 50}, given unsorted.
    let v = [50.0, 15.0, 40.0, 20.0, 35.0];
    assert_eq!(percentile(&v, 5.0), Some(15.0)); // ⌈0.25⌉ = 1
    assert_eq!(percentile(&v, 30.0), Some(20.0)); // ⌈1.5⌉ = 2
    assert_eq!(percentile(&v, 40.0), Some(20.0)); // ⌈2.0⌉ = 2
    assert_eq!(percentile(&v, 50.0), Some(35.0)); // ⌈2.5⌉ = 3
    assert_eq!(percentile(&v, 100.0), Some(50.0));
    assert_eq!(percentile(&[], 50.0), None);
    assert_eq!(percentile(&v, 0.0), None);
    assert_eq!(percentile(&v, 101.0), None);
    assert_eq!(percentile(&v, f64::NAN), None);
}

#[test]
fn request_metrics_leave_pinned_out() {
    let m = compute("kv_aware", &hand_run());
    assert_eq!(m.requests, 4);
    assert_eq!(m.finished, 3);
    // Request 4 never finished, so the window runs from the first routed arrival (1.0) to
    // the end of the run (8.0): 7 s; tokens 100 + 20 + 80 = 200.
    assert!(close(m.window_s, 7.0));
    assert!(close(m.output_tokens_per_s, 200.0 / 7.0));
    // TTFT {0.5, 0.2, 2.0}: p50 = x[⌈1.5⌉−1] = 0.5, p95 = p99 = x[2] = 2.0.
    assert!(close(m.ttft.p50.unwrap(), 0.5));
    assert!(close(m.ttft.p95.unwrap(), 2.0));
    assert!(close(m.ttft.p99.unwrap(), 2.0));
    // E2E {3.0, 1.0, 3.5}: p50 = 3.0, p95 = 3.5.
    assert!(close(m.e2e.p50.unwrap(), 3.0));
    assert!(close(m.e2e.p95.unwrap(), 3.5));
    // Hit rate over requests with a first token: (150 + 0 + 300) / (200 + 100 + 300).
    assert!(close(m.hit_rate, 0.75));
    // Phantom: request 1 predicted 200, held 150 → 50 of 600 prompt tokens.
    assert!(close(m.phantom_rate, 50.0 / 600.0));
    // Generation share of finished routed output: engine 0 100 + 80, engine 1 20.
    assert!(close(m.generation_share[0], 0.9));
    assert!(close(m.generation_share[1], 0.1));
    assert!(close(m.generation_share_min, 0.1));
    assert!(close(m.generation_share_max, 0.9));
    assert_eq!(m.rejections, 7);
    assert_eq!(m.decisions_by_reason["least_load"], 2);
    assert_eq!(m.in_flight_at_end, 1);
}

#[test]
fn all_finished_window_ends_at_the_last_finish() {
    let mut run = hand_run();
    run.requests.pop();
    let m = compute("x", &run);
    // Window 1.0 → 6.0 (request 3's finish), 200 tokens.
    assert!(close(m.window_s, 5.0));
    assert!(close(m.output_tokens_per_s, 40.0));
}

#[test]
fn engine_metrics_from_samples() {
    let m = compute("kv_aware", &hand_run());
    // Mean running over the measuring window (first routed arrival 1.0 to the run's end
    // 8.0, a routed request unfinished): samples t1..t3, the pinned request's t0 left
    // out. Engine 0 (4+4+2)/3 = 10/3, engine 1 (1+2+1)/3 = 4/3.
    assert!(close(m.mean_running[0], 10.0 / 3.0));
    assert!(close(m.mean_running[1], 4.0 / 3.0));
    assert!(close(m.imbalance.unwrap(), 2.5));
    // Mean of means 7/3, population deviation 1 → CV 3/7.
    assert!(close(m.running_cv.unwrap(), 3.0 / 7.0));
    assert_eq!(m.max_queue, 6);
    assert_eq!(m.max_queue_engine, Some(1));
    // Engines running anything: t0 1, t1 2, t2 2, t3 2 → peak 2; routed arrivals span
    // 1.0..=3.0, so the mean is over t1..t3 = 2.
    assert_eq!(m.busy_engines_peak, 2);
    assert!(close(m.busy_engines_mean, 2.0));
}

#[test]
fn engine_means_cover_the_window_of_the_routed_load() {
    // Every request routed and finished: the window is 1.0 (first routed arrival) to 6.0
    // (the last routed finish); the t = 0 sample is before it. Moving the last sample past
    // the window (t = 7) leaves it out too: engine 0 (4+4)/2 = 4, engine 1 (1+2)/2 = 1.5.
    let mut run = hand_run();
    run.requests.pop();
    for s in &mut run.samples {
        if s.t_s == 3.0 {
            s.t_s = 7.0;
        }
    }
    // A queue of 50 at t = 0, before the window (a setup's), is not the window's peak:
    // that is engine 0's 5 at t = 2 (engine 1's 6 was at t = 3, moved out).
    for s in &mut run.samples {
        if s.t_s == 0.0 && s.engine == 0 {
            s.waiting = 50;
        }
    }
    let m = compute("x", &run);
    assert!(close(m.mean_running[0], 4.0));
    assert!(close(m.mean_running[1], 1.5));
    assert!(close(m.imbalance.unwrap(), 4.0 / 1.5));
    assert_eq!((m.max_queue, m.max_queue_engine), (5, Some(0)));
    // Nothing routed: every sample counts, engine 0 (2+4+4+2)/4 = 3, engine 1 1.
    let mut run = hand_run();
    run.requests.retain(|r| r.pinned);
    let m = compute("x", &run);
    assert!(close(m.mean_running[0], 3.0));
    assert!(close(m.mean_running[1], 1.0));
}

#[test]
fn imbalance_while_waiting_covers_the_instants_with_a_queue() {
    // Window t1..t3 (first routed arrival 1.0, a request unfinished): every instant has a
    // waiting request (engine 0 waits 3, 5, 1), so the figures equal the whole window's.
    let m = compute("x", &hand_run());
    assert!(close(m.waiting_share, 1.0));
    assert!(close(m.imbalance_waiting.unwrap(), 2.5));
    // Nothing waits at t1: the instants t2, t3 remain, engine 0 (4+2)/2 = 3, engine 1
    // (2+1)/2 = 1.5 → 2.0, over 2 of the window's 3 instants.
    let mut run = hand_run();
    for s in &mut run.samples {
        if s.t_s == 1.0 {
            s.waiting = 0;
        }
    }
    let m = compute("x", &run);
    assert!(close(m.waiting_share, 2.0 / 3.0));
    assert!(close(m.imbalance_waiting.unwrap(), 2.0));
    // The whole-window imbalance is unchanged (10/3 over 4/3).
    assert!(close(m.imbalance.unwrap(), 2.5));
    // Engine 1 idle at t2 and t3 while engine 0 queues: infinite.
    for s in &mut run.samples {
        if s.engine == 1 && s.t_s >= 2.0 {
            s.running = 0;
        }
    }
    assert_eq!(compute("x", &run).imbalance_waiting, None);
    // No request ever waits: share 0 and, by definition, 1.
    let mut run = hand_run();
    for s in &mut run.samples {
        s.waiting = 0;
    }
    let m = compute("x", &run);
    assert_eq!(m.waiting_share, 0.0);
    assert_eq!(m.imbalance_waiting, Some(1.0));
}

#[test]
fn idle_engine_makes_imbalance_infinite() {
    let mut run = hand_run();
    for s in &mut run.samples {
        if s.engine == 1 {
            s.running = 0;
        }
    }
    let m = compute("x", &run);
    assert_eq!(m.imbalance, None);
    // Means 10/3 and 0: mean 5/3, deviation 5/3 → CV 1.
    assert!(close(m.running_cv.unwrap(), 1.0));
    assert!(close(m.busy_engines_mean, 1.0));
}

#[test]
fn empty_run_has_no_metrics_and_does_not_panic() {
    let m = compute("x", &RunResult::default());
    assert_eq!(m.requests, 0);
    assert_eq!(m.output_tokens_per_s, 0.0);
    assert_eq!(m.ttft.p50, None);
    assert_eq!(m.imbalance, None);
    assert_eq!(m.running_cv, None);
    assert_eq!(m.max_queue_engine, None);
    assert_eq!(m.generation_share_min, 0.0);
}
