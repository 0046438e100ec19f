//! The per-rank counters and gauges through the `metrics` facade: after a late
//! subscription (a gap, then a replay), the exported series equal `RankStats`, and the
//! `connected` gauge follows the socket.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kvroute::{Router, RouterConfig, WorkerId};
use kvroute_connect::{ConnectOptions, Connector, EngineKind, EngineSpec, RankSpec};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use support::engine::EmulatedRank;
use support::{BLOCK, Residency, batch, store, wait_until, wall};

fn series(s: &Snapshotter) -> BTreeMap<String, f64> {
    s.snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let (_, key) = key.into_parts();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let v = match value {
                DebugValue::Counter(c) => c as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(_) => f64::NAN,
            };
            (format!("{}{{{}}}", key.name(), labels.join(",")), v)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rank_counters_are_exported() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");

    let e = EmulatedRank::start("", Some(1000));
    let mut want = Residency::default();
    for i in 0..5 {
        let b = batch(wall(), vec![store(&[i + 1], None)], 0);
        want.apply(&b);
        e.publish(&b, true);
    }
    let router = Arc::new(Router::new(RouterConfig::new(4, BLOCK as usize)).unwrap());
    let c = Connector::start(router.clone(), ConnectOptions::default()).expect("valid options");
    let spec = EngineSpec::new(
        6,
        EngineKind::Sglang,
        vec![RankSpec::new(0, e.events_endpoint()).with_replay(e.replay_endpoint().unwrap())],
    );
    c.add_engine(spec).unwrap();
    let w = WorkerId::new(6, 0);
    let ok = wait_until(
        Duration::from_secs(60),
        || Residency::of(&router, w) == want && router.is_trusted(w) == Some(true),
        || {
            e.publish(&batch(wall(), vec![], 0), true);
        },
    )
    .await;
    assert!(ok);
    let s = c.rank(w).unwrap();
    let m = series(&snapshotter);
    let l = "{dp_rank=0,engine_id=6}";
    let get = |name: &str| m.get(&format!("{name}{l}")).copied();
    assert_eq!(get("kvroute_connect_connected"), Some(1.0));
    assert!(s.gaps >= 1 && s.replays >= 1);
    assert_eq!(get("kvroute_connect_gaps_total"), Some(s.gaps as f64));
    assert_eq!(get("kvroute_connect_replays_total"), Some(s.replays as f64));
    assert_eq!(get("kvroute_connect_batches_total"), Some(s.batches as f64));
    assert_eq!(
        get("kvroute_connect_ingested_total"),
        Some(s.ingested as f64)
    );
    assert_eq!(get("kvroute_connect_overflows_total"), Some(0.0));
    c.shutdown().await;
    // Shut down: the socket thread has ended and said so.
    assert_eq!(
        series(&snapshotter).get(&format!("kvroute_connect_connected{l}")),
        Some(&0.0)
    );
}
