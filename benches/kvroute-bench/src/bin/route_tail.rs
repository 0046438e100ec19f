//! Decision latency percentiles with and without a concurrent event writer (target, in the
//! summary table of `docs/BENCHMARKS.md`: decision p99 with a concurrent writer at >= 5 M
//! blocks/s within 2x of the idle p99).
//!
//! Run: `cargo run --release -p kvroute-bench --bin route_tail [-- WORKERS DECISIONS]`
//! (defaults: 512 workers, 200,000 decisions per phase).
//!
//! The fleet and the routed requests are the `route` bench's (`kvroute_bench::route`):
//! warm requests rotating through every conversation, policy `projected_time`. Each
//! decision (`Router::route`, then dropping the decision, which releases its reservation) is
//! timed on its own with `Instant` (the clock read costs tens of nanoseconds, against
//! decisions of microseconds), and the percentiles are nearest-rank over all of them.
//!
//! Phase "idle": the routing thread alone. Phase "writer": the same decisions while one
//! other thread ingests without pause into the same index: it stores a whole conversation
//! (128 blocks, hashes given) on a worker that does not hold it, so the bits it sets and
//! clears are on the very nodes the decisions read, and once 64 such copies are held it
//! removes the oldest, so the index keeps its size. The writer's rate is blocks stored plus
//! blocks removed per second of the phase. This is a measurement, not a test: it asserts
//! nothing about the figures.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use kvroute::{EngineHash, Router, Slot};
use kvroute_bench::route::{request, router};
use kvroute_bench::{ConversationFleet, FLEET_SEED, ORDER_SEED};

/// Copies the writer keeps before it removes the oldest.
const WINDOW: usize = 64;

/// Engine hash of block `i` of the writer's `n`-th copy: a range the fleet's own engine
/// hashes (`ConversationFleet::*_engine_hash`, at most 2^48) never use.
fn writer_hash(n: u64, i: usize) -> EngineHash {
    EngineHash((1 << 62) | (n << 8) | i as u64)
}

/// Routes `count` warm requests in the fleet's rotating order; returns each decision's
/// latency in nanoseconds.
fn route_timed(
    router: &Router,
    fleet: &ConversationFleet,
    order: &[usize],
    count: usize,
) -> Vec<u64> {
    let mut lat = Vec::with_capacity(count);
    for k in 0..count {
        let q = &fleet.requests[order[k % order.len()]];
        let req = request(q);
        let t = Instant::now();
        let d = router.route(&req).expect("routes");
        std::hint::black_box(d.slot);
        drop(d);
        lat.push(t.elapsed().as_nanos() as u64);
    }
    lat
}

/// The writer loop: stores and removes conversation copies until `stop`; returns blocks
/// ingested (stored + removed).
fn writer(router: &Router, fleet: &ConversationFleet, stop: &AtomicBool, blocks: &AtomicU64) {
    let index = router.index();
    let mut held: std::collections::VecDeque<(Slot, u64)> = std::collections::VecDeque::new();
    let mut pairs = Vec::new();
    let mut removes = Vec::new();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let c = (n as usize * 7919) % fleet.requests.len();
        let [a, _] = fleet.holders[c];
        let slot = Slot(((a + 1) % fleet.workers) as u32);
        pairs.clear();
        pairs.extend(
            fleet.requests[c]
                .iter()
                .enumerate()
                .map(|(i, &s)| (writer_hash(n, i), s)),
        );
        index.store_hashes(slot, None, &pairs).expect("slot exists");
        held.push_back((slot, n));
        let mut done = pairs.len() as u64;
        if held.len() > WINDOW {
            let (slot, old) = held.pop_front().expect("non-empty");
            removes.clear();
            removes.extend((0..pairs.len()).map(|i| writer_hash(old, i)));
            index.remove(slot, &removes).expect("slot exists");
            done += removes.len() as u64;
        }
        blocks.fetch_add(done, Ordering::Relaxed);
        n += 1;
    }
}

/// Nearest-rank percentile `p` (0..=100) of sorted `v`.
fn pct(v: &[u64], p: f64) -> u64 {
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

fn report(name: &str, mut lat: Vec<u64>) -> u64 {
    lat.sort_unstable();
    let p99 = pct(&lat, 99.0);
    println!(
        "{name:>7}: p50 {:>7} ns  p90 {:>7} ns  p99 {:>7} ns  p99.9 {:>8} ns  max {:>9} ns  ({} decisions)",
        pct(&lat, 50.0),
        pct(&lat, 90.0),
        p99,
        pct(&lat, 99.9),
        lat[lat.len() - 1],
        lat.len()
    );
    p99
}

fn main() {
    let mut args = std::env::args().skip(1);
    let workers: usize = args.next().map_or(512, |a| a.parse().expect("WORKERS"));
    let decisions: usize = args
        .next()
        .map_or(200_000, |a| a.parse().expect("DECISIONS"));
    let fleet = ConversationFleet::new(workers, FLEET_SEED);
    let router = router(&fleet);
    let order = fleet.query_order(ORDER_SEED);
    println!("route_tail: {workers} workers, warm 128-block requests, projected_time");

    // Warm-up, not reported.
    let _ = route_timed(&router, &fleet, &order, decisions / 10);
    let idle = route_timed(&router, &fleet, &order, decisions);

    let stop = AtomicBool::new(false);
    let blocks = AtomicU64::new(0);
    let (busy, secs) = std::thread::scope(|s| {
        s.spawn(|| writer(&router, &fleet, &stop, &blocks));
        // Let the writer reach its steady window first.
        while blocks.load(Ordering::Relaxed) < (WINDOW as u64 + 1) * 256 {
            std::hint::spin_loop();
        }
        let b0 = blocks.load(Ordering::Relaxed);
        let t = Instant::now();
        let lat = route_timed(&router, &fleet, &order, decisions);
        let secs = t.elapsed().as_secs_f64();
        let b1 = blocks.load(Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
        (lat, (b1 - b0) as f64 / secs)
    });
    let p_idle = report("idle", idle);
    let p_busy = report("writer", busy);
    println!(
        "writer rate {:.2} M blocks/s (stored + removed); p99 ratio writer/idle {:.2}",
        secs / 1e6,
        p_busy as f64 / p_idle as f64
    );
}
