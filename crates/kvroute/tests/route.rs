//! The full Router path on small fleets with hand-computed expectations: cache owner when
//! idle, spill when overloaded (a hot cached owner), shadow mode, fallback, request errors.
//! Units: prefill 8,000 tokens/s and decode 1,000 tokens/s (reported), 64 slots per
//! worker, KV barrier 0.15 s · k/(1 − k), blocks of 16 tokens, policy `projected_time`
//! enforce (default). Projected seconds (`kvroute_score`, module `cost`):
//! `queued/π + wait + n·U/π + (2n − 1)·O/δ + barrier` (no step model configured:
//! processor sharing), `U` uncached and `O` expected output tokens, `n = q + 1` for `q`
//! requests while the batch has room, lifted to the fleet's mean batch + 1 (at most the cap)
//! where the cap is known and the worker holds a request, else the cap.

mod common;

use common::{BS, NOW, idle, publish, router, sample, store, tokens};
use kvroute::{
    FallbackCause, Nanos, Policy, ProjectedMode, Prompt, Reason, RouteError, RouteRequest,
};

/// 4,096-token shared prefix (256 blocks) + 64 new tokens = 4,160-token prompts.
fn hot_request(prefix: &[u32], tail_seed: u32) -> Vec<u32> {
    let mut t = prefix.to_vec();
    t.extend(tokens(tail_seed, 64));
    t
}

/// Idle fleet of 5, worker 1 holds the prefix; 256 output tokens (0.256 s of decode). Owner:
/// uncached 64 tokens → 64/8,000 + 0.256 = 0.264 s. Peers: 4,160/8,000 + 0.256 = 0.776 s.
/// The owner wins with `CacheHold`, 256 blocks.
#[test]
fn route_picks_the_cache_owner_when_idle() {
    let (r, ws) = router(8, 5, |_| {});
    let prefix = tokens(1, 4_096);
    store(&r, ws[0], &prefix, 0);
    publish(&r, &ws, &[]);
    let req = hot_request(&prefix, 2);
    let d = r.route(&RouteRequest::tokens(&req, 256, NOW)).unwrap();
    assert_eq!(d.worker, ws[0]);
    assert_eq!(d.reason, Reason::CacheHold);
    assert_eq!(d.overlap_blocks, 256);
    assert!((d.cost - 0.264).abs() < 1e-6, "{d:?}");
    // Reserved: one request, 64 uncached prefill tokens, 256 decode tokens.
    let held = r.reserved(ws[0]).unwrap();
    assert_eq!(
        (held.requests, held.prefill_tokens, held.decode_tokens),
        (1, 64, 256)
    );
    assert_eq!(r.stats().with_reason(Reason::CacheHold), 1);
}

/// The hot owner in small, 256 output tokens: worker 1 owns the prefix with 38 running and 109
/// waiting (q 147 > 64 slots: n = 64), queued 6,976 tokens, KV 0.6 → after 0.872 s of
/// queue it waits for the 84th free slot, one every 0.512 s (the running requests taken to
/// generate the typical 512 tokens): 43.008 s, + 64 × 0.008 + 127 × 0.256 + 0.225 =
/// 77.129 s. Worker 5 is lightly loaded (2 running, n = 3, KV 0.05):
/// 3 × 0.52 + 5 × 0.256 + 0.0079 = 2.848 s. Workers 2–4 are idle: 0.52 + 0.256 = 0.776 s
/// each (an idle worker's batch is 1). Each routed request reserves one request, 4,160
/// prefill and 256 decode tokens on its worker, whose batch then has room and is lifted to
/// the fleet's mean batch + 1, each worker counted at most at its cap (the owner's 147
/// requests count 64, worker 5's 2 count 2): after the first pick, mean 67/5 = 13.4,
/// n = 14.4, 0.52 + 14.4 × 0.52 + 27.8 × 0.256 = 15.125 s there. So three requests go to
/// the three idle peers, one each (`Spill`, 0.776 s); then the mean batch is 69/5 = 13.8 and
/// n = 14.8 on every worker with room: a peer costs 0.52 + 7.696 + 28.6 × 0.256 =
/// 15.538 s, worker 5 (nothing queued) 7.696 + 7.3216 + 0.0079 = 15.0255 s: the fourth
/// goes to worker 5. None goes to the owner.
#[test]
fn route_spills_off_an_overloaded_owner() {
    let (r, ws) = router(8, 5, |_| {});
    let prefix = tokens(1, 4_096);
    store(&r, ws[0], &prefix, 0);
    publish(
        &r,
        &ws,
        &[
            (ws[0], sample(38, 109, 6_976, 159_600, 0.6)),
            (ws[4], sample(2, 0, 0, 8_400, 0.05)),
        ],
    );
    let mut held = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..3 {
        let req = hot_request(&prefix, 10 + i);
        let d = r.route(&RouteRequest::tokens(&req, 256, NOW)).unwrap();
        assert!([ws[1], ws[2], ws[3]].contains(&d.worker), "{d:?}");
        assert_eq!(d.reason, Reason::Spill);
        assert!((d.cost - 0.776).abs() < 1e-6, "{d:?}");
        assert_eq!(d.overlap_blocks, 0);
        seen.insert(d.worker);
        held.push(d);
    }
    assert_eq!(seen.len(), 3, "one request per idle peer");
    // The one-line summary a gateway logs: worker, slot, overlap, cost, policy, reason,
    // and nothing for what did not apply (no fallback, redirect, re-score or shadow).
    let line = held[0].to_string();
    let head = format!(
        "worker {} (slot {}), overlap 0 blocks, cost ",
        held[0].worker,
        held[0].slot.index()
    );
    assert!(line.starts_with(&head), "{line}");
    assert!(line.ends_with(" (projected_time), spill"), "{line}");
    let req = hot_request(&prefix, 20);
    let d = r.route(&RouteRequest::tokens(&req, 256, NOW)).unwrap();
    assert_eq!(d.worker, ws[4], "{d:?}");
    assert!((d.cost - 15.0255).abs() < 1e-3, "{d:?}");
    assert_eq!(r.reserved(ws[0]).unwrap().requests, 0, "owner got nothing");
    assert_eq!(r.stats().with_reason(Reason::Spill), 4);
}

/// Shadow mode dispatches as `least_load` and records enforce's pick. 64 output tokens
/// (0.064 s of decode). Worker 1 holds the prefix with 2 waiting requests and 800 queued
/// tokens (n = 3): least_load 800/8,000 = 0.1 s, projected 0.1 + 3 × 0.008 + 5 × 0.064 =
/// 0.444 s. Worker 2 is idle: least_load 0 s, projected 0.52 + 0.064 = 0.584 s. Dispatch:
/// worker 2 (`LeastLoad`); counterfactual: worker 1 (`CacheHold`, 256 blocks, 0.444 s),
/// against worker 2's 0.584 s: enforce would gain 0.14 s; one disagreement, counted under
/// the label `projected_time:shadow`.
#[test]
fn shadow_records_the_counterfactual_without_changing_dispatch() {
    let (r, ws) = router(4, 2, |c| {
        c.score.policy = Policy::ProjectedTime {
            mode: ProjectedMode::Shadow,
        }
    });
    let prefix = tokens(1, 4_096);
    store(&r, ws[0], &prefix, 0);
    publish(&r, &ws, &[(ws[0], sample(0, 2, 800, 0, 0.0))]);
    let req = hot_request(&prefix, 3);
    let d = r.route(&RouteRequest::tokens(&req, 64, NOW)).unwrap();
    assert_eq!((d.worker, d.reason), (ws[1], Reason::LeastLoad));
    let cf = d.shadow.expect("shadow mode records a counterfactual");
    assert_eq!((cf.worker, cf.reason), (Some(ws[0]), Reason::CacheHold));
    assert!((cf.cost - 0.444).abs() < 1e-6, "{cf:?}");
    assert_eq!(cf.overlap_blocks, 256);
    assert!((cf.dispatched_cost - 0.584).abs() < 1e-6, "{cf:?}");
    assert!((cf.gain() - 0.14).abs() < 1e-6, "{cf:?}");
    let s = r.stats();
    assert_eq!(s.shadow_disagreements, 1);
    assert_eq!(s.decisions.len(), 1);
    assert_eq!(
        (
            s.decisions[0].policy,
            s.decisions[0].reason,
            s.decisions[0].count
        ),
        ("projected_time:shadow", Reason::LeastLoad, 1)
    );
}

/// Workers that never reported: past half the fleet (2 of 3) `projected_time` falls back
/// to `least_load` fleet-wide, and the decision and the stats say why; with one of 3 the
/// rule is scoped: the fresh workers keep cache-aware routing, and the missing worker,
/// idle as far as is known, is costed just above the best fresh worker, so three
/// decisions, each dropped at once, rotate over the two fresh ones and none falls back.
#[test]
fn missing_telemetry_falls_back_and_is_counted() {
    let (r, ws) = router(4, 3, |_| {});
    r.update_load(ws[0], idle(), NOW).unwrap();
    r.publish(NOW).unwrap();
    let req = tokens(5, 100);
    let d = r.route(&RouteRequest::tokens(&req, 10, NOW)).unwrap();
    assert_eq!(d.fallback, Some(FallbackCause::Missing));
    assert_eq!(d.reason, Reason::Fallback(FallbackCause::Missing));
    assert_eq!(r.stats().fallbacks.missing, 1);
    drop(d);

    let (r, ws) = router(4, 3, |_| {});
    for w in &ws[..2] {
        r.update_load(*w, idle(), NOW).unwrap();
    }
    r.publish(NOW).unwrap();
    let mut on = [0; 3];
    for _ in 0..3 {
        let d = r.route(&RouteRequest::tokens(&req, 10, NOW)).unwrap();
        assert_eq!((d.fallback, d.reason), (None, Reason::CacheMiss), "{d:?}");
        on[ws.iter().position(|w| *w == d.worker).unwrap()] += 1;
    }
    assert_eq!(on[2], 0, "the missing worker: {on:?}");
    assert_eq!(r.stats().fallbacks.missing, 0);
}

/// Precomputed hashes route like token ids; malformed requests are typed errors, counted.
#[test]
fn precomputed_hashes_and_request_errors() {
    let (r, ws) = router(4, 2, |_| {});
    let prefix = tokens(1, 64);
    store(&r, ws[1], &prefix, 0);
    publish(&r, &ws, &[]);
    let mut hashes = Vec::new();
    kvroute::BlockHasher::new(BS, kvroute::HashNamespace::DEFAULT).sequence_hashes_into(
        &prefix,
        None,
        &mut hashes,
    );
    let d = r.route(&RouteRequest::hashes(&hashes, 64, 8, NOW)).unwrap();
    assert_eq!((d.worker, d.overlap_blocks), (ws[1], 4));
    drop(d);

    let bad = RouteRequest {
        prompt: Prompt::Tokens(&prefix),
        prompt_tokens: 63,
        ..RouteRequest::tokens(&prefix, 8, NOW)
    };
    assert_eq!(
        r.route(&bad).unwrap_err(),
        RouteError::PromptLengthMismatch {
            prompt_tokens: 63,
            token_ids: 64
        }
    );
    assert_eq!(
        r.route(&RouteRequest::hashes(&hashes, 63, 8, NOW))
            .unwrap_err(),
        RouteError::TooManyHashes {
            hashes: 4,
            full_blocks: 3
        }
    );
    // An empty prompt: refused before anything is reserved.
    assert_eq!(
        r.route(&RouteRequest::tokens(&[], 8, NOW)).unwrap_err(),
        RouteError::EmptyPrompt
    );
    assert_eq!(
        r.route(&RouteRequest::hashes(&[], 0, 8, NOW)).unwrap_err(),
        RouteError::EmptyPrompt
    );
    for w in &ws {
        assert_eq!(r.reserved(*w).unwrap().requests, 0);
    }
    let s = r.stats();
    assert_eq!(s.rejections.invalid_request, 4);
    assert_eq!(s.total_decisions(), 1);
}

/// Nothing published yet (an error that names `publish`), or no worker at all: no
/// eligible worker, never a panic; both counted as no eligible worker.
#[test]
fn no_eligible_worker_before_publication() {
    let (r, _) = router(4, 2, |_| {});
    let req = tokens(1, 32);
    let before = r.route(&RouteRequest::tokens(&req, 1, NOW)).unwrap_err();
    assert_eq!(before, RouteError::NotPublished);
    assert!(before.to_string().contains("Router::publish"), "{before}");
    let (empty, _) = router(4, 0, |_| {});
    empty.publish(NOW).unwrap();
    assert_eq!(
        empty
            .route(&RouteRequest::tokens(&req, 1, NOW))
            .unwrap_err(),
        RouteError::NoEligibleWorker
    );
    assert_eq!(r.stats().rejections.no_eligible_worker, 1);
}

/// A telemetry thread that stops publishing does not keep its last snapshot fresh: a
/// decision judges the snapshot's age at its own time. Published at 10 s with the default
/// 2 s staleness bound: at 11.9 s the cache owner holds the request; past 12 s no figure is
/// current, so the policy falls back to load only and says why.
#[test]
fn a_snapshot_older_than_the_staleness_bound_is_stale_at_decision_time() {
    let (r, ws) = router(4, 2, |_| {});
    let prompt = tokens(9, 8 * BS);
    store(&r, ws[0], &prompt, 1);
    publish(&r, &ws, &[]);
    let at = |t: Nanos| r.route(&RouteRequest::tokens(&prompt, 16, t)).unwrap();
    let fresh = at(NOW + Nanos::from_millis(1_900));
    assert_eq!((fresh.worker, fresh.reason), (ws[0], Reason::CacheHold));
    drop(fresh);
    let late = at(NOW + Nanos::from_secs(2) + Nanos(1));
    assert_eq!(late.reason, Reason::Fallback(FallbackCause::Stale));
    drop(late);
    // A new publication makes the figures current again.
    publish(&r, &ws, &[]);
    let again = at(NOW + Nanos::from_millis(100));
    assert_eq!(again.reason, Reason::CacheHold);
}

/// With the engines' context configured (`max_model_len` 4,096 tokens), an expected
/// output is cut to what the context leaves after the prompt, in the cost and in the
/// reservation, and each cut is counted. Idle worker (n = 1, no step model: `O/δ` of
/// decode): a 64-token prompt asking for `u32::MAX` tokens is costed and reserved at
/// 4,096 − 64 = 4,032 decode tokens, 64/8,000 + 4,032/1,000 = 4.040 s; a 4,096-token
/// prompt leaves no output (0 decode tokens); a 64-token prompt asking for 1,000 keeps
/// them, uncounted. Without the setting the first request reserves `u32::MAX`.
#[test]
fn an_output_past_the_engines_context_is_cut_and_counted() {
    let (r, ws) = router(8, 1, |c| c.max_model_len = Some(4_096));
    publish(&r, &ws, &[]);
    let a = tokens(7, 64);
    let first = r.route(&RouteRequest::tokens(&a, u32::MAX, NOW)).unwrap();
    assert!((first.cost - 4.040).abs() < 1e-4, "{first:?}");
    let held = r.reserved(ws[0]).unwrap();
    assert_eq!((held.requests, held.decode_tokens), (1, 4_032));
    assert_eq!(r.stats().outputs_capped, 1);
    let long = tokens(8, 4_096);
    let second = r.route(&RouteRequest::tokens(&long, 100, NOW)).unwrap();
    let held = r.reserved(ws[0]).unwrap();
    assert_eq!((held.requests, held.decode_tokens), (2, 4_032));
    let c = tokens(9, 64);
    let third = r.route(&RouteRequest::tokens(&c, 1_000, NOW)).unwrap();
    let held = r.reserved(ws[0]).unwrap();
    assert_eq!((held.requests, held.decode_tokens), (3, 5_032));
    assert_eq!(r.stats().outputs_capped, 2);
    drop((first, second, third));

    let (r, ws) = router(8, 1, |_| {});
    publish(&r, &ws, &[]);
    let _d = r.route(&RouteRequest::tokens(&a, u32::MAX, NOW)).unwrap();
    let held = r.reserved(ws[0]).unwrap();
    assert_eq!(held.decode_tokens, u64::from(u32::MAX));
    assert_eq!(r.stats().outputs_capped, 0);
}

/// A context length of 0 is refused; 1 and 2^30 are accepted, 2^30 + 1 is not.
#[test]
fn the_context_length_is_checked() {
    let check = |l: u32| {
        let mut c = kvroute::RouterConfig::new(8, BS);
        c.max_model_len = Some(l);
        c.validate().is_ok()
    };
    assert_eq!(
        [check(0), check(1), check(1 << 30), check((1 << 30) + 1)],
        [false, true, true, false]
    );
}

/// An expected output of `u32::MAX` tokens (a caller's "no limit") fills the chosen
/// worker's reserved decode tokens; a later request still routes (its decode tokens do not
/// fit and are cut, counted), instead of failing while the first is out. One worker, so
/// both land on it: the second reservation holds its 64 prefill tokens and no decode token.
#[test]
fn a_saturated_token_counter_does_not_refuse_later_requests() {
    let (r, ws) = router(8, 1, |_| {});
    publish(&r, &ws, &[]);
    let a = tokens(7, 64);
    let b = tokens(8, 64);
    let first = r.route(&RouteRequest::tokens(&a, u32::MAX, NOW)).unwrap();
    let second = r.route(&RouteRequest::tokens(&b, 100, NOW)).unwrap();
    assert_eq!((first.worker, second.worker), (ws[0], ws[0]));
    let held = r.reserved(ws[0]).unwrap();
    assert_eq!(
        (held.requests, held.prefill_tokens, held.decode_tokens),
        (2, 128, u64::from(u32::MAX))
    );
    let stats = r.stats();
    assert_eq!(stats.reservations.saturated_tokens, 1);
    assert_eq!(stats.reservations.rejected_saturated, 0);
    drop(first);
    let held = r.reserved(ws[0]).unwrap();
    assert_eq!(
        (held.requests, held.prefill_tokens, held.decode_tokens),
        (1, 64, 0),
        "the first's return takes back all it added"
    );
}
