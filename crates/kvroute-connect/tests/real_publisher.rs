//! The connector against SGLang 0.5.23's own `ZmqEventPublisher` (the pip package's
//! class, driven by `scripts/real_publisher.py`): two DP ranks with replay buffers, a
//! late subscription (a gap only the replay can fill), a publisher restart (sequence from
//! 0), and at the end the Router's residency against what the script says the published
//! events leave in each rank's cache.
//!
//! Runs when `KVROUTE_PUBLISHER_PYTHON` names a Python with sglang, msgspec, pyzmq and
//! pydantic installed (`bash scripts/real-publisher.sh` sets it up and runs this test);
//! otherwise it prints a notice and passes.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use kvroute::{Router, RouterConfig, WorkerId};
use kvroute_connect::{ConnectOptions, Connector, EngineKind, EngineSpec, RankSpec};
use serde_json::{Value, json};
use support::{BLOCK, Residency, wait_until};

const LONG: Duration = Duration::from_secs(90);

struct Script {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Script {
    fn call(&mut self, cmd: Value) -> Value {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }

    fn publish(&mut self, rank: u32, events: Value) {
        self.call(json!({"op": "publish", "rank": rank, "events": events}));
    }

    fn residency(&mut self, rank: u32) -> Residency {
        let v = self.call(json!({"op": "residency", "rank": rank}));
        let blocks = v["blocks"].as_array().unwrap();
        Residency(
            blocks
                .iter()
                .map(|b| (b[0].as_i64().unwrap() as u64, b[1].as_u64().unwrap() as u32))
                .collect(),
        )
    }
}

/// Step `i` of rank `r`: a two-block chain, a removal of an older leaf every third step, a
/// duplicate store every fifth (SGLang hashes are signed: half of these are negative).
fn step(i: i64, r: u32) -> Value {
    let base = (i64::from(r) * 1_000_003 + i * 2 + 1) * if i % 2 == 0 { -1 } else { 1 };
    let mut ev = vec![json!({"store": [base, base + 7], "parent": null})];
    if i % 3 == 2 {
        let old =
            (i64::from(r) * 1_000_003 + (i - 1) * 2 + 1) * if (i - 1) % 2 == 0 { -1 } else { 1 };
        ev.push(json!({"remove": [old + 7]}));
    }
    if i % 5 == 4 {
        ev.push(json!({"store": [base + 7], "parent": base}));
    }
    Value::Array(ev)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_publisher_gap_replay_restart_exact_residency() {
    let Ok(python) = std::env::var("KVROUTE_PUBLISHER_PYTHON") else {
        eprintln!(
            "notice: KVROUTE_PUBLISHER_PYTHON is not set; skipping the real-publisher test \
             (bash scripts/real-publisher.sh runs it)"
        );
        return;
    };
    let root = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/real_publisher.py"
    );
    let mut child = Command::new(python)
        .arg(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the publisher script starts");
    let stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut py = Script {
        child,
        stdin,
        stdout,
    };
    let mut ranks = Vec::new();
    for r in 0..2u32 {
        let v = py.call(json!({"op": "start", "rank": r}));
        let (ev, rp) = (v["events"].as_str().unwrap(), v["replay"].as_str().unwrap());
        ranks.push(RankSpec::new(r, ev).with_replay(rp));
    }
    // Published before the subscription: a gap from 0 that only a replay fills.
    for r in 0..2 {
        for i in 0..30 {
            py.publish(r, step(i, r));
        }
    }
    py.call(json!({"op": "flush"}));

    let router = Arc::new(Router::new(RouterConfig::new(16, BLOCK as usize)).unwrap());
    let c = Connector::start(router.clone(), ConnectOptions::default()).expect("valid options");
    c.add_engine(EngineSpec::new(9, EngineKind::Sglang, ranks))
        .unwrap();
    let w = |r: u32| WorkerId::new(9, r);
    assert!(wait_until(LONG, || c.rank_stats().iter().all(|s| s.connected), || {}).await);
    for r in 0..2 {
        for i in 30..80 {
            py.publish(r, step(i, r));
        }
    }
    for r in 0..2u32 {
        let want = py.residency(r);
        assert!(!want.0.is_empty());
        let ok = wait_until(
            LONG,
            || Residency::of(&router, w(r)) == want && router.is_trusted(w(r)) == Some(true),
            || py.publish(r, json!([])),
        )
        .await;
        assert!(ok, "rank {r}: {:?}", c.rank(w(r)));
        assert_eq!(Residency::of(&router, w(r)), want);
        let s = c.rank(w(r)).unwrap();
        assert!(s.gaps >= 1 && s.replays >= 1, "{s:?}");
        assert_eq!(s.replays_skipped, 0, "{s:?}");
    }

    // Rank 0 restarts: a new publisher on the same ports, sequence from 0; its first
    // batch clears the cache, as a fresh SGLang's does.
    py.call(json!({"op": "restart", "rank": 0}));
    py.publish(0, json!([{"clear": true}]));
    assert!(wait_until(LONG, || c.rank(w(0)).unwrap().reconnects >= 1, || {}).await);
    for i in 100..130 {
        py.publish(0, step(i, 0));
    }
    let want = py.residency(0);
    let ok = wait_until(
        LONG,
        || Residency::of(&router, w(0)) == want && router.is_trusted(w(0)) == Some(true),
        || py.publish(0, json!([])),
    )
    .await;
    assert!(ok, "{:?}", c.rank(w(0)));
    assert_eq!(Residency::of(&router, w(0)), want);
    assert!(c.rank(w(0)).unwrap().resets >= 1);
    assert_eq!(Residency::of(&router, w(1)), py.residency(1));

    py.call(json!({"op": "stop"}));
    let _ = py.child.wait();
    c.shutdown().await;
}
