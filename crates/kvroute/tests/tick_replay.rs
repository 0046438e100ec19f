//! `Router::tick` and `tick_interval`, the replay request an `IngestReport` carries, and
//! `Router::request_replay`. Expected values are computed by hand from the documented rules.

mod common;
mod ingest_support;

use kvroute::ingest::SeqOutcome;
use kvroute::{
    Channel, LoadSample, Nanos, ReplayRequest, Router, RouterConfig, Validity, WorkerId,
};
use kvroute_wire::KvMessage;

use common::BS;
use ingest_support::{batch_at, store};

fn validity(r: &Router, w: WorkerId) -> Validity {
    let reader = r.load_reader();
    let snap = reader.load();
    snap.slot(r.slot_of(w).unwrap()).unwrap().validity
}

#[test]
fn tick_publishes_and_stales_and_its_interval_follows_the_bound() {
    // Defaults: max_load_age 2 s, reservation TTL 60 s: a quarter of 2 s.
    let r = Router::new(RouterConfig::new(4, BS)).unwrap();
    assert_eq!(r.tick_interval(), Nanos(500_000_000));
    let mut cfg = RouterConfig::new(4, BS);
    // 2 ms: a quarter, 0.5 ms, is under the 1 ms floor.
    cfg.max_load_age = Nanos(2_000_000);
    assert_eq!(Router::new(cfg).unwrap().tick_interval(), Nanos(1_000_000));

    let w = WorkerId::new(1, 0);
    r.add_worker(w).unwrap();
    let t0 = Nanos::from_secs(10);
    r.update_load(w, LoadSample::idle(8), t0).unwrap();
    let first = r.tick(t0);
    assert!(first.publication.is_ok());
    assert_eq!(validity(&r, w), Validity::Fresh);
    // 1.5 s later, within the 2 s bound: still fresh; 2.5 s later, past it: stale, with no
    // new report in between.
    assert!(r.tick(Nanos(t0.0 + 1_500_000_000)).publication.is_ok());
    assert_eq!(validity(&r, w), Validity::Fresh);
    let later = r.tick(Nanos(t0.0 + 2_500_000_000));
    assert!(later.publication.unwrap() > first.publication.unwrap());
    assert_eq!(validity(&r, w), Validity::Stale);
}

fn msg(seq: u64, ts: f64, first_hash: u64) -> KvMessage {
    let tokens: Vec<u32> = (0..BS as u32)
        .map(|t| first_hash as u32 * 100 + t)
        .collect();
    batch_at(seq, ts, vec![store(first_hash, None, &tokens)])
}

#[test]
fn the_report_carries_the_workers_replay_and_request_replay_marks_one() {
    let r = Router::new(RouterConfig::new(4, BS)).unwrap();
    let w = WorkerId::new(1, 0);
    r.add_worker(w).unwrap();
    let ok = r.ingest(w, Channel::Live, &msg(0, 1.0, 10)).unwrap();
    assert_eq!((ok.outcome, ok.replay), (SeqOutcome::Contiguous, None));
    // Batches 1 and 2 lost: batch 3 reveals the gap; the replay starts at the witness 0.
    let gap = r.ingest(w, Channel::Live, &msg(3, 4.0, 13)).unwrap();
    let want = ReplayRequest {
        worker: w,
        from_seq: 0,
        last_live_seq: Some(3),
    };
    assert_eq!(gap.replay, Some(want));
    assert_eq!(r.replay_requests(), vec![want]);
    for (s, ts, h) in [(0, 1.0, 10), (1, 2.0, 11), (2, 3.0, 12), (3, 4.0, 13)] {
        r.ingest(w, Channel::Replay, &msg(s, ts, h)).unwrap();
    }
    let end = r
        .ingest(w, Channel::Replay, &KvMessage::EndOfReplay)
        .unwrap();
    assert_eq!((end.replay, end.trusted), (None, true));
    assert_eq!(r.index().worker_blocks(r.slot_of(w).unwrap()), 4);

    // Batch 4 dropped by the caller before ingest: it asks for a replay from the witness 3.
    let asked = r.request_replay(w).unwrap();
    assert_eq!(
        asked,
        ReplayRequest {
            worker: w,
            from_seq: 3,
            last_live_seq: Some(3),
        }
    );
    assert_eq!(r.is_trusted(w), Some(false));
    assert_eq!(r.ingest_stats().replays_requested, 1);
    for (s, ts, h) in [(3, 4.0, 13), (4, 5.0, 14)] {
        r.ingest(w, Channel::Replay, &msg(s, ts, h)).unwrap();
    }
    r.ingest(w, Channel::Replay, &KvMessage::EndOfReplay)
        .unwrap();
    assert_eq!(r.is_trusted(w), Some(true));
    assert_eq!(r.index().worker_blocks(r.slot_of(w).unwrap()), 5);
    // The live copy of batch 4 arriving late is dropped, not applied twice.
    r.ingest(w, Channel::Live, &msg(4, 5.0, 14)).unwrap();
    assert_eq!(r.index().worker_blocks(r.slot_of(w).unwrap()), 5);
    assert!(r.request_replay(WorkerId::new(9, 9)).is_err());
}
