//! `RouterStats::workers`: decisions by the worker they went to, counted per tenancy of a
//! slot, and the stats' `Display`. Units as in `route.rs`: prefill 8,000 and decode 1,000
//! tokens/s reported, blocks of 16 tokens, policy `projected_time` enforce. An idle worker
//! costs `uncached/8,000 + output/1,000` seconds.

mod common;

use common::{NOW, publish, router, store, tokens};
use kvroute::{Reason, RouteRequest, WorkerId};

/// Workers 1, 2, 3 in slots 0, 1, 2, all idle; worker 1 holds a 4,096-token prefix.
/// * A (the prefix + 64 tokens, 256 output): worker 1 costs 64/8,000 + 0.256 = 0.264 s,
///   the others 4,160/8,000 + 0.256 = 0.776 s: worker 1, `cache_hold`.
/// * B (640 fresh tokens, 64 output), twice: every worker costs the same, so the cursor
///   (1, then 2: one step per decision) picks slots 1 and 2: `cache_miss` on workers 2
///   and 3.
/// * Worker 2 is removed and worker 9 added: it takes the freed slot 1, with nothing
///   counted. It stores a 1,024-token prefix; C (that prefix + 64 tokens, 64 output) costs
///   64/8,000 + 0.064 = 0.072 s there against 1,088/8,000 + 0.064 = 0.2 s elsewhere:
///   worker 9, `cache_hold`, its first decision (worker 2's `cache_miss` is not its).
#[test]
fn decisions_are_counted_per_worker_and_tenancy() {
    let (r, ws) = router(4, 3, |_| {});
    let prefix = tokens(1, 4_096);
    store(&r, ws[0], &prefix, 0);
    publish(&r, &ws, &[]);
    let mut a = prefix.clone();
    a.extend(tokens(2, 64));
    let b = tokens(3, 640);

    let d = r.route(&RouteRequest::tokens(&a, 256, NOW)).unwrap();
    assert_eq!((d.worker, d.reason), (ws[0], Reason::CacheHold));
    drop(d);
    for want in [ws[1], ws[2]] {
        let d = r.route(&RouteRequest::tokens(&b, 64, NOW)).unwrap();
        assert_eq!((d.worker, d.reason), (want, Reason::CacheMiss));
    }
    let s = r.stats();
    let counts: Vec<(WorkerId, u32, u64, u64, u64)> = s
        .workers
        .iter()
        .map(|w| {
            (
                w.worker,
                w.slot.0,
                w.total(),
                w.with_reason(Reason::CacheHold),
                w.with_reason(Reason::CacheMiss),
            )
        })
        .collect();
    assert_eq!(
        counts,
        [
            (ws[0], 0, 1, 1, 0),
            (ws[1], 1, 1, 0, 1),
            (ws[2], 2, 1, 0, 1)
        ]
    );
    assert_eq!(s.worker(ws[1]).map(|w| w.generation.0), Some(1));

    r.remove_worker(ws[1]).unwrap();
    let nine = WorkerId::new(9, 0);
    assert_eq!(r.add_worker(nine).unwrap().0, 1);
    let s = r.stats();
    assert_eq!(s.worker(ws[1]), None);
    let w9 = s.worker(nine).expect("registered");
    assert_eq!((w9.slot.0, w9.generation.0, w9.total()), (1, 2, 0));
    assert_eq!(
        s.total_decisions(),
        3,
        "a removed worker's decisions stay counted"
    );

    let live = [ws[0], nine, ws[2]];
    let c_prefix = tokens(4, 1_024);
    store(&r, nine, &c_prefix, 10_000);
    publish(&r, &live, &[]);
    let mut c = c_prefix.clone();
    c.extend(tokens(5, 64));
    let d = r.route(&RouteRequest::tokens(&c, 64, NOW)).unwrap();
    assert_eq!((d.worker, d.reason), (nine, Reason::CacheHold));
    drop(d);
    let w9 = *r.stats().worker(nine).unwrap();
    assert_eq!((w9.total(), w9.with_reason(Reason::CacheHold)), (1, 1));
    assert_eq!(w9.by_reason.iter().sum::<u64>(), 1);

    assert_eq!(
        r.stats().to_string(),
        "decisions: 4\n\
         \x20 projected_time cache_hold: 2\n\
         \x20 projected_time cache_miss: 2\n\
         decisions by worker (since each was added):\n\
         \x20 1:0 (slot 0): 1 (cache_hold 1)\n\
         \x20 9:0 (slot 1): 1 (cache_hold 1)\n\
         \x20 3:0 (slot 2): 1 (cache_miss 1)\n\
         shadow disagreements: 0\n\
         fallbacks: missing 0, invalid 0, stale 0, partial 0\n\
         rescores: 0, unchecked reserves: 0, admission redirects: 0, outputs capped: 0\n\
         rejections: invalid_request 0, no_eligible_worker 0, over_bound 0, contended 0, \
         saturated 0\n\
         reservations refused: stale 0, saturated 0, contended 0; underflows clamped: 0; \
         token amounts saturated: 0\n\
         reservations swept: 0 requests, 0 prefill tokens, 0 decode tokens\n\
         reservations reconciled: 0 requests, 0 prefill tokens, 0 decode tokens\n\
         reservations removed: 0 requests, 0 prefill tokens, 0 decode tokens\n\
         carried into re-added workers: 0 re-additions, 0 reports, 0 requests, 0 prefill \
         tokens, 0 decode tokens; 0 requests not carried\n\
         carried work returned by the router: 0 requests, 0 prefill tokens, 0 decode tokens\n\
         outcomes: completed 0, failed 0, cancelled 0, stale 0; breakers: opened 0, reopened \
         0, half-opened 0, closed 0, refused 0, open now 0\n\
         predictions: recorded 0, contended 0, credited 0, retired 0\n"
    );
}

/// A worker with no decision is listed with zeros, and the summary says so plainly.
#[test]
fn idle_workers_are_listed_with_zero() {
    let (r, ws) = router(2, 2, |_| {});
    let s = r.stats();
    assert_eq!(s.workers.len(), 2);
    assert!(s.workers.iter().all(|w| w.total() == 0));
    assert_eq!((s.workers[1].worker, s.workers[1].slot.0), (ws[1], 1));
    let text = s.to_string();
    assert!(text.starts_with("decisions: 0\ndecisions by worker (since each was added):\n  1:0 (slot 0): 0\n  2:0 (slot 1): 0\n"), "{text}");
}

/// Decisions made on several threads (each counts on its own buffer set's tally) are
/// counted once each, by policy and reason as by worker, and stay counted after those
/// threads exit and their tallies are folded into the router's shared counters (at the
/// next thread's first decision).
#[test]
fn decisions_from_several_threads_are_counted_once_each() {
    let (r, ws) = router(4, 3, |_| {});
    publish(&r, &ws, &[]);
    let r = std::sync::Arc::new(r);
    let per_thread = 25u64;
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let r = r.clone();
            std::thread::spawn(move || {
                let prompt = tokens(10 + t as u32, 640);
                for _ in 0..per_thread {
                    drop(r.route(&RouteRequest::tokens(&prompt, 64, NOW)).unwrap());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let count = |s: &kvroute::RouterStats| {
        (
            s.total_decisions(),
            s.workers.iter().map(|w| w.total()).sum::<u64>(),
        )
    };
    assert_eq!(count(&r.stats()), (4 * per_thread, 4 * per_thread));
    // A fifth thread: its first decision registers its tally and folds the four finished
    // threads' tallies; nothing is lost or counted twice.
    let r2 = r.clone();
    std::thread::spawn(move || {
        drop(
            r2.route(&RouteRequest::tokens(&tokens(99, 640), 64, NOW))
                .unwrap(),
        );
    })
    .join()
    .unwrap();
    let s = r.stats();
    assert_eq!(count(&s), (4 * per_thread + 1, 4 * per_thread + 1));
    let by_label: u64 = s
        .decisions
        .iter()
        .filter(|d| d.policy == "projected_time")
        .map(|d| d.count)
        .sum();
    assert_eq!(by_label, 4 * per_thread + 1);
}
