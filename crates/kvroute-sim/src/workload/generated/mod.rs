//! Generated workloads: synthetic traffic shapes besides the conversation trace and the
//! failure scenarios, for comparing policies over more than one kind of load (the sweep,
//! `kvroute-sim scenario NAME`). Each is a pure function of its seed, like the scenarios.
//!
//! | name | what it is |
//! |---|---|
//! | `long-context` | prompts up to the engine's context (RAG, agents) mixed with short chat |
//! | `no-sharing` | unique prompts: arrivals and lengths only, nothing to reuse |

pub mod long_context;
pub mod no_sharing;

use rand::Rng;
use rand::rngs::StdRng;

use crate::workload::scenarios::Scenario;

/// Name of the long-context mix.
pub const LONG_CONTEXT: &str = "long-context";
/// Name of the no-sharing workload.
pub const NO_SHARING: &str = "no-sharing";

const LONG_CONTEXT_IS: &str = "A long-context mix, as RAG and agent traffic send: 8 engines; \
    800 Poisson requests at 4/s, a quarter of them a long document (one of 16 documents of \
    32,768 tokens up to the engine's 131,072-token context less the question and the output, \
    Zipf s = 1 popularity) plus a 64-512-token question, the rest short chat (one of 4 \
    system prompts of 1,024 tokens plus 64-1,024 user tokens); 64-512 output tokens each. \
    Long prefills stall whoever serves them; reuse of the documents pays most.";
const NO_SHARING_IS: &str = "No sharing: 8 engines; 1,000 Poisson requests at 6/s with \
    unique prompts (no two share a token), prompt lengths log-uniform in 128..=16,384 \
    tokens and output lengths log-uniform in 32..=1,024. Only arrivals and lengths differ: \
    a cache-aware policy has nothing to gain and must not lose to a load balancer.";

/// Every generated workload, in `list` order.
pub const GENERATED: [Scenario; 2] = [
    Scenario::new(LONG_CONTEXT, LONG_CONTEXT_IS, long_context::build),
    Scenario::new(NO_SHARING, NO_SHARING_IS, no_sharing::build),
];

/// The generated workload called `name`, if any.
pub fn find(name: &str) -> Option<&'static Scenario> {
    GENERATED.iter().find(|s| s.name == name)
}

/// A log-uniform draw in `lo..=hi` (tokens): `exp(u)` with `u` uniform in
/// `[ln lo, ln hi]`, rounded and kept within the bounds; `lo` when `hi <= lo`.
pub fn log_uniform(rng: &mut StdRng, lo: u32, hi: u32) -> u32 {
    if hi <= lo {
        return lo;
    }
    let u = rng.random_range(f64::from(lo).ln()..=f64::from(hi).ln());
    (u.exp().round() as u32).clamp(lo, hi)
}
