//! Admission coupled to the decision: an idle peer gets the request while the cached owner
//! is over the bound; rejection only when nobody can take it. Policy `kv_aware` (pure
//! affinity) so the scorer itself always holds on the owner.

mod common;

use common::{NOW, publish, router, sample, store, tokens};
use kvroute::{AdmissionConfig, Policy, Reason, RouteError, RouteRequest, RouterConfig};

fn kv_aware_with_bound(c: &mut RouterConfig) {
    c.score.policy = Policy::KvAware;
    c.admission = Some(AdmissionConfig::new(64));
}

/// Owner (worker 1) holds the 256-block prefix with 38 running + 109 waiting = 147
/// outstanding, over the bound of 64. Worker 2 holds the first 128 blocks with 10
/// outstanding; worker 3 is idle. The scorer (kv_aware) picks the owner; admission moves
/// the request to the deepest holder under the bound: worker 2 (128 blocks).
#[test]
fn admission_moves_off_the_owner_to_the_best_worker_under_the_bound() {
    let (r, ws) = router(4, 3, kv_aware_with_bound);
    let prefix = tokens(1, 4_096);
    store(&r, ws[0], &prefix, 0);
    store(&r, ws[1], &prefix[..2_048], 1_000);
    publish(
        &r,
        &ws,
        &[
            (ws[0], sample(38, 109, 6_976, 159_600, 0.6)),
            (ws[1], sample(10, 0, 0, 4_000, 0.1)),
        ],
    );
    let d = r.route(&RouteRequest::tokens(&prefix, 64, NOW)).unwrap();
    assert_eq!((d.worker, d.overlap_blocks), (ws[1], 128));
    assert_eq!(d.reason, Reason::LoadEscape);
    let redirect = d.redirect.expect("admission redirected");
    assert_eq!((redirect.from, redirect.from_outstanding), (ws[0], 147));
    assert_eq!(r.stats().admission_redirects, 1);
}

/// Why admission is coupled to the decision: the only cached owner is over the bound and
/// the peer is idle. A gate in front of selection would have rejected (429); here the idle
/// peer gets the request, and so acquires its first copy of the prefix.
#[test]
fn idle_peer_gets_the_request_while_the_cached_owner_is_over_the_bound() {
    let (r, ws) = router(4, 2, kv_aware_with_bound);
    let prefix = tokens(1, 4_096);
    store(&r, ws[0], &prefix, 0);
    publish(&r, &ws, &[(ws[0], sample(38, 109, 6_976, 159_600, 0.6))]);
    let d = r.route(&RouteRequest::tokens(&prefix, 64, NOW)).unwrap();
    assert_eq!((d.worker, d.overlap_blocks), (ws[1], 0));
    assert!(d.redirect.is_some());
    // The peer's engine reports the prefix stored: it is now an owner too, with fewer
    // requests, so kv_aware's own tie rule (equal overlap, fewer requests) keeps the next
    // requests there without any redirect.
    store(&r, ws[1], &prefix, 10_000);
    for _ in 0..3 {
        let d2 = r.route(&RouteRequest::tokens(&prefix, 64, NOW)).unwrap();
        assert_eq!(
            (d2.worker, d2.overlap_blocks, d2.redirect),
            (ws[1], 256, None)
        );
        assert_eq!(d2.reason, Reason::CacheHold);
    }
    assert_eq!(r.stats().admission_redirects, 1);
    assert_eq!(r.stats().rejections.over_bound, 0);
}

/// Rejected only when every worker, cached or not, is at the bound; the error says the
/// bound and the least-loaded worker's figure (64 outstanding on worker 2).
#[test]
fn rejects_only_when_no_worker_can_take_it() {
    let (r, ws) = router(4, 2, kv_aware_with_bound);
    let prefix = tokens(1, 1_024);
    store(&r, ws[0], &prefix, 0);
    publish(
        &r,
        &ws,
        &[
            (ws[0], sample(38, 109, 6_976, 159_600, 0.6)),
            (ws[1], sample(64, 0, 0, 64_000, 0.5)),
        ],
    );
    assert_eq!(
        r.route(&RouteRequest::tokens(&prefix, 64, NOW))
            .unwrap_err(),
        RouteError::Rejected {
            bound: 64,
            least_outstanding: 64
        }
    );
    assert_eq!(r.stats().rejections.over_bound, 1);
    // One completion on worker 2 (63 running): it can take the request again.
    r.update_load(ws[1], sample(63, 0, 0, 63_000, 0.5), NOW)
        .unwrap();
    r.publish(NOW).unwrap();
    let d = r.route(&RouteRequest::tokens(&prefix, 64, NOW)).unwrap();
    assert_eq!(d.worker, ws[1]);
    // Its reservation makes 64 outstanding: full again.
    assert!(matches!(
        r.route(&RouteRequest::tokens(&prefix, 64, NOW)),
        Err(RouteError::Rejected { .. })
    ));
}

/// Under the bound, admission changes nothing.
#[test]
fn under_the_bound_the_scorer_decides() {
    let (r, ws) = router(4, 2, kv_aware_with_bound);
    let prefix = tokens(1, 1_024);
    store(&r, ws[0], &prefix, 0);
    publish(&r, &ws, &[(ws[0], sample(30, 10, 0, 0, 0.2))]);
    let d = r.route(&RouteRequest::tokens(&prefix, 64, NOW)).unwrap();
    assert_eq!(
        (d.worker, d.reason, d.redirect),
        (ws[0], Reason::CacheHold, None)
    );
}

/// Requests that a report counted and that have since ended: one worker, bound 8. Six
/// requests are routed and a report counts them (6 running); its publication absorbs their
/// six reservations. Two end: the six absorbed reservations offset them (the report might
/// not count those), so 6 are outstanding and admission takes 2 more. The next report
/// counts 4 and absorbs nothing; two more end, so the router counts 4 − 2 = 2 outstanding
/// and admission takes 8 − 2 = 6 more, each claimed on its first attempt (no re-score: the
/// claim is bounded by the reserved count the attempt read, which the ended requests do
/// not change), and rejects the next.
#[test]
fn ended_requests_beyond_the_absorbed_free_admission_room() {
    let (r, ws) = router(4, 1, |c| c.admission = Some(AdmissionConfig::new(8)));
    publish(&r, &ws, &[]);
    let mut held: Vec<_> = (0..6)
        .map(|i| {
            r.route(&RouteRequest::tokens(&tokens(i, 64), 16, NOW))
                .unwrap()
        })
        .collect();
    publish(&r, &ws, &[(ws[0], sample(6, 0, 0, 0, 0.1))]);
    assert_eq!(r.reserved(ws[0]).unwrap().requests, 0, "reconciled");
    held.truncate(4);
    assert_eq!(
        r.reserved(ws[0]).unwrap().finished,
        0,
        "2 ended, 6 absorbed"
    );
    let fresh: Vec<_> = (0..3)
        .map_while(|i| {
            r.route(&RouteRequest::tokens(&tokens(50 + i, 64), 16, NOW))
                .ok()
        })
        .collect();
    assert_eq!(fresh.len(), 2, "6 reported + 2 = the bound");
    drop(fresh);
    assert_eq!(
        r.reserved(ws[0]).unwrap().finished,
        0,
        "live ones do not count"
    );
    publish(&r, &ws, &[(ws[0], sample(4, 0, 0, 0, 0.1))]);
    held.truncate(2);
    assert_eq!(
        r.reserved(ws[0]).unwrap().finished,
        2,
        "2 ended, none absorbed"
    );
    for i in 0..6 {
        let d = r
            .route(&RouteRequest::tokens(&tokens(100 + i, 64), 16, NOW))
            .unwrap();
        assert_eq!(d.rescores, 0, "request {i}");
        held.push(d);
    }
    assert!(matches!(
        r.route(&RouteRequest::tokens(&tokens(200, 64), 16, NOW)),
        Err(RouteError::Rejected { .. })
    ));
    // The next report (2 + 6 = 8 running) resets the count; its publication absorbs the
    // six reservations.
    r.update_load(ws[0], sample(8, 0, 0, 0, 0.1), NOW).unwrap();
    r.publish(NOW).unwrap();
    assert_eq!(r.reserved(ws[0]).unwrap(), kvroute::Reserved::default());
}
