//! `restart`, `event-loss`, `fail-fast`, `flap` and `partial-telemetry`: engine restarts
//! (cache wiped, event sequence back at 0); KV events delayed, reordered, lost and cut off by
//! disconnects; an engine that fails every request at once while its telemetry reads idle;
//! connections that keep dropping and coming back; engines that report only vLLM's gauges;
//! an engine that slows down while reporting its nominal speed (`straggler`); all on one
//! steady multi-prefix load.

use crate::engine::EngineConfig;
use crate::fault::{Fault, FaultKind};
use crate::net::ChannelConfig;
use crate::workload::Workload;
use crate::workload::synth::ZipfLoad;

/// Engines.
pub const ENGINES: u32 = 8;
/// The steady load both scenarios share.
pub const LOAD: ZipfLoad = ZipfLoad {
    prefixes: 16,
    prefix_tokens: 4_096,
    zipf_s: 1.0,
    rate_per_s: 12.0,
    // About 90 s of arrivals.
    requests: 1_080,
    suffix_tokens: (64, 256),
    output_tokens: (64, 256),
};

/// The restarts of `restart`: (seconds, engine). Engine 0 restarts twice, so its event
/// sequence starts over twice.
pub const RESTARTS: [(f64, u32); 4] = [(20.0, 0), (35.0, 1), (50.0, 2), (65.0, 0)];

/// The steady load both scenarios share: 8 engines, 1,080 Poisson arrivals at 12/s, each
/// one of 16 prefixes of 4,096 tokens (Zipf s = 1.0) plus 64–256 tokens of its own, 64–256
/// output tokens.
fn steady(seed: u64, name: &str, description: &str) -> Workload {
    super::workload(
        name,
        description,
        LOAD.requests(seed),
        ENGINES,
        EngineConfig::default(),
    )
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

/// When `fail-fast`'s engine 0 starts failing (seconds); it fails until the end.
pub const FAIL_FAST_AT_S: f64 = 10.0;

/// Builds `fail-fast` for `seed`: the steady load, engine 0 failing every request at once
/// from [`FAIL_FAST_AT_S`] to the end of the run.
pub fn build_fail_fast(seed: u64) -> Workload {
    let mut w = steady(seed, super::FAIL_FAST, super::FAIL_FAST_REPRODUCES);
    w.faults = vec![Fault {
        at_s: FAIL_FAST_AT_S,
        engine: 0,
        kind: FaultKind::FailFast { duration_s: 1e6 },
    }];
    w
}

/// `fail-fast`'s yardstick: the same steady load on the fleet without the failing engine
/// ([`ENGINES`] − 1 engines, no fault). A router that routes around the failing engine
/// serves the scenario about as well as this fleet.
pub fn fail_fast_without_the_failing_engine(seed: u64) -> Workload {
    let mut w = steady(seed, super::FAIL_FAST, super::FAIL_FAST_REPRODUCES);
    w.fleet.engines = ENGINES - 1;
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

/// The flapping connections of `flap`: (engine, from (seconds), period, down (seconds)); each
/// flaps to the end of the run.
pub const FLAPS: [(u32, f64, f64, f64); 2] = [(1, 10.0, 3.0, 1.0), (2, 20.0, 5.0, 2.0)];

/// Builds `flap` for `seed`: the steady load, with [`FLAPS`]: engine 1's connection (KV
/// events and load reports) cut for 1 s every 3 s from 10 s, engine 2's for 2 s every 5 s
/// from 20 s, to the end of the run. The engines keep serving throughout.
pub fn build_flap(seed: u64) -> Workload {
    let mut w = steady(seed, super::FLAP, super::FLAP_REPRODUCES);
    w.faults = FLAPS
        .iter()
        .map(|&(engine, at_s, period_s, down_s)| Fault {
            at_s,
            engine,
            kind: FaultKind::Flap {
                duration_s: 1e6,
                period_s,
                down_s,
            },
        })
        .collect();
    w
}

/// Engines of `partial-telemetry` whose reports carry only vLLM's gauges (running, waiting,
/// KV usage) for the whole run: half the fleet.
pub const GAUGES_ONLY: [u32; 4] = [0, 1, 2, 3];

/// Builds `partial-telemetry` for `seed`: the steady load, engines [`GAUGES_ONLY`] reporting
/// only vLLM's gauges from the start, the other four the full figures.
pub fn build_partial_telemetry(seed: u64) -> Workload {
    let mut w = steady(
        seed,
        super::PARTIAL_TELEMETRY,
        super::PARTIAL_TELEMETRY_REPRODUCES,
    );
    w.faults = GAUGES_ONLY
        .iter()
        .map(|&engine| Fault {
            at_s: 0.0,
            engine,
            kind: FaultKind::PartialTelemetry { duration_s: 1e6 },
        })
        .collect();
    w
}

/// When `straggler`'s engine 0 slows down (seconds), and by how much (step time multiplier);
/// it stays slow to the end of the run.
pub const STRAGGLER: (f64, f64) = (10.0, 3.0);

/// Builds `straggler` for `seed`: the steady load, engine 0's steps lasting
/// [`STRAGGLER`]`.1` times their modelled time from [`STRAGGLER`]`.0` s to the end, while its
/// reports keep the nominal throughputs.
pub fn build_straggler(seed: u64) -> Workload {
    let mut w = steady(seed, super::STRAGGLER_NAME, super::STRAGGLER_REPRODUCES);
    w.faults = vec![Fault {
        at_s: STRAGGLER.0,
        engine: 0,
        kind: FaultKind::Slowdown {
            duration_s: 1e6,
            factor: STRAGGLER.1,
        },
    }];
    w
}
