//! Small hand-built workloads shared by the driver tests, and the built-in scenarios' names.

#![allow(dead_code)]

use std::sync::Arc;

use kvroute_sim::engine::EngineConfig;
use kvroute_sim::fault::Fault;
use kvroute_sim::net::ChannelConfig;
use kvroute_sim::request::FollowUp;
use kvroute_sim::workload::{FleetSpec, Workload};
use kvroute_sim::{PromptSpec, RunResult, SimRequest};

/// The built-in scenarios' names, written out by hand so that a renamed or missing scenario
/// fails the tests.
pub const SCENARIO_NAMES: [&str; 10] = [
    "hot-owner-51",
    "owner-canary",
    "zipf-prefixes",
    "burst-siblings",
    "restart",
    "event-loss",
    "fail-fast",
    "flap",
    "partial-telemetry",
    "straggler",
];

/// A fast engine with a small cache: 10 ms steps plus 1 ms per decoding request, 20,000
/// prefill tokens/s, 16 running, `kv_blocks` blocks of 16 tokens, 2,048-token chunks.
pub fn small_engine(kv_blocks: u32) -> EngineConfig {
    EngineConfig {
        max_running: 16,
        kv_blocks,
        block_size: 16,
        chunk_tokens: 2_048,
        max_model_len: 32_768,
        step_base_s: 0.010,
        step_per_seq_s: 0.001,
        step_per_ctx_token_s: 0.0,
        prefill_tps: 20_000.0,
    }
}

/// `n` tokens unique to `tag` (ids far from other tags).
pub fn tokens(tag: u32, n: u32) -> Vec<u32> {
    (0..n).map(|i| tag * 100_000 + i).collect()
}

/// A request with explicit tokens.
pub fn request(id: u64, arrival_s: f64, prompt: Vec<u32>, output_tokens: u32) -> SimRequest {
    SimRequest {
        id,
        arrival_s,
        prompt: PromptSpec::Tokens(Arc::from(prompt)),
        output_tokens,
        follows: None,
        pinned: None,
    }
}

/// A workload of `requests` on `engines` engines.
pub fn workload(
    engines: u32,
    engine: EngineConfig,
    channels: ChannelConfig,
    requests: Vec<SimRequest>,
    faults: Vec<Fault>,
) -> Workload {
    Workload {
        name: "test".to_owned(),
        description: "hand-built".to_owned(),
        requests,
        fleet: FleetSpec {
            engines,
            engine,
            channels,
        },
        faults,
        load_start_s: 0.0,
    }
}

/// A chat-like mix: `convs` conversations of `turns` turns sharing a 256-token system
/// prompt; turn `k + 1` follows turn `k` after `think_s` and quotes its prompt; every
/// conversation starts at `i * gap_s`. Ids: conversation `c`, turn `k` is `c * 100 + k`.
pub fn conversations(convs: u32, turns: u32, gap_s: f64, think_s: f64) -> Vec<SimRequest> {
    let system = tokens(999, 256);
    let mut out = Vec::new();
    for c in 0..convs {
        let mut prompt = system.clone();
        for k in 0..turns {
            prompt.extend(tokens(c * 10 + k % 10 + 1, 200 + 37 * (k % 5)));
            let id = u64::from(c) * 100 + u64::from(k);
            let mut r = request(id, f64::from(c) * gap_s, prompt.clone(), 20 + 7 * (k % 4));
            if k > 0 {
                r.follows = Some(FollowUp {
                    parent: id - 1,
                    think_s,
                });
            }
            out.push(r);
        }
    }
    out
}

/// Every request is accounted for exactly once.
pub fn assert_totals(r: &RunResult) {
    let n = r.requests.len() as u64;
    let arrived = r.completed + r.rejected_for_good + r.refused + r.in_flight_at_end;
    assert_eq!(
        arrived + r.never_arrived + r.pending_at_end,
        n,
        "completed {} + rejected {} + refused {} + in flight {} + never arrived {} + \
         pending {} != {n}",
        r.completed,
        r.rejected_for_good,
        r.refused,
        r.in_flight_at_end,
        r.never_arrived,
        r.pending_at_end
    );
    let finished = r.requests.iter().filter(|q| q.finish_s.is_some()).count() as u64;
    assert_eq!(finished, r.completed);
}
