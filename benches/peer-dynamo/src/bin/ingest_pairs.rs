//! The ingest rows of `benches/compare.rs` (`ingest/store`, `ingest/store_remove`: the
//! 512-worker conversation fleet, its 256 store events each followed by its removal) as
//! paired rounds: in every round `kv-index`'s `ChainIndex` and kvroute's `RunIndex` replay
//! the events once each, in alternating order, in one process, and the round's ratio
//! (kv-index time / `RunIndex` time) is taken for the store calls and for store + remove.
//! On a machine whose speed drifts from minute to minute (a shared VM), the ratio of the
//! two sides measured seconds apart is steadier than that of two criterion rows measured
//! a minute apart; the medians of the per-round ratios and of each side's times are
//! printed, with their quartiles.
//!
//! Run from `benches/peer-dynamo`: `cargo run --release --bin ingest_pairs [ROUNDS]`
//! (default 41 rounds, after 5 unrecorded ones). With `--alone`, only `RunIndex` replays
//! (no kv-index in the process; the least store and removal times over the rounds are
//! printed), and with `--alone --cold` a 64 MiB sweep of memory runs before every round,
//! so each round starts with the index's data out of the caches.

use std::time::{Duration, Instant};

use kvroute_bench::{ConversationFleet, StoreWorkload};
use kvroute_index::runs::RunIndex;
use kvroute_peer_dynamo::chain::{self, ChainFleet, ChainPeer, ChainStore};
use kvroute_peer_dynamo::{EVENTS_SEED, FLEET_SEED, STORE_EVENTS, STORE_WORKERS};

/// One replay of the events on `RunIndex`: (store time, remove time).
fn replay_runs(runs: &RunIndex, load: &StoreWorkload) -> (Duration, Duration) {
    let (mut store, mut remove) = (Duration::ZERO, Duration::ZERO);
    for e in &load.events {
        let t = Instant::now();
        std::hint::black_box(
            runs.store_hashes(e.slot, Some(e.parent), &e.pairs)
                .expect("valid slot and parent"),
        );
        store += t.elapsed();
        let t = Instant::now();
        std::hint::black_box(runs.remove(e.slot, &e.engine_hashes).expect("valid slot"));
        remove += t.elapsed();
    }
    (store, remove)
}

/// One replay of the events on `ChainIndex`: (store time, remove time).
fn replay_chain(peer: &mut ChainPeer, stores: &[ChainStore]) -> (Duration, Duration) {
    let (mut store, mut remove) = (Duration::ZERO, Duration::ZERO);
    for s in stores {
        let t = Instant::now();
        peer.store(s).expect("store applies");
        store += t.elapsed();
        let t = Instant::now();
        peer.remove(s);
        remove += t.elapsed();
    }
    (store, remove)
}

/// The quartiles (25 %, 50 %, 75 %) of `v` (sorted here; nearest rank).
fn quartiles(v: &mut [f64]) -> [f64; 3] {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    [at(0.25), at(0.5), at(0.75)]
}

/// `--alone`: `RunIndex` replays the events `rounds` times (after 5 unrecorded), with a
/// 64 MiB memory sweep before each round when `cold`; prints the least times.
fn alone(rounds: usize, cold: bool, fleet: &ConversationFleet, load: &StoreWorkload) {
    let runs = fleet.build_run_index();
    let mut sweep = vec![1u64; 8 << 20];
    let (mut store, mut remove) = (Duration::MAX, Duration::MAX);
    for round in 0..rounds + 5 {
        if cold {
            for x in sweep.iter_mut() {
                *x = x.wrapping_mul(3);
            }
            std::hint::black_box(&sweep);
        }
        let (s, r) = replay_runs(&runs, load);
        if round >= 5 {
            store = store.min(s);
            remove = remove.min(r);
        }
    }
    println!(
        "RunIndex alone{}, {rounds} rounds: least store {:.3} ms, least remove {:.3} ms",
        if cold {
            " (64 MiB sweep before each round)"
        } else {
            ""
        },
        store.as_secs_f64() * 1e3,
        remove.as_secs_f64() * 1e3
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let rounds: usize = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(|a| a.parse().expect("ROUNDS is a count"))
        .unwrap_or(41);
    let fleet = ConversationFleet::new(STORE_WORKERS, FLEET_SEED);
    let load = StoreWorkload::new(&fleet, STORE_EVENTS, EVENTS_SEED);
    if flag("--alone") {
        return alone(rounds, flag("--cold"), &fleet, &load);
    }
    let stores = chain::store_workload(&fleet, &load);
    let mut peer = ChainFleet::new(&fleet).build().expect("kv-index builds");
    let runs = fleet.build_run_index();
    let before = (peer.index.current_size(), runs.stats().residencies);
    let mut rows: Vec<[f64; 4]> = Vec::with_capacity(rounds);
    for round in 0..rounds + 5 {
        let (c, r) = if round % 2 == 0 {
            let c = replay_chain(&mut peer, &stores);
            (c, replay_runs(&runs, &load))
        } else {
            let r = replay_runs(&runs, &load);
            (replay_chain(&mut peer, &stores), r)
        };
        if round >= 5 {
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            rows.push([ms(c.0), ms(c.0 + c.1), ms(r.0), ms(r.0 + r.1)]);
        }
    }
    assert_eq!(
        (peer.index.current_size(), runs.stats().residencies),
        before,
        "an index drifted over the rounds"
    );
    let col = |i: usize| rows.iter().map(|r| r[i]).collect::<Vec<f64>>();
    let ratio = |a: usize, b: usize| rows.iter().map(|r| r[a] / r[b]).collect::<Vec<f64>>();
    let blocks: usize = load.events.iter().map(|e| e.blocks()).sum();
    println!(
        "ingest pairs: {} workers, {} events, {blocks} blocks, {rounds} rounds (medians, [25 %, 75 %])",
        STORE_WORKERS, STORE_EVENTS
    );
    for (name, k, r) in [("store", 0, 2), ("store + remove", 1, 3)] {
        let [k1, k2, k3] = quartiles(&mut col(k));
        let [r1, r2, r3] = quartiles(&mut col(r));
        let [q1, q2, q3] = quartiles(&mut ratio(k, r));
        println!(
            "{name:>15}: kv-index {k2:.3} ms [{k1:.3}, {k3:.3}], RunIndex {r2:.3} ms [{r1:.3}, {r3:.3}], \
             kv-index / RunIndex {q2:.2}x [{q1:.2}, {q3:.2}]"
        );
    }
}
