//! The `metrics` feature: `Router::export_metrics` through a debugging recorder, against
//! counts worked out by hand from the scenario below.
//!
//! Fleet (block size 16, `projected_time`, 8,000 prefill tokens/s): worker 1 has 200 queued
//! prefill tokens (0.025 s) and holds the 40-block prompt `p`; worker 2 is idle. Request
//! `q` = `p` + one more block (656 tokens, 64 output tokens):
//! * worker 1: 0.025 s + 16 uncached / 8,000 = 0.027 s; worker 2: 656 / 8,000 = 0.082 s,
//!   so worker 1 wins on cache (`cache_hold`), reserving 1 request, 16 prefill and 64
//!   decode tokens.
//! * After worker 3 joins without ever reporting, the policy falls back to `least_load`
//!   over the workers that did report: worker 1 (200 queued tokens, 0.025 s; its held
//!   request was swept) against the idle worker 2 (0 s), so worker 2
//!   (`fallback_missing`).
//! * Per worker (generation 1, each worker's first tenancy): worker 1 the two
//!   `cache_hold` decisions, worker 2 the fallbacks.

mod common;
mod ingest_support;

use std::collections::BTreeMap;

use common::{BS, NOW, publish, router, sample, tokens};
use ingest_support::{batch, store, stored};
use kvroute::{Channel, Nanos, Policy, ProjectedMode, Reason, RouteRequest, Router, WorkerId};
use kvroute_wire::{KvEvent, KvMessage};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// Every exported series as `name{label=value,…}` → value (gauges as `f64`).
fn export(r: &Router) -> BTreeMap<String, f64> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || r.export_metrics());
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let (_, key) = key.into_parts();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let series = format!("{}{{{}}}", key.name(), labels.join(","));
            let v = match value {
                DebugValue::Counter(c) => c as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(_) => panic!("no histogram is exported: {series}"),
            };
            (series, v)
        })
        .collect()
}

/// The scenario's expected non-zero series, with `fallback_on` the fallback decisions each
/// engine got (engine id, decisions).
fn expected_nonzero(fallback_on: &[(u64, u32)]) -> BTreeMap<String, f64> {
    let fallback_decisions: u32 = fallback_on.iter().map(|&(_, n)| n).sum();
    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: f64| {
        m.insert(k.to_owned(), v);
    };
    put(
        "kvroute_decisions_total{policy=projected_time,reason=cache_hold}",
        2.0,
    );
    put(
        "kvroute_decisions_total{policy=projected_time,reason=fallback_missing}",
        f64::from(fallback_decisions),
    );
    put(
        "kvroute_fallbacks_total{cause=missing}",
        f64::from(fallback_decisions),
    );
    put(
        "kvroute_worker_decisions_total{dp_rank=0,engine_id=1,generation=1,reason=cache_hold}",
        2.0,
    );
    for &(engine, n) in fallback_on {
        put(
            &format!(
                "kvroute_worker_decisions_total{{dp_rank=0,engine_id={engine},generation=1,\
                 reason=fallback_missing}}"
            ),
            f64::from(n),
        );
    }
    put("kvroute_rejections_total{kind=invalid_request}", 1.0);
    put("kvroute_reservations_swept_total{field=requests}", 1.0);
    put(
        "kvroute_reservations_swept_total{field=prefill_tokens}",
        16.0,
    );
    put(
        "kvroute_reservations_swept_total{field=decode_tokens}",
        64.0,
    );
    // Ingest: worker 1's store (40 blocks), a message of an unknown worker, worker 2's
    // batch with a block-size-8 store (rejected: worker 2 untrusted).
    put("kvroute_ingest_messages_total{}", 3.0);
    put("kvroute_ingest_contiguous_total{}", 2.0);
    put("kvroute_ingest_stored_blocks_total{}", 40.0);
    put("kvroute_ingest_rejected_events_total{}", 1.0);
    put("kvroute_ingest_unknown_worker_messages_total{}", 1.0);
    put("kvroute_ingest_untrusted_workers{}", 1.0);
    put(
        "kvroute_ingest_block_size_mismatches_total{dp_rank=0,engine_block_size=8,engine_id=2,generation=1,router_block_size=16}",
        1.0,
    );
    m
}

#[test]
fn export_metrics_reports_hand_counted_values() {
    // Any worker not fresh switches the fleet to the fallback (so one is counted below).
    let (r, ws) = router(4, 2, |c| c.score.fallback_fraction = 0.0);
    publish(&r, &ws, &[(ws[0], sample(0, 0, 200, 0, 0.0))]);
    let p = tokens(11, 40 * BS);
    r.ingest(ws[0], Channel::Live, &batch(0, vec![store(1, None, &p)]))
        .unwrap();
    let mut q = p.clone();
    q.extend(tokens(12, BS));
    let req = RouteRequest::tokens(&q, 64, NOW);

    // Two cache_hold decisions on worker 1; the second stays held.
    drop(r.route(&req).unwrap());
    let held = r.route(&req).unwrap();
    assert_eq!((held.worker, held.reason.name()), (ws[0], "cache_hold"));
    // The sweeper ages the slots (70 s: 60 s after they were added), then drops what is
    // still reserved (140 s); the guard's later drop returns nothing.
    assert_eq!(r.sweep(Nanos::from_secs(70)).released.requests, 0);
    assert_eq!(r.sweep(Nanos::from_secs(140)).released.requests, 1);
    drop(held);

    // A malformed request: 5 prompt tokens announced, 656 given.
    let bad = RouteRequest {
        prompt_tokens: 5,
        ..req
    };
    assert!(r.route(&bad).is_err());

    // Ingest: an unknown publisher, then a store of the wrong block size from worker 2.
    let stranger = WorkerId::new(9, 0);
    assert!(
        r.ingest(stranger, Channel::Live, &KvMessage::EndOfReplay)
            .is_err()
    );
    let mut wrong = stored(100, None, &tokens(3, 64));
    wrong.block_size = 8;
    wrong.block_hashes = (100..108).map(kvroute::EngineHash).collect();
    let wrong = batch(0, vec![KvEvent::BlockStored(wrong)]);
    assert!(r.ingest(ws[1], Channel::Live, &wrong).is_err());

    // Worker 3 joins and never reports: decisions fall back (fleet-wide, `fallback_fraction`
    // 0).
    r.add_worker(WorkerId::new(3, 0)).unwrap();
    r.publish(NOW).unwrap();
    let d = r.route(&req).unwrap();
    assert_eq!(d.reason.name(), "fallback_missing");
    drop(d);

    let got = export(&r);
    let want = expected_nonzero(&[(2, 1)]);
    let nonzero: BTreeMap<String, f64> = got
        .iter()
        .filter(|(_, v)| **v != 0.0)
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    assert_eq!(nonzero, want);
    // Every documented series is there, zeros included: 33 ingest counters (one per field
    // of the `counters!` list in `ingest/stats.rs`) and the gauge, 4 fallback causes, 5
    // rejection kinds, 3 refusal causes, 3 × 3 released fields, and
    // the seven single counters; the carried work's 3 single counters and 2 × 3 fields;
    // the outcomes' 3 + 1, the breaker's 5 transitions and its gauge, the predictions' 5
    // events; plus the two decision series, the two per-worker series and the mismatch
    // series.
    assert_eq!(
        got.len(),
        33 + 1 + 4 + 5 + 3 + 9 + 7 + 3 + 6 + 4 + 5 + 1 + 5 + 2 + 2 + 1,
        "{got:#?}"
    );
    for name in [
        "kvroute_shadow_disagreements_total{}",
        "kvroute_rescores_total{}",
        "kvroute_unchecked_reserves_total{}",
        "kvroute_admission_redirects_total{}",
        "kvroute_outputs_capped_total{}",
        "kvroute_reservation_underflow_clamped_total{}",
        "kvroute_reservation_saturated_tokens_total{}",
        "kvroute_reservation_refusals_total{cause=contended}",
        "kvroute_reservations_reconciled_total{field=requests}",
        "kvroute_reservations_removed_total{field=decode_tokens}",
        "kvroute_carried_readditions_total{}",
        "kvroute_outcomes_total{outcome=failed}",
        "kvroute_breaker_transitions_total{transition=opened}",
        "kvroute_carried_total{field=requests}",
        "kvroute_carried_returned_total{field=prefill_tokens}",
        "kvroute_ingest_gaps_total{}",
        "kvroute_ingest_reserved_seq_batches_total{}",
        "kvroute_predictions_total{event=cleared}",
    ] {
        assert_eq!(got.get(name), Some(&0.0), "{name}");
    }

    // Counters are absolute: exporting again after one more decision moves only that one.
    // Workers 2 and 3 tie at 0 s of `least_load` (worker 3 is costed from what is known of
    // it, not excluded), and the rotating cursor gives the second fallback to worker 3.
    drop(r.route(&req).unwrap());
    let again: BTreeMap<String, f64> = export(&r).into_iter().filter(|(_, v)| *v != 0.0).collect();
    assert_eq!(again, expected_nonzero(&[(2, 1), (3, 1)]));
}

/// After `describe_metrics`, every exported series carries a unit and a description; an
/// ingest counter's is its field's doc.
#[test]
fn describe_metrics_describes_every_series() {
    let (r, _) = router(2, 1, |_| {});
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        kvroute::metrics::describe_metrics();
        r.export_metrics();
    });
    let series = snapshotter.snapshot().into_vec();
    assert_eq!(
        series.len(),
        33 + 1 + 4 + 5 + 3 + 9 + 7 + 3 + 6 + 4 + 5 + 1 + 5
    );
    for (key, unit, text, _) in &series {
        let name = key.key().name();
        assert_eq!(*unit, Some(metrics::Unit::Count), "{name}");
        assert!(text.as_ref().is_some_and(|t| !t.is_empty()), "{name}");
        if name == "kvroute_ingest_gaps_total" {
            assert_eq!(
                text.as_deref(),
                Some(
                    "Sequence gaps detected on the live stream (each marks the worker untrusted)."
                )
            );
        }
    }
}

/// The decision series carries `projected_time`'s mode in its policy label, and a worker
/// removed and added again (the same id, the same slot) starts a new per-worker series at
/// generation 2 while the first tenancy's keeps its value. Shadow on an idle fleet of two:
/// both cost 0 s, fewer requests and overlap tie, so the rotating cursor (0, 1, 2, …)
/// picks slot 0, slot 1, then, after worker 1's re-addition into slot 0, slot 0 again.
#[test]
fn policy_labels_carry_the_mode_and_tenancies_are_series_of_their_own() {
    let (r, ws) = router(2, 2, |c| {
        c.score.policy = Policy::ProjectedTime {
            mode: ProjectedMode::Shadow,
        }
    });
    publish(&r, &ws, &[]);
    let q = tokens(5, 4 * BS);
    let req = RouteRequest::tokens(&q, 8, NOW);
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let route = |want: WorkerId| {
        let d = r.route(&req).unwrap();
        assert_eq!((d.worker, d.reason), (want, Reason::LeastLoad));
    };
    route(ws[0]);
    route(ws[1]);
    metrics::with_local_recorder(&recorder, || r.export_metrics());
    r.remove_worker(ws[0]).unwrap();
    assert_eq!(r.add_worker(ws[0]).unwrap().0, 0);
    publish(&r, &ws, &[]);
    let d = r.route(&req).unwrap();
    assert_eq!((d.worker, d.generation.0), (ws[0], 2));
    drop(d);
    metrics::with_local_recorder(&recorder, || r.export_metrics());
    let got: BTreeMap<String, u64> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| {
            let (_, key) = key.into_parts();
            let name = key.name();
            if !name.starts_with("kvroute_decisions") && !name.starts_with("kvroute_worker") {
                return None;
            }
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let DebugValue::Counter(c) = value else {
                panic!("{name} is a counter");
            };
            Some((format!("{name}{{{}}}", labels.join(",")), c))
        })
        .collect();
    let want: BTreeMap<String, u64> = [
        (
            "kvroute_decisions_total{policy=projected_time:shadow,reason=least_load}",
            3,
        ),
        (
            "kvroute_worker_decisions_total{dp_rank=0,engine_id=1,generation=1,reason=least_load}",
            1,
        ),
        (
            "kvroute_worker_decisions_total{dp_rank=0,engine_id=2,generation=1,reason=least_load}",
            1,
        ),
        (
            "kvroute_worker_decisions_total{dp_rank=0,engine_id=1,generation=2,reason=least_load}",
            1,
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(got, want);
}

/// A worker removed and added again counts its block-size mismatches under its new
/// tenancy's `generation`: with one recorder across both exports, three rejected stores
/// before and three after read as two series of 3 (the counters keep the largest value
/// set, so one series would have hidden the second three).
#[test]
fn block_size_mismatches_of_a_new_tenancy_are_a_new_series() {
    let (r, ws) = router(4, 2, |_| {});
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let wrong = |seq: u64| {
        let mut s = stored(100 + seq, None, &tokens(3, 64));
        s.block_size = 8;
        s.block_hashes = (0..8)
            .map(|i| kvroute::EngineHash(1_000 * seq + i))
            .collect();
        batch(seq, vec![KvEvent::BlockStored(s)])
    };
    for seq in 0..3 {
        assert!(r.ingest(ws[1], Channel::Live, &wrong(seq)).is_err());
    }
    metrics::with_local_recorder(&recorder, || r.export_metrics());
    r.remove_worker(ws[1]).unwrap();
    r.add_worker(ws[1]).unwrap();
    for seq in 0..3 {
        assert!(r.ingest(ws[1], Channel::Live, &wrong(seq)).is_err());
    }
    metrics::with_local_recorder(&recorder, || r.export_metrics());
    let series: BTreeMap<String, u64> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == "kvroute_ingest_block_size_mismatches_total")
        .map(|(key, _, _, value)| {
            let generation = key
                .key()
                .labels()
                .find(|l| l.key() == "generation")
                .map(|l| l.value().to_string())
                .unwrap_or_default();
            let DebugValue::Counter(v) = value else {
                panic!("a counter")
            };
            (generation, v)
        })
        .collect();
    let want: BTreeMap<String, u64> = [("1".to_string(), 3), ("2".to_string(), 3)].into();
    assert_eq!(series, want);
}
