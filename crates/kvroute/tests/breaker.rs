//! Request outcomes and the per-worker breaker: a worker whose requests fail while its
//! telemetry reads idle stops receiving traffic after a few failures, gets one probe after
//! its cooldown, and is back when a probe completes.

mod common;

use std::collections::VecDeque;

use common::{NOW, publish, router, tokens};
use kvroute::{
    BreakerConfig, Nanos, Outcome, RouteError, RouteRequest, Router, RouterConfig,
    RouterConfigError, SlotGeneration, WorkerId,
};

/// The tenancy `w` holds now.
fn generation(r: &Router, w: WorkerId) -> SlotGeneration {
    let reader = r.load_reader();
    let snap = reader.load();
    snap.tenant(r.slot_of(w).unwrap()).unwrap().1
}

/// Whether the latest snapshot excludes `w`.
fn excluded(r: &Router, w: WorkerId) -> bool {
    let reader = r.load_reader();
    let snap = reader.load();
    snap.excluded()[r.slot_of(w).unwrap().index()]
}

fn at(ms: u64) -> Nanos {
    Nanos(NOW.0 + ms * 1_000_000)
}

/// 1,000 requests on 8 idle workers (publications every 10 requests, 1 ms apart); worker
/// 0's engine fails every request at once, the others complete theirs 32 requests later
/// (32 in flight). Returns the requests each worker got.
fn run(r: &Router, ws: &[WorkerId]) -> Vec<u32> {
    let mut counts = vec![0u32; ws.len()];
    let mut in_flight = VecDeque::new();
    for i in 0..1_000u64 {
        if i % 10 == 0 {
            for w in ws {
                r.update_load(*w, common::idle(), at(i)).unwrap();
            }
            r.publish(at(i)).unwrap();
        }
        let prompt = tokens(i as u32 + 1, 256);
        let d = r.route(&RouteRequest::tokens(&prompt, 32, at(i))).unwrap();
        let k = ws.iter().position(|&w| w == d.worker).unwrap();
        counts[k] += 1;
        if k == 0 {
            r.finish(d, Outcome::Failed);
        } else {
            in_flight.push_back(d);
            if in_flight.len() > 32 {
                r.finish(in_flight.pop_front().unwrap(), Outcome::Completed);
            }
        }
    }
    counts
}

/// With the breaker, the failing worker gets exactly the 5 requests whose failures open
/// it (5 consecutive failures; the 1 s run is inside its 5 s cooldown); without it, it
/// gets far more than its fair share of 125 (it always reads idle).
#[test]
fn a_worker_whose_requests_fail_stops_receiving_them() {
    let (r, ws) = router(8, 8, |_| {});
    let counts = run(&r, &ws);
    assert_eq!(counts[0], 5, "{counts:?}");
    let b = r.stats().breaker;
    assert_eq!((b.opened, b.open_now, b.failed), (1, 1, 5));
    assert_eq!(b.completed, 1_000 - 5 - 32);
    assert!(excluded(&r, ws[0]));

    let (off, ws) = router(8, 8, |c: &mut RouterConfig| c.breaker = None);
    let counts = run(&off, &ws);
    assert!(counts[0] > 250, "without the breaker: {counts:?}");
    assert_eq!(off.stats().breaker.failed, u64::from(counts[0]));
}

/// Open, then half-open at the first publication past the 5 s cooldown: the next request
/// may go to the worker again (the probe). A failed probe opens it again for twice the
/// cooldown (10 s); a completed one closes it.
#[test]
fn a_probe_after_the_cooldown_decides() {
    let (r, ws) = router(4, 1, |_| {});
    publish(&r, &ws, &[]);
    r.add_worker(WorkerId::new(2, 0)).unwrap();
    let w2 = WorkerId::new(2, 0);
    r.update_load(w2, common::idle(), NOW).unwrap();
    r.publish(NOW).unwrap();
    let gen0 = generation(&r, ws[0]);
    for _ in 0..5 {
        r.record_outcome(ws[0], gen0, Outcome::Failed);
    }
    assert_eq!(r.stats().breaker.opened, 1);
    let route = |t: Nanos| {
        let d = r
            .route(&RouteRequest::tokens(&tokens(9, 64), 8, t))
            .unwrap();
        d.worker
    };
    for _ in 0..4 {
        assert_eq!(route(NOW), w2, "open: never chosen");
    }
    // 4.9 s later: still open.
    r.publish(at(4_900)).unwrap();
    assert!(excluded(&r, ws[0]));
    // 5 s: half-open, a candidate again.
    r.publish(at(5_000)).unwrap();
    assert!(!excluded(&r, ws[0]));
    assert_eq!(r.stats().breaker.half_opened, 1);
    // The probe fails: open again, now for 10 s.
    r.record_outcome(ws[0], gen0, Outcome::Failed);
    let b = r.stats().breaker;
    assert_eq!((b.reopened, b.open_now), (1, 1));
    r.publish(at(14_900)).unwrap();
    assert!(excluded(&r, ws[0]));
    r.publish(at(15_000)).unwrap();
    assert!(!excluded(&r, ws[0]));
    // This probe completes: closed, and failures count from zero again.
    r.record_outcome(ws[0], gen0, Outcome::Completed);
    let b = r.stats().breaker;
    assert_eq!((b.closed, b.open_now), (1, 0));
    for _ in 0..4 {
        r.record_outcome(ws[0], gen0, Outcome::Failed);
    }
    assert_eq!(
        r.stats().breaker.open_now,
        0,
        "4 failures in a row do not open it"
    );
}

/// Alternating failures and completions never make 5 in a row, but the failure rate over
/// the window does: 8 failures in the first 16 outcomes is 0.5, the default threshold, so
/// the breaker opens at the 16th outcome, not before. Cancellations count for nothing.
#[test]
fn a_failure_rate_over_the_window_opens_the_breaker() {
    let (r, ws) = router(4, 2, |_| {});
    publish(&r, &ws, &[]);
    let g = generation(&r, ws[0]);
    for k in 0..15 {
        r.record_outcome(ws[0], g, Outcome::Cancelled);
        let o = if k % 2 == 0 {
            Outcome::Failed
        } else {
            Outcome::Completed
        };
        r.record_outcome(ws[0], g, o);
        assert_eq!(r.stats().breaker.opened, 0, "after {} outcomes", k + 1);
    }
    r.record_outcome(ws[0], g, Outcome::Completed);
    let b = r.stats().breaker;
    assert_eq!(
        (b.opened, b.failed, b.completed, b.cancelled),
        (1, 8, 8, 15)
    );
}

/// At most half the fleet may be open (one always may): with 2 workers both failing,
/// the first opens, the second is refused and keeps serving.
#[test]
fn the_breaker_never_takes_out_more_than_its_share_of_the_fleet() {
    let (r, ws) = router(4, 2, |_| {});
    publish(&r, &ws, &[]);
    let gens: Vec<_> = ws.iter().map(|w| generation(&r, *w)).collect();
    for _ in 0..5 {
        r.record_outcome(ws[0], gens[0], Outcome::Failed);
        r.record_outcome(ws[1], gens[1], Outcome::Failed);
    }
    let b = r.stats().breaker;
    assert_eq!((b.opened, b.open_now, b.open_refused), (1, 1, 1));
    let d = r
        .route(&RouteRequest::tokens(&tokens(3, 64), 8, NOW))
        .unwrap();
    assert_eq!(d.worker, ws[1]);
}

/// A failed probe reopens a half-open breaker only within the same cap on the share open:
/// 4 workers, at most 2 open (`max_open_fraction` 0.5). Workers 0 and 1 open (worker 2's
/// five failures then come after and are refused); 6 s later both are half-open (none
/// open), and worker 2's next five failures open it (1 open). Then both probes fail:
/// worker 0 reopens (2 open), worker 1 may not (refused, it stays half-open), so 2 stay
/// open and two workers keep taking requests.
#[test]
fn a_failed_probe_reopens_only_within_the_share() {
    let (r, ws) = router(4, 4, |_| {});
    publish(&r, &ws, &[]);
    let gens: Vec<_> = ws.iter().map(|w| generation(&r, *w)).collect();
    for w in 0..3 {
        for _ in 0..5 {
            r.record_outcome(ws[w], gens[w], Outcome::Failed);
        }
    }
    let b = r.stats().breaker;
    assert_eq!((b.opened, b.open_now, b.open_refused), (2, 2, 1));
    for w in &ws {
        r.update_load(*w, common::idle(), at(6_000)).unwrap();
    }
    r.publish(at(6_000)).unwrap();
    let b = r.stats().breaker;
    assert_eq!((b.half_opened, b.open_now), (2, 0));
    for _ in 0..5 {
        r.record_outcome(ws[2], gens[2], Outcome::Failed);
    }
    assert_eq!(r.stats().breaker.open_now, 1);
    r.record_outcome(ws[0], gens[0], Outcome::Failed);
    r.record_outcome(ws[1], gens[1], Outcome::Failed);
    let b = r.stats().breaker;
    assert_eq!((b.reopened, b.open_now, b.open_refused), (1, 2, 2));
}

/// An outcome of a removed worker, or of its previous tenancy after it was added back,
/// is stale: counted, and the new tenancy's breaker starts closed.
#[test]
fn outcomes_of_another_tenancy_are_stale() {
    let (r, ws) = router(4, 2, |_| {});
    publish(&r, &ws, &[]);
    let old = generation(&r, ws[0]);
    for _ in 0..4 {
        r.record_outcome(ws[0], old, Outcome::Failed);
    }
    r.remove_worker(ws[0]).unwrap();
    r.record_outcome(ws[0], old, Outcome::Failed);
    r.add_worker(ws[0]).unwrap();
    r.record_outcome(ws[0], old, Outcome::Failed);
    let b = r.stats().breaker;
    assert_eq!((b.stale_outcomes, b.failed, b.opened), (2, 4, 0));
}

/// Admission never redirects to an excluded worker: with the only healthy worker at its
/// bound, the request is rejected rather than sent to the open one.
#[test]
fn admission_does_not_redirect_to_an_open_worker() {
    let (r, ws) = router(4, 2, |c: &mut RouterConfig| {
        c.admission = Some(kvroute::AdmissionConfig::new(4));
    });
    publish(&r, &ws, &[(ws[1], common::sample(4, 0, 0, 0, 0.1))]);
    let g = generation(&r, ws[0]);
    for _ in 0..5 {
        r.record_outcome(ws[0], g, Outcome::Failed);
    }
    let e = r
        .route(&RouteRequest::tokens(&tokens(3, 64), 8, NOW))
        .unwrap_err();
    assert!(matches!(e, RouteError::Rejected { .. }), "{e:?}");
}

/// Every breaker setting out of range is refused by name.
#[test]
fn breaker_settings_out_of_range_are_refused_by_name() {
    type Change = fn(&mut BreakerConfig);
    let cases: [(&str, Change); 7] = [
        ("breaker.consecutive_failures", |b| {
            b.consecutive_failures = 0
        }),
        ("breaker.min_outcomes", |b| b.min_outcomes = 65),
        ("breaker.window", |b| b.window = 8),
        ("breaker.failure_rate", |b| b.failure_rate = 0.0),
        ("breaker.max_open_fraction", |b| b.max_open_fraction = 1.5),
        ("breaker.cooldown", |b| b.cooldown = Nanos(10)),
        ("breaker.max_cooldown", |b| {
            b.max_cooldown = Nanos::from_secs(1)
        }),
    ];
    for (field, change) in cases {
        let mut c = RouterConfig::new(4, 16);
        let mut b = BreakerConfig::default();
        change(&mut b);
        c.breaker = Some(b);
        match Router::new(c) {
            Err(RouterConfigError::OutOfRange(e)) => assert_eq!(e.field, field),
            other => panic!("{field}: {other:?}"),
        }
    }
}

/// A publication refused as too far ahead of the clock does not move the breakers' clock:
/// a breaker opened after it still goes half-open 5 s later by the accepted publications
/// (before, the refused day-ahead time became its clock and it stayed open for a day).
#[test]
fn a_refused_publication_does_not_stall_the_breakers() {
    let (r, ws) = router(8, 4, |_| {});
    publish(&r, &ws, &[]);
    assert!(r.publish(at(86_400_000)).is_err(), "a day ahead is refused");
    let g = generation(&r, ws[0]);
    for _ in 0..5 {
        r.record_outcome(ws[0], g, Outcome::Failed);
    }
    assert!(excluded(&r, ws[0]));
    r.publish(at(4_999)).unwrap();
    assert!(excluded(&r, ws[0]));
    r.publish(at(5_000)).unwrap();
    assert!(
        !excluded(&r, ws[0]),
        "half-open 5 s after the accepted clock"
    );
}

/// When every registered worker is open (a fleet of one, or the closed ones removed
/// since), the fleet fails open: requests still go to the open workers rather than all
/// being rejected.
#[test]
fn a_fleet_whose_every_worker_is_open_fails_open() {
    let (r, ws) = router(4, 1, |_| {});
    publish(&r, &ws, &[]);
    let g = generation(&r, ws[0]);
    for _ in 0..5 {
        r.record_outcome(ws[0], g, Outcome::Failed);
    }
    assert_eq!(r.stats().breaker.open_now, 1);
    let d = r
        .route(&RouteRequest::tokens(&tokens(3, 64), 8, NOW))
        .unwrap();
    assert_eq!(d.worker, ws[0]);

    // 4 workers, 3 failing: 2 open (the cap), then the 2 closed ones are removed.
    let (r, ws) = router(4, 4, |_| {});
    publish(&r, &ws, &[]);
    for w in &ws[..3] {
        let g = generation(&r, *w);
        for _ in 0..5 {
            r.record_outcome(*w, g, Outcome::Failed);
        }
    }
    let b = r.stats().breaker;
    assert_eq!((b.open_now, b.open_refused), (2, 1));
    let open: Vec<_> = ws.iter().filter(|w| excluded(&r, **w)).copied().collect();
    for w in ws.iter().filter(|w| !open.contains(w)) {
        r.remove_worker(*w).unwrap();
    }
    let d = r
        .route(&RouteRequest::tokens(&tokens(3, 64), 8, NOW))
        .unwrap();
    assert!(open.contains(&d.worker), "{d:?}");
}

/// A request routed before the breaker opened (a slow one still running) that completes
/// while it is half-open is no probe: the breaker stays half-open, and the first request
/// routed since then decides.
#[test]
fn a_request_routed_before_the_breaker_opened_is_no_probe() {
    let (r, ws) = router(4, 2, |_| {});
    publish(&r, &ws, &[]);
    let slow = loop {
        let d = r
            .route(&RouteRequest::tokens(&tokens(1, 64), 8, NOW))
            .unwrap();
        if d.worker == ws[0] {
            break d;
        }
    };
    let g = generation(&r, ws[0]);
    for _ in 0..5 {
        r.record_outcome(ws[0], g, Outcome::Failed);
    }
    r.publish(at(5_000)).unwrap();
    assert_eq!(r.stats().breaker.half_opened, 1);
    r.finish(slow, Outcome::Completed);
    let b = r.stats().breaker;
    assert_eq!((b.closed, b.completed), (0, 1), "no probe: {b:?}");
    assert!(!excluded(&r, ws[0]), "still half-open");
    // A request routed now is the probe; its failure opens the breaker again.
    let probe = loop {
        let d = r
            .route(&RouteRequest::tokens(&tokens(2, 64), 8, at(5_000)))
            .unwrap();
        if d.worker == ws[0] {
            break d;
        }
    };
    r.finish(probe, Outcome::Failed);
    assert_eq!(r.stats().breaker.reopened, 1);
    assert!(excluded(&r, ws[0]));
}
