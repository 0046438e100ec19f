//! Concurrent identical requests spread: N simultaneous identical requests on an idle fleet
//! of W workers put at most ceil(N/W) + 1 on any worker. Real threads released together by
//! a barrier; no timing is asserted.

mod common;

use std::sync::{Arc, Barrier};

use common::{NOW, publish, router, store, tokens};
use kvroute::{Policy, RouteRequest, RouterConfig};

fn burst(tweak: impl FnOnce(&mut RouterConfig), cached: bool) -> (Vec<u64>, kvroute::RouterStats) {
    const N: usize = 64;
    const W: u64 = 8;
    let (r, ws) = router(16, W, tweak);
    let prompt = Arc::new(tokens(9, 1_024));
    if cached {
        // Every worker holds the shared system prompt: all tie on cache too.
        for (i, w) in ws.iter().enumerate() {
            store(&r, *w, &prompt[..512], 1_000 * i as u64);
        }
    }
    publish(&r, &ws, &[]);
    let r = Arc::new(r);
    let barrier = Arc::new(Barrier::new(N));
    let handles: Vec<_> = (0..N)
        .map(|_| {
            let (r, barrier, prompt) = (r.clone(), barrier.clone(), prompt.clone());
            std::thread::spawn(move || {
                barrier.wait();
                r.route(&RouteRequest::tokens(&prompt, 256, NOW))
                    .expect("routes")
            })
        })
        .collect();
    // Keep every decision (and its reservation) alive until all are made.
    let decisions: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let mut per_worker = vec![0u64; W as usize];
    for d in &decisions {
        per_worker[d.slot.index()] += 1;
    }
    assert_eq!(per_worker.iter().sum::<u64>(), N as u64);
    let stats = r.stats();
    drop(decisions);
    for w in &ws {
        assert_eq!(r.reserved(*w).unwrap().requests, 0);
    }
    (per_worker, stats)
}

fn check(per_worker: &[u64]) {
    let bound = 64u64.div_ceil(8) + 1;
    assert!(
        per_worker.iter().all(|&n| n <= bound),
        "a worker got more than {bound}: {per_worker:?}"
    );
}

#[test]
fn simultaneous_identical_requests_spread_projected_time() {
    for round in 0..5 {
        let (per_worker, stats) = burst(|_| {}, round % 2 == 1);
        check(&per_worker);
        assert_eq!(stats.total_decisions(), 64);
    }
}

#[test]
fn simultaneous_identical_requests_spread_least_load() {
    let (per_worker, _) = burst(|c| c.score.policy = Policy::LeastLoad, false);
    check(&per_worker);
}

#[test]
fn simultaneous_identical_requests_spread_without_the_cursor_helping() {
    // kv_aware on a fleet where everyone holds the same prefix: ties broken by fewer
    // requests (which counts reservations), then the cursor.
    let (per_worker, _) = burst(|c| c.score.policy = Policy::KvAware, true);
    check(&per_worker);
}
