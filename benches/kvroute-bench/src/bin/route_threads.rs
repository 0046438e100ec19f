//! Decision throughput with several threads routing on one `Router` at once: what the
//! cache lines every deciding thread writes cost when threads decide concurrently.
//!
//! Run: `cargo run --release -p kvroute-bench --bin route_threads [-- WORKERS DECISIONS
//! ROUNDS THREADS...]` (defaults: 512 workers, 100,000 decisions per thread per round, 5
//! rounds, thread counts 1, 2 and the machine's available parallelism when larger).
//!
//! The fleet and the requests are the `route` bench's (`kvroute_bench::route`): warm
//! 128-block requests, policy `projected_time`. Each thread routes requests from its own
//! place in the fleet's rotating order (thread `t` starts `t · order.len() / threads` in, so
//! threads route different conversations) and drops each decision at once, which releases
//! its reservation; the threads start together on a barrier, and a round's time is the
//! slowest thread's. Rounds alternate over the thread counts; per count the bench prints
//! the median over rounds of the aggregate decisions per second, the nanoseconds per
//! decision on each thread, and the aggregate against `threads` times the one-thread
//! rate (1.0 = every thread as fast as one alone). Before that it times the load
//! snapshot's read alone on the same thread counts: a guard taken and returned through
//! the router's shared `LoadReader` (two read-modify-writes on the cell's one shared
//! word) against one through a `PinnedReader` of the thread's own (a store and a fence on
//! its own line), and a reservation and its release alone, on a slot of each thread's
//! own, through the table (its reference count cloned and dropped: one line every thread
//! writes) against through a `TableLease` of the thread's own. A thread count above the
//! cores measures time-sharing, not contention. Output order: the snapshot rows (ten times
//! `DECISIONS` loads per thread and round), the reservation rows (`DECISIONS` each), then
//! the decision rows; the scaling column needs a 1-thread count among `THREADS` (`-`
//! without it). This is a measurement, not a test: it asserts
//! nothing about the figures.

use std::sync::Barrier;
use std::time::Instant;

use kvroute::Router;
use kvroute_bench::route::{request, router};
use kvroute_bench::{ConversationFleet, FLEET_SEED, ORDER_SEED};
use kvroute_core::{Nanos, Slot, SlotGeneration};
use kvroute_load::{ReservationTable, Work};

/// Routes `count` requests from position `start` of `order`; returns the seconds taken.
fn route_for(
    router: &Router,
    fleet: &ConversationFleet,
    order: &[usize],
    start: usize,
    count: usize,
) -> f64 {
    let t = Instant::now();
    for k in 0..count {
        let q = &fleet.requests[order[(start + k) % order.len()]];
        let d = router.route(&request(q)).expect("routes");
        std::hint::black_box(d.slot);
    }
    t.elapsed().as_secs_f64()
}

/// Runs `body(t, barrier)` on threads `t = 0..threads` at once (each waits on the barrier
/// once its set-up is done, then times its work); returns the slowest thread's seconds.
fn slowest(threads: usize, body: impl Fn(usize, &Barrier) -> f64 + Sync) -> f64 {
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, body) = (&barrier, &body);
                s.spawn(move || body(t, barrier))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .fold(0.0, f64::max)
    })
}

/// One round with `threads` threads; returns the slowest thread's seconds.
fn round(
    router: &Router,
    fleet: &ConversationFleet,
    order: &[usize],
    threads: usize,
    count: usize,
) -> f64 {
    slowest(threads, |t, barrier| {
        let start = t * order.len() / threads;
        // A few decisions first so each thread's buffers are sized.
        route_for(router, fleet, order, start, 64);
        barrier.wait();
        route_for(router, fleet, order, start, count)
    })
}

/// One round of snapshot loads alone on `threads` threads, each taking and returning
/// `count` guards through the router's shared reader (`pinned` false) or through a pinned
/// reader of its own; returns the slowest thread's seconds.
fn snapshot_round(router: &Router, threads: usize, count: usize, pinned: bool) -> f64 {
    slowest(threads, |_, barrier| {
        let reader = router.load_reader();
        let mut pin = reader.pinned();
        barrier.wait();
        let t = Instant::now();
        for _ in 0..count {
            if pinned {
                std::hint::black_box(pin.load().seq());
            } else {
                std::hint::black_box(reader.load().seq());
            }
        }
        t.elapsed().as_secs_f64()
    })
}

/// One round of reservations alone on `threads` threads, each reserving and dropping
/// `count` times on a slot of its own (64 slots apart, so in different slot groups) of
/// `table`, through the table itself (`leased` false) or through a lease of its own;
/// returns the slowest thread's seconds.
fn reserve_round(table: &ReservationTable, threads: usize, count: usize, leased: bool) -> f64 {
    let work = Work {
        prefill_tokens: 1_000,
        decode_tokens: 200,
    };
    slowest(threads, |t, barrier| {
        let lease = table.lease();
        let slot = Slot((t * 64) as u32);
        barrier.wait();
        let start = Instant::now();
        for _ in 0..count {
            let g = if leased {
                lease.reserve(slot, SlotGeneration(1), work, Nanos(1))
            } else {
                table.reserve(slot, SlotGeneration(1), work, Nanos(1))
            };
            drop(std::hint::black_box(g.expect("reserves")));
        }
        start.elapsed().as_secs_f64()
    })
}

/// `rounds` alternated runs of `run(false)` and `run(true)`, each of `ops` operations per
/// thread; the median of each, in nanoseconds per operation.
fn alternated(rounds: usize, ops: usize, run: impl Fn(bool) -> f64) -> [f64; 2] {
    let mut secs = [Vec::new(), Vec::new()];
    for _ in 0..rounds {
        secs[0].push(run(false));
        secs[1].push(run(true));
    }
    secs.map(|s| median(s) * 1e9 / ops as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let workers: usize = args.next().map_or(512, |a| a.parse().expect("WORKERS"));
    let count: usize = args
        .next()
        .map_or(100_000, |a| a.parse().expect("DECISIONS"));
    let rounds: usize = args.next().map_or(5, |a| a.parse().expect("ROUNDS"));
    let mut counts: Vec<usize> = args.map(|a| a.parse().expect("THREADS")).collect();
    if counts.is_empty() {
        counts = vec![1, 2];
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cores > 2 {
            counts.push(cores);
        }
    }
    let fleet = ConversationFleet::new(workers, FLEET_SEED);
    let router = router(&fleet);
    let order = fleet.query_order(ORDER_SEED);
    println!(
        "route_threads: {workers} workers, warm 128-block requests, projected_time; per thread and round: {} snapshot loads, {count} reservations, {count} decisions; {rounds} rounds (medians)",
        count * 10
    );
    let mut secs = vec![Vec::new(); counts.len()];
    for _ in 0..rounds {
        for (i, &t) in counts.iter().enumerate() {
            secs[i].push(round(&router, &fleet, &order, t, count));
        }
    }
    // The load snapshot's read alone, shared reader against pinned readers (the one part
    // of a decision whose every thread wrote one cache line before the pinned readers).
    let loads = count * 10;
    for &t in &counts {
        let [shared, pinned] = alternated(rounds, loads, |p| snapshot_round(&router, t, loads, p));
        println!(
            "{t:>3} threads: snapshot load + drop {shared:>6.1} ns shared reader, {pinned:>6.1} ns pinned reader (per load per thread)"
        );
    }
    // A reservation and its release alone, through the table against through a lease of
    // the thread's own (the table's reference count is one cache line every reserving
    // thread writes twice per reservation without leases).
    let most = counts.iter().copied().max().unwrap_or(1);
    let table = ReservationTable::new(64 * most, Nanos::from_secs(60)).expect("table");
    for t in 0..most {
        table
            .add_worker(Slot((t * 64) as u32), SlotGeneration(1), Nanos(0))
            .expect("slot");
    }
    for &t in &counts {
        let [shared, leased] = alternated(rounds, count, |l| reserve_round(&table, t, count, l));
        println!(
            "{t:>3} threads: reserve + drop {shared:>6.1} ns through the table, {leased:>6.1} ns through a lease (per reservation per thread)"
        );
    }
    let mut one = None;
    for (&t, s) in counts.iter().zip(secs) {
        let m = median(s);
        let rate = (t * count) as f64 / m;
        if t == 1 {
            one = Some(rate);
        }
        let scaling = one.map_or(String::from("-"), |r| {
            format!("{:.2}", rate / (r * t as f64))
        });
        println!(
            "{t:>3} threads: {:>6.2} M decisions/s  {:>6.0} ns per decision per thread  scaling {scaling}",
            rate / 1e6,
            m * 1e9 / count as f64
        );
    }
}
