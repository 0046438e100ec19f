//! The built-in scenarios: shapes from `docs/FAILURE-MODES.md`, determinism, follow-up prompts,
//! slicing.

mod driver_common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use driver_common::SCENARIO_NAMES;
use kvroute_sim::fault::FaultKind;
use kvroute_sim::net::ChannelConfig;
use kvroute_sim::request::output_token;
use kvroute_sim::workload::scenarios::{
    self, SCENARIOS, burst, faults, hot_owner, owner_canary, zipf,
};
use kvroute_sim::workload::synth::truncate;
use kvroute_sim::workload::{FleetSpec, Workload};
use kvroute_sim::{PromptSpec, SimRequest};

fn tokens(r: &SimRequest) -> Vec<u32> {
    let mut v = Vec::new();
    r.prompt.tokens_into(&mut v);
    v
}

/// Every scenario's name is unique and in the shared list; each is found, says what it
/// reproduces and builds a workload of its name.
#[test]
fn list_names_are_unique_and_documented() {
    let names: HashSet<&str> = SCENARIOS.iter().map(|s| s.name).collect();
    assert_eq!(names.len(), SCENARIOS.len());
    assert_eq!(names.len(), SCENARIO_NAMES.len());
    for want in SCENARIO_NAMES {
        let s = scenarios::find(want).unwrap();
        assert!(s.reproduces.len() > 80, "{want} says what it reproduces");
        let w = s.build(1);
        assert_eq!(w.name, want);
        assert_eq!(w.description, s.reproduces);
        assert!(!w.requests.is_empty());
    }
    assert!(scenarios::find("nope").is_none());
}

#[test]
fn same_seed_same_workload_other_seed_other_arrivals() {
    for s in &SCENARIOS {
        assert_eq!(s.build(7), s.build(7), "{}", s.name);
    }
    for name in ["hot-owner-51", "zipf-prefixes", "restart", "event-loss"] {
        let s = scenarios::find(name).unwrap();
        assert_ne!(s.build(7).requests, s.build(8).requests, "{name}");
    }
}

#[test]
fn hot_owner_51_starts_with_the_owner_overloaded() {
    let w = hot_owner::build(1);
    assert_eq!(w.fleet.engines, 51);
    assert_eq!(w.fleet.engine.max_running, 38);
    let (pinned, routed): (Vec<_>, Vec<_>) = w.requests.iter().partition(|r| r.pinned.is_some());
    // 38 running + 109 waiting on the owner.
    assert_eq!(pinned.len(), 147);
    assert!(pinned.iter().all(|r| r.pinned == Some(0)));
    assert_eq!(routed.len(), 1_800);
    let prefix: Vec<u32> = tokens(pinned[0])[..6_144].to_vec();
    for r in &w.requests {
        let t = tokens(r);
        assert_eq!(t.len(), 6_144 + 256);
        assert_eq!(t[..6_144], prefix[..]);
        assert!((256..=512).contains(&r.output_tokens));
    }
    // Own user text is never shared.
    let tails: HashSet<u32> = w.requests.iter().map(|r| tokens(r)[6_144]).collect();
    assert_eq!(tails.len(), w.requests.len());
    // The burst starts after 1 s at about 60 requests/s: 1,800 exponential gaps of mean
    // 1/60 s sum to 30 s ± 0.7 s (one standard deviation).
    let first = routed
        .iter()
        .map(|r| r.arrival_s)
        .fold(f64::INFINITY, f64::min);
    let last = routed.iter().map(|r| r.arrival_s).fold(0.0, f64::max);
    assert!(first > 1.0);
    assert!((last - 1.0 - 30.0).abs() < 3.5, "{last}");
    assert!(routed.windows(2).all(|p| p[0].arrival_s <= p[1].arrival_s));
    // At 16x the burst still starts after 1 s (the owner's pinned load is the setup) and
    // lasts a sixteenth: about 30/16 = 1.9 s.
    let mut fast = w.clone();
    kvroute_sim::workload::arrivals::scale_arrivals(&mut fast, 16.0).unwrap();
    let burst: Vec<f64> = fast
        .requests
        .iter()
        .filter(|r| r.pinned.is_none())
        .map(|r| r.arrival_s)
        .collect();
    assert!(burst[0] > 1.0, "{}", burst[0]);
    assert!((burst[burst.len() - 1] - 1.0 - 30.0 / 16.0).abs() < 3.5 / 16.0);
}

#[test]
fn owner_canary_trajectories_grow_their_prefix() {
    let w = owner_canary::build(3);
    assert_eq!(w.fleet.engines, 2);
    assert_eq!(w.fleet.engine.max_running, 38);
    let by_id: HashMap<u64, &SimRequest> = w.requests.iter().map(|r| (r.id, r)).collect();
    assert_eq!(by_id.len(), w.requests.len());
    let pinned: Vec<_> = w.requests.iter().filter(|r| r.pinned.is_some()).collect();
    assert_eq!(pinned.len(), 35);
    assert!(pinned.iter().all(|r| r.pinned == Some(0)));
    let routed: Vec<_> = w.requests.iter().filter(|r| r.pinned.is_none()).collect();
    assert_eq!(routed.len(), 76 * 3);
    assert!(routed.iter().all(|r| r.output_tokens == 1_000));
    let shared = tokens(pinned[0])[..67_500].to_vec();
    let mut followups = 0;
    for r in &routed {
        let t = tokens(r);
        assert_eq!(t[..67_500], shared[..]);
        if let Some(f) = r.follows {
            followups += 1;
            assert!((0.5..=2.0).contains(&f.think_s));
            let parent = by_id[&f.parent];
            let p = tokens(parent);
            // Parent prompt, then the parent's 1,000 output tokens, then 1,000 new ones.
            assert_eq!(t.len(), p.len() + 2_000);
            assert_eq!(t[..p.len()], p[..]);
            for j in 0..1_000u32 {
                assert_eq!(t[p.len() + j as usize], output_token(parent.id, j));
            }
        } else {
            assert_eq!(t.len(), 68_500);
        }
    }
    assert_eq!(followups, 76 * 2);
    // Routed prompt tokens: 76 · (68,500 + 70,500 + 72,500) = 16,074,000 ≈ 16.1 M;
    // prompt:output = 16,074,000 / 228,000 = 70.5.
    let prompt: u64 = routed.iter().map(|r| u64::from(r.prompt.len())).sum();
    assert_eq!(prompt, 16_074_000);
    let output: u64 = routed.iter().map(|r| u64::from(r.output_tokens)).sum();
    assert!((prompt as f64 / output as f64 - 70.5).abs() < 0.01);
}

#[test]
fn zipf_prefixes_follow_the_zipf_law() {
    let w = zipf::build(11);
    assert_eq!(w.fleet.engines, 2);
    assert_eq!(w.load_start_s, zipf::LOAD_START_S);
    let routed: Vec<_> = w.requests.iter().filter(|r| r.pinned.is_none()).collect();
    assert_eq!(routed.len(), 500);
    let mut counts: HashMap<Vec<u32>, u32> = HashMap::new();
    for r in &routed {
        let t = tokens(r);
        assert!((2_048 + 32..=2_048 + 128).contains(&t.len()));
        *counts.entry(t[..2_048].to_vec()).or_default() += 1;
    }
    assert!(counts.len() <= 128);
    // P(rank 1) = 1 / Σ_{k=1}^{128} k^−0.9 ≈ 0.1466: about 73 of 500, binomial sd ≈ 7.9.
    let h: f64 = (1..=128).map(|k| f64::from(k).powf(-0.9)).sum();
    let top = f64::from(*counts.values().max().unwrap());
    let expect = 500.0 / h;
    let sd = (500.0 * (1.0 / h) * (1.0 - 1.0 / h)).sqrt();
    assert!(
        (top - expect).abs() < 4.0 * sd,
        "top {top}, expected {expect:.1}"
    );
    // 16 requests/s from the load's start: 500 gaps sum to 31.25 s ± 1.4 s.
    assert!(routed[0].arrival_s > zipf::LOAD_START_S);
    let last = routed.last().unwrap().arrival_s - zipf::LOAD_START_S;
    assert!((last - 31.25).abs() < 6.0, "{last}");
}

#[test]
fn zipf_prefixes_warm_up_places_an_earlier_run_evenly() {
    let w = zipf::build(11);
    let warm: Vec<_> = w.requests.iter().filter(|r| r.pinned.is_some()).collect();
    // The warm-up comes first, ids 0.., request j at j ms, each a bare 2,048-token prefix
    // with 1 output token, every (prefix, engine) pair at most once.
    let mut pairs = HashSet::new();
    let mut on_engine = [HashSet::new(), HashSet::new()];
    for (j, r) in warm.iter().enumerate() {
        assert_eq!(w.requests[j].id, j as u64);
        assert_eq!(r.id, j as u64);
        assert!((r.arrival_s - j as f64 * 1e-3).abs() < 1e-12);
        assert_eq!(r.output_tokens, 1);
        let t = tokens(r);
        assert_eq!(t.len(), 2_048);
        let e = r.pinned.unwrap();
        assert!(pairs.insert((t.clone(), e)), "pair repeated");
        on_engine[e as usize].insert(t);
    }
    // 500 draws, 250 per engine: at most 128 distinct prefixes on each engine and at
    // least ceil(250 / 128) = 2 (pigeonhole, far more in practice).
    for set in &on_engine {
        assert!((2..=128).contains(&set.len()), "{}", set.len());
    }
    // The most popular prefix of the routed load (rank 1, P ≈ 0.147 a draw) is on both
    // engines: missing from one engine's 250 draws has probability (1 − 0.147)^250 < 1e-17.
    let mut counts: HashMap<Vec<u32>, u32> = HashMap::new();
    for r in w.requests.iter().filter(|r| r.pinned.is_none()) {
        *counts.entry(tokens(r)[..2_048].to_vec()).or_default() += 1;
    }
    let top = counts.iter().max_by_key(|&(_, &c)| c).unwrap().0;
    assert!(on_engine.iter().all(|set| set.contains(top)));
    // Every warm-up prefix is one of the load's 128: the prefixes are the first
    // 128 × 2,048 ids of the scenario token space, in rank order.
    let base = kvroute_sim::workload::synth::SCENARIO_TOKEN_BASE;
    for set in &on_engine {
        for t in set {
            let off = t[0] - base;
            assert!(off % 2_048 == 0 && off / 2_048 < 128, "offset {off}");
            assert!(t.iter().enumerate().all(|(i, &x)| x == t[0] + i as u32));
        }
    }
}

#[test]
fn burst_siblings_are_identical_and_simultaneous() {
    let w = burst::build(0);
    assert_eq!(w.fleet.engines, 8);
    assert_eq!(w.requests.len(), 64);
    let first = &w.requests[0];
    assert_eq!(first.prompt.len(), 4_096);
    for r in &w.requests {
        assert_eq!(r.prompt, first.prompt);
        assert_eq!(r.arrival_s, 0.0);
        assert_eq!(r.output_tokens, 256);
    }
}

#[test]
fn fault_scenarios_schedule_their_faults() {
    let r = faults::build_restart(5);
    assert_eq!(r.fleet.engines, 8);
    assert_eq!(r.faults.len(), 4);
    assert!(r.faults.iter().all(|f| f.kind == FaultKind::Restart));
    assert_eq!(
        r.faults
            .iter()
            .map(|f| (f.at_s, f.engine))
            .collect::<Vec<_>>(),
        faults::RESTARTS.to_vec()
    );
    let l = faults::build_event_loss(5);
    // Same load, different channels and faults.
    assert_eq!(l.requests, r.requests);
    assert_eq!(l.fleet.channels.event_loss, 0.01);
    assert!(l.fleet.channels.event_jitter_s > l.fleet.channels.event_delay_s);
    let kinds: Vec<_> = l.faults.iter().map(|f| f.kind).collect();
    assert!(matches!(kinds[0], FaultKind::Disconnect { duration_s } if duration_s == 5.0));
    assert!(matches!(kinds[1], FaultKind::EventLoss { loss, .. } if loss == 0.5));
    assert!(matches!(kinds[2], FaultKind::TelemetryBlackout { .. }));
}

/// Checks that `w` is called `name` and is `restart`'s load for `seed` on 8 engines over
/// default channels; returns its last arrival (seconds).
fn restart_load_on_eight_engines(w: &Workload, name: &str, seed: u64) -> f64 {
    assert_eq!(w.name, name);
    assert_eq!(w.fleet.engines, 8);
    assert_eq!(w.fleet.channels, ChannelConfig::default());
    assert_eq!(
        w.requests,
        faults::build_restart(seed).requests,
        "seed {seed}"
    );
    w.requests.iter().map(|r| r.arrival_s).fold(0.0, f64::max)
}

/// `flap` is the restart load on 8 engines with exactly the two flaps of `FLAPS`, written
/// out by hand: engine 1 cut 1 s every 3 s from 10 s, engine 2 cut 2 s every 5 s from 20 s,
/// each to the end of the run (a window far past the last arrival), on default channels.
#[test]
fn flap_schedules_two_flapping_connections() {
    assert_eq!(faults::FLAPS, [(1, 10.0, 3.0, 1.0), (2, 20.0, 5.0, 2.0)]);
    for seed in [5, 9] {
        let w = faults::build_flap(seed);
        let last = restart_load_on_eight_engines(&w, "flap", seed);
        assert_eq!(w.faults.len(), 2);
        let got: Vec<_> = w
            .faults
            .iter()
            .map(|f| match f.kind {
                FaultKind::Flap {
                    duration_s,
                    period_s,
                    down_s,
                } => {
                    // To the end of the run: past the last arrival plus an hour.
                    assert!(f.at_s + duration_s > last + 3_600.0, "{duration_s}");
                    (f.engine, f.at_s, period_s, down_s)
                }
                other => panic!("not a flap: {other:?}"),
            })
            .collect();
        assert_eq!(got, [(1, 10.0, 3.0, 1.0), (2, 20.0, 5.0, 2.0)]);
        assert!(w.faults.iter().all(|f| f.check(8).is_ok()));
    }
}

/// `partial-telemetry` is the restart load on 8 engines with engines 0, 1, 2 and 3 (and no
/// other) reporting only vLLM's gauges from 0 s to past the end of the run.
#[test]
fn partial_telemetry_covers_half_the_fleet_from_the_start() {
    assert_eq!(faults::GAUGES_ONLY, [0, 1, 2, 3]);
    for seed in [5, 9] {
        let w = faults::build_partial_telemetry(seed);
        let last = restart_load_on_eight_engines(&w, "partial-telemetry", seed);
        let mut engines: Vec<u32> = w.faults.iter().map(|f| f.engine).collect();
        engines.sort_unstable();
        assert_eq!(engines, [0, 1, 2, 3]);
        for f in &w.faults {
            assert_eq!(f.at_s, 0.0);
            assert!(
                matches!(f.kind, FaultKind::PartialTelemetry { duration_s } if duration_s > last + 3_600.0),
                "{f:?}"
            );
            assert!(f.check(8).is_ok());
        }
    }
}

fn req(id: u64, parent: Option<u64>) -> SimRequest {
    SimRequest {
        id,
        arrival_s: id as f64,
        prompt: PromptSpec::Tokens(Arc::from(vec![1u32])),
        output_tokens: 1,
        follows: parent.map(|parent| kvroute_sim::request::FollowUp {
            parent,
            think_s: 0.0,
        }),
        pinned: None,
    }
}

/// A workload called `w` of `requests` on one default engine, no faults.
fn one_engine_workload(requests: Vec<SimRequest>) -> Workload {
    Workload {
        name: "w".into(),
        description: String::new(),
        requests,
        fleet: FleetSpec {
            engines: 1,
            engine: Default::default(),
            channels: Default::default(),
        },
        faults: Vec::new(),
        load_start_s: 0.0,
    }
}

#[test]
fn truncate_cuts_orphaned_follow_ups_transitively() {
    // List order: 0, 3 (child of 2), 1, 4 (child of 3), 2. Keeping the first 4 drops 2, so
    // 3 and then 4 lose their parents.
    let w = one_engine_workload(vec![
        req(0, None),
        req(3, Some(2)),
        req(1, None),
        req(4, Some(3)),
        req(2, None),
    ]);
    let t = truncate(w.clone(), 4);
    assert_eq!(t.requests.iter().map(|r| r.id).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(t.name, "w[..4]");
    assert_eq!(truncate(w.clone(), 5), w);
}

#[test]
fn truncate_keeps_every_pinned_request_and_counts_routed_ones() {
    // List order: 10 (pinned), 0, 11 (pinned), 1, 2. Keeping 1 routed request keeps 10, 0
    // and 11; keeping 3 keeps everything (3 routed, the pinned ones not counted).
    let pinned = |id| SimRequest {
        pinned: Some(0),
        ..req(id, None)
    };
    let w = one_engine_workload(vec![
        pinned(10),
        req(0, None),
        pinned(11),
        req(1, None),
        req(2, None),
    ]);
    let t = truncate(w.clone(), 1);
    assert_eq!(
        t.requests.iter().map(|r| r.id).collect::<Vec<_>>(),
        [10, 0, 11]
    );
    assert_eq!(t.name, "w[..1]");
    assert_eq!(truncate(w.clone(), 3), w);
}

#[test]
fn demo_is_hot_owner_plus_a_zipf_slice() {
    let d = scenarios::demo(1);
    assert_eq!(d.len(), 2);
    assert_eq!(d[0], hot_owner::build(1));
    assert_eq!(d[1].name, "zipf-prefixes[..200]");
    let z = zipf::build(1);
    let warm = z.requests.iter().filter(|r| r.pinned.is_some()).count();
    assert!(warm > 0);
    assert_eq!(d[1].requests[..], z.requests[..warm + 200]);
}
