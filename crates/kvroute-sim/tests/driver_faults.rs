//! Faults, replays and the router's view of the engines' caches.

mod driver_common;

use driver_common::{assert_totals, conversations, request, small_engine, tokens, workload};
use kvroute::Policy;
use kvroute_sim::RunResult;
use kvroute_sim::driver::{RunOptions, run};
use kvroute_sim::fault::{Fault, FaultKind};
use kvroute_sim::net::{ChannelConfig, TelemetryMode};
use kvroute_sim::workload::Workload;
use kvroute_sim::workload::scenarios::faults;

fn probes_of(r: &RunResult, engine: u32) -> Vec<(f64, u64, u64, bool)> {
    r.probes
        .iter()
        .filter(|p| p.engine == engine)
        .map(|p| {
            (
                p.t_ns as f64 / 1e9,
                p.engine_blocks,
                p.indexed_blocks,
                p.trusted,
            )
        })
        .collect()
}

/// Engine 0 serves three pinned requests, then sits idle with a full cache; it restarts at
/// 10 s. Just before, the router's index holds exactly the engine's blocks; one event delay
/// and its most jitter (5 + 2 ms) after the restart, it holds none of them (the restarted engine's first batch,
/// sequence 0 with `AllBlocksCleared`, made the router clear the worker), while the other
/// engine's residency is untouched. A late request on engine 1 keeps the run going.
#[test]
fn restarted_engine_leaves_the_index_within_one_event_delay() {
    let mut reqs = vec![
        request(1, 0.0, tokens(1, 3_000), 30),
        request(2, 0.5, tokens(2, 2_000), 30),
        request(3, 1.0, tokens(3, 1_000), 30),
        request(4, 0.0, tokens(4, 1_500), 10),
        request(5, 20.0, tokens(5, 500), 10),
    ];
    for r in &mut reqs[..3] {
        r.pinned = Some(0);
    }
    for r in &mut reqs[3..] {
        r.pinned = Some(1);
    }
    let channels = ChannelConfig::default();
    let faults = vec![Fault {
        at_s: 10.0,
        engine: 0,
        kind: FaultKind::Restart,
    }];
    let w = workload(2, small_engine(4_000), channels, reqs, faults);
    let opts = RunOptions {
        probes: vec![
            9.99,
            10.0 + channels.event_delay_s + channels.event_jitter_s,
            15.0,
        ],
        ..RunOptions::default()
    };
    let r = run(&w, Policy::RoundRobin, &opts);
    assert_eq!(r.error, None);
    let e0 = probes_of(&r, 0);
    let e1 = probes_of(&r, 1);
    // (3,000 + 30 − 1) / 16 + (2,000 + 29) / 16 + (1,000 + 29) / 16 = 189 + 126 + 64 blocks.
    assert_eq!(e0[0].1, 379);
    assert_eq!((e0[0].2, e0[0].3), (379, true));
    assert_eq!((e0[1].1, e0[1].2, e0[1].3), (0, 0, true));
    assert_eq!((e0[2].1, e0[2].2), (0, 0));
    // (1,500 + 9) / 16 = 94 blocks, before and after.
    assert!(e1.iter().all(|p| p.1 == 94 && p.2 == 94 && p.3));
    assert_eq!(r.channel.resets, 1);
    assert_eq!(r.restarted_requests, 0);
    assert_totals(&r);
}

/// Restarts while requests run (every engine restarts at 0.3 s; conversation 1's first
/// turn arrived at 0.2 s and runs for 0.01 + 456/20,000 + 19 × 0.011 = 0.242 s on one of
/// them): the lost requests are routed again and complete; no reservation is left. The
/// router detects the restart of the engine that served conversation 0 (it published its
/// prefill store and, at about 0.12 s, a decode block, so its sequence goes back from 1 to
/// 0); an engine that published at most its first batch cannot be told from a duplicate
/// by sequence numbers (the router's `RESET_WINDOW` rule), and one that published nothing
/// needs no clearing.
#[test]
fn restart_with_requests_on_the_engine() {
    let reqs = conversations(12, 3, 0.2, 0.5);
    let faults = (0..3)
        .map(|engine| Fault {
            at_s: 0.3,
            engine,
            kind: FaultKind::Restart,
        })
        .collect();
    let w = workload(
        3,
        small_engine(3_000),
        ChannelConfig::default(),
        reqs,
        faults,
    );
    let r = run(&w, Policy::RoundRobin, &RunOptions::default());
    assert_eq!(r.error, None);
    assert!(r.restarted_requests > 0);
    assert_eq!(r.completed, 36);
    assert_eq!(r.reservations_at_end, 0);
    assert!(r.channel.resets >= 1);
    assert_totals(&r);
}

/// Engine 0 is disconnected for 2 s while serving: its batches meanwhile are lost, the next
/// one shows a gap, the replay brings the missing ones, and at quiescence the router's
/// index again holds exactly the engine's blocks and trusts it. With replay off, the
/// router gives the replay up (clearing the worker), so it holds fewer.
#[test]
fn disconnect_gap_is_recovered_by_replay() {
    for replay in [true, false] {
        let reqs = vec![
            request(1, 0.0, tokens(1, 4_000), 200),
            request(2, 0.5, tokens(2, 4_000), 200),
            request(3, 3.0, tokens(3, 600), 40),
            request(4, 30.0, tokens(4, 100), 5),
        ];
        let mut reqs = reqs;
        for r in &mut reqs[..3] {
            r.pinned = Some(0);
        }
        reqs[3].pinned = Some(1);
        let channels = ChannelConfig {
            replay,
            ..ChannelConfig::default()
        };
        let faults = vec![Fault {
            at_s: 1.0,
            engine: 0,
            kind: FaultKind::Disconnect { duration_s: 2.0 },
        }];
        let w = workload(2, small_engine(4_000), channels, reqs, faults);
        let opts = RunOptions {
            probes: vec![2.0, 25.0],
            ..RunOptions::default()
        };
        let r = run(&w, Policy::RoundRobin, &opts);
        assert_eq!(r.error, None);
        assert!(r.channel.batches_lost > 0);
        assert!(r.channel.gaps >= 1);
        let e0 = probes_of(&r, 0);
        let (_, engine_blocks, indexed, trusted) = e0[1];
        assert!(trusted);
        if replay {
            assert!(r.channel.replays_requested >= 1);
            assert!(r.channel.batches_replayed > 0);
            assert_eq!(indexed, engine_blocks);
        } else {
            assert_eq!(r.channel.replays_requested, 0);
            assert!(r.channel.replays_skipped >= 1);
            assert!(indexed < engine_blocks);
        }
        assert_eq!(r.reservations_at_end, 0);
        assert_totals(&r);
    }
}

/// Every kind of fault at once, with lossy, jittery channels, a small cache (evictions and
/// preemptions) and admission control: nothing panics, nothing fails to decode or ingest,
/// every request is accounted for, and no reservation is left.
#[test]
fn every_fault_together() {
    let reqs = conversations(40, 4, 0.05, 0.3);
    let n = reqs.len() as u64;
    let channels = ChannelConfig {
        event_loss: 0.05,
        event_jitter_s: 0.02,
        telemetry_loss: 0.1,
        ..ChannelConfig::default()
    };
    let faults = vec![
        Fault {
            at_s: 0.5,
            engine: 0,
            kind: FaultKind::Restart,
        },
        Fault {
            at_s: 0.7,
            engine: 1,
            kind: FaultKind::Disconnect { duration_s: 1.5 },
        },
        Fault {
            at_s: 0.2,
            engine: 2,
            kind: FaultKind::TelemetryBlackout { duration_s: 3.0 },
        },
        Fault {
            at_s: 1.0,
            engine: 3,
            kind: FaultKind::EventLoss {
                duration_s: 2.0,
                loss: 0.8,
            },
        },
        Fault {
            at_s: 2.5,
            engine: 1,
            kind: FaultKind::Restart,
        },
    ];
    for policy in [Policy::default(), Policy::KvAware, Policy::OwnerPressure] {
        let w = workload(4, small_engine(800), channels, reqs.clone(), faults.clone());
        let opts = RunOptions {
            admission: Some(kvroute::AdmissionConfig::new(12)),
            retry_backoff_s: 0.2,
            max_retries: 50,
            ..RunOptions::default()
        };
        let r = run(&w, policy, &opts);
        assert_eq!(r.error, None);
        assert_eq!(r.channel.decode_errors, 0);
        assert_eq!(r.channel.ingest_errors, 0);
        assert_eq!(r.completed, n, "{policy:?}");
        assert_eq!(r.reservations_at_end, 0);
        assert!(r.channel.batches_lost > 0);
        assert!(r.channel.gaps > 0);
        assert!(r.preemptions > 0 || r.restarted_requests > 0);
        assert_totals(&r);
    }
}

/// `flap` (seed 1) without jitter or stagger, cut at 23.9 s: every engine reports at
/// 0.5 s, 1.0 s, …, 23.5 s (47 reports; the time-0 figures are not a report), 8 × 47 = 376
/// in all. Engine 1's cuts before the horizon, [10, 11), [13, 14), [16, 17), [19, 20) and
/// [22, 23), each swallow 2 reports (10 in all); engine 2's, [20, 22), swallows 4. Each
/// flap alone loses event batches of its engine and exactly its own reports (default
/// channels lose nothing else); both together lose 14 reports; the same load without faults
/// loses no batch and no report.
#[test]
fn flap_loses_batches_and_reports_on_the_flapping_engines() {
    let mut base = faults::build_flap(1);
    base.fleet.channels = base.fleet.channels.without_jitter();
    let flaps = base.faults.clone();
    assert_eq!(flaps.len(), 2);
    let opts = RunOptions {
        horizon_s: Some(23.9),
        ..RunOptions::default()
    };
    let run_with = |engines: &[u32]| {
        let w = Workload {
            faults: flaps
                .iter()
                .filter(|f| engines.contains(&f.engine))
                .copied()
                .collect(),
            ..base.clone()
        };
        assert_eq!(w.faults.len(), engines.len());
        let r = run(&w, Policy::RoundRobin, &opts);
        assert_eq!(r.error, None);
        assert_eq!(r.channel.decode_errors, 0);
        assert_eq!(r.channel.ingest_errors, 0);
        assert_eq!(r.channel.telemetry_lost, 0);
        assert_eq!(r.channel.telemetry_rejected, 0);
        assert!(r.end_s <= 23.9);
        assert!(r.pending_at_end > 0, "the horizon cut the load");
        assert_totals(&r);
        r
    };
    let calm = run_with(&[]);
    assert_eq!(calm.channel.batches_lost, 0);
    assert_eq!(calm.channel.gaps, 0);
    assert!(calm.channel.batches_published > 0);
    assert_eq!(calm.channel.telemetry_sent, 376);
    for (engine, reports_lost) in [(1, 10), (2, 4)] {
        let r = run_with(&[engine]);
        assert!(r.channel.batches_lost > 0, "engine {engine}");
        assert!(r.channel.gaps >= 1, "engine {engine}");
        assert!(r.channel.replays_requested >= 1, "engine {engine}");
        assert_eq!(
            r.channel.telemetry_sent,
            376 - reports_lost,
            "engine {engine}"
        );
    }
    let both = run_with(&[1, 2]);
    assert!(both.channel.batches_lost > 0);
    assert!(both.channel.gaps >= 2);
    assert_eq!(both.channel.telemetry_sent, 376 - 14);
}

/// `partial-telemetry` (seed 1, all 1,080 requests): with half the fleet reporting only
/// vLLM's gauges, every report is accepted and every request completes, whichever policy
/// routes, and no reservation is left.
#[test]
fn partial_telemetry_completes_every_request() {
    let w = faults::build_partial_telemetry(1);
    assert_eq!(w.requests.len(), 1_080);
    assert_eq!(w.faults.len(), 4);
    for policy in [Policy::default(), Policy::KvAware, Policy::RoundRobin] {
        let r = run(&w, policy, &RunOptions::default());
        assert_eq!(r.error, None);
        assert_eq!(r.completed, 1_080, "{policy:?}");
        assert_eq!(r.channel.telemetry_rejected, 0, "{policy:?}");
        assert!(r.channel.telemetry_sent > 0);
        assert_eq!(r.reservations_at_end, 0);
        assert_totals(&r);
    }
}

/// Gauges-only reports on every engine for the whole run are vLLM-metrics telemetry: on
/// `partial-telemetry`'s load (seed 1) routed by the default policy, where vLLM-metrics
/// and full telemetry route differently, the run equals the one with
/// `TelemetryMode::VllmMetrics` channels and no fault, and a window of 0 s changes nothing
/// against full telemetry.
#[test]
fn partial_telemetry_everywhere_is_vllm_metrics_telemetry() {
    let base = Workload {
        faults: Vec::new(),
        ..faults::build_partial_telemetry(1)
    };
    let partial = |duration_s: f64| Workload {
        faults: (0..8)
            .map(|engine| Fault {
                at_s: 0.0,
                engine,
                kind: FaultKind::PartialTelemetry { duration_s },
            })
            .collect(),
        ..base.clone()
    };
    let go = |w: &Workload| {
        let mut r = run(w, Policy::default(), &RunOptions::default());
        assert_eq!(r.error, None);
        assert_eq!(r.completed, 1_080);
        r.wall_s = 0.0;
        r
    };
    let mut vllm = base.clone();
    vllm.fleet.channels.telemetry = TelemetryMode::VllmMetrics;
    let vllm = go(&vllm);
    let full = go(&base);
    // Otherwise the comparisons below could not tell the modes apart.
    assert_ne!(vllm.requests, full.requests);
    assert_eq!(go(&partial(1e6)), vllm);
    assert_eq!(go(&partial(0.0)), full);
}

/// A telemetry mode forced by `RunOptions::telemetry` holds for every engine, the
/// partial-telemetry faults included: `partial-telemetry` (seed 1, default policy) forced
/// to full figures equals its load without faults, and forced to vLLM's gauges equals its
/// load on `TelemetryMode::VllmMetrics` channels; unforced it differs from both.
#[test]
fn a_forced_telemetry_mode_overrides_partial_telemetry_faults() {
    let scenario = faults::build_partial_telemetry(1);
    let base = Workload {
        faults: Vec::new(),
        ..scenario.clone()
    };
    let go = |w: &Workload, telemetry: Option<TelemetryMode>| {
        let opts = RunOptions {
            telemetry,
            ..RunOptions::default()
        };
        let mut r = run(w, Policy::default(), &opts);
        assert_eq!(r.error, None);
        r.wall_s = 0.0;
        r
    };
    let full = go(&base, None);
    let mut vllm = base.clone();
    vllm.fleet.channels.telemetry = TelemetryMode::VllmMetrics;
    let vllm = go(&vllm, None);
    let own = go(&scenario, None);
    assert_ne!(own.requests, full.requests);
    assert_ne!(own.requests, vllm.requests);
    assert_eq!(go(&scenario, Some(TelemetryMode::Full)), full);
    assert_eq!(go(&scenario, Some(TelemetryMode::VllmMetrics)), vllm);
}

/// A fault that starts after the last request has finished is never applied, and the
/// result names it (by its position in the fault list); one inside the run is not named.
#[test]
fn faults_after_the_end_of_the_run_are_named_not_dropped() {
    let reqs = vec![
        request(1, 0.0, tokens(1, 500), 10),
        request(2, 0.2, tokens(2, 500), 10),
    ];
    let restart = |at_s| Fault {
        at_s,
        engine: 0,
        kind: FaultKind::Restart,
    };
    // Two requests of 500 prompt and 10 output tokens end within a second; the run lasts
    // until then, far before 1,000 s.
    let faults = vec![restart(1_000.0), restart(0.1), restart(5_000.0)];
    let w = workload(
        2,
        small_engine(4_000),
        ChannelConfig::default(),
        reqs,
        faults,
    );
    let r = run(&w, Policy::RoundRobin, &RunOptions::default());
    assert_eq!(r.error, None);
    assert!(r.end_s < 1_000.0, "{}", r.end_s);
    assert_eq!(r.faults_after_end, vec![0, 2]);
    assert_totals(&r);
}
