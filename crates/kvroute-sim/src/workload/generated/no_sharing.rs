//! `no-sharing`: unique prompts, only arrivals and lengths (module docs of [`super`]).

use crate::engine::EngineConfig;
use crate::workload::Workload;
use crate::workload::synth::{self, TokenSpace};

/// Engines in the fleet.
pub const ENGINES: u32 = 8;
/// Requests.
pub const REQUESTS: u32 = 1_000;
/// Poisson arrival rate (requests/s).
pub const RATE_PER_S: f64 = 6.0;
/// Prompt length range (tokens, inclusive; log-uniform).
pub const PROMPT_TOKENS: (u32, u32) = (128, 16_384);
/// Output length range (tokens, inclusive; log-uniform).
pub const OUTPUT_TOKENS: (u32, u32) = (32, 1_024);

/// Builds the workload for `seed`: [`REQUESTS`] Poisson arrivals at [`RATE_PER_S`] on
/// [`ENGINES`] default engines, each prompt all fresh tokens (log-uniform length in
/// [`PROMPT_TOKENS`]), each output log-uniform in [`OUTPUT_TOKENS`].
pub fn build(seed: u64) -> Workload {
    let mut rng = synth::rng(seed);
    let mut tokens = TokenSpace::default();
    let mut t = 0.0;
    let requests = (0..u64::from(REQUESTS))
        .map(|id| {
            t += synth::exp_gap(&mut rng, RATE_PER_S);
            let n = super::log_uniform(&mut rng, PROMPT_TOKENS.0, PROMPT_TOKENS.1);
            let out = super::log_uniform(&mut rng, OUTPUT_TOKENS.0, OUTPUT_TOKENS.1);
            synth::request(id, t, tokens.fresh(n).into(), out)
        })
        .collect();
    crate::workload::scenarios::workload(
        super::NO_SHARING,
        super::NO_SHARING_IS,
        requests,
        ENGINES,
        EngineConfig::default(),
    )
}
