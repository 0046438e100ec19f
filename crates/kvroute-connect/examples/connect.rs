//! Connects a Router to the engines of a config file and prints, every second, a routing
//! decision for a probe prompt and each engine rank's state.
//!
//! ```sh
//! cargo run --release -p kvroute-connect --example connect -- engines.toml
//! cargo run --release -p kvroute-connect --example connect -- --emulate --seconds 5
//! ```
//!
//! Options: `--block-size N` (the engines' block / page size, default 16), `--seconds N`
//! (stop after N seconds; default: run until Ctrl-C), `--emulate` (no file: start two
//! emulated SGLang DP ranks on loopback, publishing the engines' wire format, and connect
//! to them through a generated config).

#[path = "../tests/support/engine.rs"]
mod engine;

use std::sync::Arc;
use std::time::Duration;

use kvroute::{RouteRequest, Router, RouterConfig};
use kvroute_connect::{ConnectConfig, Connector};
use kvroute_wire::{BlockStored, KvEvent, KvEventBatch};

struct Args {
    config: Option<String>,
    block_size: usize,
    seconds: Option<u64>,
    emulate: bool,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        config: None,
        block_size: 16,
        seconds: None,
        emulate: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut num = |name: &str| -> Result<u64, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or(format!("{name} needs a number"))
        };
        match x.as_str() {
            "--block-size" => a.block_size = num("--block-size")? as usize,
            "--seconds" => a.seconds = Some(num("--seconds")?),
            "--emulate" => a.emulate = true,
            _ if a.config.is_none() && !x.starts_with("--") => a.config = Some(x),
            _ => return Err(format!("unknown argument {x:?}")),
        }
    }
    if a.config.is_none() && !a.emulate {
        return Err("usage: connect CONFIG.toml [--block-size N] [--seconds N] | --emulate".into());
    }
    Ok(a)
}

/// An emulated engine step: a store of a prompt sharing its first block with every other.
fn emulated_step(i: u64, rank: u32, block: usize) -> KvEventBatch {
    let hashes = [1, 1000 * u64::from(rank + 1) + i];
    let mut tokens: Vec<u32> = (0..block as u32).collect();
    tokens.extend((0..block as u32).map(|t| 100_000 + 64 * (i as u32) + t));
    KvEventBatch {
        ts: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        events: vec![KvEvent::BlockStored(BlockStored::device(
            hashes.iter().map(|&h| kvroute::EngineHash(h)).collect(),
            None,
            tokens,
            block as u32,
        ))],
        dp_rank: Some(rank),
    }
}

#[tokio::main]
async fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let emulated: Vec<engine::EmulatedRank> = if a.emulate {
        (0..2)
            .map(|_| engine::EmulatedRank::start("", Some(10_000)))
            .collect()
    } else {
        Vec::new()
    };
    let text = match &a.config {
        Some(path) => std::fs::read_to_string(path).unwrap_or_else(|e| {
            eprintln!("{path}: {e}");
            std::process::exit(2)
        }),
        None => {
            let mut t = String::from("[[engine]]\nid = 1\nkind = \"sglang\"\n");
            for (r, e) in emulated.iter().enumerate() {
                t += &format!(
                    "[[engine.rank]]\ndp_rank = {r}\nevents = \"{}\"\nreplay = \"{}\"\n",
                    e.events_endpoint(),
                    e.replay_endpoint().unwrap_or_default()
                );
            }
            t
        }
    };
    let config = ConnectConfig::from_toml(&text).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    if config.engines.is_empty() {
        eprintln!("no [[engine]] in the configuration: nothing to connect to");
        std::process::exit(2)
    }
    let router = Arc::new(Router::new(RouterConfig::new(256, a.block_size)).expect("router"));
    let c = Connector::start(router.clone(), config.options.clone()).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    for spec in config.engines {
        if let Err(e) = c.add_engine(spec) {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
    // The probe: the first two blocks of the emulated engines' prompts.
    let probe: Vec<u32> = (0..a.block_size as u32)
        .chain((0..a.block_size as u32).map(|t| 100_000 + t))
        .chain([7, 7, 7])
        .collect();
    let mut every = tokio::time::interval(Duration::from_secs(1));
    let mut step = 0u64;
    let mut seconds = 0u64;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = every.tick() => {}
        }
        for (r, e) in emulated.iter().enumerate() {
            for _ in 0..3 {
                e.publish(&emulated_step(step, r as u32, a.block_size), step % 5 != 3);
                step += 1;
            }
        }
        match router.route(&RouteRequest::tokens(&probe, 64, c.now())) {
            Ok(d) => println!(
                "route: worker {} overlap {} blocks, reason {:?}",
                d.worker, d.overlap_blocks, d.reason
            ),
            Err(e) => println!("route: {e}"),
        }
        for s in c.rank_stats() {
            let blocks = router
                .slot_of(s.worker)
                .map_or(0, |slot| router.index().worker_blocks(slot));
            println!(
                "  {}: connected {} trusted {:?} blocks {} batches {} gaps {} replays {} \
                 resets {} reconnects {} overflows {} lag {:.3}s",
                s.worker,
                s.connected,
                router.is_trusted(s.worker).unwrap_or(false),
                blocks,
                s.batches,
                s.gaps,
                s.replays,
                s.resets,
                s.reconnects,
                s.overflows,
                s.lag_seconds
            );
        }
        for t in c.telemetry_stats() {
            println!(
                "  engine {} telemetry: applied {} errors {}{}",
                t.engine_id,
                t.applied,
                t.total_errors(),
                c.last_telemetry_error(t.engine_id)
                    .map_or(String::new(), |e| format!(" (last: {e})"))
            );
        }
        seconds += 1;
        if a.seconds.is_some_and(|n| seconds >= n) {
            break;
        }
    }
    c.shutdown().await;
}
