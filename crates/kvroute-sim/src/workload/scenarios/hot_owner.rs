//! `hot-owner-51`: the hot cached owner in a 51-engine fleet: the one engine holding a long
//! shared prefix is already overloaded while its 50 peers idle.

use rand::Rng;

use crate::engine::EngineConfig;
use crate::workload::Workload;
use crate::workload::synth::{self, TokenSpace};

/// Engines in the fleet.
pub const ENGINES: u32 = 51;
/// The engine that already holds the shared prefix (index).
pub const OWNER: u32 = 0;
/// Running-request cap per engine: the owner runs 38 requests at the start.
pub const MAX_RUNNING: u32 = 38;
/// Pinned requests that give the owner its starting load: 38 running + 109 waiting.
pub const PINNED: u32 = 38 + 109;
/// Shared prefix every request starts with (tokens).
pub const PREFIX_TOKENS: u32 = 6_144;
/// Each request's own user text after the prefix (tokens).
pub const USER_TOKENS: u32 = 256;
/// Routed chat requests in the burst.
pub const BURST_REQUESTS: u32 = 1_800;
/// Poisson arrival rate of the burst (requests/s).
pub const BURST_RATE: f64 = 60.0;
/// When the burst starts (seconds), after the owner's store events have reached the router.
pub const BURST_START_S: f64 = 1.0;
/// Output length range of every request (tokens, inclusive).
pub const OUTPUT_TOKENS: (u32, u32) = (256, 512);

/// Builds the scenario for `seed`.
///
/// 51 engines of 38 slots; engine 0 is handed 147 pinned requests at t ≈ 0 (all sharing a
/// 6,144-token prefix, so it holds the prefix in cache with 38 running and 109 waiting);
/// from t = 1 s, 1,800 chat requests sharing the same prefix arrive as a Poisson burst of
/// 60 requests/s (about 30 s; spread over the fleet that keeps nearly every engine busy,
/// on the owner alone many times what one engine serves), each with 256 tokens of its own and 256–512 output tokens.
pub fn build(seed: u64) -> Workload {
    let mut rng = synth::rng(seed);
    let mut tokens = TokenSpace::default();
    let prefix = tokens.fresh(PREFIX_TOKENS);
    let mut requests = synth::pinned(&mut tokens, &prefix, PINNED, USER_TOKENS, OWNER, || {
        rng.random_range(OUTPUT_TOKENS.0..=OUTPUT_TOKENS.1)
    });
    let mut t = BURST_START_S;
    for id in u64::from(PINNED)..u64::from(PINNED + BURST_REQUESTS) {
        t += synth::exp_gap(&mut rng, BURST_RATE);
        let prompt = synth::concat(&prefix, &tokens.fresh(USER_TOKENS));
        let out = rng.random_range(OUTPUT_TOKENS.0..=OUTPUT_TOKENS.1);
        requests.push(synth::request(id, t, prompt, out));
    }
    let engine = EngineConfig {
        max_running: MAX_RUNNING,
        ..Default::default()
    };
    let mut w = super::workload(
        super::HOT_OWNER_51,
        super::HOT_OWNER_51_REPRODUCES,
        requests,
        ENGINES,
        engine,
    );
    // The owner's pinned load is the setup: a rate scale speeds up the burst, not its start.
    w.load_start_s = BURST_START_S;
    w
}
