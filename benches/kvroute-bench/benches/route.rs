//! `Router::route` end to end (match + snapshot + score + reserve + release) with
//! precomputed hashes, on the index bench's fleet shape ([`ConversationFleet`]) at 16, 128,
//! 512 and 1,024 workers, policy `projected_time` enforce (the default).
//!
//! Run: `cargo bench -p kvroute-bench --bench route -- --warm-up-time 1 --measurement-time 3`.
//!
//! Every worker reports fresh, varied load (so no fallback and no ties dominate); each
//! iteration routes one 128-block (2,048-token) request and drops the decision, releasing
//! its reservation, so the fleet is the same at every iteration.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use kvroute::{LoadSample, Nanos, RouteRequest, Router, RouterConfig, WorkerId};
use kvroute_bench::{BLOCK_SIZE, ConversationFleet, REQUEST_BLOCKS};

const FLEET_SEED: u64 = 0x6b76_726f_7574_6501;
const ORDER_SEED: u64 = 0x6b76_726f_7574_6502;
const COLD_SEED: u64 = 0x6b76_726f_7574_6503;

const WORKER_COUNTS: [usize; 4] = [16, 128, 512, 1024];
const NOW: Nanos = Nanos::from_secs(100);
const PROMPT_TOKENS: u32 = (REQUEST_BLOCKS * BLOCK_SIZE) as u32;
const OUTPUT_TOKENS: u32 = 256;

/// A router holding `fleet` in its index, every worker with a fresh, deterministic load.
fn router(fleet: &ConversationFleet) -> Router {
    let mut cfg = RouterConfig::new(fleet.workers, BLOCK_SIZE);
    cfg.index.expected_blocks = fleet.distinct_blocks();
    let router = Router::new(cfg).expect("valid config");
    for w in 0..fleet.workers {
        let slot = router.add_worker(WorkerId::new(w as u64, 0)).expect("room");
        assert_eq!(slot.index(), w);
    }
    fleet.populate(router.index());
    for w in 0..fleet.workers {
        let running = (w % 7) as u32;
        let waiting = (w % 3) as u32;
        let sample = LoadSample {
            running,
            waiting,
            max_running: 64,
            kv_usage: (w % 10) as f32 / 20.0,
            waiting_prefill_tokens: Some(waiting * 1_000),
            active_decode_tokens: Some(running * 2_300),
            decode_tps: Some(1_000.0),
            prefill_tps: Some(8_000.0),
            utilization: None,
        };
        router
            .update_load(WorkerId::new(w as u64, 0), sample, NOW)
            .expect("valid sample");
    }
    router.publish(NOW).expect("publishes");
    router
}

/// "warm": a known conversation (two workers hold all 128 blocks), rotating through every
/// conversation in a fixed shuffled order; "cold": a new conversation (every worker holds
/// the 32-block system prompt, nobody the rest).
fn route(c: &mut Criterion) {
    let mut group = c.benchmark_group("route");
    for &workers in &WORKER_COUNTS {
        let fleet = ConversationFleet::new(workers, FLEET_SEED);
        let router = router(&fleet);
        let order = fleet.query_order(ORDER_SEED);

        group.bench_function(BenchmarkId::new("warm", workers), |b| {
            let mut i = 0usize;
            b.iter(|| {
                let q = &fleet.requests[order[i]];
                i = if i + 1 == order.len() { 0 } else { i + 1 };
                let req = RouteRequest::hashes(black_box(q), PROMPT_TOKENS, OUTPUT_TOKENS, NOW);
                black_box(router.route(&req).expect("routes").slot)
            });
        });

        let cold = fleet.cold_request(COLD_SEED);
        group.bench_function(BenchmarkId::new("cold", workers), |b| {
            b.iter(|| {
                let req = RouteRequest::hashes(black_box(&cold), PROMPT_TOKENS, OUTPUT_TOKENS, NOW);
                black_box(router.route(&req).expect("routes").slot)
            });
        });
    }
    group.finish();
}

criterion_group!(benches, route);
criterion_main!(benches);
