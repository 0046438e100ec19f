//! Ties spread evenly over the tied workers, whatever the router's slot capacity, wherever
//! vacant slots sit, from one thread or many.

mod common;

use std::collections::BTreeMap;

use common::{BS, NOW, publish, router, store, tokens};
use kvroute::{Policy, PolicyKind, RouteRequest, Router, WorkerId};

/// `n` decisions of one identical request on an idle fleet, each dropped at once (so every
/// decision sees the same tie); decisions per worker.
fn route_ties(r: &Router, n: usize) -> BTreeMap<WorkerId, usize> {
    let prompt = tokens(3, 4 * BS);
    let mut by = BTreeMap::new();
    for _ in 0..n {
        let d = r
            .route(&RouteRequest::tokens(&prompt, 16, NOW))
            .expect("a worker");
        *by.entry(d.worker).or_insert(0) += 1;
    }
    by
}

#[test]
fn ties_rotate_evenly_at_any_slot_capacity_under_every_policy() {
    for slots in [4, 16, 1024] {
        for kind in PolicyKind::ALL {
            let (r, ws) = router(slots, 4, |c| c.score.policy = kind.with_defaults());
            publish(&r, &ws, &[]);
            let by = route_ties(&r, 400);
            // 400 decisions over 4 identical idle workers: 100 each.
            let counts: Vec<usize> = ws.iter().map(|w| by.get(w).copied().unwrap_or(0)).collect();
            assert_eq!(counts, vec![100; 4], "{slots} slots, {}", kind.name());
        }
    }
}

#[test]
fn vacant_slots_do_not_double_the_next_worker() {
    // 8 slots; workers in slots 0..8, then the ones in slots 1, 2 and 3 removed: 5 remain.
    let (r, ws) = router(8, 8, |c| c.score.policy = Policy::LeastLoad);
    for w in &ws[1..4] {
        r.remove_worker(*w).expect("registered");
    }
    let live: Vec<WorkerId> = [0, 4, 5, 6, 7].iter().map(|&i| ws[i]).collect();
    publish(&r, &live, &[]);
    let by = route_ties(&r, 8_000);
    // 8,000 ties over 5 workers: 1,600 each (the worker after the hole gets no more).
    for w in &live {
        assert_eq!(by.get(w).copied(), Some(1_600), "{w}");
    }
}

/// 8 threads decide in 200 lock-step rounds: each round every thread routes one identical
/// request, and no thread starts the next round before every thread has dropped this
/// round's decision (a barrier). Within a round the threads' decisions see some of each
/// other's reservations, so its split varies with scheduling; a thread descheduled while it
/// holds a reservation stalls only its own round, never the next ones.
#[test]
fn ties_from_many_threads_spread_over_every_worker() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 200;
    let (r, ws) = router(1024, 4, |_| {});
    publish(&r, &ws, &[]);
    let prompt = tokens(3, 4 * BS);
    let barrier = std::sync::Barrier::new(THREADS);
    let by: Vec<BTreeMap<WorkerId, usize>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    let mut by = BTreeMap::new();
                    for _ in 0..ROUNDS {
                        let d = r
                            .route(&RouteRequest::tokens(&prompt, 16, NOW))
                            .expect("a worker");
                        *by.entry(d.worker).or_insert(0) += 1;
                        drop(d);
                        barrier.wait();
                    }
                    by
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut total = BTreeMap::new();
    for m in by {
        for (w, n) in m {
            *total.entry(w).or_insert(0) += n;
        }
    }
    // 1,600 decisions, fair share 400 each. No worker may get less than half or more than
    // one and a half fair shares.
    assert_eq!(total.values().sum::<usize>(), THREADS * ROUNDS);
    for w in &ws {
        let n = total.get(w).copied().unwrap_or(0);
        assert!((200..=600).contains(&n), "{w}: {n} of 1600 ({total:?})");
    }
}

/// A near-tie band spreads replicas over near-equal workers, but never moves a
/// conversation off the worker holding its cache: 12 turns of one chat (one block more
/// each turn) on 2 idle workers with a 10 % band stay on the first turn's worker. The band
/// holds both workers on every turn: the owner costs 16/8,000 + 256/1,000 = 0.258 s, the
/// other at most 192/8,000 + 0.256 = 0.28 s by turn 12, within 0.258 · 1.1 = 0.2838 s.
#[test]
fn a_near_tie_band_keeps_a_conversation_on_its_cache_owner() {
    for seed in [1u64, 2, 3, 4] {
        let (r, ws) = router(16, 2, |c| {
            c.score.near_tie_band = 0.1;
            c.near_tie_seed = seed;
        });
        let mut prompt = Vec::new();
        let mut chosen = Vec::new();
        for turn in 0..12u32 {
            publish(&r, &ws, &[]);
            prompt.extend(tokens(100 + turn, BS));
            let d = r
                .route(&RouteRequest::tokens(&prompt, 256, NOW))
                .expect("a worker");
            // The engine caches the prompt it served (each event restates the whole prompt
            // under fresh engine hashes).
            store(&r, d.worker, &prompt, u64::from(turn) << 32);
            chosen.push(d.worker);
        }
        assert!(
            chosen.iter().all(|w| *w == chosen[0]),
            "seed {seed}: the conversation moved: {chosen:?}"
        );
    }
}
