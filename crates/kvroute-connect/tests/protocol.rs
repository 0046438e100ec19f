//! The connector against emulated engine ranks speaking the engines' ZMQ protocol (PUB
//! frames, replay ROUTER, end marker): late subscription and forced losses recovered by
//! replay, an engine restart, a replay the engine can no longer serve, a rank without a
//! replay socket, a queue of one batch, run-time removal and a clean shutdown. Every
//! expected residency is computed by the test's own model of what was published.

mod support;

use std::sync::Arc;
use std::time::Duration;

use kvroute::{Router, RouterConfig, WorkerId};
use kvroute_connect::{ConnectOptions, Connector, EngineKind, EngineSpec, RankSpec};
use support::engine::EmulatedRank;
use support::{BLOCK, Residency, batch, remove, store, wait_until, wall};

const LONG: Duration = Duration::from_secs(60);

fn router() -> Arc<Router> {
    Arc::new(Router::new(RouterConfig::new(16, BLOCK as usize)).unwrap())
}

fn spec(id: u64, ranks: &[&EmulatedRank]) -> EngineSpec {
    let ranks = ranks
        .iter()
        .enumerate()
        .map(|(r, e)| {
            let s = RankSpec::new(r as u32, e.events_endpoint());
            match e.replay_endpoint() {
                Some(ep) => s.with_replay(ep),
                None => s,
            }
        })
        .collect();
    EngineSpec::new(id, EngineKind::Sglang, ranks)
}

/// A step of rank `r`: stores a chain of two blocks, removes the older chain's leaf.
fn step(i: u64, r: u32) -> kvroute_wire::KvEventBatch {
    let base = (u64::from(r) << 32) | (i * 2 + 1);
    let mut events = vec![store(&[base, base + 1], None)];
    if i % 3 == 2 {
        events.push(remove(&[base - 3]));
    }
    if i % 5 == 4 {
        // A duplicate store of the chain's tail, as vLLM sends one.
        events.push(store(&[base + 1], Some(base)));
    }
    batch(wall(), events, r)
}

/// Publishes empty batches until the Router's residency of `worker` is `want` and
/// trusted (an empty batch changes nothing but shows any loss before it).
async fn settle(router: &Router, e: &EmulatedRank, worker: WorkerId, want: &Residency) -> bool {
    wait_until(
        LONG,
        || &Residency::of(router, worker) == want && router.is_trusted(worker) == Some(true),
        || {
            e.publish(&batch(wall(), vec![], worker.dp_rank), true);
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gaps_are_replayed_and_a_restart_is_handled() {
    let ranks = [
        EmulatedRank::start("", Some(10_000)),
        EmulatedRank::start("", Some(10_000)),
    ];
    let mut model = [Residency::default(), Residency::default()];
    // Published before anyone subscribed: only a replay can bring these.
    for (r, e) in ranks.iter().enumerate() {
        for i in 0..20 {
            let b = step(i, r as u32);
            model[r].apply(&b);
            e.publish(&b, true);
        }
    }
    let router = router();
    let c = Connector::start(router.clone(), ConnectOptions::default()).expect("valid options");
    c.add_engine(spec(7, &[&ranks[0], &ranks[1]])).unwrap();
    let w = |r: u32| WorkerId::new(7, r);
    assert!(wait_until(LONG, || c.rank_stats().iter().all(|s| s.connected), || {}).await);
    // Live batches with forced losses: every fourth is buffered but never sent.
    for (r, e) in ranks.iter().enumerate() {
        for i in 20..80 {
            let b = step(i, r as u32);
            model[r].apply(&b);
            e.publish(&b, i % 4 != 0);
        }
    }
    for r in 0..2 {
        assert!(settle(&router, &ranks[r], w(r as u32), &model[r]).await);
        assert_eq!(Residency::of(&router, w(r as u32)), model[r]);
        let s = c.rank(w(r as u32)).unwrap();
        assert!(s.gaps >= 1 && s.replays >= 1, "{s:?}");
        assert_eq!((s.replay_failures, s.replays_skipped), (0, 0), "{s:?}");
    }

    // Rank 0 restarts: sequence from 0, its first batch clears the cache (as SGLang's).
    ranks[0].restart();
    model[0] = Residency::default();
    let first = batch(
        wall() + 1.0,
        vec![kvroute_wire::KvEvent::AllBlocksCleared],
        0,
    );
    ranks[0].publish(&first, false);
    assert!(wait_until(LONG, || c.rank(w(0)).unwrap().reconnects >= 1, || {}).await);
    for i in 100..140 {
        let b = step(i, 0);
        model[0].apply(&b);
        ranks[0].publish(&b, i % 7 != 0);
    }
    assert!(settle(&router, &ranks[0], w(0), &model[0]).await);
    assert_eq!(Residency::of(&router, w(0)), model[0]);
    assert!(c.rank(w(0)).unwrap().resets >= 1);
    // Rank 1 was left alone.
    assert_eq!(Residency::of(&router, w(1)), model[1]);
    assert_eq!(c.rank(w(1)).unwrap().resets, 0);

    c.remove_engine(7).await.unwrap();
    assert_eq!(router.slot_of(w(0)), None);
    assert!(c.rank_stats().is_empty());
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_the_engine_no_longer_holds_clears_the_worker() {
    // The engine keeps 4 batches; 30 were published before the subscription.
    let e = EmulatedRank::start("kv", Some(4));
    let mut all = Vec::new();
    for i in 0..30 {
        let b = step(i, 0);
        e.publish(&b, true);
        all.push(b);
    }
    let router = router();
    let c = Connector::start(router.clone(), ConnectOptions::default()).expect("valid options");
    c.add_engine(spec(3, &[&e]).with_topic("kv")).unwrap();
    let w = WorkerId::new(3, 0);
    assert!(wait_until(LONG, || c.rank(w).unwrap().connected, || {}).await);
    // What a cleared worker can know: the batches the engine still buffered when it
    // served the replay, applied to an empty cache, then the live ones (the engine's own
    // record says where its answer began).
    let b = step(30, 0);
    e.publish(&b, true);
    all.push(b);
    assert!(
        wait_until(
            LONG,
            || !e.served().is_empty(),
            || {
                e.publish(&batch(wall(), vec![], 0), true);
            }
        )
        .await
    );
    let (asked, first) = e.served()[0];
    assert_eq!(asked, 0);
    let first = first.expect("the buffer is never empty here") as usize;
    assert!(first > 0, "the engine kept only 4 batches");
    let mut want = Residency::default();
    // Sequence numbers past 30 are empty batches: they change nothing.
    for b in all.iter().skip(first) {
        want.apply(b);
    }
    assert!(settle(&router, &e, w, &want).await, "{:?}", c.rank(w));
    assert!(router.ingest_stats().replays_truncated >= 1);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_without_replay_socket_skips_and_is_trusted() {
    let e = EmulatedRank::start("", None);
    for i in 0..5 {
        e.publish(&step(i, 0), true);
    }
    let router = router();
    let c = Connector::start(router.clone(), ConnectOptions::default()).expect("valid options");
    c.add_engine(spec(4, &[&e])).unwrap();
    let w = WorkerId::new(4, 0);
    assert!(wait_until(LONG, || c.rank(w).unwrap().connected, || {}).await);
    // A clear makes the cache knowable again whatever was lost.
    let mut want = Residency::default();
    let b = batch(wall(), vec![kvroute_wire::KvEvent::AllBlocksCleared], 0);
    want.apply(&b);
    e.publish(&b, false);
    let b = step(10, 0);
    want.apply(&b);
    e.publish(&b, true);
    assert!(
        wait_until(
            LONG,
            || c.rank(w).unwrap().replays_skipped >= 1,
            || {
                e.publish(&batch(wall(), vec![], 0), true);
            }
        )
        .await
    );
    assert_eq!(router.is_trusted(w), Some(true));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_is_counted_and_replayed() {
    let e = EmulatedRank::start("", Some(100_000));
    let router = router();
    let mut opts = ConnectOptions::default();
    opts.queue_capacity = 1;
    let c = Connector::start(router.clone(), opts).expect("valid options");
    c.add_engine(spec(5, &[&e])).unwrap();
    let w = WorkerId::new(5, 0);
    assert!(wait_until(LONG, || c.rank(w).unwrap().connected, || {}).await);
    let mut want = Residency::default();
    for i in 0..3000 {
        let b = step(i, 0);
        want.apply(&b);
        e.publish(&b, true);
    }
    assert!(settle(&router, &e, w, &want).await, "{:?}", c.rank(w));
    let s = c.rank(w).unwrap();
    // Whatever met the full queue was counted and brought back by a replay.
    assert!(s.overflows == 0 || s.replays >= 1, "{s:?}");
    c.shutdown().await;
}

/// Waits, publishing nothing, until the Router's residency of `worker` is `want` and
/// trusted.
async fn holds(router: &Router, worker: WorkerId, want: &Residency) -> bool {
    wait_until(
        LONG,
        || &Residency::of(router, worker) == want && router.is_trusted(worker) == Some(true),
        || {},
    )
    .await
}

/// A live batch that does not decode is a batch lost: the connector asks for the replay at
/// once, without waiting for a later batch to show the gap (the engine then stays quiet).
/// Batch 0 arrives whole; batch 1 (a store and a removal of batch 0's leaf) arrives
/// damaged; the replay brings it, and the residency is the model's after both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_batch_that_does_not_decode_is_replayed_at_once() {
    let rank = EmulatedRank::start("", Some(100));
    let router = router();
    let c = Connector::start(router.clone(), ConnectOptions::default()).expect("valid options");
    c.add_engine(spec(9, &[&rank])).unwrap();
    let w = WorkerId::new(9, 0);
    assert!(wait_until(LONG, || c.rank_stats().iter().all(|s| s.connected), || {}).await);
    // Nothing is published while the residency is awaited, so nothing would show a lost
    // first batch: it is sent once the subscription has reached the engine.
    assert!(rank.wait_subscribed(LONG));
    let mut model = Residency::default();
    let first = batch(wall(), vec![store(&[1, 2], None)], 0);
    model.apply(&first);
    rank.publish(&first, true);
    assert!(holds(&router, w, &model).await);
    let second = batch(wall(), vec![store(&[3], Some(2)), remove(&[2])], 0);
    model.apply(&second);
    rank.publish_damaged(&second);
    assert!(holds(&router, w, &model).await);
    let s = c.rank(w).unwrap();
    assert!(s.decode_errors >= 1 && s.replays >= 1, "{s:?}");
    c.shutdown().await;
}
