//! kvroute, `dynamo-kv-router` 1.6.1 and `kv-index` 2.0.0 on the same workload, in one run,
//! side by side.
//!
//! Run from `benches/peer-dynamo`: `cargo bench --bench compare` (criterion flags after `--`,
//! e.g. `-- --warm-up-time 1 --measurement-time 2`, or a filter such as `-- match`).
//! Each criterion group holds every side of one row (`kv-index` has match and ingest rows
//! only: it has no worker selector); after the run the table of medians and ratios (peer
//! time / kvroute time) is printed. `README.md` says what each side does.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use criterion::{Criterion, SamplingMode, Throughput};
use dynamo_kv_router::protocols::RouterEvent;
use dynamo_kv_router::{RadixTree, SyncIndexer};
use kvroute_bench::{ConversationFleet, StoreWorkload};
use kvroute_index::index::PrefixIndex;
use kvroute_index::runs::RunIndex;
use kvroute_peer_dynamo::chain::{self, ChainFleet, ChainPeer, ChainStore, same_dense_overlaps};
use kvroute_peer_dynamo::decide::{PeerDecider, kvroute_decide, kvroute_router};
use kvroute_peer_dynamo::peer::{PeerFleet, PeerPool, PeerStoreWorkload, same_overlaps};
use kvroute_peer_dynamo::report::{BenchRef, Row, table};
use kvroute_peer_dynamo::{
    COLD_SEED, EVENTS_SEED, FLEET_SEED, ORDER_SEED, STORE_EVENTS, STORE_WORKERS, WORKER_COUNTS,
};

/// Queries checked for equal overlaps on both sides, per worker count (plus the cold one).
const CHECKED_QUERIES: usize = 64;

fn main() {
    // criterion's output folder: `KVROUTE_PEER_OUT` when set (e.g. running the built binary
    // on another machine), else under cargo's target folder.
    let dir = std::env::var_os("KVROUTE_PEER_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("peer-criterion"));
    let since = SystemTime::now();
    let mut c = Criterion::default()
        .output_directory(&dir)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
        .configure_from_args();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");

    let mut rows = Vec::new();
    for &workers in &WORKER_COUNTS {
        match_and_decide(&mut c, &rt, workers, &mut rows);
    }
    ingest(&mut c, &rt, &mut rows);
    c.final_summary();

    rows.sort_by_key(|r| order_key(&r.label));
    println!(
        "\nkvroute vs dynamo-kv-router 1.6.1 and kv-index 2.0.0 \
         (criterion medians; ratio = peer / kvroute)\n"
    );
    println!("{}", table(&rows, &dir, since));
}

/// Table order: match rows, then decision rows, then ingest; by worker count within each
/// (the sort is stable: warm before cold, as the rows were measured).
fn order_key(label: &str) -> (u8, usize) {
    let kind = ["match", "decision", "ingest"]
        .iter()
        .position(|k| label.starts_with(k))
        .unwrap_or(3) as u8;
    let workers = label
        .split_whitespace()
        .find_map(|w| w.parse().ok())
        .unwrap_or(0);
    (kind, workers)
}

/// Checks both sides index the same workload: equal overlaps for the first
/// [`CHECKED_QUERIES`] rotating queries and the cold one.
fn check_overlaps(
    index: &PrefixIndex,
    fleet: &ConversationFleet,
    pool: &PeerPool,
    peer: &PeerFleet,
    order: &[usize],
) {
    let mut out = index.new_overlaps();
    for &q in order.iter().take(CHECKED_QUERIES) {
        index.match_prefix(&fleet.requests[q], &mut out);
        let scores = pool.backend().find_matches(&peer.requests[q], false);
        if let Err(e) = same_overlaps(&out.to_vec(), &scores) {
            panic!("{} workers, conversation {q}: {e}", fleet.workers);
        }
    }
    index.match_prefix(&fleet.cold_request(COLD_SEED), &mut out);
    let cold = PeerFleet::cold_request(fleet, COLD_SEED);
    let scores = pool.backend().find_matches(&cold, false);
    if let Err(e) = same_overlaps(&out.to_vec(), &scores) {
        panic!("{} workers, cold request: {e}", fleet.workers);
    }
}

/// Checks kvroute and `kv-index` index the same workload: equal per-worker overlaps for the
/// first [`CHECKED_QUERIES`] rotating queries and the cold one.
fn check_chain_overlaps(
    index: &PrefixIndex,
    fleet: &ConversationFleet,
    peer: &ChainPeer,
    chain: &ChainFleet,
    order: &[usize],
) {
    let mut out = index.new_overlaps();
    let mut got = vec![0u32; fleet.workers];
    for &q in order.iter().take(CHECKED_QUERIES) {
        index.match_prefix(&fleet.requests[q], &mut out);
        peer.overlaps_into(&chain.requests[q], &mut got);
        if let Err(e) = same_dense_overlaps(&out.to_vec(), &got) {
            panic!(
                "kv-index disagrees with kvroute at {} workers, conversation {q}: {e}",
                fleet.workers
            );
        }
    }
    index.match_prefix(&fleet.cold_request(COLD_SEED), &mut out);
    peer.overlaps_into(&ChainFleet::cold_request(fleet, COLD_SEED), &mut got);
    if let Err(e) = same_dense_overlaps(&out.to_vec(), &got) {
        panic!(
            "kv-index disagrees with kvroute at {} workers, cold request: {e}",
            fleet.workers
        );
    }
}

/// Checks the run-compressed index gives every worker the same overlap as the node index
/// for the first [`CHECKED_QUERIES`] rotating queries and the cold one.
fn check_run_overlaps(
    index: &PrefixIndex,
    runs: &RunIndex,
    fleet: &ConversationFleet,
    order: &[usize],
) {
    let (mut a, mut b) = (index.new_overlaps(), runs.new_overlaps());
    let cold = fleet.cold_request(COLD_SEED);
    let queries = order
        .iter()
        .take(CHECKED_QUERIES)
        .map(|&q| &fleet.requests[q]);
    for (i, q) in queries.chain([&cold]).enumerate() {
        index.match_prefix(q, &mut a);
        runs.match_prefix(q, &mut b);
        assert_eq!(
            &a.to_vec(),
            &b.to_vec(),
            "RunIndex disagrees with PrefixIndex at {} workers, query {i}",
            fleet.workers
        );
    }
}

/// Match and decision rows at `workers` workers.
fn match_and_decide(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    workers: usize,
    rows: &mut Vec<Row>,
) {
    let fleet = ConversationFleet::new(workers, FLEET_SEED);
    let index = fleet.build_index();
    let router = kvroute_router(&fleet);
    let order = fleet.query_order(ORDER_SEED);
    let cold = fleet.cold_request(COLD_SEED);
    let peer = PeerFleet::new(&fleet);
    let pool = peer.pool(1, rt).expect("peer index builds");
    let peer_cold = PeerFleet::cold_request(&fleet, COLD_SEED);
    check_overlaps(&index, &fleet, &pool, &peer, &order);
    let chain = ChainFleet::new(&fleet);
    let chain_peer = chain.build().expect("kv-index builds");
    let chain_cold = ChainFleet::cold_request(&fleet, COLD_SEED);
    check_chain_overlaps(&index, &fleet, &chain_peer, &chain, &order);
    let runs = fleet.build_run_index();
    check_run_overlaps(&index, &runs, &fleet, &order);
    let st = runs.stats();
    println!(
        "{workers} workers: RunIndex {} runs, {} positions, {} residencies, {} heap bytes \
         ({:.1} per distinct block); PrefixIndex {} heap bytes ({:.1} per distinct block)",
        st.runs,
        st.positions,
        st.residencies,
        st.heap_bytes,
        st.heap_bytes as f64 / fleet.distinct_blocks() as f64,
        index.stats().heap_bytes,
        index.stats().heap_bytes as f64 / fleet.distinct_blocks() as f64,
    );
    let mut decider = PeerDecider::new(workers);

    // Informative only (the policies differ): how often each side picks a cache holder.
    let (mut k_hold, mut p_hold) = (0, 0);
    for &q in order.iter().take(CHECKED_QUERIES) {
        let holders = fleet.holders[q];
        k_hold += usize::from(holders.contains(&kvroute_decide(&router, &fleet.requests[q])));
        p_hold += usize::from(holders.contains(&decider.decide(pool.backend(), &peer.requests[q])));
    }
    let n = order.len().min(CHECKED_QUERIES);
    println!(
        "{workers} workers: overlaps equal on all three sides; a cache holder chosen in \
         {k_hold}/{n} (kvroute) and {p_hold}/{n} (dynamo-kv-router) rotating queries"
    );

    let w = workers.to_string();
    for mode in ["warm", "cold"] {
        let warm = mode == "warm";
        let group_name = format!("match/{mode}/{w}");
        let mut group = c.benchmark_group(&group_name);
        let mut out = index.new_overlaps();
        let mut i = 0usize;
        group.bench_function("kvroute", |b| {
            b.iter(|| {
                let q = if warm {
                    i = (i + 1) % order.len();
                    &fleet.requests[order[i]]
                } else {
                    &cold
                };
                index.match_prefix(black_box(q), &mut out);
                black_box(out.deepest())
            });
        });
        let tree = pool.backend();
        let mut i = 0usize;
        group.bench_function("dynamo", |b| {
            b.iter(|| {
                let q = if warm {
                    i = (i + 1) % order.len();
                    &peer.requests[order[i]]
                } else {
                    &peer_cold
                };
                black_box(tree.find_matches(black_box(q), false).scores.len())
            });
        });
        let mut dense = vec![0u32; workers];
        let mut i = 0usize;
        group.bench_function("kv_index", |b| {
            b.iter(|| {
                let q = if warm {
                    i = (i + 1) % order.len();
                    &chain.requests[order[i]]
                } else {
                    &chain_cold
                };
                chain_peer.overlaps_into(black_box(q), &mut dense);
                black_box(dense[0])
            });
        });
        let mut out = runs.new_overlaps();
        let mut i = 0usize;
        group.bench_function("runs", |b| {
            b.iter(|| {
                let q = if warm {
                    i = (i + 1) % order.len();
                    &fleet.requests[order[i]]
                } else {
                    &cold
                };
                runs.match_prefix(black_box(q), &mut out);
                black_box(out.deepest())
            });
        });
        group.finish();
        rows.push(Row {
            kv_index: Some(BenchRef::new(&group_name, "kv_index", None)),
            runs: Some(BenchRef::new(&group_name, "runs", None)),
            ..row(&format!("match {mode} {w}"), &group_name, None)
        });

        let group_name = format!("decision/{mode}/{w}");
        let mut group = c.benchmark_group(&group_name);
        let mut i = 0usize;
        group.bench_function("kvroute", |b| {
            b.iter(|| {
                let q = if warm {
                    i = (i + 1) % order.len();
                    &fleet.requests[order[i]]
                } else {
                    &cold
                };
                black_box(kvroute_decide(&router, black_box(q)))
            });
        });
        let mut i = 0usize;
        group.bench_function("dynamo", |b| {
            b.iter(|| {
                let q = if warm {
                    i = (i + 1) % order.len();
                    &peer.requests[order[i]]
                } else {
                    &peer_cold
                };
                black_box(decider.decide(tree, black_box(q)))
            });
        });
        group.finish();
        rows.push(row(&format!("decision {mode} {w}"), &group_name, None));
    }
}

/// A row of the two functions `kvroute` and `dynamo` of `group` (no `kv-index` figure).
fn row(label: &str, group: &str, blocks: Option<u64>) -> Row {
    Row {
        label: label.to_owned(),
        kvroute: BenchRef::new(group, "kvroute", None),
        peer: Some(BenchRef::new(group, "dynamo", None)),
        kv_index: None,
        runs: None,
        blocks,
    }
}

/// [`row`] with the function `kv_index` of `group` as the `kv-index` figure.
fn row3(label: &str, group: &str, blocks: Option<u64>) -> Row {
    Row {
        kv_index: Some(BenchRef::new(group, "kv_index", None)),
        runs: Some(BenchRef::new(group, "runs", None)),
        ..row(label, group, blocks)
    }
}

/// Replays `load` `iters` times on the `RunIndex`: each store (after its parent), then its
/// removal; only the calls selected by `time_store` / `time_remove` are timed.
fn replay_runs(
    iters: u64,
    runs: &RunIndex,
    load: &StoreWorkload,
    time_store: bool,
    time_remove: bool,
) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        for e in &load.events {
            let t = Instant::now();
            black_box(
                runs.store_hashes(e.slot, Some(e.parent), &e.pairs)
                    .expect("valid slot and parent"),
            );
            if time_store {
                total += t.elapsed();
            }
            let t = Instant::now();
            black_box(runs.remove(e.slot, &e.engine_hashes).expect("valid slot"));
            if time_remove {
                total += t.elapsed();
            }
        }
    }
    total
}

/// Replays `stores` `iters` times on `kv-index`: each store, then its removal. Only the calls
/// selected by `time_store` / `time_remove` are timed (the index takes its events by
/// reference, so nothing is cloned).
fn replay_chain(
    iters: u64,
    peer: &mut ChainPeer,
    stores: &[ChainStore],
    time_store: bool,
    time_remove: bool,
) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        for s in stores {
            let t = Instant::now();
            peer.store(s).expect("store applies");
            if time_store {
                total += t.elapsed();
            }
            let t = Instant::now();
            peer.remove(s);
            if time_remove {
                total += t.elapsed();
            }
        }
    }
    total
}

/// Replays the peer's events `iters` times on `tree`: each store, then its remove. Only the
/// calls selected by `time_store` / `time_remove` are timed; cloning the events (the peer
/// takes them by value) never is.
fn replay_peer(
    iters: u64,
    tree: &mut RadixTree,
    load: &PeerStoreWorkload,
    time_store: bool,
    time_remove: bool,
) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        for (s, r) in load.stores.iter().zip(&load.removes) {
            let (s, r) = (s.clone(), r.clone());
            let t = Instant::now();
            tree.apply_event(s).expect("store applies");
            if time_store {
                total += t.elapsed();
            }
            let t = Instant::now();
            tree.apply_event(r).expect("remove applies");
            if time_remove {
                total += t.elapsed();
            }
        }
    }
    total
}

/// Ingest rows: one writer, 512 workers, the 512-worker fleet as the steady base.
fn ingest(c: &mut Criterion, rt: &tokio::runtime::Runtime, rows: &mut Vec<Row>) {
    let fleet = ConversationFleet::new(STORE_WORKERS, FLEET_SEED);
    let index = fleet.build_index();
    let load = StoreWorkload::new(&fleet, STORE_EVENTS, EVENTS_SEED);
    let blocks = load.total_blocks() as u64;
    let peer = PeerFleet::new(&fleet);
    let peer_load = PeerStoreWorkload::new(&fleet, &load, peer.events.len() as u64);
    let mut tree = peer.radix_tree().expect("peer tree builds");
    let pool = peer.pool(1, rt).expect("peer index builds");
    let tree_size = tree.current_size();
    let chain_stores = chain::store_workload(&fleet, &load);
    let mut chain_peer = ChainFleet::new(&fleet).build().expect("kv-index builds");
    let chain_size = chain_peer.index.current_size();
    let runs = fleet.build_run_index();
    let runs_before = runs.stats();

    let mut group = c.benchmark_group("ingest/store");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(20);
    group.throughput(Throughput::Elements(blocks));
    group.bench_function("kvroute", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                for e in &load.events {
                    let t = Instant::now();
                    black_box(index.store_hashes(e.slot, &e.pairs).expect("valid slot"));
                    total += t.elapsed();
                    black_box(index.remove(e.slot, &e.engine_hashes).expect("valid slot"));
                }
            }
            total
        });
    });
    group.bench_function("dynamo", |b| {
        b.iter_custom(|iters| replay_peer(iters, &mut tree, &peer_load, true, false));
    });
    group.bench_function("kv_index", |b| {
        b.iter_custom(|iters| replay_chain(iters, &mut chain_peer, &chain_stores, true, false));
    });
    group.bench_function("runs", |b| {
        b.iter_custom(|iters| replay_runs(iters, &runs, &load, true, false));
    });
    group.finish();
    rows.push(row3("ingest 512 store", "ingest/store", Some(blocks)));

    let mut group = c.benchmark_group("ingest/store_remove");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(20);
    group.throughput(Throughput::Elements(blocks));
    group.bench_function("kvroute", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                for e in &load.events {
                    black_box(index.store_hashes(e.slot, &e.pairs).expect("valid slot"));
                    black_box(index.remove(e.slot, &e.engine_hashes).expect("valid slot"));
                }
            }
            t.elapsed()
        });
    });
    group.bench_function("dynamo", |b| {
        b.iter_custom(|iters| replay_peer(iters, &mut tree, &peer_load, true, true));
    });
    group.bench_function("kv_index", |b| {
        b.iter_custom(|iters| replay_chain(iters, &mut chain_peer, &chain_stores, true, true));
    });
    group.bench_function("runs", |b| {
        b.iter_custom(|iters| replay_runs(iters, &runs, &load, true, true));
    });
    group.bench_function("dynamo_pool", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let batch: Vec<RouterEvent> = peer_load
                    .stores
                    .iter()
                    .zip(&peer_load.removes)
                    .flat_map(|(s, r)| [s.clone(), r.clone()])
                    .collect();
                let t = Instant::now();
                for e in batch {
                    pool.enqueue_event(e).expect("pool online");
                }
                rt.block_on(pool.flush_and_wait()).expect("pool flushes");
                total += t.elapsed();
            }
            total
        });
    });
    group.finish();
    rows.push(row3(
        "ingest 512 store+remove",
        "ingest/store_remove",
        Some(blocks),
    ));
    rows.push(Row {
        label: "ingest 512 store+remove, peer thread pool (1 thread)".to_owned(),
        kvroute: BenchRef::new("ingest/store_remove", "kvroute", None),
        peer: Some(BenchRef::new("ingest/store_remove", "dynamo_pool", None)),
        kv_index: None,
        runs: None,
        blocks: Some(blocks),
    });

    assert_eq!(
        index.stats().nodes as usize,
        fleet.distinct_blocks(),
        "kvroute index drifted"
    );
    println!(
        "peer radix tree: {tree_size} blocks before the ingest rows, {} after",
        tree.current_size()
    );
    assert_eq!(
        chain_peer.index.current_size(),
        chain_size,
        "kv-index drifted over the ingest rows"
    );
    let runs_after = runs.stats();
    assert_eq!(
        (
            runs_after.runs,
            runs_after.positions,
            runs_after.residencies
        ),
        (
            runs_before.runs,
            runs_before.positions,
            runs_before.residencies
        ),
        "RunIndex drifted over the ingest rows"
    );
    let stats = chain_peer.index.stats();
    println!(
        "kv-index: {chain_size} held blocks before and after the ingest rows; \
         {} engine-hash conflicts, {} runs live",
        stats.engine_conflicts, stats.runs_live
    );
}
