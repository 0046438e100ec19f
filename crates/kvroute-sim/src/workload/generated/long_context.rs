//! `long-context`: long documents up to the engine's context mixed with short chat (module
//! docs of [`super`]).

use rand::Rng;
use rand::seq::SliceRandom;

use crate::engine::EngineConfig;
use crate::workload::Workload;
use crate::workload::synth::{self, TokenSpace, Zipf};

/// Engines in the fleet.
pub const ENGINES: u32 = 8;
/// Requests.
pub const REQUESTS: u32 = 800;
/// Poisson arrival rate (requests/s).
pub const RATE_PER_S: f64 = 4.0;
/// Long-document requests among [`REQUESTS`]: exactly a quarter (200), at seeded places.
pub const LONG_REQUESTS: u32 = REQUESTS / 4;
/// Distinct long documents.
pub const DOCUMENTS: usize = 16;
/// Zipf exponent of the documents' popularity.
pub const DOCUMENT_ZIPF_S: f64 = 1.0;
/// Shortest document (tokens): every long prompt is longer than this.
pub const LONG_MIN_TOKENS: u32 = 32_768;
/// A long request's question after its document (tokens, inclusive range).
pub const QUESTION_TOKENS: (u32, u32) = (64, 512);
/// Distinct chat system prompts.
pub const SYSTEM_PROMPTS: usize = 4;
/// Length of each system prompt (tokens).
pub const SYSTEM_TOKENS: u32 = 1_024;
/// A chat request's own text after its system prompt (tokens, inclusive range).
pub const CHAT_TOKENS: (u32, u32) = (64, 1_024);
/// Output length of every request (tokens, inclusive range).
pub const OUTPUT_TOKENS: (u32, u32) = (64, 512);

/// The longest document for an engine of `context` tokens: the context less the longest
/// question and the longest output, so that no request exceeds it.
pub fn longest_document(context: u32) -> u32 {
    context.saturating_sub(QUESTION_TOKENS.1 + OUTPUT_TOKENS.1)
}

/// Builds the workload for `seed`.
///
/// The default engine (context `max_model_len` 131,072 tokens). The 16 documents' lengths
/// are evenly spaced from [`LONG_MIN_TOKENS`] to [`longest_document`] and dealt to the
/// popularity ranks in a seeded order; [`LONG_REQUESTS`] of the requests, at seeded places,
/// are a document (Zipf rank) plus a fresh question, the others one of the system prompts
/// (uniform) plus fresh chat text.
pub fn build(seed: u64) -> Workload {
    let engine = EngineConfig::default();
    let mut rng = synth::rng(seed);
    let mut tokens = TokenSpace::default();
    let longest = longest_document(engine.max_model_len);
    let step = (longest - LONG_MIN_TOKENS) / (DOCUMENTS as u32 - 1);
    let mut lengths: Vec<u32> = (0..DOCUMENTS as u32)
        .map(|k| {
            if k + 1 == DOCUMENTS as u32 {
                longest
            } else {
                LONG_MIN_TOKENS + k * step
            }
        })
        .collect();
    lengths.shuffle(&mut rng);
    let documents: Vec<Vec<u32>> = lengths.iter().map(|&n| tokens.fresh(n)).collect();
    let systems: Vec<Vec<u32>> = (0..SYSTEM_PROMPTS)
        .map(|_| tokens.fresh(SYSTEM_TOKENS))
        .collect();
    let mut long = vec![true; LONG_REQUESTS as usize];
    long.resize(REQUESTS as usize, false);
    long.shuffle(&mut rng);
    let zipf = Zipf::new(DOCUMENTS, DOCUMENT_ZIPF_S);
    let mut t = 0.0;
    let requests = long
        .iter()
        .enumerate()
        .map(|(id, &is_long)| {
            t += synth::exp_gap(&mut rng, RATE_PER_S);
            let prompt = if is_long {
                let doc = &documents[zipf.sample(&mut rng)];
                let q = rng.random_range(QUESTION_TOKENS.0..=QUESTION_TOKENS.1);
                synth::concat(doc, &tokens.fresh(q))
            } else {
                let sys = &systems[rng.random_range(0..SYSTEM_PROMPTS)];
                let own = rng.random_range(CHAT_TOKENS.0..=CHAT_TOKENS.1);
                synth::concat(sys, &tokens.fresh(own))
            };
            let out = rng.random_range(OUTPUT_TOKENS.0..=OUTPUT_TOKENS.1);
            synth::request(id as u64, t, prompt, out)
        })
        .collect();
    crate::workload::scenarios::workload(
        super::LONG_CONTEXT,
        super::LONG_CONTEXT_IS,
        requests,
        ENGINES,
        engine,
    )
}
