//! A time from the future never becomes state: load reports and publications far ahead of
//! the router's clock (the latest publication, `RouterConfig::max_clock_lead` = 60 s by
//! default) are refused and counted; a real jump of the caller's clock is accepted once the
//! next publication confirms it.

mod common;

use common::{NOW, router, sample};
use kvroute::{Nanos, PublishError, RouteRequest, Router, UpdateError, WorkerId};

fn running(r: &Router, w: WorkerId) -> (u32, kvroute::Validity) {
    let reader = r.load_reader();
    let snap = reader.load();
    let slot = r.slot_of(w).expect("registered");
    let s = snap.slot(slot).expect("occupied");
    (s.running, s.validity)
}

fn stats(r: &Router) -> kvroute::LoadStats {
    r.load_reader().load().stats()
}

#[test]
fn a_report_from_the_future_is_refused_and_later_reports_still_apply() {
    let (r, ws) = router(4, 1, |_| {});
    let w = ws[0];
    r.update_load(w, sample(0, 0, 0, 0, 0.0), NOW).unwrap();
    r.publish(NOW).unwrap();
    let e = r
        .update_load(w, sample(0, 0, 0, 0, 0.0), Nanos(u64::MAX))
        .unwrap_err();
    assert_eq!(
        e,
        UpdateError::FromTheFuture {
            worker: w,
            now: Nanos(u64::MAX),
            clock: NOW
        }
    );
    assert!(e.to_string().contains("caller's clock"), "{e}");
    // A busy report one second later is not "older than the figures held".
    let later = NOW + Nanos::from_secs(1);
    r.update_load(w, sample(60, 10, 0, 0, 0.5), later).unwrap();
    r.publish(later).unwrap();
    assert_eq!(running(&r, w), (60, kvroute::Validity::Fresh));
    assert_eq!(stats(&r).rejected_future, 1);
}

#[test]
fn before_the_first_publication_a_future_report_is_dropped_when_the_clock_starts() {
    let (r, ws) = router(4, 1, |_| {});
    let w = ws[0];
    // No clock yet: accepted for now.
    r.update_load(w, sample(0, 0, 0, 0, 0.0), Nanos(u64::MAX))
        .unwrap();
    // The first publication sets the clock and drops figures observed past its lead.
    r.publish(NOW).unwrap();
    assert_eq!(running(&r, w).1, kvroute::Validity::Missing);
    assert_eq!(stats(&r).rejected_future, 1);
    let later = NOW + Nanos::from_secs(1);
    r.update_load(w, sample(60, 10, 0, 0, 0.5), later).unwrap();
    r.publish(later).unwrap();
    assert_eq!(running(&r, w), (60, kvroute::Validity::Fresh));
}

#[test]
fn a_wild_publication_is_refused_and_the_sweeper_keeps_working() {
    let (r, ws) = router(4, 1, |_| {});
    common::publish(&r, &ws, &[]);
    assert_eq!(
        r.publish(Nanos(u64::MAX)),
        Err(PublishError::FromTheFuture {
            now: Nanos(u64::MAX),
            clock: NOW
        })
    );
    // Normal ticks go on (they are not ahead of the clock), and the wild time left nothing.
    let t = NOW + Nanos::from_secs(1);
    r.publish(t).unwrap();
    assert_eq!(stats(&r).publish_future, 1);
    // A worker added after it, with a leaked reservation: the sweeper still releases it
    // (TTL 60 s: a reservation survives one ageing and goes at the next, at most 2 TTLs).
    let w2 = WorkerId::new(9, 0);
    r.add_worker(w2).unwrap();
    r.update_load(w2, sample(0, 0, 0, 0, 0.0), t).unwrap();
    r.update_load(ws[0], sample(50, 50, 0, 0, 0.9), t).unwrap();
    r.publish(t).unwrap();
    let prompt = common::tokens(5, 64);
    let d = r.route(&RouteRequest::tokens(&prompt, 16, t)).unwrap();
    assert_eq!(d.worker, w2);
    std::mem::forget(d);
    assert_eq!(r.reserved(w2).map(|x| x.requests), Some(1));
    for k in 1..=3u64 {
        r.sweep(t + Nanos::from_secs(61 * k));
    }
    assert_eq!(r.reserved(w2).map(|x| x.requests), Some(0));
}

#[test]
fn a_real_clock_jump_is_accepted_when_the_next_tick_confirms_it() {
    let (r, ws) = router(4, 1, |_| {});
    common::publish(&r, &ws, &[]);
    // The gateway was suspended for 90 s: the first tick after it is refused...
    let woke = NOW + Nanos::from_secs(90);
    assert!(matches!(
        r.publish(woke),
        Err(PublishError::FromTheFuture { .. })
    ));
    // ...and the next one, a second later, confirms the jump: the clock moves on.
    r.publish(woke + Nanos::from_secs(1)).unwrap();
    r.update_load(ws[0], sample(3, 0, 0, 0, 0.1), woke + Nanos::from_secs(2))
        .unwrap();
    r.publish(woke + Nanos::from_secs(2)).unwrap();
    assert_eq!(running(&r, ws[0]), (3, kvroute::Validity::Fresh));
}

#[test]
fn a_publication_with_an_earlier_time_does_not_make_a_stale_worker_fresh() {
    let (r, ws) = router(4, 1, |_| {});
    let w = ws[0];
    r.update_load(w, sample(1, 0, 0, 0, 0.0), NOW).unwrap();
    r.publish(NOW).unwrap();
    // 3 s later, past the 2 s staleness bound, with no new report: stale.
    r.publish(NOW + Nanos::from_secs(3)).unwrap();
    assert_eq!(running(&r, w).1, kvroute::Validity::Stale);
    // A tick that went back to 1 s after the report is evaluated at the clock: still stale.
    r.publish(NOW + Nanos::from_secs(1)).unwrap();
    assert_eq!(running(&r, w).1, kvroute::Validity::Stale);
    assert_eq!(
        r.load_reader().load().published_at(),
        NOW + Nanos::from_secs(3)
    );
}
