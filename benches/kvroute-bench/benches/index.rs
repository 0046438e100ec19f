//! Prefix-index benchmarks: `match_prefix` latency on the conversation-fleet shape, and store
//! (ingest) throughput with one writer and 512 workers.
//!
//! Run: `cargo bench -p kvroute-bench --bench index -- --warm-up-time 1 --measurement-time 3`.
//! Workloads are built by `kvroute_bench` with fixed seeds; see `docs/BENCHMARKS.md`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use kvroute_bench::{
    COLD_SEED, ConversationFleet, EVENTS_SEED, FLEET_SEED, ORDER_SEED, STORE_EVENTS, STORE_WORKERS,
    StoreWorkload,
};
use kvroute_index::index::PrefixIndex;
use kvroute_index::runs::RunIndex;

/// Worker counts of the `match_prefix` benches.
const WORKER_COUNTS: [usize; 4] = [16, 128, 512, 1024];

/// `match_prefix` of one conversation's full 128 blocks ("warm": two workers match all 128,
/// the rest 32), rotating through every conversation in a fixed shuffled order (each query
/// walks nodes that are not cache-resident: the realistic case); the same conversation
/// every time ("warm_same": cache-resident, a best case); and a new conversation ("cold":
/// every worker matches the 32-block system prompt, then a miss).
fn match_prefix(c: &mut Criterion) {
    let mut group = c.benchmark_group("match_prefix");
    for &workers in &WORKER_COUNTS {
        let fleet = ConversationFleet::new(workers, FLEET_SEED);
        let index = fleet.build_index();
        let order = fleet.query_order(ORDER_SEED);
        let mut out = index.new_overlaps();

        group.bench_function(BenchmarkId::new("warm", workers), |b| {
            let mut i = 0usize;
            b.iter(|| {
                let q = &fleet.requests[order[i]];
                i = if i + 1 == order.len() { 0 } else { i + 1 };
                index.match_prefix(black_box(q), &mut out);
                black_box(out.deepest())
            });
        });

        // The same conversation every time: its 128 nodes stay cache-resident, so this is
        // the compute cost of the walk without memory latency (a best case).
        let same = &fleet.requests[order[0]];
        group.bench_function(BenchmarkId::new("warm_same", workers), |b| {
            b.iter(|| {
                index.match_prefix(black_box(same), &mut out);
                black_box(out.deepest())
            });
        });

        let cold = fleet.cold_request(COLD_SEED);
        group.bench_function(BenchmarkId::new("cold", workers), |b| {
            b.iter(|| {
                index.match_prefix(black_box(&cold), &mut out);
                black_box(out.deepest())
            });
        });
    }
    group.finish();
}

/// Replays `events` `iters` times, timing only `timed` and running `untimed` after it.
fn replay<I>(
    iters: u64,
    load: &StoreWorkload,
    index: &I,
    mut timed: impl FnMut(&I, &kvroute_bench::StoreEvent),
    mut untimed: impl FnMut(&I, &kvroute_bench::StoreEvent),
) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        for e in &load.events {
            let t = Instant::now();
            timed(index, e);
            total += t.elapsed();
            untimed(index, e);
        }
    }
    total
}

/// Store throughput in blocks/s: one writer, 512 workers registered, the index holding the
/// 512-worker fleet (98,336 blocks) as its steady base. Every event is removed again right
/// after its store, so the index size stays steady.
///
/// * `store/tokens`: `store()` with token ids (re-hashing included); the remove is untimed.
/// * `store/hashes`: `store_hashes()` with precomputed chained hashes; remove untimed.
/// * `remove`: `remove()` of the event's blocks; the store before it is untimed.
/// * `store_remove/{tokens,hashes}`: store and remove both timed; throughput counts each
///   block once (it is two events' worth of work).
fn store(c: &mut Criterion) {
    let fleet = ConversationFleet::new(STORE_WORKERS, FLEET_SEED);
    let index = fleet.build_index();
    let load = StoreWorkload::new(&fleet, STORE_EVENTS, EVENTS_SEED);
    let blocks = load.total_blocks() as u64;

    let mut group = c.benchmark_group("ingest");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(30);
    group.throughput(Throughput::Elements(blocks));

    let store_tokens = |ix: &PrefixIndex, e: &kvroute_bench::StoreEvent| {
        black_box(ix.store(e.slot, &e.block_store()).expect("valid event"));
    };
    let store_hashes = |ix: &PrefixIndex, e: &kvroute_bench::StoreEvent| {
        black_box(ix.store_hashes(e.slot, &e.pairs).expect("valid slot"));
    };
    let remove = |ix: &PrefixIndex, e: &kvroute_bench::StoreEvent| {
        black_box(ix.remove(e.slot, &e.engine_hashes).expect("valid slot"));
    };
    let nothing = |_: &PrefixIndex, _: &kvroute_bench::StoreEvent| {};

    group.bench_function("store/tokens", |b| {
        b.iter_custom(|iters| replay(iters, &load, &index, store_tokens, remove));
    });
    group.bench_function("store/hashes", |b| {
        b.iter_custom(|iters| replay(iters, &load, &index, store_hashes, remove));
    });
    group.bench_function("remove", |b| {
        b.iter_custom(|iters| {
            // The timed closure runs first, so store untimed beforehand each round.
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                for e in &load.events {
                    store_hashes(&index, e);
                    let t = Instant::now();
                    remove(&index, e);
                    total += t.elapsed();
                }
            }
            total
        });
    });
    group.bench_function("store_remove/tokens", |b| {
        b.iter_custom(|iters| {
            replay(
                iters,
                &load,
                &index,
                |ix, e| {
                    store_tokens(ix, e);
                    remove(ix, e);
                },
                nothing,
            )
        });
    });
    group.bench_function("store_remove/hashes", |b| {
        b.iter_custom(|iters| {
            replay(
                iters,
                &load,
                &index,
                |ix, e| {
                    store_hashes(ix, e);
                    remove(ix, e);
                },
                nothing,
            )
        });
    });
    group.finish();

    let stats = index.stats();
    assert_eq!(
        stats.nodes as usize,
        fleet.distinct_blocks(),
        "index drifted"
    );
}

/// The same events on `RunIndex`, the router's index (`store` and `store_hashes` after
/// the event's parent): `ingest_runs/store/{tokens,hashes}` (removal untimed) and
/// `ingest_runs/store_remove/{tokens,hashes}` (both timed, each block counted once).
fn store_runs(c: &mut Criterion) {
    let fleet = ConversationFleet::new(STORE_WORKERS, FLEET_SEED);
    let index = fleet.build_run_index();
    let load = StoreWorkload::new(&fleet, STORE_EVENTS, EVENTS_SEED);
    let blocks = load.total_blocks() as u64;

    let mut group = c.benchmark_group("ingest_runs");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(30);
    group.throughput(Throughput::Elements(blocks));

    let store_tokens = |ix: &RunIndex, e: &kvroute_bench::StoreEvent| {
        black_box(ix.store(e.slot, &e.block_store()).expect("valid event"));
    };
    let store_hashes = |ix: &RunIndex, e: &kvroute_bench::StoreEvent| {
        black_box(
            ix.store_hashes(e.slot, Some(e.parent), &e.pairs)
                .expect("valid slot and parent"),
        );
    };
    let remove = |ix: &RunIndex, e: &kvroute_bench::StoreEvent| {
        black_box(ix.remove(e.slot, &e.engine_hashes).expect("valid slot"));
    };
    for (name, store) in [
        (
            "tokens",
            &store_tokens as &dyn Fn(&RunIndex, &kvroute_bench::StoreEvent),
        ),
        ("hashes", &store_hashes),
    ] {
        group.bench_function(format!("store/{name}"), |b| {
            b.iter_custom(|iters| replay(iters, &load, &index, store, remove));
        });
        group.bench_function(format!("store_remove/{name}"), |b| {
            b.iter_custom(|iters| {
                replay(
                    iters,
                    &load,
                    &index,
                    |ix, e| {
                        store(ix, e);
                        remove(ix, e);
                    },
                    |_, _| {},
                )
            });
        });
    }
    group.finish();
    assert_eq!(
        index.stats().blocks as usize,
        fleet.distinct_blocks(),
        "index drifted"
    );
}

criterion_group!(benches, match_prefix, store, store_runs);
criterion_main!(benches);
