//! Hand-computed timings and prefix hits of single requests (formula of
//! `kvroute_sim::engine::config`: `step = base + per_seq·decoding + prefill/prefill_tps +
//! per_ctx·context`).

mod driver_common;

use driver_common::{request, tokens, workload};
use kvroute::Policy;
use kvroute_sim::driver::{RunOptions, run};
use kvroute_sim::engine::EngineConfig;
use kvroute_sim::net::ChannelConfig;

/// base 10 ms, 1 ms per decoding request, 1 µs per context token, 10,000 prefill tokens/s,
/// 8,192-token chunks.
fn engine() -> EngineConfig {
    EngineConfig {
        max_running: 8,
        kv_blocks: 10_000,
        block_size: 16,
        chunk_tokens: 8_192,
        max_model_len: 65_536,
        step_base_s: 0.010,
        step_per_seq_s: 0.001,
        step_per_ctx_token_s: 1e-6,
        prefill_tps: 10_000.0,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

/// One 1,000-token request with 5 output tokens arriving at t = 1 s:
/// prefill step 0.010 + 1,000/10,000 = 0.110 s, so the first token at 1.110 s; then 4
/// decode steps at contexts 1,000..1,003: 4 × (0.010 + 0.001) + (1,000 + 1,001 + 1,002 +
/// 1,003) × 1e-6 = 0.048006 s, so the last token at 1.158006 s.
#[test]
fn single_request_prefill_and_decode() {
    let w = workload(
        1,
        engine(),
        ChannelConfig::default(),
        vec![request(1, 1.0, tokens(1, 1_000), 5)],
        vec![],
    );
    let r = run(&w, Policy::RoundRobin, &RunOptions::default());
    assert_eq!(r.error, None);
    let q = &r.requests[0];
    assert_eq!(q.engine, Some(0));
    assert!(close(q.arrival_s, 1.0));
    assert!(
        close(q.first_token_s.unwrap(), 1.110),
        "{:?}",
        q.first_token_s
    );
    assert!(close(q.finish_s.unwrap(), 1.158_006), "{:?}", q.finish_s);
    assert_eq!(q.cached_tokens, 0);
    assert_eq!(r.generated_tokens, vec![5]);
    assert!(close(r.end_s, 1.158_006));
    assert_eq!(r.reservations_at_end, 0);
    assert_eq!(r.completed, 1);
}

/// A 20,000-token prompt is prefilled in chunks of 8,192, 8,192 and 3,616 tokens:
/// 3 × 0.010 + 20,000/10,000 = 2.030 s, first token at 2.030 s; one output token only,
/// so it also finishes then.
#[test]
fn chunked_prefill() {
    let w = workload(
        1,
        engine(),
        ChannelConfig::default(),
        vec![request(1, 0.0, tokens(1, 20_000), 1)],
        vec![],
    );
    let r = run(&w, Policy::RoundRobin, &RunOptions::default());
    let q = &r.requests[0];
    assert!(
        close(q.first_token_s.unwrap(), 2.030),
        "{:?}",
        q.first_token_s
    );
    assert!(close(q.finish_s.unwrap(), 2.030));
}

/// The same 1,000-token prompt again after the first finished: the engine holds its 62
/// full blocks (992 tokens; `(1000 − 1) / 16 = 62`, the last token always recomputed), so
/// the prefill is 8 tokens: 0.010 + 8/10,000 = 0.0108 s. The router predicted the same
/// overlap from the engine's events. A 1,008-token prompt (63 full blocks) still hits only
/// `(1008 − 1) / 16 = 62` blocks: the last block is recomputed (16 tokens, 0.0116 s). The
/// router holds all 63, but the record's prediction counts what an engine can reuse, 62
/// blocks (992 tokens), so the last block is no phantom hit.
#[test]
fn second_request_hits_the_engine_cache() {
    let w = workload(
        1,
        engine(),
        ChannelConfig::default(),
        vec![
            request(1, 0.0, tokens(1, 1_000), 2),
            request(2, 1.0, tokens(1, 1_000), 2),
            request(3, 2.0, tokens(2, 1_008), 2),
            request(4, 3.0, tokens(2, 1_008), 2),
        ],
        vec![],
    );
    let r = run(&w, Policy::KvAware, &RunOptions::default());
    let q = &r.requests;
    assert_eq!(q[1].cached_tokens, 992);
    assert_eq!(q[1].predicted_cached_tokens, 992);
    assert!(close(q[1].first_token_s.unwrap() - 1.0, 0.0108));
    assert_eq!(q[3].cached_tokens, 992);
    assert_eq!(q[3].predicted_cached_tokens, 992);
    assert!(close(q[3].first_token_s.unwrap() - 3.0, 0.0116));
    assert_eq!(r.channel.decode_errors + r.channel.ingest_errors, 0);
}

/// Two requests arriving together share decode steps: the first step prefills both
/// (0.010 + 2,000/10,000 = 0.210 s), then each decode step serves two requests at contexts
/// 1,000 + 1,000: 0.010 + 2 × 0.001 + 2,000 × 1e-6 = 0.014 s.
#[test]
fn requests_arriving_together_share_steps() {
    let w = workload(
        1,
        engine(),
        ChannelConfig::default(),
        vec![
            request(1, 0.0, tokens(1, 1_000), 2),
            request(2, 0.0, tokens(2, 1_000), 2),
        ],
        vec![],
    );
    let r = run(&w, Policy::RoundRobin, &RunOptions::default());
    for q in &r.requests {
        assert!(close(q.first_token_s.unwrap(), 0.210), "{q:?}");
        assert!(close(q.finish_s.unwrap(), 0.224), "{q:?}");
    }
}
