//! Instruction counts (callgrind, one run each) of kvroute's hot paths at 512 workers, on
//! the criterion benches' workload shapes (built by `kvroute_bench` with the same seeds):
//!
//! * `match_prefix`: `PrefixIndex::match_prefix` of a known conversation (`warm`: two
//!   workers match all 128 blocks, the rest 32) and of a new one (`cold`: 32, then a miss).
//! * `match_runs`: the same two matches on the run-compressed `RunIndex` holding the same
//!   fleet.
//! * `ingest_runs`: the ingest bench's 256 events on `RunIndex` (`store_hashes` after the
//!   event's parent, then `remove`).
//! * `scorer_pass`: the scorer pass alone, `projected_time` (enforce), SIMD
//!   (`Scorer::score`), from the lanes and from the fleet's prepared cost coefficients
//!   (`Fleet::prepare_costs`).
//! * `route_end_to_end`: `Router::route` with precomputed hashes (match, snapshot, score,
//!   reserve and release), `warm` and `cold` as above; `warm_1024` on the same fleet of
//!   1,024 workers.
//! * `ingest_hashes`, `ingest_tokens`: the 256 store events of the ingest bench, each stored
//!   then removed again (`store_hashes` + `remove`; `store` with token ids + `remove`).
//!
//! Only the benchmark function is measured: the setup (building the 196,640-block index,
//! a first call that sizes the reusable buffers) runs before it, and the workload is
//! dropped after it. Run through `scripts/gungraun.sh`, which builds at a fixed CPU level
//! and compares the counts with `benches/kvroute-gungraun/baseline.json`.

// gungraun's macros generate public modules and constants without doc comments.
#![allow(missing_docs)]

use std::hint::black_box;

use gungraun::{library_benchmark, library_benchmark_group, main};
use kvroute::{Router, SequenceHash};
use kvroute_bench::{
    COLD_SEED, ConversationFleet, EVENTS_SEED, FLEET_SEED, ORDER_SEED, STORE_EVENTS, STORE_WORKERS,
    StoreWorkload, route, score,
};
use kvroute_index::index::{Overlaps, PrefixIndex};
use kvroute_index::runs::RunIndex;
use kvroute_score::{Fleet, ScoreConfig, Scorer, TieInput};

/// Workers of every bench here.
const WORKERS: usize = 512;

/// The query of a `warm` bench: the first conversation of the criterion bench's rotation.
fn warm_query(fleet: &ConversationFleet) -> Vec<SequenceHash> {
    fleet.requests[fleet.query_order(ORDER_SEED)[0]].clone()
}

/// An index holding the 512-worker fleet, a query and a warm output buffer.
struct MatchCase {
    index: PrefixIndex,
    query: Vec<SequenceHash>,
    out: Overlaps,
}

fn match_case(cold: bool) -> MatchCase {
    let fleet = ConversationFleet::new(WORKERS, FLEET_SEED);
    let index = fleet.build_index();
    let query = if cold {
        fleet.cold_request(COLD_SEED)
    } else {
        warm_query(&fleet)
    };
    let mut out = index.new_overlaps();
    index.match_prefix(&query, &mut out);
    MatchCase { index, query, out }
}

fn match_warm() -> MatchCase {
    match_case(false)
}

fn match_cold() -> MatchCase {
    match_case(true)
}

#[library_benchmark]
#[bench::warm_512(setup = match_warm)]
#[bench::cold_512(setup = match_cold)]
fn match_prefix(mut case: MatchCase) -> MatchCase {
    case.index
        .match_prefix(black_box(&case.query), &mut case.out);
    black_box(case.out.deepest());
    case
}

/// A `RunIndex` holding the 512-worker fleet, a query and a warm output buffer.
struct RunsCase {
    index: RunIndex,
    query: Vec<SequenceHash>,
    out: Overlaps,
}

fn runs_case(cold: bool) -> RunsCase {
    let fleet = ConversationFleet::new(WORKERS, FLEET_SEED);
    let index = fleet.build_run_index();
    let query = if cold {
        fleet.cold_request(COLD_SEED)
    } else {
        warm_query(&fleet)
    };
    let mut out = index.new_overlaps();
    index.match_prefix(&query, &mut out);
    RunsCase { index, query, out }
}

fn runs_warm() -> RunsCase {
    runs_case(false)
}

fn runs_cold() -> RunsCase {
    runs_case(true)
}

#[library_benchmark]
#[bench::warm_512(setup = runs_warm)]
#[bench::cold_512(setup = runs_cold)]
fn match_runs(mut case: RunsCase) -> RunsCase {
    case.index
        .match_prefix(black_box(&case.query), &mut case.out);
    black_box(case.out.deepest());
    case
}

/// A `RunIndex` holding the 512-worker fleet and the ingest bench's events.
struct RunsIngestCase {
    index: RunIndex,
    load: StoreWorkload,
}

/// The fleet's `RunIndex` after one unmeasured replay of the events (each store, then its
/// removal), so that the lane maps the events reach have grown to the size their steady
/// churn keeps: the measured replay counts ingest, not a map's one-time growth (as the
/// criterion row's warm-up does).
fn runs_ingest_case() -> RunsIngestCase {
    let fleet = ConversationFleet::new(STORE_WORKERS, FLEET_SEED);
    let index = fleet.build_run_index();
    let load = StoreWorkload::new(&fleet, STORE_EVENTS, EVENTS_SEED);
    for e in &load.events {
        index
            .store_hashes(e.slot, Some(e.parent), &e.pairs)
            .expect("valid slot and parent");
        index.remove(e.slot, &e.engine_hashes).expect("valid slot");
    }
    RunsIngestCase { index, load }
}

#[library_benchmark]
#[bench::store_remove_hashes_512(setup = runs_ingest_case)]
fn ingest_runs(case: RunsIngestCase) -> RunsIngestCase {
    for e in &case.load.events {
        black_box(
            case.index
                .store_hashes(e.slot, Some(e.parent), &e.pairs)
                .expect("valid slot and parent"),
        );
        black_box(
            case.index
                .remove(e.slot, &e.engine_hashes)
                .expect("valid slot"),
        );
    }
    case
}

/// The scorer's fleet, a scorer whose buffers are sized, and the default configuration.
struct ScoreCase {
    fleet: Fleet,
    scorer: Scorer,
    cfg: ScoreConfig,
}

fn score_projected_time() -> ScoreCase {
    let fleet = score::fleet(WORKERS);
    let mut scorer = Scorer::new();
    let cfg = ScoreConfig::default();
    let tie = TieInput {
        cursor: 0,
        random: None,
    };
    scorer.score(&fleet, score::SCORE_REQUEST, &cfg, tie);
    ScoreCase { fleet, scorer, cfg }
}

/// [`score_projected_time`] with the fleet's cost coefficients prepared for the default
/// configuration (what the router's fill keeps).
fn score_projected_time_coefficients() -> ScoreCase {
    let mut case = score_projected_time();
    case.fleet.prepare_costs(&case.cfg);
    case
}

#[library_benchmark]
#[bench::projected_time_simd_512(setup = score_projected_time)]
#[bench::projected_time_coefficients_512(setup = score_projected_time_coefficients)]
fn scorer_pass(mut case: ScoreCase) -> ScoreCase {
    let tie = TieInput {
        cursor: 1,
        random: None,
    };
    black_box(
        case.scorer
            .score(black_box(&case.fleet), score::SCORE_REQUEST, &case.cfg, tie),
    );
    case
}

/// A router holding the fleet with fresh load, and the request's hashes. The setup routes
/// the request once (and releases it), so the scratch buffers are warm. The router is boxed
/// so that moving the case in and out of the bench function copies a pointer, not the
/// router (whose inline counters would otherwise add a few hundred `memcpy` instructions
/// that are the harness's, not the decision's).
struct RouteCase {
    router: Box<Router>,
    query: Vec<SequenceHash>,
}

fn route_case(cold: bool) -> RouteCase {
    route_case_of(WORKERS, cold)
}

fn route_case_of(workers: usize, cold: bool) -> RouteCase {
    let fleet = ConversationFleet::new(workers, FLEET_SEED);
    let router = route::router(&fleet);
    let query = if cold {
        fleet.cold_request(COLD_SEED)
    } else {
        warm_query(&fleet)
    };
    drop(router.route(&route::request(&query)).expect("routes"));
    RouteCase {
        router: Box::new(router),
        query,
    }
}

fn route_warm() -> RouteCase {
    route_case(false)
}

fn route_cold() -> RouteCase {
    route_case(true)
}

/// The same at 1,024 workers (the 1,024-worker instruction target).
fn route_warm_1024() -> RouteCase {
    route_case_of(2 * WORKERS, false)
}

#[library_benchmark]
#[bench::warm_512(setup = route_warm)]
#[bench::cold_512(setup = route_cold)]
#[bench::warm_1024(setup = route_warm_1024)]
fn route_end_to_end(case: RouteCase) -> RouteCase {
    let req = route::request(black_box(&case.query));
    black_box(case.router.route(&req).expect("routes").slot);
    case
}

/// The 512-worker fleet's index and the ingest bench's 256 store events.
struct IngestCase {
    index: PrefixIndex,
    load: StoreWorkload,
}

fn ingest_case() -> IngestCase {
    let fleet = ConversationFleet::new(STORE_WORKERS, FLEET_SEED);
    let index = fleet.build_index();
    let load = StoreWorkload::new(&fleet, STORE_EVENTS, EVENTS_SEED);
    IngestCase { index, load }
}

#[library_benchmark]
#[bench::store_remove_hashes_512(setup = ingest_case)]
fn ingest_hashes(case: IngestCase) -> IngestCase {
    for e in &case.load.events {
        black_box(
            case.index
                .store_hashes(e.slot, &e.pairs)
                .expect("valid slot"),
        );
        black_box(
            case.index
                .remove(e.slot, &e.engine_hashes)
                .expect("valid slot"),
        );
    }
    case
}

#[library_benchmark]
#[bench::store_remove_tokens_512(setup = ingest_case)]
fn ingest_tokens(case: IngestCase) -> IngestCase {
    for e in &case.load.events {
        black_box(
            case.index
                .store(e.slot, &e.block_store())
                .expect("valid event"),
        );
        black_box(
            case.index
                .remove(e.slot, &e.engine_hashes)
                .expect("valid slot"),
        );
    }
    case
}

library_benchmark_group!(
    name = hot_paths,
    benchmarks = [
        match_prefix,
        match_runs,
        scorer_pass,
        route_end_to_end,
        ingest_hashes,
        ingest_tokens,
        ingest_runs
    ]
);

main!(library_benchmark_groups = hot_paths);
