//! Telemetry that is missing, stale or partial on some workers: the fallback is scoped to
//! those workers (they lose their cache credit and are costed from what is known of them)
//! until more than half the fleet is affected, and even then no worker is excluded, so the
//! last worker still reporting, saturated, never takes every request.

mod common;

use common::{NOW, router, sample, store, tokens};
use kvroute::{
    Decision, EngineConfig, EngineId, LoadSample, Nanos, Reason, RouteRequest, Router, WorkerId,
};

fn at(ms: u64) -> Nanos {
    Nanos(NOW.0 + ms * 1_000_000)
}

/// Routes `n` distinct 64-token prompts at `t`, keeping every decision (in flight).
fn route_many(r: &Router, n: u32, seed: u32, t: Nanos, held: &mut Vec<Decision>) {
    for i in 0..n {
        let prompt = tokens(seed + i, 64);
        held.push(r.route(&RouteRequest::tokens(&prompt, 16, t)).unwrap());
    }
}

fn count(held: &[Decision], w: WorkerId) -> usize {
    held.iter().filter(|d| d.worker == w).count()
}

/// A saturated report: 64 running of 64 and `waiting` waiting, no token figures (so 512
/// tokens each are assumed), no throughput (the default 2,000 tokens/s of `least_load`).
fn saturated(waiting: u32) -> LoadSample {
    LoadSample::new(64, waiting, 64, 0.5)
}

/// 4 workers, none reporting: 100 decisions spread 25 each by their reservations. Then only
/// worker 0 reports, saturated (64 running + 200 waiting): 3 of 4 workers are not fresh, so
/// the fallback is fleet-wide `least_load`, over every worker from what is known of it.
/// Worker 0's known load is (200 + 64) × 512 tokens / 2,000 tokens/s = 67.6 s; each other
/// worker's is its reservations, at most 125 × (64 + 16) tokens / 2,000 = 5 s: the next 100
/// all go to the three that do not report (before, worker 0 took all 100).
#[test]
fn the_last_worker_still_reporting_is_not_a_hotspot() {
    let (r, ws) = router(4, 4, |_| {});
    r.publish(NOW).unwrap();
    let mut held = Vec::new();
    route_many(&r, 100, 0, NOW, &mut held);
    for w in &ws {
        assert_eq!(count(&held, *w), 25);
    }
    r.update_load(ws[0], saturated(200), at(100)).unwrap();
    r.publish(at(100)).unwrap();
    let mut next = Vec::new();
    route_many(&r, 100, 1_000, at(100), &mut next);
    assert_eq!(count(&next, ws[0]), 0, "the saturated worker");
    assert!(
        next.iter().all(|d| d.fallback.is_some()),
        "fleet-wide fallback"
    );
}

/// 16 workers report idle, then 15 go stale (no report for more than the 2 s maximum age)
/// while worker 0 keeps reporting, saturated (64 + 300 waiting): its known load is
/// 364 × 512 / 2,000 = 93.2 s, the stale workers' their last (idle) figures plus what is
/// routed to them: worker 0 gets none of the next 160 (before, all 160).
#[test]
fn stale_idle_workers_take_the_load_off_a_saturated_one() {
    let (r, ws) = router(16, 16, |_| {});
    for w in &ws {
        r.update_load(*w, common::idle(), NOW).unwrap();
    }
    r.publish(NOW).unwrap();
    r.update_load(ws[0], saturated(300), at(3_000)).unwrap();
    r.publish(at(3_000)).unwrap();
    let mut held = Vec::new();
    route_many(&r, 160, 0, at(3_000), &mut held);
    assert_eq!(count(&held, ws[0]), 0);
    for w in &ws[1..] {
        assert!(count(&held, *w) >= 5, "{w}: {}", count(&held, *w));
    }
}

/// 16 workers; worker 3 holds a 4,096-token prefix and runs 4, the others run 2. With
/// every report fresh the request goes to worker 3 (its cache saves the whole prefill).
/// One worker stale, one newly added that has not reported, or one DP rank partial (its
/// engine's other rank stale) is 1 of 16 or 17 workers not fresh: the fallback is scoped,
/// the fresh fleet keeps cache-aware routing, and the request still goes to worker 3 with
/// its 256 cached blocks (before, each switched the whole fleet to `least_load`).
#[test]
fn one_worker_not_fresh_does_not_switch_the_fleet_to_load_only() {
    let prefix = tokens(9, 4_096);
    let mut prompt = prefix.clone();
    prompt.extend(tokens(10, 64));
    let setup = || {
        let (r, ws) = router(32, 16, |_| {});
        store(&r, ws[3], &prefix, 1);
        for (i, w) in ws.iter().enumerate() {
            let running = if i == 3 { 4 } else { 2 };
            r.update_load(*w, sample(running, 0, 0, 0, 0.1), NOW)
                .unwrap();
        }
        r.publish(NOW).unwrap();
        (r, ws)
    };
    let check = |r: &Router, ws: &[WorkerId], t: Nanos, case: &str| {
        let d = r.route(&RouteRequest::tokens(&prompt, 64, t)).unwrap();
        assert_eq!(
            (d.worker, d.overlap_blocks, d.reason, d.fallback),
            (ws[3], 256, Reason::CacheHold, None),
            "{case}"
        );
    };
    let (r, ws) = setup();
    check(&r, &ws, NOW, "all fresh");

    // Worker 15 stale: everyone else reports again 3 s later.
    let (r, ws) = setup();
    for (i, w) in ws.iter().enumerate().take(15) {
        let running = if i == 3 { 4 } else { 2 };
        r.update_load(*w, sample(running, 0, 0, 0, 0.1), at(3_000))
            .unwrap();
    }
    r.publish(at(3_000)).unwrap();
    check(&r, &ws, at(3_000), "one stale");

    // A worker added that has not reported yet.
    let (r, ws) = setup();
    r.add_worker(WorkerId::new(99, 0)).unwrap();
    r.publish(NOW).unwrap();
    check(&r, &ws, NOW, "one missing");

    // Engine 100 with two DP ranks: rank 1 goes stale, so rank 0 is partial; and rank 1
    // itself is stale: 2 of 18 not fresh. Rank 1's last report ran 2, like the fleet's
    // other workers (a stale worker is costed from its last figures: an idle one would
    // take the request, `stale_idle_workers_take_the_load_off_a_saturated_one`).
    let (r, ws) = setup();
    r.configure_engine(EngineId(100), EngineConfig::new().with_dp_size(2))
        .unwrap();
    let (a, b) = (WorkerId::new(100, 0), WorkerId::new(100, 1));
    r.add_worker(a).unwrap();
    r.add_worker(b).unwrap();
    r.update_load(b, sample(2, 0, 0, 0, 0.1), NOW).unwrap();
    for (i, w) in ws.iter().enumerate() {
        let running = if i == 3 { 4 } else { 2 };
        r.update_load(*w, sample(running, 0, 0, 0, 0.1), at(3_000))
            .unwrap();
    }
    r.update_load(a, common::idle(), at(3_000)).unwrap();
    r.publish(at(3_000)).unwrap();
    let reader = r.load_reader();
    let snap = reader.load();
    let slot_a = r.slot_of(a).unwrap().index();
    assert_eq!(snap.validity()[slot_a], kvroute::Validity::Partial);
    drop(snap);
    check(&r, &ws, at(3_000), "one partial, one stale");
}
