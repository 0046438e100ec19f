//! Predicted residency through the public API: a decision credits its worker with the
//! routed prompt for the next decisions, until the worker's events show it or the TTL
//! passes; the index's own overlap is reported apart.
//!
//! The fleet of every test: workers 1 and 2, cap 64, prefill 8,000 and decode 1,000
//! tokens/s reported (no step model, so `b = 0`, `a` = 1 ms per token and sequence);
//! worker 1 idle, worker 2 running one request. A 2,048-token prompt (128 blocks of 16)
//! with 100 output tokens; `min_tokens` 256 records depths 16, 32, 64 and 128. By hand
//! (`kvroute_score::cost`, `projected_time`):
//!
//! * First decision. Worker 1 is idle (`n` = 1): 2,048/8,000 + 100 × 0.001 = 0.356 s.
//!   Worker 2 holds one request; the fleet's mean batch is 0.5, so `n = max(2, 1.5)` = 2:
//!   2 × 0.256 + 100 × 3 × 0.001 = 0.812 s. Worker 1.
//! * Second, identical. The mean batch is now 1 (one request on each), `n` = 2 on both.
//!   Worker 1 has the first decision's 2,048 prefill tokens queued (0.256 s). Credited
//!   with the 128 blocks, its uncached prompt is 0: 0.256 + 0 + 0.3 = 0.556 s, against
//!   worker 2's 0.812 s: worker 1, reserving no prefill. Without the credit worker 1 costs
//!   0.256 + 2 × 0.256 + 0.3 = 1.068 s and the request goes to worker 2.

mod common;
mod ingest_support;

use common::{NOW, idle, publish, router, sample, store, tokens};
use kvroute::{EngineHash, Nanos, PredictedConfig, RouteRequest, RouterConfig, WorkerId};

const PROMPT: usize = 2_048;
const OUT: u32 = 100;

fn fleet(predicted: Option<PredictedConfig>) -> (kvroute::Router, Vec<WorkerId>) {
    let (r, ws) = router(4, 2, |c: &mut RouterConfig| c.predicted = predicted);
    publish(
        &r,
        &ws,
        &[(ws[0], idle()), (ws[1], sample(1, 0, 0, 0, 0.0))],
    );
    (r, ws)
}

fn close(got: f32, want: f32) -> bool {
    (got - want).abs() < 1e-5
}

/// The second sibling joins the worker computing the prompt, credited with all of it but
/// reported with the index's overlap (none), and reserves no prefill there.
#[test]
fn a_sibling_is_credited_with_the_prompt_routed_before_it() {
    let (r, ws) = fleet(Some(PredictedConfig::default()));
    let prompt = tokens(3, PROMPT);
    let req = RouteRequest::tokens(&prompt, OUT, NOW);
    let first = r.route(&req).unwrap();
    assert_eq!(first.worker, ws[0]);
    assert!(close(first.cost, 0.356), "{first}");
    let second = r.route(&req).unwrap();
    assert_eq!(second.worker, ws[0], "{second}");
    assert!(close(second.cost, 0.556), "{second}");
    assert_eq!((second.overlap_blocks, second.predicted_blocks), (0, 128));
    assert_eq!(r.reserved(ws[0]).unwrap().prefill_tokens, PROMPT as u64);
    let p = r.stats().predictions;
    // The first records four depths; the second raises worker 1 once per depth and, its
    // entries refreshed, records the same four again.
    assert_eq!(
        (p.recorded, p.credited, p.retired, p.contended),
        (8, 4, 0, 0)
    );
}

/// Off (the default): the same two decisions split, the second costed without a credit.
#[test]
fn without_predictions_the_sibling_goes_to_the_other_worker() {
    let (r, ws) = fleet(RouterConfig::default().predicted);
    let prompt = tokens(3, PROMPT);
    let req = RouteRequest::tokens(&prompt, OUT, NOW);
    let first = r.route(&req).unwrap();
    let second = r.route(&req).unwrap();
    assert_eq!((first.worker, second.worker), (ws[0], ws[1]));
    assert!(close(second.cost, 0.812), "{second}");
    assert_eq!(second.predicted_blocks, 0);
    assert_eq!(r.stats().predictions, kvroute::PredictionStats::default());
}

/// Once the worker's own store arrives, the next lookup retires the credit; after the
/// worker then evicts the blocks, nothing credits it with them.
#[test]
fn the_workers_events_retire_the_credit() {
    let (r, ws) = fleet(Some(PredictedConfig::default()));
    let prompt = tokens(3, PROMPT);
    let req = RouteRequest::tokens(&prompt, OUT, NOW);
    let first = r.route(&req).unwrap();
    assert_eq!(first.worker, ws[0]);
    store(&r, ws[0], &prompt, 0);
    let second = r.route(&req).unwrap();
    assert_eq!((second.overlap_blocks, second.predicted_blocks), (128, 0));
    assert_eq!(r.stats().predictions.retired, 4);
    let evicted: Vec<EngineHash> = (0..128).map(EngineHash).collect();
    r.remove_blocks(ws[0], &evicted).unwrap();
    drop((first, second));
    let third = r.route(&req).unwrap();
    assert_eq!((third.overlap_blocks, third.predicted_blocks), (0, 0));
    let p = r.stats().predictions;
    assert_eq!((p.credited, p.retired), (0, 4));
}

/// A credit lasts its TTL from the decision and no longer.
#[test]
fn a_credit_ends_at_its_ttl() {
    let mut cfg = PredictedConfig::default();
    cfg.ttl = Nanos::from_millis(500);
    let (r, ws) = fleet(Some(cfg));
    let prompt = tokens(3, PROMPT);
    let first = r.route(&RouteRequest::tokens(&prompt, OUT, NOW)).unwrap();
    assert_eq!(first.worker, ws[0]);
    let late = NOW + Nanos::from_millis(500);
    let second = r.route(&RouteRequest::tokens(&prompt, OUT, late)).unwrap();
    assert_eq!((second.worker, second.predicted_blocks), (ws[1], 0));
}

/// A prompt sharing 100 of its 128 blocks with the routed one is credited with 64 on the
/// first one's worker: the deepest recorded depth within the shared part (16, 32 and 64
/// match, 128 does not; a credit may under-state, never over-state). Credited with 64
/// blocks, worker 1 costs 0.256 + 2 × 1,024/8,000 + 0.3 = 0.812 s, as worker 2 does: the
/// tie may go either way, so the credit is checked in the stats.
#[test]
fn a_partly_shared_prompt_is_credited_up_to_a_recorded_depth() {
    let (r, ws) = fleet(Some(PredictedConfig::default()));
    let prompt = tokens(3, PROMPT);
    let first = r.route(&RouteRequest::tokens(&prompt, OUT, NOW)).unwrap();
    assert_eq!(first.worker, ws[0]);
    let mut other = prompt[..100 * 16].to_vec();
    other.extend(tokens(4, 28 * 16));
    let second = r.route(&RouteRequest::tokens(&other, OUT, NOW)).unwrap();
    assert!(close(second.cost, 0.812), "{second}");
    assert_eq!(r.stats().predictions.credited, 3);
    let want = if second.worker == ws[0] { 64 } else { 0 };
    assert_eq!(second.predicted_blocks, want, "{second}");
}

/// Out-of-range settings are refused, naming the field.
#[test]
fn out_of_range_settings_are_refused() {
    let mut c = RouterConfig::new(4, 16);
    let mut p = PredictedConfig::default();
    p.ttl = Nanos(0);
    c.predicted = Some(p);
    let e = kvroute::Router::new(c).unwrap_err();
    assert!(e.to_string().contains("predicted.ttl"), "{e}");
}

/// A sibling routed on a credit does not extend it: with a 500 ms TTL, decisions at 0 and
/// 300 ms leave a credit that ends at 500 ms. At 600 ms worker 1 holds two reservations
/// (2,048 prefill tokens queued), the mean batch is 1.5 and its `n` 3: uncredited it costs
/// 0.256 + 3 × 0.256 + 100 × 5 × 0.001 = 1.524 s against worker 2's 2.5 × 0.256 + 100 × 4
/// × 0.001 = 1.04 s (credited it would be 0.756 s).
#[test]
fn siblings_do_not_extend_a_credit() {
    let mut cfg = PredictedConfig::default();
    cfg.ttl = Nanos::from_millis(500);
    let (r, ws) = fleet(Some(cfg));
    let prompt = tokens(3, PROMPT);
    let at = |ms| RouteRequest::tokens(&prompt, OUT, NOW + Nanos::from_millis(ms));
    let first = r.route(&at(0)).unwrap();
    let second = r.route(&at(300)).unwrap();
    assert_eq!((first.worker, second.worker), (ws[0], ws[0]));
    assert_eq!(second.predicted_blocks, 128);
    let third = r.route(&at(600)).unwrap();
    assert_eq!(
        (third.worker, third.predicted_blocks),
        (ws[1], 0),
        "{third}"
    );
    assert!(close(third.cost, 1.04), "{third}");
}

/// A clear of the worker's cache drops its credits: after the first decision, worker 1's
/// cache is cleared (`clear_blocks`), and the identical second request is costed without
/// a credit there: 1.068 s against worker 2's 0.812 s, so it goes to worker 2 (module
/// docs). Counted in `PredictionStats::cleared` (the four recorded depths).
#[test]
fn a_cleared_cache_drops_its_credits() {
    let (r, ws) = fleet(Some(PredictedConfig::default()));
    let prompt = tokens(3, PROMPT);
    let req = RouteRequest::tokens(&prompt, OUT, NOW);
    let first = r.route(&req).unwrap();
    assert_eq!(first.worker, ws[0]);
    r.clear_blocks(ws[0]).unwrap();
    let second = r.route(&req).unwrap();
    assert_eq!(
        (second.worker, second.predicted_blocks),
        (ws[1], 0),
        "{second}"
    );
    assert!(close(second.cost, 0.812), "{second}");
    assert_eq!(r.stats().predictions.cleared, 4);
}

/// A decision whose clock is an hour ahead records entries that no decision on the real
/// clock is credited with (they would otherwise outlive every TTL): the identical request
/// at `NOW` goes to worker 2, uncredited, as without predictions.
#[test]
fn a_decision_from_far_ahead_credits_nobody_on_the_real_clock() {
    let (r, ws) = fleet(Some(PredictedConfig::default()));
    let prompt = tokens(3, PROMPT);
    let ahead = NOW + Nanos::from_secs(3_600);
    let first = r.route(&RouteRequest::tokens(&prompt, OUT, ahead)).unwrap();
    assert_eq!(first.worker, ws[0]);
    let second = r.route(&RouteRequest::tokens(&prompt, OUT, NOW)).unwrap();
    assert_eq!(
        (second.worker, second.predicted_blocks),
        (ws[1], 0),
        "{second}"
    );
}

/// The same through the engine's event stream: an `AllBlocksCleared` ingested for worker 1
/// after the first decision drops its credits, so the second request goes to worker 2.
#[test]
fn an_ingested_clear_drops_the_credits() {
    let (r, ws) = fleet(Some(PredictedConfig::default()));
    let prompt = tokens(3, PROMPT);
    let req = RouteRequest::tokens(&prompt, OUT, NOW);
    let first = r.route(&req).unwrap();
    assert_eq!(first.worker, ws[0]);
    let msg = ingest_support::batch(0, vec![kvroute_wire::KvEvent::AllBlocksCleared]);
    r.ingest(ws[0], kvroute::Channel::Live, &msg).unwrap();
    let second = r.route(&req).unwrap();
    assert_eq!(
        (second.worker, second.predicted_blocks),
        (ws[1], 0),
        "{second}"
    );
    assert_eq!(r.stats().predictions.cleared, 4);
}
