//! `burst-siblings`: identical requests at once, before any engine has reported storing
//! their prompt; reservations must spread them.

use crate::engine::EngineConfig;
use crate::workload::Workload;
use crate::workload::synth::{self, TokenSpace};

/// Engines (all idle at the start).
pub const ENGINES: u32 = 8;
/// Identical requests, all arriving at t = 0.
pub const SIBLINGS: u32 = 64;
/// Their common prompt (tokens).
pub const PROMPT_TOKENS: u32 = 4_096;
/// Their output length (tokens).
pub const OUTPUT_TOKENS: u32 = 256;

/// Builds the scenario (the seed is unused: nothing is random).
///
/// Eight idle engines with the default configuration; 64 requests with the same
/// 4,096-token prompt and 256 output tokens all arrive at t = 0, before any engine can
/// report storing the prompt (best-of-N sampling or an agent fan-out).
pub fn build(_seed: u64) -> Workload {
    let prompt: std::sync::Arc<[u32]> = TokenSpace::default().fresh(PROMPT_TOKENS).into();
    let requests = (0..u64::from(SIBLINGS))
        .map(|id| synth::request(id, 0.0, prompt.clone(), OUTPUT_TOKENS))
        .collect();
    super::workload(
        super::BURST_SIBLINGS,
        super::BURST_SIBLINGS_REPRODUCES,
        requests,
        ENGINES,
        EngineConfig::default(),
    )
}
