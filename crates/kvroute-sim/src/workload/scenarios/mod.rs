//! The built-in scenarios: each reproduces one failure a router must avoid (the behaviours,
//! their tests and scenarios are listed in `docs/FAILURE-MODES.md`), deterministically for a
//! seed.
//!
//! | name | reproduces |
//! |---|---|
//! | `hot-owner-51` | one overloaded cached owner, 50 idle peers |
//! | `owner-canary` | an owner at its running-request cap with low KV usage, one idle peer |
//! | `zipf-prefixes` | pure affinity on Zipf-popular prefixes |
//! | `burst-siblings` | identical requests at once |
//! | `restart` | cache wipes and sequence restarts |
//! | `event-loss` | KV event delay, loss, reordering, disconnects |
//! | `fail-fast` | an engine failing every request while its telemetry reads idle |
//! | `flap` | connections that keep dropping and coming back |
//! | `partial-telemetry` | half the fleet reporting only vLLM's gauges |
//! | `straggler` | an engine three times slower than its reports say |

pub mod burst;
pub mod faults;
pub mod hot_owner;
pub mod owner_canary;
pub mod zipf;

use crate::engine::EngineConfig;
use crate::net::ChannelConfig;
use crate::request::SimRequest;
use crate::workload::{FleetSpec, Workload, synth};

/// Name of the hot cached owner scenario.
pub const HOT_OWNER_51: &str = "hot-owner-51";
/// Name of the owner-pressure canary scenario.
pub const OWNER_CANARY: &str = "owner-canary";
/// Name of the Zipf-popular prefixes scenario.
pub const ZIPF_PREFIXES: &str = "zipf-prefixes";
/// Name of the identical-requests burst scenario.
pub const BURST_SIBLINGS: &str = "burst-siblings";
/// Name of the restart scenario.
pub const RESTART: &str = "restart";
/// Name of the lossy-channel scenario.
pub const EVENT_LOSS: &str = "event-loss";
/// Name of the failing-engine scenario.
pub const FAIL_FAST: &str = "fail-fast";
/// Name of the flapping-connection scenario.
pub const FLAP: &str = "flap";
/// Name of the partial-telemetry scenario.
pub const PARTIAL_TELEMETRY: &str = "partial-telemetry";
/// Name of the slow-engine scenario.
pub const STRAGGLER_NAME: &str = "straggler";

const HOT_OWNER_51_REPRODUCES: &str = "A hot cached owner: 51 engines of 38 slots; engine 0 holds \
    a 6,144-token shared prefix with 38 running and 109 waiting (pinned), then 1,800 chat requests \
    on that prefix arrive at 60/s. Pure affinity piles them onto the owner while 50 engines idle; \
    a good policy spills to the idle peers.";
const OWNER_CANARY_REPRODUCES: &str = "Owner pressure without occupancy: two engines of 38 slots, \
    the owner starting with 35 running (pinned) and the cached 67,500-token context, the peer \
    idle; 76 growing-prefix trajectories x 3 turns x 1,000 output tokens (~16.1 M prompt tokens). \
    Affinity keeps a 100:0 generation share; occupancy pressure splits it.";
const ZIPF_PREFIXES_REPRODUCES: &str = "Pure affinity on a Zipf workload: two engines, 128 \
    prefixes of 2,048 tokens drawn with Zipf s = 0.9, Poisson 16 requests/s, 500 requests from \
    12 s, on caches warmed by an earlier run spread evenly (pinned; the popular prefixes on both \
    engines). Sending each prefix to the first engine holding it unbalances the engines; a load \
    term restores balance at the same hit rate.";
const BURST_SIBLINGS_REPRODUCES: &str = "Identical requests at once: 64 identical 4,096-token \
    requests arrive at once on 8 idle engines, before any engine has reported storing the prompt \
    (best-of-N, agent fan-out). Reservations must spread them.";
const RESTART_REPRODUCES: &str = "Engine restarts: 8 engines under a steady load of 16 \
    Zipf-popular prefixes (12 requests/s, 90 s); engines 0, 1, 2 and 0 again restart at 20, 35, 50 \
    and 65 s (cache wiped, event sequence back at 0). The router must stop predicting hits on \
    wiped engines.";
const EVENT_LOSS_REPRODUCES: &str = "Lossy KV event and telemetry channels: the restart load over \
    lossy channels (KV events delayed 50 ms + up to 100 ms jitter so batches reorder, 1% of \
    batches and 5% of load reports lost), a 5 s disconnect of engine 1 at 20 s, 50% batch loss on \
    engine 2 for 20 s from 30 s, a 10 s telemetry blackout of engine 3 at 40 s.";

const FAIL_FAST_REPRODUCES: &str = "An engine that fails fast: the restart load on 8 engines; \
    from 10 s engine 0 fails every request at once (a broken model server behind a healthy \
    metrics endpoint), so its telemetry reads idle. Load-weighing policies send it the most \
    requests; reporting outcomes opens its breaker, and the fleet serves as 7 engines would.";

const FLAP_REPRODUCES: &str = "Flapping connections: restart's steady load (without its restarts) on \
    8 engines; engine 1's connection to the router (KV events and load reports) drops for 1 s \
    every 3 s from 10 s, engine 2's for 2 s every 5 s from 20 s, to the end; both keep serving. \
    Each drop loses the engine's batches (a sequence gap, then a replay) and sends no load \
    reports, so its figures age; a router \
    that distrusts them too much idles them, one that trusts stale figures piles onto them.";
const PARTIAL_TELEMETRY_REPRODUCES: &str = "Partial telemetry: restart's steady load (without its restarts) on 8 engines, \
    engines 0-3 reporting only vLLM's gauges (running, waiting, KV usage), engines 4-7 the full \
    figures (queued prefill tokens, decode tokens, throughput). The costs of the two halves rest \
    on different evidence; neither half may be idled or piled onto for it.";

const STRAGGLER_REPRODUCES: &str = "A straggler: restart's steady load (without its restarts) on 8 engines; from 10 s \
    engine 0 runs every step three times slower (a throttled or degraded GPU) while its reports \
    keep the nominal throughputs. Only its growing queue and running count show it; a router \
    that trusts the reported speed, or its cache, piles onto it.";

/// A built-in scenario: its name, what it reproduces, and its builder.
#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    /// The name `kvroute-sim scenario NAME` takes.
    pub name: &'static str,
    /// What it reproduces (one paragraph; also the workload's description).
    pub reproduces: &'static str,
    build: fn(u64) -> Workload,
}

impl Scenario {
    /// A named workload built by `build` from a seed (used by the generated workloads,
    /// [`crate::workload::generated`], which share this shape).
    pub const fn new(
        name: &'static str,
        reproduces: &'static str,
        build: fn(u64) -> Workload,
    ) -> Self {
        Self {
            name,
            reproduces,
            build,
        }
    }

    /// The workload for `seed` (the same seed always gives the same workload).
    pub fn build(&self, seed: u64) -> Workload {
        (self.build)(seed)
    }
}

/// Every built-in scenario, in `list` order.
pub const SCENARIOS: [Scenario; 10] = [
    Scenario {
        name: HOT_OWNER_51,
        reproduces: HOT_OWNER_51_REPRODUCES,
        build: hot_owner::build,
    },
    Scenario {
        name: OWNER_CANARY,
        reproduces: OWNER_CANARY_REPRODUCES,
        build: owner_canary::build,
    },
    Scenario {
        name: ZIPF_PREFIXES,
        reproduces: ZIPF_PREFIXES_REPRODUCES,
        build: zipf::build,
    },
    Scenario {
        name: BURST_SIBLINGS,
        reproduces: BURST_SIBLINGS_REPRODUCES,
        build: burst::build,
    },
    Scenario {
        name: RESTART,
        reproduces: RESTART_REPRODUCES,
        build: faults::build_restart,
    },
    Scenario {
        name: EVENT_LOSS,
        reproduces: EVENT_LOSS_REPRODUCES,
        build: faults::build_event_loss,
    },
    Scenario {
        name: FAIL_FAST,
        reproduces: FAIL_FAST_REPRODUCES,
        build: faults::build_fail_fast,
    },
    Scenario {
        name: FLAP,
        reproduces: FLAP_REPRODUCES,
        build: faults::build_flap,
    },
    Scenario {
        name: PARTIAL_TELEMETRY,
        reproduces: PARTIAL_TELEMETRY_REPRODUCES,
        build: faults::build_partial_telemetry,
    },
    Scenario {
        name: STRAGGLER_NAME,
        reproduces: STRAGGLER_REPRODUCES,
        build: faults::build_straggler,
    },
];

/// The scenario called `name`, if any.
pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// Routed requests of `zipf-prefixes` the default demo keeps (with its whole warm-up).
pub const DEMO_SLICE: usize = 200;

/// The default demo's workloads for `seed`: `hot-owner-51` and `zipf-prefixes` cut to its
/// first [`DEMO_SLICE`] routed requests (its warm-up kept).
pub fn demo(seed: u64) -> Vec<Workload> {
    vec![
        hot_owner::build(seed),
        synth::truncate(zipf::build(seed), DEMO_SLICE),
    ]
}

/// A scenario's workload: `requests` on `engines` engines configured as `engine`, over
/// default channels, with no faults.
pub(crate) fn workload(
    name: &str,
    description: &str,
    requests: Vec<SimRequest>,
    engines: u32,
    engine: EngineConfig,
) -> Workload {
    Workload {
        name: name.to_string(),
        description: description.to_string(),
        requests,
        fleet: FleetSpec {
            engines,
            engine,
            channels: ChannelConfig::default(),
        },
        faults: Vec::new(),
        load_start_s: 0.0,
    }
}
