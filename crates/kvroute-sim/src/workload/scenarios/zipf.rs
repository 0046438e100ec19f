//! `zipf-prefixes`: incident C (field notes), pure cache affinity on a Zipf workload.

use rand::Rng;

use crate::engine::EngineConfig;
use crate::net::ChannelConfig;
use crate::workload::synth::{self, TokenSpace, Zipf};
use crate::workload::{FleetSpec, Workload};

/// Engines.
pub const ENGINES: u32 = 2;
/// Distinct shared prefixes.
pub const PREFIXES: usize = 128;
/// Length of each prefix (tokens).
pub const PREFIX_TOKENS: u32 = 2_048;
/// Zipf exponent of prefix popularity.
pub const ZIPF_S: f64 = 0.9;
/// Poisson arrival rate (requests/s).
pub const RATE: f64 = 16.0;
/// Requests.
pub const REQUESTS: u32 = 500;
/// Each request's own suffix after its prefix (tokens, inclusive range).
pub const SUFFIX_TOKENS: (u32, u32) = (32, 128);
/// Output length (tokens, inclusive range).
pub const OUTPUT_TOKENS: (u32, u32) = (64, 256);

/// Builds the scenario for `seed`.
///
/// Two engines with the default configuration; 500 requests arriving as a Poisson process
/// of 16 requests/s, each one of 128 prefixes of 2,048 tokens drawn with Zipf s = 0.9
/// (rank 1 most popular) followed by 32–128 tokens of its own, with 64–256 output tokens.
pub fn build(seed: u64) -> Workload {
    let mut rng = synth::rng(seed);
    let mut tokens = TokenSpace::default();
    let prefixes: Vec<Vec<u32>> = (0..PREFIXES).map(|_| tokens.fresh(PREFIX_TOKENS)).collect();
    let zipf = Zipf::new(PREFIXES, ZIPF_S);
    let mut t = 0.0;
    let requests = (0..u64::from(REQUESTS))
        .map(|id| {
            t += synth::exp_gap(&mut rng, RATE);
            let p = &prefixes[zipf.sample(&mut rng)];
            let suffix = tokens.fresh(rng.random_range(SUFFIX_TOKENS.0..=SUFFIX_TOKENS.1));
            let out = rng.random_range(OUTPUT_TOKENS.0..=OUTPUT_TOKENS.1);
            synth::request(id, t, synth::concat(p, &suffix), out)
        })
        .collect();
    Workload {
        name: super::ZIPF_PREFIXES.to_string(),
        description: super::ZIPF_PREFIXES_REPRODUCES.to_string(),
        requests,
        fleet: FleetSpec {
            engines: ENGINES,
            engine: EngineConfig::default(),
            channels: ChannelConfig::default(),
        },
        faults: Vec::new(),
    }
}
