//! Whole runs: determinism, accounting of every request, admission and retries, follow-ups,
//! invalid input.

mod driver_common;

use driver_common::{assert_totals, conversations, request, small_engine, tokens, workload};
use kvroute::{AdmissionConfig, Policy, ScoreConfig};
use kvroute_sim::SimRequest;
use kvroute_sim::driver::{RunError, RunOptions, run, try_run};
use kvroute_sim::fault::{Fault, FaultKind};
use kvroute_sim::net::{ChannelConfig, TelemetryMode};
use kvroute_sim::request::FollowUp;
use kvroute_sim::workload::Workload;

fn lossy() -> ChannelConfig {
    ChannelConfig {
        event_loss: 0.1,
        event_jitter_s: 0.01,
        telemetry_loss: 0.2,
        ..ChannelConfig::default()
    }
}

/// `reqs` on 2 idle engines of 4,000 blocks over lossless channels, no faults.
fn two_engines(reqs: Vec<SimRequest>) -> Workload {
    workload(
        2,
        small_engine(4_000),
        ChannelConfig::default(),
        reqs,
        vec![],
    )
}

/// 6 requests arriving at t = 0, each with its own 800-token prompt and 10 output tokens.
fn six_at_once() -> Vec<SimRequest> {
    (0..6)
        .map(|i| request(i, 0.0, tokens(i as u32 + 1, 800), 10))
        .collect()
}

/// Default options with an admission bound of 1 outstanding request per engine.
fn bound_one() -> RunOptions<'static> {
    RunOptions {
        admission: Some(AdmissionConfig::new(1)),
        ..RunOptions::default()
    }
}

/// Same seed, same result (wall-clock time aside), with every random draw in play: event
/// and telemetry loss, jitter, faults and the router's near-tie draws. Another seed draws
/// other losses.
#[test]
fn same_seed_same_result() {
    let faults = vec![
        Fault {
            at_s: 1.0,
            engine: 2,
            kind: FaultKind::Restart,
        },
        Fault {
            at_s: 0.5,
            engine: 0,
            kind: FaultKind::Disconnect { duration_s: 1.0 },
        },
    ];
    let w = workload(
        4,
        small_engine(1_500),
        lossy(),
        conversations(30, 4, 0.1, 0.4),
        faults,
    );
    let score = {
        let mut c = ScoreConfig::default();
        c.near_tie_band = 0.2;
        c
    };
    let go = |seed| {
        let opts = RunOptions {
            seed,
            score: Some(score),
            probes: vec![1.0, 2.0],
            ..RunOptions::default()
        };
        let mut r = run(&w, Policy::default(), &opts);
        assert_eq!(r.error, None);
        r.wall_s = 0.0;
        r
    };
    let a = go(7);
    let b = go(7);
    assert_eq!(a, b);
    assert!(a.channel.batches_lost > 0 && a.channel.telemetry_lost > 0);
    let c = go(8);
    assert_ne!(a.channel, c.channel);
}

/// Admission bound 1 on 2 idle engines, 6 requests at once, no retry: the first two are
/// placed (one per engine: each reservation makes its engine's outstanding count 1), the
/// other four are rejected for good.
#[test]
fn admission_rejects_over_the_bound() {
    let w = two_engines(six_at_once());
    let opts = RunOptions {
        max_retries: 0,
        ..bound_one()
    };
    let r = run(&w, Policy::LeastLoad, &opts);
    assert_eq!((r.completed, r.rejected_for_good, r.rejections), (2, 4, 4));
    let engines: Vec<_> = r.requests.iter().filter_map(|q| q.engine).collect();
    assert_eq!(engines.len(), 2);
    assert_ne!(engines[0], engines[1]);
    assert!(
        r.requests
            .iter()
            .filter(|q| q.engine.is_none())
            .all(|q| q.reason == "rejected" && q.rejections == 1)
    );
    assert_eq!(r.reservations_at_end, 0);
    assert_totals(&r);
}

/// With retries every rejected request is placed eventually (2 at a time, 0.1 s apart):
/// all complete and some were rejected first.
#[test]
fn rejected_requests_retry_after_the_backoff() {
    let w = two_engines(six_at_once());
    let opts = RunOptions {
        retry_backoff_s: 0.1,
        max_retries: 100,
        ..bound_one()
    };
    let r = run(&w, Policy::LeastLoad, &opts);
    assert_eq!(r.completed, 6);
    assert!(r.rejections >= 4);
    // A retried request arrives at its first arrival time; its wait is in its latency.
    assert!(r.requests.iter().all(|q| q.arrival_s == 0.0));
    assert!(
        r.requests
            .iter()
            .any(|q| q.first_token_s.unwrap() > 0.1 && q.rejections > 0)
    );
    assert_eq!(r.reservations_at_end, 0);
    assert_totals(&r);
}

/// Follow-ups arrive `think_s` after their parent's last token; those of a request given
/// up never arrive.
#[test]
fn follow_ups_arrive_after_their_parent() {
    let mut reqs = Vec::new();
    for c in 0..4u64 {
        reqs.push(request(c * 10, 0.0, tokens(c as u32 + 1, 800), 10));
        let mut next = request(c * 10 + 1, 0.0, tokens(c as u32 + 1, 1_200), 10);
        next.follows = Some(FollowUp {
            parent: c * 10,
            think_s: 2.0,
        });
        reqs.push(next);
    }
    let w = two_engines(reqs);
    let opts = RunOptions {
        max_retries: 0,
        ..bound_one()
    };
    let r = run(&w, Policy::LeastLoad, &opts);
    assert_eq!(
        (r.completed, r.rejected_for_good, r.never_arrived),
        (4, 2, 2)
    );
    for pair in r.requests.chunks(2) {
        let (parent, child) = (&pair[0], &pair[1]);
        match parent.finish_s {
            Some(f) => {
                assert!((child.arrival_s - (f + 2.0)).abs() < 1e-6);
                // The second turn extends the first: the engine that served it hits.
                assert_eq!(child.engine, parent.engine);
                assert_eq!(child.cached_tokens, 800 / 16 * 16);
            }
            None => assert_eq!(child.reason, "never_arrived"),
        }
    }
    assert_totals(&r);
}

/// A horizon stops the run with requests in flight; they still hold their reservations,
/// and every request is accounted for.
#[test]
fn horizon_leaves_requests_in_flight() {
    let w = two_engines(conversations(10, 3, 0.2, 0.5));
    let opts = RunOptions {
        horizon_s: Some(1.0),
        ..RunOptions::default()
    };
    let r = run(&w, Policy::RoundRobin, &opts);
    assert!(r.end_s <= 1.0);
    assert!(r.in_flight_at_end > 0);
    assert!(r.reservations_at_end > 0);
    assert!(r.reservations_at_end <= r.in_flight_at_end);
    assert_totals(&r);
}

/// vLLM-style telemetry (requests and KV usage only) also drives a complete run.
#[test]
fn vllm_metrics_telemetry() {
    let channels = ChannelConfig {
        telemetry: TelemetryMode::VllmMetrics,
        ..ChannelConfig::default()
    };
    let w = workload(
        3,
        small_engine(2_000),
        channels,
        conversations(15, 3, 0.1, 0.3),
        vec![],
    );
    let r = run(&w, Policy::default(), &RunOptions::default());
    assert_eq!(r.completed, 45);
    assert_eq!(r.channel.telemetry_rejected, 0);
    assert!(r.fallbacks.is_empty(), "{:?}", r.fallbacks);
    assert_totals(&r);
}

/// Invalid workloads and options are typed errors, and `run` reports them without
/// panicking.
#[test]
fn invalid_input_is_an_error() {
    let base = workload(
        2,
        small_engine(2_000),
        ChannelConfig::default(),
        vec![request(1, 0.0, tokens(1, 100), 1)],
        vec![],
    );
    let opts = RunOptions::default();
    let mut w = base.clone();
    w.fleet.engines = 0;
    assert_eq!(
        try_run(&w, Policy::RoundRobin, &opts).unwrap_err(),
        RunError::NoEngines
    );
    let mut w = base.clone();
    w.faults.push(Fault {
        at_s: 1.0,
        engine: 5,
        kind: FaultKind::Restart,
    });
    assert!(matches!(
        try_run(&w, Policy::RoundRobin, &opts),
        Err(RunError::Fault { index: 0, .. })
    ));
    let mut w = base.clone();
    w.requests[0].follows = Some(FollowUp {
        parent: 42,
        think_s: 1.0,
    });
    assert!(matches!(
        try_run(&w, Policy::RoundRobin, &opts),
        Err(RunError::Request { index: 0, .. })
    ));
    let mut w = base.clone();
    w.fleet.channels.event_loss = 1.5;
    assert!(matches!(
        try_run(&w, Policy::RoundRobin, &opts),
        Err(RunError::Channel("event_loss", _))
    ));
    let mut w = base.clone();
    w.fleet.engine.prefill_tps = 0.0;
    let r = run(&w, Policy::RoundRobin, &opts);
    assert!(r.error.is_some() && r.requests.is_empty());
    let bad = RunOptions {
        sweep_interval_s: 0.0,
        ..RunOptions::default()
    };
    assert!(matches!(
        try_run(&base, Policy::RoundRobin, &bad),
        Err(RunError::Option("sweep_interval_s", _))
    ));
}

/// A prompt longer than the engine's context is refused (no first token, reservation
/// released); the rest of the run is unaffected.
#[test]
fn oversized_prompt_is_refused() {
    let mut engine = small_engine(2_000);
    engine.max_model_len = 1_000;
    let w = workload(
        1,
        engine,
        ChannelConfig::default(),
        vec![
            request(1, 0.0, tokens(1, 1_000), 5),
            request(2, 0.0, tokens(2, 999), 5),
        ],
        vec![],
    );
    let r = run(&w, Policy::RoundRobin, &RunOptions::default());
    assert_eq!((r.refused, r.completed), (1, 1));
    assert_eq!(r.requests[0].first_token_s, None);
    // 999 prompt tokens + 5 outputs exceed 1,000: output stops at the context length.
    assert_eq!(r.generated_tokens, vec![1]);
    assert_eq!(r.reservations_at_end, 0);
    assert_totals(&r);
}

/// An engine whose cache holds less than its context: 11 blocks of 16 (one kept back), 160
/// tokens, against a 32,768-token context. A 100-token prompt asking for 500 tokens
/// generates 60, the most one sequence alone can hold in the cache (as vLLM, which refuses
/// to start unless the context fits the cache, runs with the context lowered to it), and
/// finishes instead of preempting itself for ever.
#[test]
fn output_stops_where_the_cache_is_full_with_the_sequence_alone() {
    let w = workload(
        1,
        small_engine(11),
        ChannelConfig::default(),
        vec![request(1, 0.0, tokens(1, 100), 500)],
        vec![],
    );
    let opts = RunOptions {
        horizon_s: Some(600.0),
        ..Default::default()
    };
    let r = run(&w, Policy::RoundRobin, &opts);
    assert_eq!(r.completed, 1, "{:?}", r.requests);
    assert_eq!(r.requests[0].output_tokens, 60);
    assert_eq!(r.generated_tokens, vec![60]);
    assert_totals(&r);
}

/// On the default channels (no loss, no faults, no near-tie band) the seed still matters:
/// it sets each engine's telemetry phase and the channels' delay jitter, so a load-aware
/// policy meets other load figures. The same seed repeats the run exactly.
#[test]
fn default_channels_seed_changes_the_run_and_repeats_it() {
    let w = workload(
        4,
        small_engine(1_500),
        ChannelConfig::default(),
        conversations(40, 4, 0.05, 0.2),
        vec![],
    );
    let go = |seed| {
        let opts = RunOptions {
            seed,
            ..RunOptions::default()
        };
        let mut r = run(&w, Policy::LeastLoad, &opts);
        assert_eq!(r.error, None);
        r.wall_s = 0.0;
        r
    };
    let a = go(1);
    assert_eq!(a, go(1));
    let engines = |r: &kvroute_sim::RunResult| -> Vec<Option<u32>> {
        r.requests.iter().map(|q| q.engine).collect()
    };
    assert_ne!(
        engines(&a),
        engines(&go(2)),
        "seed 2 places requests elsewhere"
    );
}

/// Without jitter or stagger every engine reports at the same instants and the seed only
/// reorders the engines' registration, which the symmetric fleet does not notice:
/// `round_robin` gives the same metrics for every seed.
#[test]
fn jitter_free_channels_and_round_robin_ignore_the_seed() {
    let w = workload(
        4,
        small_engine(1_500),
        ChannelConfig::default().without_jitter(),
        conversations(20, 3, 0.05, 0.2),
        vec![],
    );
    let go = |seed| {
        let opts = RunOptions {
            seed,
            ..RunOptions::default()
        };
        let r = run(&w, Policy::RoundRobin, &opts);
        assert_eq!(r.error, None);
        let mut generated = r.generated_tokens.clone();
        generated.sort_unstable();
        (r.completed, generated)
    };
    assert_eq!(go(1), go(2));
}

/// Prompt hashes computed once give every run the result it computes alone, with other
/// arrival times too; hashes of other requests or another block size are refused.
#[test]
fn shared_prompt_hashes_give_the_same_runs() {
    use kvroute_sim::driver::PromptHashes;
    let w = workload(
        3,
        small_engine(1_500),
        lossy(),
        conversations(20, 3, 0.1, 0.3),
        vec![],
    );
    let hashes = PromptHashes::of(&w);
    let mut later = w.clone();
    for r in &mut later.requests {
        r.arrival_s *= 2.0;
    }
    for (w, policy) in [(&w, Policy::default()), (&later, Policy::LeastLoad)] {
        let alone = RunOptions {
            seed: 3,
            ..RunOptions::default()
        };
        let shared = RunOptions {
            prompt_hashes: Some(&hashes),
            ..alone.clone()
        };
        let mut a = run(w, policy, &alone);
        let mut b = run(w, policy, &shared);
        assert_eq!(a.error, None);
        (a.wall_s, b.wall_s) = (0.0, 0.0);
        assert_eq!(a, b);
    }
    let mut fewer = w.clone();
    fewer.requests.pop();
    let mut longer = w.clone();
    longer.requests[0].output_tokens += 1;
    let mut other_blocks = w.clone();
    other_blocks.fleet.engine.block_size = 32;
    for other in [&fewer, &longer, &other_blocks] {
        assert!(!hashes.fit(other));
        let opts = RunOptions {
            prompt_hashes: Some(&hashes),
            ..RunOptions::default()
        };
        assert_eq!(
            try_run(other, Policy::LeastLoad, &opts).err(),
            Some(RunError::PromptHashes)
        );
    }
}
