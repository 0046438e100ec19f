//! `owner-canary`: the two-engine canary of owner pressure: an owner at its running-request
//! cap with a long queue but low KV usage must still shed load to its idle peer.

use std::sync::Arc;

use rand::Rng;

use crate::engine::EngineConfig;
use crate::workload::Workload;
use crate::workload::synth::{self, TokenSpace};

/// Engines in the canary.
pub const ENGINES: u32 = 2;
/// The engine that starts as the cached owner (index).
pub const OWNER: u32 = 0;
/// Running-request cap per engine (38 slots each).
pub const MAX_RUNNING: u32 = 38;
/// Pinned requests that give the owner its starting load (35 running, peer 0).
pub const PINNED: u32 = 35;
/// Growing-prefix trajectories.
pub const TRAJECTORIES: u32 = 76;
/// Turns per trajectory.
pub const TURNS: u32 = 3;
/// Output length of every turn (tokens).
pub const OUTPUT_TOKENS: u32 = 1_000;
/// The context every trajectory starts from (tokens). With 1,000 user tokens per turn the
/// routed prompts total 76 · (68,500 + 70,500 + 72,500) ≈ 16.1 M tokens, prompt:output
/// ≈ 70.5:1, as in the canary.
pub const SHARED_TOKENS: u32 = 67_500;
/// New user text per turn (tokens).
pub const USER_TOKENS: u32 = 1_000;
/// When the trajectories' first turns start arriving (seconds).
pub const START_S: f64 = 1.0;
/// Spacing of the first turns (seconds).
pub const SPACING_S: f64 = 0.05;
/// Think time range between a turn's last token and the next turn (seconds).
pub const THINK_S: (f64, f64) = (0.5, 2.0);

/// Builds the scenario for `seed` (the seed only draws think times).
///
/// Two engines of 38 slots. Engine 0 is handed 35 pinned requests at t ≈ 0 (the shared
/// 67,500-token context plus 1,000 tokens each, 1,000 output tokens), so it starts as the
/// cached owner with 35 running while the peer is idle. From t = 1 s, 76 trajectories start
/// 50 ms apart; each has 3 turns of 1,000 output tokens, turn `k + 1` arriving 0.5–2 s
/// after turn `k` finishes with prompt = turn `k`'s prompt + its output + 1,000 new tokens.
pub fn build(seed: u64) -> Workload {
    let mut rng = synth::rng(seed);
    let mut tokens = TokenSpace::default();
    let shared = tokens.fresh(SHARED_TOKENS);
    let mut requests = synth::pinned(&mut tokens, &shared, PINNED, USER_TOKENS, OWNER, || {
        OUTPUT_TOKENS
    });
    let mut id = u64::from(PINNED);
    for k in 0..TRAJECTORIES {
        let mut prompt: Arc<[u32]> = synth::concat(&shared, &tokens.fresh(USER_TOKENS));
        let mut parent = id;
        requests.push(synth::request(
            id,
            START_S + f64::from(k) * SPACING_S,
            prompt.clone(),
            OUTPUT_TOKENS,
        ));
        id += 1;
        for _ in 1..TURNS {
            prompt =
                synth::follow_up_prompt(parent, &prompt, OUTPUT_TOKENS, &tokens.fresh(USER_TOKENS));
            let think = rng.random_range(THINK_S.0..=THINK_S.1);
            requests.push(synth::follow_up(
                id,
                parent,
                think,
                prompt.clone(),
                OUTPUT_TOKENS,
            ));
            parent = id;
            id += 1;
        }
    }
    let engine = EngineConfig {
        max_running: MAX_RUNNING,
        ..Default::default()
    };
    let mut w = super::workload(
        super::OWNER_CANARY,
        super::OWNER_CANARY_REPRODUCES,
        requests,
        ENGINES,
        engine,
    );
    // The owner's pinned load is the setup: a rate scale speeds up the trajectories' first
    // turns, not their start.
    w.load_start_s = START_S;
    w
}
