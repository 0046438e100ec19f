//! A task or thread of the connector that panics, or that is cancelled under it, is
//! counted in `TaskStats`, never dropped silently. The panics are made by a `metrics`
//! recorder whose handle for one series panics when it is updated: given to the connector
//! (as the thread's local recorder) only while an engine is added, it reaches exactly the
//! task or thread that updates that series. The cancellations are made by shutting down
//! the runtime the connector was started in.

mod support;

use std::sync::Arc;
use std::time::Duration;

use kvroute::{Router, RouterConfig, WorkerId};
use kvroute_connect::{
    ConnectOptions, Connector, EngineKind, EngineSpec, RankSpec, TaskStats, TelemetryErrorKind,
};
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString,
    Unit,
};
use support::engine::EmulatedRank;
use support::{BLOCK, batch, store, wait_until, wall};

const LONG: Duration = Duration::from_secs(60);

/// A recorder whose handles of one series (a name, and a `dp_rank` label when given)
/// panic when updated; every other handle does nothing.
struct PanicOn {
    name: &'static str,
    dp_rank: Option<&'static str>,
}

struct Boom(&'static str);

impl CounterFn for Boom {
    fn increment(&self, _: u64) {
        panic!("test: {} updated", self.0);
    }
    fn absolute(&self, _: u64) {
        panic!("test: {} updated", self.0);
    }
}

impl GaugeFn for Boom {
    fn increment(&self, _: f64) {
        panic!("test: {} updated", self.0);
    }
    fn decrement(&self, _: f64) {
        panic!("test: {} updated", self.0);
    }
    fn set(&self, _: f64) {
        panic!("test: {} updated", self.0);
    }
}

impl PanicOn {
    fn hits(&self, key: &Key) -> bool {
        key.name() == self.name
            && self
                .dp_rank
                .is_none_or(|r| key.labels().any(|l| l.key() == "dp_rank" && l.value() == r))
    }
}

impl Recorder for PanicOn {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        if self.hits(key) {
            Counter::from_arc(Arc::new(Boom(self.name)))
        } else {
            Counter::noop()
        }
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        if self.hits(key) {
            Gauge::from_arc(Arc::new(Boom(self.name)))
        } else {
            Gauge::noop()
        }
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// Adds `spec` with the handles of its counters and gauges taken from `rec`.
fn add_with(c: &Connector, rec: &PanicOn, spec: EngineSpec) {
    metrics::with_local_recorder(rec, || c.add_engine(spec)).unwrap();
}

fn router() -> Arc<Router> {
    Arc::new(Router::new(RouterConfig::new(8, BLOCK as usize)).unwrap())
}

fn options() -> ConnectOptions {
    let mut o = ConnectOptions::default();
    o.tick_interval = Some(Duration::from_millis(50));
    o
}

/// A telemetry URL where nothing listens (a port bound then released): every poll is a
/// connect error.
fn refused_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}/v1/loads")
}

/// `n` ranks whose KV event sockets connect to nothing.
fn silent_ranks(n: u32) -> Vec<RankSpec> {
    (0..n)
        .map(|r| RankSpec::new(r, "tcp://127.0.0.1:1"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_telemetry_poller_is_counted_once_while_the_connector_runs() {
    let c = Connector::start(router(), options()).expect("valid options");
    let poll = Duration::from_millis(50);
    let spec = EngineSpec::new(1, EngineKind::Sglang, silent_ranks(2))
        .with_telemetry(refused_url())
        .with_polling(poll, Duration::from_millis(300));
    // The poller's first failed poll updates the engine's connect-error series: it panics.
    let rec = PanicOn {
        name: "kvroute_connect_telemetry_errors_total",
        dp_rank: None,
    };
    add_with(&c, &rec, spec);
    // One engine with a telemetry URL: one poller, the only task updating that series.
    let pollers = 1;
    assert!(wait_until(LONG, || c.task_stats().task_panics >= pollers, || {}).await);
    // The poller is gone: no poll after the one that panicked, for twenty intervals.
    tokio::time::sleep(poll * 20).await;
    let t = c.telemetry_stats()[0];
    assert_eq!(t.errors_of(TelemetryErrorKind::Connect), 1);
    assert_eq!(t.total_errors(), 1);
    assert_eq!(c.task_stats().task_panics, pollers);
    // Its join meets the panic, counted already: not counted again, and not a cancellation.
    c.remove_engine(1).await.unwrap();
    let want = (pollers, 0);
    let s = c.task_stats();
    assert_eq!((s.task_panics, s.task_cancellations), want);
    let s = c.shutdown().await;
    assert_eq!((s.task_panics, s.task_cancellations), want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_ingest_task_is_counted_and_the_other_ranks_go_on() {
    let e0 = EmulatedRank::start("", None);
    let e1 = EmulatedRank::start("", None);
    let c = Connector::start(router(), options()).expect("valid options");
    let spec = EngineSpec::new(
        2,
        EngineKind::Sglang,
        vec![
            RankSpec::new(0, e0.events_endpoint()),
            RankSpec::new(1, e1.events_endpoint()),
        ],
    );
    // Rank 1's ingest task panics at its first message handed to the Router.
    let rec = PanicOn {
        name: "kvroute_connect_ingested_total",
        dp_rank: Some("1"),
    };
    add_with(&c, &rec, spec);
    let (w0, w1) = (WorkerId::new(2, 0), WorkerId::new(2, 1));
    let mut h = 0;
    let mut publish = || {
        h += 1;
        e0.publish(&batch(wall(), vec![store(&[h], None)], 0), true);
        e1.publish(&batch(wall(), vec![store(&[h], None)], 1), true);
    };
    assert!(
        wait_until(
            LONG,
            || c.task_stats().task_panics >= 1 && c.rank(w0).unwrap().ingested >= 1,
            &mut publish
        )
        .await
    );
    // Rank 0 goes on ingesting; rank 1 took one message, the one that panicked.
    let before = c.rank(w0).unwrap().ingested;
    assert!(wait_until(LONG, || c.rank(w0).unwrap().ingested > before, &mut publish).await);
    assert_eq!(c.rank(w1).unwrap().ingested, 1);
    let s = c.task_stats();
    assert_eq!((s.task_panics, s.task_cancellations), (1, 0));
    let s = c.shutdown().await;
    assert_eq!((s.task_panics, s.task_cancellations), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_threads_that_panic_as_they_stop_are_counted_by_the_removal() {
    let c = Connector::start(router(), options()).expect("valid options");
    let ranks = 3;
    // Each socket thread sets its rank's `connected` gauge to 0 as it ends (never to 1
    // before: nothing listens at its endpoint), so each panics at the removal's stop.
    let rec = PanicOn {
        name: "kvroute_connect_connected",
        dp_rank: None,
    };
    add_with(
        &c,
        &rec,
        EngineSpec::new(3, EngineKind::Vllm, silent_ranks(ranks)),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(c.task_stats(), TaskStats::default());
    // The removal joins the threads: each has panicked, and been counted, by then.
    c.remove_engine(3).await.unwrap();
    let s = c.task_stats();
    assert_eq!((s.task_panics, s.task_cancellations), (u64::from(ranks), 0));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_load_stat_thread_is_counted() {
    let ctx = zmq::Context::new();
    let pub_sock = ctx.socket(zmq::PUB).unwrap();
    pub_sock.bind("tcp://127.0.0.1:*").unwrap();
    let ep = pub_sock.get_last_endpoint().unwrap().unwrap();
    let c = Connector::start(router(), options()).expect("valid options");
    let spec = EngineSpec::new(
        5,
        EngineKind::Sglang,
        vec![RankSpec::new(0, "tcp://127.0.0.1:1").with_load_stat(ep)],
    )
    .with_max_running_per_rank(32);
    // The rank's `LoadStat` thread counts a frame that does not decode: it panics there.
    let rec = PanicOn {
        name: "kvroute_connect_telemetry_errors_total",
        dp_rank: None,
    };
    add_with(&c, &rec, spec);
    let garbage: [&[u8]; 3] = [b"load", &0u64.to_be_bytes(), &[0xc1]];
    assert!(
        wait_until(
            LONG,
            || c.task_stats().task_panics >= 1,
            || pub_sock.send_multipart(garbage, 0).unwrap()
        )
        .await
    );
    // The thread is gone: later frames are not read.
    for _ in 0..20 {
        pub_sock.send_multipart(garbage, 0).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let t = c.telemetry_stats()[0];
    assert_eq!(t.errors_of(TelemetryErrorKind::Malformed), 1);
    c.remove_engine(5).await.unwrap();
    let s = c.shutdown().await;
    assert_eq!((s.task_panics, s.task_cancellations), (1, 0));
}

#[test]
fn tasks_cancelled_under_the_connector_are_counted_when_joined() {
    let first = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ranks = 2u32;
    let c = {
        let _inside = first.enter();
        let c = Connector::start(router(), options()).expect("valid options");
        let spec = EngineSpec::new(4, EngineKind::Sglang, silent_ranks(ranks))
            .with_telemetry(refused_url())
            .with_polling(Duration::from_millis(50), Duration::from_millis(300));
        c.add_engine(spec).unwrap();
        c
    };
    // The runtime shuts down under the connector: every task it started is cancelled.
    drop(first);
    let second = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    second.block_on(async {
        assert_eq!(c.task_stats(), TaskStats::default());
        // The engine's tasks: one ingest task per rank and its poller.
        c.remove_engine(4).await.unwrap();
        let engine_tasks = u64::from(ranks) + 1;
        let s = c.task_stats();
        assert_eq!((s.task_panics, s.task_cancellations), (0, engine_tasks));
        // And the tick timer.
        let s = c.shutdown().await;
        assert_eq!((s.task_panics, s.task_cancellations), (0, engine_tasks + 1));
    });
}
