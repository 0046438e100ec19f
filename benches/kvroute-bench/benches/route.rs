//! `Router::route` end to end (match + snapshot + score + reserve + release) with
//! precomputed hashes, on the index bench's fleet shape (`kvroute_bench::route`) at 16, 128,
//! 512 and 1,024 workers, policy `projected_time` enforce (the default).
//!
//! Run: `cargo bench -p kvroute-bench --bench route -- --warm-up-time 1 --measurement-time 3`.
//!
//! Every worker reports fresh, varied load (so no fallback and no ties dominate); each
//! iteration routes one 128-block (2,048-token) request and drops the decision, releasing
//! its reservation, so the fleet is the same at every iteration.
//!
//! `route_predicted`: the same workload at 512 workers with predicted residency on
//! (`RouterConfig::predicted`, default settings): each decision also probes the
//! prediction table at the request's recorded depths and records its own prompt (the
//! table fills and then evicts; time does not advance, so no entry expires, and from its
//! second iteration the cold request is credited where the first one went).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use kvroute::PredictedConfig;
use kvroute_bench::route::{request, router, router_with};
use kvroute_bench::{COLD_SEED, ConversationFleet, FLEET_SEED, ORDER_SEED};

const WORKER_COUNTS: [usize; 4] = [16, 128, 512, 1024];

/// "warm": a known conversation (two workers hold all 128 blocks), rotating through every
/// conversation in a fixed shuffled order; "cold": a new conversation (every worker holds
/// the 32-block system prompt, nobody the rest).
fn route(c: &mut Criterion) {
    let mut group = c.benchmark_group("route");
    for &workers in &WORKER_COUNTS {
        let fleet = ConversationFleet::new(workers, FLEET_SEED);
        warm_and_cold(&mut group, &fleet, &router(&fleet));
    }
    group.finish();

    let mut group = c.benchmark_group("route_predicted");
    let fleet = ConversationFleet::new(512, FLEET_SEED);
    let predicted = router_with(&fleet, |c| c.predicted = Some(PredictedConfig::default()));
    warm_and_cold(&mut group, &fleet, &predicted);
    group.finish();
}

/// The `warm` and `cold` decisions of `fleet` through `router`, named by its worker count.
fn warm_and_cold(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    fleet: &ConversationFleet,
    router: &kvroute::Router,
) {
    let workers = fleet.workers;
    let order = fleet.query_order(ORDER_SEED);
    group.bench_function(BenchmarkId::new("warm", workers), |b| {
        let mut i = 0usize;
        b.iter(|| {
            let q = &fleet.requests[order[i]];
            i = if i + 1 == order.len() { 0 } else { i + 1 };
            let req = request(black_box(q));
            black_box(router.route(&req).expect("routes").slot)
        });
    });
    let cold = fleet.cold_request(COLD_SEED);
    group.bench_function(BenchmarkId::new("cold", workers), |b| {
        b.iter(|| {
            let req = request(black_box(&cold));
            black_box(router.route(&req).expect("routes").slot)
        });
    });
}

criterion_group!(benches, route);
criterion_main!(benches);
