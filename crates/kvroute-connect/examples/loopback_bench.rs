//! Throughput of subscriber → ingest on loopback: an emulated engine DP rank (libzmq PUB,
//! batches encoded as vLLM / SGLang send them) publishes `--batches` batches of one store
//! of `--blocks` blocks each; the connector receives, decodes and ingests them into a
//! Router. Prints batches and blocks per second from the first publish to the last block
//! indexed, and the rank's counters (a gap or overflow would show there).
//!
//! `cargo run --release -p kvroute-connect --example loopback_bench -- --batches 100000 --blocks 16`

#[path = "../tests/support/engine.rs"]
mod engine;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kvroute::{EngineHash, Router, RouterConfig, WorkerId};
use kvroute_connect::{ConnectOptions, Connector, EngineKind, EngineSpec, RankSpec};
use kvroute_wire::{BlockStored, KvEvent, KvEventBatch};

const BLOCK: u32 = 16;

fn batch(i: u64, blocks: u64) -> KvEventBatch {
    let hashes: Vec<EngineHash> = (0..blocks)
        .map(|b| EngineHash(i * blocks + b + 1))
        .collect();
    let token_ids = (0..blocks as u32 * BLOCK)
        .map(|t| (i as u32).wrapping_mul(1 << 12).wrapping_add(t))
        .collect();
    KvEventBatch {
        ts: 1.7e9 + i as f64 * 1e-3,
        events: vec![KvEvent::BlockStored(BlockStored::device(
            hashes, None, token_ids, BLOCK,
        ))],
        dp_rank: Some(0),
    }
}

#[tokio::main]
async fn main() {
    let mut n: u64 = 100_000;
    let mut k: u64 = 16;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let v = it.next().and_then(|v| v.parse().ok());
        match (a.as_str(), v) {
            ("--batches", Some(v)) => n = v,
            ("--blocks", Some(v)) => k = v,
            _ => {
                eprintln!("usage: loopback_bench [--batches N] [--blocks K]");
                std::process::exit(2);
            }
        }
    }
    let e = engine::EmulatedRank::start("", Some(n as usize + 16));
    let mut cfg = RouterConfig::new(8, BLOCK as usize);
    cfg.max_blocks_per_worker = ((n + 1) * k) as usize + 1024;
    let router = Arc::new(Router::new(cfg).expect("router"));
    let mut opts = ConnectOptions::default();
    opts.queue_capacity = 1 << 16;
    let c = Connector::start(router.clone(), opts).expect("valid options");
    let spec = EngineSpec::new(
        1,
        EngineKind::Vllm,
        vec![RankSpec::new(0, e.events_endpoint()).with_replay(e.replay_endpoint().unwrap())],
    );
    c.add_engine(spec).expect("engine");
    let w = WorkerId::new(1, 0);
    let slot = router.slot_of(w).unwrap();
    // Warm up: the first batch (seq 0) must have arrived, so the timed ones are live.
    let warm = batch(u64::MAX / (2 * k), k);
    e.publish(&warm, true);
    let deadline = Instant::now() + Duration::from_secs(60);
    while router.index().worker_blocks(slot) < k as usize {
        if Instant::now() > deadline {
            eprintln!("no batch arrived: {:?}", c.rank(w));
            std::process::exit(1);
        }
        e.publish(
            &KvEventBatch {
                ts: 1.7e9,
                events: vec![],
                dp_rank: Some(0),
            },
            true,
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let batches: Vec<KvEventBatch> = (0..n).map(|i| batch(i, k)).collect();
    let want = ((n + 1) * k) as usize;
    let t0 = Instant::now();
    let publisher = std::thread::spawn(move || {
        for b in &batches {
            e.publish(b, true);
        }
        (t0.elapsed(), e)
    });
    while router.index().worker_blocks(slot) < want {
        if Instant::now() > t0 + Duration::from_secs(600) {
            eprintln!("stalled: {:?}", c.rank(w));
            std::process::exit(1);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let dt = t0.elapsed().as_secs_f64();
    let (published, _e) = publisher.join().unwrap();
    println!(
        "{n} batches x {k} blocks in {dt:.3} s (publisher alone {:.3} s): {:.0} batches/s, {:.0} blocks/s",
        published.as_secs_f64(),
        n as f64 / dt,
        (n * k) as f64 / dt
    );
    println!("{:?}", c.rank(w).unwrap());
    c.shutdown().await;
}
