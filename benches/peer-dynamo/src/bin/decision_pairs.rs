//! The decision row of `benches/compare.rs` (`decision/warm/W/kvroute` against
//! `match/warm/W/kv_index`: kvroute's whole `Router::route` on rotating conversations
//! against kv-index's `ChainIndex` lookup alone, `overlaps_into` a reused dense buffer) as
//! paired rounds: in every round both sides run the same batch of rotating queries once
//! each, in alternating order, in one process, and the round's ratio (`ChainIndex` time /
//! kvroute time per query) is taken. On a machine whose speed drifts from minute to minute
//! (a shared VM), the ratio of two sides measured milliseconds apart is steadier than that
//! of two criterion rows measured seconds apart; the medians of the per-round ratios and
//! of each side's times per query are printed, with their quartiles.
//!
//! Before timing, both sides' overlaps are checked equal for the first 64 rotating queries
//! (the same work to do), and every decision drops its reservation at once, as the
//! criterion row does.
//!
//! Run from `benches/peer-dynamo`:
//! `cargo run --release --bin decision_pairs [ROUNDS] [WORKERS...]`
//! (default 41 rounds after 5 unrecorded ones, at 128, 512 and 1,024 workers; each round
//! is 4,096 queries per side).

use std::hint::black_box;
use std::time::Instant;

use kvroute_bench::ConversationFleet;
use kvroute_peer_dynamo::chain::{ChainFleet, same_dense_overlaps};
use kvroute_peer_dynamo::decide::{kvroute_decide, kvroute_router};
use kvroute_peer_dynamo::{FLEET_SEED, ORDER_SEED};

/// Queries per side per round.
const BATCH: usize = 4_096;
/// Rotating queries whose overlaps are checked equal before timing.
const CHECKED_QUERIES: usize = 64;

/// The quartiles (25 %, 50 %, 75 %) of `v` (sorted here; nearest rank).
fn quartiles(v: &mut [f64]) -> [f64; 3] {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    [at(0.25), at(0.5), at(0.75)]
}

/// Paired rounds at `workers` workers; prints one line.
fn pairs(workers: usize, rounds: usize) {
    let fleet = ConversationFleet::new(workers, FLEET_SEED);
    let order = fleet.query_order(ORDER_SEED);
    let router = kvroute_router(&fleet);
    let chain = ChainFleet::new(&fleet);
    let peer = chain.build().expect("kv-index builds");
    let runs = fleet.build_run_index();
    let mut ours = runs.new_overlaps();
    let mut dense = vec![0u32; workers];
    for &q in order.iter().take(CHECKED_QUERIES) {
        runs.match_prefix(&fleet.requests[q], &mut ours);
        peer.overlaps_into(&chain.requests[q], &mut dense);
        if let Err(e) = same_dense_overlaps(&ours.to_vec(), &dense) {
            panic!("kv-index disagrees with kvroute at {workers} workers, conversation {q}: {e}");
        }
    }
    let (mut ki, mut ri) = (0usize, 0usize);
    let mut chain_batch = |dense: &mut [u32]| {
        let t = Instant::now();
        for _ in 0..BATCH {
            ki = (ki + 1) % order.len();
            peer.overlaps_into(black_box(&chain.requests[order[ki]]), dense);
            black_box(dense[0]);
        }
        t.elapsed().as_secs_f64() * 1e9 / BATCH as f64
    };
    let mut route_batch = || {
        let t = Instant::now();
        for _ in 0..BATCH {
            ri = (ri + 1) % order.len();
            black_box(kvroute_decide(
                &router,
                black_box(&fleet.requests[order[ri]]),
            ));
        }
        t.elapsed().as_secs_f64() * 1e9 / BATCH as f64
    };
    let mut rows: Vec<[f64; 2]> = Vec::with_capacity(rounds);
    for round in 0..rounds + 5 {
        let (c, r) = if round % 2 == 0 {
            let c = chain_batch(&mut dense);
            (c, route_batch())
        } else {
            let r = route_batch();
            (chain_batch(&mut dense), r)
        };
        if round >= 5 {
            rows.push([c, r]);
        }
    }
    let col = |i: usize| rows.iter().map(|r| r[i]).collect::<Vec<f64>>();
    let [c1, c2, c3] = quartiles(&mut col(0));
    let [r1, r2, r3] = quartiles(&mut col(1));
    let [q1, q2, q3] = quartiles(&mut rows.iter().map(|r| r[0] / r[1]).collect::<Vec<_>>());
    println!(
        "{workers:>5} workers: ChainIndex lookup {c2:.0} ns [{c1:.0}, {c3:.0}], kvroute decision \
         {r2:.0} ns [{r1:.0}, {r3:.0}], ChainIndex / kvroute {q2:.2}x [{q1:.2}, {q3:.2}]"
    );
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("ROUNDS and WORKERS are counts"))
        .collect();
    let rounds = args.first().copied().unwrap_or(41);
    let workers = if args.len() > 1 {
        args[1..].to_vec()
    } else {
        vec![128, 512, 1_024]
    };
    println!(
        "decision pairs: rotating conversations, {BATCH} queries per side per round, {rounds} \
         rounds (medians per query, [25 %, 75 %])"
    );
    for w in workers {
        pairs(w, rounds);
    }
}
