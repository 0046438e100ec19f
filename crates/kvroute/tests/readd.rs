//! A worker removed and added back soon after (the same worker id) keeps the work its
//! engine still has: its last load report and the reservations the removal released are
//! carried into the new tenancy until its own telemetry replaces them, so admission never
//! admits past its bound across a remove + add. Residency is not carried.

mod common;

use common::{NOW, publish, router, sample, tokens};
use kvroute::{
    AdmissionConfig, Decision, Nanos, RouteError, RouteRequest, Router, RouterConfig, Validity,
    WorkerId,
};

const BOUND: u32 = 8;

fn bounded(c: &mut RouterConfig) {
    c.admission = Some(AdmissionConfig::new(BOUND));
}

/// Routes distinct prompts until admission rejects one (at most `limit`), keeping every
/// decision (its request is in flight): returns the decisions.
fn route_until_rejected(r: &Router, seed: u32, limit: usize) -> Vec<Decision> {
    let mut held = Vec::new();
    for i in 0..limit {
        let prompt = tokens(seed + i as u32, 64);
        match r.route(&RouteRequest::tokens(&prompt, 16, NOW)) {
            Ok(d) => held.push(d),
            Err(RouteError::Rejected { .. }) => break,
            Err(e) => panic!("route: {e:?}"),
        }
    }
    held
}

fn on(held: &[Decision], w: WorkerId) -> usize {
    held.iter().filter(|d| d.worker == w).count()
}

/// One worker, bound 8, 6 requests in flight, no report since: remove + add of the same
/// id. The engine still runs the 6, so admission takes 8 − 6 = 2 more, not 8.
#[test]
fn admission_counts_the_in_flight_work_of_a_readded_worker() {
    let (r, ws) = router(4, 1, bounded);
    r.publish(NOW).unwrap();
    let first = route_until_rejected(&r, 0, 6);
    assert_eq!(first.len(), 6);
    r.remove_worker(ws[0]).unwrap();
    r.add_worker(ws[0]).unwrap();
    r.publish(NOW).unwrap();
    assert_eq!(r.reserved(ws[0]).unwrap().requests, 6, "carried");
    let more = route_until_rejected(&r, 100, 20);
    assert_eq!(
        more.len(),
        2,
        "the engine runs 6 + {} > {BOUND}",
        more.len()
    );
    // The old tenancy's guards are no-ops: their requests are the carried ones.
    drop(first);
    assert_eq!(r.reserved(ws[0]).unwrap().requests, 8);
    let c = r.stats().carried;
    assert_eq!((c.readditions, c.reserved.requests, c.reports), (1, 6, 0));
}

/// Two workers, bound 8: worker 2 reports 8 running (full); worker 1 has 6 in flight and
/// flaps. Admission may redirect to worker 1 only while its engine is under the bound:
/// 2 requests, then every request is rejected.
#[test]
fn admission_redirects_to_a_readded_worker_only_up_to_its_bound() {
    let (r, ws) = router(4, 2, bounded);
    publish(&r, &ws, &[(ws[1], sample(8, 0, 0, 0, 0.1))]);
    let first = route_until_rejected(&r, 0, 6);
    assert_eq!(on(&first, ws[0]), 6);
    r.remove_worker(ws[0]).unwrap();
    r.add_worker(ws[0]).unwrap();
    r.publish(NOW).unwrap();
    let more = route_until_rejected(&r, 100, 20);
    assert_eq!((on(&more, ws[0]), on(&more, ws[1])), (2, 0));
    assert_eq!(more.len(), 2);
}

/// The carried reservations end at the re-added worker's own first report: it reports
/// 6 running, the publication reconciles the carried 6 away, and what is left are the
/// reservations made after that report.
#[test]
fn the_first_report_of_the_new_tenancy_replaces_what_was_carried() {
    let (r, ws) = router(4, 1, bounded);
    r.publish(NOW).unwrap();
    let _first = route_until_rejected(&r, 0, 6);
    r.remove_worker(ws[0]).unwrap();
    r.add_worker(ws[0]).unwrap();
    let later = Nanos(NOW.0 + 1_000_000);
    r.update_load(ws[0], sample(6, 0, 0, 0, 0.1), later)
        .unwrap();
    r.publish(later).unwrap();
    assert_eq!(r.reserved(ws[0]).unwrap().requests, 0, "reconciled");
    let more = route_until_rejected(&r, 100, 20);
    assert_eq!(more.len(), 2, "6 reported + 2 = {BOUND}");
    assert_eq!(r.reserved(ws[0]).unwrap().requests, 2);
}

/// The last report is carried as of its own observation time: the re-added lane shows
/// the reported figures at once (not `Missing` at 0), and turns `Stale` when that report
/// would have (the default maximum age, 2 s, after it).
#[test]
fn the_last_report_is_carried_and_ages_from_when_it_was_observed() {
    let (r, ws) = router(4, 1, |_| {});
    r.update_load(ws[0], sample(5, 3, 0, 0, 0.2), NOW).unwrap();
    r.publish(NOW).unwrap();
    r.remove_worker(ws[0]).unwrap();
    let slot = r.add_worker(ws[0]).unwrap();
    let t1 = Nanos(NOW.0 + 1_000_000_000);
    r.publish(t1).unwrap();
    let reader = r.load_reader();
    let snap = reader.load();
    let i = slot.index();
    assert_eq!((snap.running()[i], snap.waiting()[i]), (5, 3));
    assert_eq!(snap.validity()[i], Validity::Fresh);
    drop(snap);
    r.publish(Nanos(NOW.0 + 2_000_000_001)).unwrap();
    assert_eq!(reader.load().validity()[i], Validity::Stale);
    assert_eq!(r.stats().carried.reports, 1);
}

/// A worker added back one reservation TTL (60 s) or more after its removal starts from
/// nothing: by then its reservations would have been swept and its report is stale.
#[test]
fn a_worker_added_back_after_a_ttl_starts_from_nothing() {
    let (r, ws) = router(4, 1, bounded);
    r.publish(NOW).unwrap();
    let _first = route_until_rejected(&r, 0, 6);
    r.remove_worker(ws[0]).unwrap();
    r.publish(Nanos(NOW.0 + 60_000_000_000)).unwrap();
    r.add_worker(ws[0]).unwrap();
    assert_eq!(r.reserved(ws[0]).unwrap().requests, 0);
    assert_eq!(r.stats().carried.readditions, 0);
}

/// Another worker id added to the freed slot inherits nothing of the removed one.
#[test]
fn a_different_worker_in_the_freed_slot_inherits_nothing() {
    let (r, ws) = router(4, 1, bounded);
    r.update_load(ws[0], sample(5, 3, 0, 0, 0.2), NOW).unwrap();
    r.publish(NOW).unwrap();
    let _first = route_until_rejected(&r, 0, 3);
    r.remove_worker(ws[0]).unwrap();
    let other = WorkerId::new(9, 0);
    let slot = r.add_worker(other).unwrap();
    r.publish(NOW).unwrap();
    assert_eq!(r.reserved(other).unwrap().requests, 0);
    let reader = r.load_reader();
    let snap = reader.load();
    assert_eq!(snap.validity()[slot.index()], Validity::Missing);
    assert_eq!(snap.running()[slot.index()], 0);
}

/// A vLLM engine's deployment facts come back with its only rank: the publisher forgets an
/// engine with its last rank, so without the departure a flapped vLLM worker's next update
/// would be refused for a missing cap (vLLM does not report `max_num_seqs`).
#[test]
fn a_readded_vllm_worker_keeps_its_engine_configuration() {
    let (r, ws) = router(4, 1, |_| {});
    let cfg = kvroute::EngineConfig::new().with_max_running_per_rank(48);
    r.configure_engine(kvroute::EngineId(ws[0].engine_id), cfg)
        .unwrap();
    let update = kvroute::VllmLoadUpdate {
        engine_id: ws[0].engine_id,
        ranks: vec![kvroute::VllmRankLoad {
            dp_rank: 0,
            num_requests_running: 12.0,
            num_requests_waiting: 0.0,
            kv_cache_usage: 0.25,
        }],
    };
    r.update_vllm_load(&update, NOW).unwrap();
    r.remove_worker(ws[0]).unwrap();
    let slot = r.add_worker(ws[0]).unwrap();
    let later = Nanos(NOW.0 + 1_000_000);
    assert_eq!(r.update_vllm_load(&update, later), Ok(()));
    r.publish(later).unwrap();
    let reader = r.load_reader();
    let snap = reader.load();
    assert_eq!(snap.engine_of(slot).unwrap().max_running, 48);
}
