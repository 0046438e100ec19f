//! `restart` and `event-loss`: failure kinds 4 and 5 and incident A's list of KV-event
//! delay, loss, disconnects and restarts (field notes), on one steady multi-prefix load.

use rand::Rng;

use crate::engine::EngineConfig;
use crate::fault::{Fault, FaultKind};
use crate::net::ChannelConfig;
use crate::workload::synth::{self, TokenSpace, Zipf};
use crate::workload::{FleetSpec, Workload};

/// Engines.
pub const ENGINES: u32 = 8;
/// Distinct shared prefixes.
pub const PREFIXES: usize = 16;
/// Length of each prefix (tokens).
pub const PREFIX_TOKENS: u32 = 4_096;
/// Zipf exponent of prefix popularity.
pub const ZIPF_S: f64 = 1.0;
/// Poisson arrival rate (requests/s).
pub const RATE: f64 = 12.0;
/// Requests (about 90 s of arrivals).
pub const REQUESTS: u32 = 1_080;
/// Each request's own suffix (tokens, inclusive range).
pub const SUFFIX_TOKENS: (u32, u32) = (64, 256);
/// Output length (tokens, inclusive range).
pub const OUTPUT_TOKENS: (u32, u32) = (64, 256);

/// The restarts of `restart`: (seconds, engine). Engine 0 restarts twice, so its event
/// sequence starts over twice.
pub const RESTARTS: [(f64, u32); 4] = [(20.0, 0), (35.0, 1), (50.0, 2), (65.0, 0)];

/// The steady load both scenarios share: 8 engines, 1,080 Poisson arrivals at 12/s, each
/// one of 16 prefixes of 4,096 tokens (Zipf s = 1.0) plus 64–256 tokens of its own, 64–256
/// output tokens.
fn steady(seed: u64, name: &str, description: &str) -> Workload {
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
        name: name.to_string(),
        description: description.to_string(),
        requests,
        fleet: FleetSpec {
            engines: ENGINES,
            engine: EngineConfig::default(),
            channels: ChannelConfig::default(),
        },
        faults: Vec::new(),
    }
}

/// Builds `restart` for `seed`: the steady load with the [`RESTARTS`] schedule (each wipes
/// the engine's cache, re-queues its requests and restarts its event sequence at 0).
pub fn build_restart(seed: u64) -> Workload {
    let mut w = steady(seed, super::RESTART, super::RESTART_REPRODUCES);
    w.faults = RESTARTS
        .iter()
        .map(|&(at_s, engine)| Fault {
            at_s,
            engine,
            kind: FaultKind::Restart,
        })
        .collect();
    w
}

/// Builds `event-loss` for `seed`: the steady load over lossy channels (KV event batches
/// delayed 50 ms with up to 100 ms of jitter, so they reorder, 1% of batches lost, 5% of
/// load reports lost) plus a 5 s disconnect of engine 1 at 20 s, 50% batch loss on engine 2
/// for 20 s from 30 s, and a 10 s telemetry blackout of engine 3 at 40 s.
pub fn build_event_loss(seed: u64) -> Workload {
    let mut w = steady(seed, super::EVENT_LOSS, super::EVENT_LOSS_REPRODUCES);
    w.fleet.channels = ChannelConfig {
        event_delay_s: 0.05,
        event_jitter_s: 0.1,
        event_loss: 0.01,
        telemetry_loss: 0.05,
        ..Default::default()
    };
    w.faults = vec![
        Fault {
            at_s: 20.0,
            engine: 1,
            kind: FaultKind::Disconnect { duration_s: 5.0 },
        },
        Fault {
            at_s: 30.0,
            engine: 2,
            kind: FaultKind::EventLoss {
                duration_s: 20.0,
                loss: 0.5,
            },
        },
        Fault {
            at_s: 40.0,
            engine: 3,
            kind: FaultKind::TelemetryBlackout { duration_s: 10.0 },
        },
    ];
    w
}
