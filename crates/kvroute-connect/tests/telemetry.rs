//! The telemetry pollers against a local HTTP server serving the engines' real formats
//! (vLLM's Prometheus gauges, SGLang's `/v1/loads` document, names as
//! `docs/WIRE-FORMAT.md` records them from the engines' source) and their failures: a 500,
//! a malformed body, a server that never answers, a refused connection. Each failure is
//! a typed error and a counter, and the worker goes stale; none panics. Also SGLang's
//! pushed `LoadStat` frames.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kvroute::{Router, RouterConfig, Validity, WorkerId};
use kvroute_connect::{
    ConnectOptions, Connector, EngineKind, EngineSpec, HttpError, RankSpec, TelemetryError,
    TelemetryErrorKind as K,
};
use support::{wait_until, wall};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const LONG: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Good,
    Status500,
    Malformed,
    Hang,
}

/// A server answering every request by the current mode; the body of `Good` from `body`.
async fn serve(mode: Arc<Mutex<Mode>>, body: fn() -> String) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let m = *mode.lock().unwrap();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let (status, text) = match m {
                    Mode::Good => ("200 OK", body()),
                    Mode::Status500 => ("500 Internal Server Error", "oops".to_owned()),
                    Mode::Malformed => (
                        "200 OK",
                        "{\"loads\": [ vllm:num_requests_running{engine=\"0\"} x".to_owned(),
                    ),
                    Mode::Hang => {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        return;
                    }
                };
                let resp = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{text}",
                    text.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}")
}

fn vllm_body() -> String {
    // vLLM 0.33's gauges (vllm/v1/metrics/loggers.py), label `engine` = DP rank, as a TP
    // group exports them: the same value twice for rank 0.
    "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
     # TYPE vllm:num_requests_running gauge\n\
     vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n\
     vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n\
     # TYPE vllm:num_requests_waiting gauge\n\
     vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 2.0\n\
     # TYPE vllm:kv_cache_usage_perc gauge\n\
     vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n"
        .to_owned()
}

fn sglang_body() -> String {
    let t = wall();
    format!(
        "{{\"timestamp\": {t}, \"loads\": [{{\"dp_rank\": 0, \"num_running_reqs\": 4, \
         \"num_waiting_reqs\": 1, \"num_waiting_uncached_tokens\": 100, \
         \"num_used_tokens\": 500, \"max_total_num_tokens\": 10000, \"token_usage\": 0.05, \
         \"gen_throughput\": 100.0, \"utilization\": 0.5, \"max_running_requests\": 64, \
         \"timestamp\": {t}}}]}}"
    )
}

/// The published load of `w`; `Missing` until a snapshot holds it.
fn load(r: &Router, w: WorkerId) -> (u32, u32, Validity) {
    let reader = r.load_reader();
    let snap = reader.load();
    match snap.slot(r.slot_of(w).unwrap()) {
        Some(s) => (s.running, s.waiting, s.validity),
        None => (0, 0, Validity::Missing),
    }
}

fn router() -> Arc<Router> {
    let mut cfg = RouterConfig::new(8, 4);
    cfg.max_load_age = kvroute::Nanos(300_000_000);
    Arc::new(Router::new(cfg).unwrap())
}

fn options() -> ConnectOptions {
    let mut o = ConnectOptions::default();
    o.tick_interval = Some(Duration::from_millis(50));
    o
}

/// Runs the failure sequence for one engine kind: good, 500, good, malformed, hang.
async fn failures_make_the_worker_stale(
    kind: EngineKind,
    body: fn() -> String,
    path: &str,
    want: (u32, u32),
) {
    let mode = Arc::new(Mutex::new(Mode::Good));
    let url = serve(mode.clone(), body).await;
    let router = router();
    let c = Connector::start(router.clone(), options()).expect("valid options");
    // No KV events socket listens there: only telemetry is exercised.
    let spec = EngineSpec::new(1, kind, vec![RankSpec::new(0, "tcp://127.0.0.1:1")])
        .with_telemetry(format!("{url}{path}"))
        .with_max_running_per_rank(64)
        .with_polling(Duration::from_millis(50), Duration::from_millis(300));
    c.add_engine(spec).unwrap();
    let w = WorkerId::new(1, 0);
    let fresh = || {
        let (run, wait, v) = load(&router, w);
        (run, wait) == want && v == Validity::Fresh
    };
    let stale = || load(&router, w).2 == Validity::Stale;
    let errors = |k| c.telemetry_stats()[0].errors_of(k);
    assert!(
        wait_until(LONG, fresh, || {}).await,
        "{:?}",
        c.last_telemetry_error(1)
    );

    for (m, k) in [
        (Mode::Status500, K::Status),
        (Mode::Malformed, K::Malformed),
        (Mode::Hang, K::Timeout),
    ] {
        *mode.lock().unwrap() = m;
        assert!(
            wait_until(LONG, || errors(k) >= 1 && stale(), || {}).await,
            "{m:?}"
        );
        let e = c.last_telemetry_error(1).unwrap();
        assert_eq!(e.kind(), k, "{e}");
        if m == Mode::Status500 {
            assert_eq!(e, TelemetryError::Http(HttpError::Status(500)));
        }
        *mode.lock().unwrap() = Mode::Good;
        assert!(wait_until(LONG, fresh, || {}).await, "after {m:?}");
    }
    assert!(c.telemetry_stats()[0].applied >= 4);
    assert_eq!(c.telemetry_stats()[0].errors_of(K::Rejected), 0);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_metrics_poller_errors_are_counted_and_stale() {
    failures_make_the_worker_stale(EngineKind::Vllm, vllm_body, "/metrics", (3, 2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_loads_poller_errors_are_counted_and_stale() {
    failures_make_the_worker_stale(EngineKind::Sglang, sglang_body, "/v1/loads", (4, 1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_a_connect_error() {
    // A port bound then released: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let router = router();
    let c = Connector::start(router.clone(), options()).expect("valid options");
    let spec = EngineSpec::new(
        2,
        EngineKind::Sglang,
        vec![RankSpec::new(0, "tcp://127.0.0.1:1")],
    )
    .with_telemetry(format!("http://127.0.0.1:{port}/v1/loads"))
    .with_polling(Duration::from_millis(50), Duration::from_millis(300));
    c.add_engine(spec).unwrap();
    let w = WorkerId::new(2, 0);
    assert!(
        wait_until(
            LONG,
            || c.telemetry_stats()[0].errors_of(K::Connect) >= 2,
            || {}
        )
        .await
    );
    // Never reported: missing, not fresh.
    assert_eq!(load(&router, w).2, Validity::Missing);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_load_stat_frames_are_applied_and_bad_ones_counted() {
    let ctx = zmq::Context::new();
    let pub_sock = ctx.socket(zmq::PUB).unwrap();
    pub_sock.bind("tcp://127.0.0.1:*").unwrap();
    let ep = pub_sock.get_last_endpoint().unwrap().unwrap();
    let router = router();
    let c = Connector::start(router.clone(), options()).expect("valid options");
    let spec = EngineSpec::new(
        3,
        EngineKind::Sglang,
        vec![RankSpec::new(0, "tcp://127.0.0.1:1").with_load_stat(ep)],
    )
    .with_max_running_per_rank(32);
    c.add_engine(spec).unwrap();
    let w = WorkerId::new(3, 0);
    let send = |payload: &[u8]| {
        let frames: [&[u8]; 3] = [b"load", &0u64.to_be_bytes(), payload];
        pub_sock.send_multipart(frames, 0).unwrap();
    };
    let good = kvroute_wire::encode::encode_load_stat(5, 6, 100, 1000, 0);
    assert!(
        wait_until(
            LONG,
            || load(&router, w) == (5, 6, Validity::Fresh),
            || send(&good)
        )
        .await
    );
    // A frame of DP rank 1 on rank 0's socket: rejected (counted), rank 0's figures stay
    // those of its own frame.
    let other_rank = kvroute_wire::encode::encode_load_stat(9, 9, 100, 1000, 1);
    assert!(
        wait_until(
            LONG,
            || c.telemetry_stats()[0].errors_of(K::Rejected) >= 1,
            || send(&other_rank)
        )
        .await
    );
    assert_eq!(load(&router, w).0, 5);
    // A frame one field short: malformed, counted, not zero-filled; the worker goes stale.
    let short = &good[..good.len() - 1];
    let mut short = short.to_vec();
    short[0] = 0x95; // a five-element array
    assert!(
        wait_until(
            LONG,
            || c.telemetry_stats()[0].errors_of(K::Malformed) >= 1
                && load(&router, w).2 == Validity::Stale,
            || send(&short)
        )
        .await
    );
    c.shutdown().await;
}
