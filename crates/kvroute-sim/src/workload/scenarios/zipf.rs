//! `zipf-prefixes`: pure cache affinity on a Zipf workload unbalances the engines; a load
//! term restores the balance at almost the same hit rate.

use crate::engine::EngineConfig;
use crate::workload::Workload;
use crate::workload::synth::ZipfLoad;

/// Engines.
pub const ENGINES: u32 = 2;
/// The load: Zipf-popular prefixes under Poisson arrivals.
pub const LOAD: ZipfLoad = ZipfLoad {
    prefixes: 128,
    prefix_tokens: 2_048,
    zipf_s: 0.9,
    rate_per_s: 16.0,
    requests: 500,
    suffix_tokens: (32, 128),
    output_tokens: (64, 256),
};

/// Builds the scenario for `seed`.
///
/// Two engines with the default configuration; 500 requests arriving as a Poisson process
/// of 16 requests/s, each one of 128 prefixes of 2,048 tokens drawn with Zipf s = 0.9
/// (rank 1 most popular) followed by 32–128 tokens of its own, with 64–256 output tokens.
pub fn build(seed: u64) -> Workload {
    super::workload(
        super::ZIPF_PREFIXES,
        super::ZIPF_PREFIXES_REPRODUCES,
        LOAD.requests(seed),
        ENGINES,
        EngineConfig::default(),
    )
}
