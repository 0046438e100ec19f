//! Knob bounds (every knob out of range is rejected by name, never clamped silently) and
//! live updates without torn reads.

use kvroute_core::sync::Arc;
use kvroute_core::sync::atomic::{AtomicBool, Ordering};

use kvroute_score::{Policy, ScoreConfig, SharedConfig};

#[test]
fn every_knob_out_of_range_is_rejected_by_name() {
    let d = ScoreConfig::default();
    assert_eq!(d.validate(), Ok(()));
    let cases: Vec<(&str, ScoreConfig)> = vec![
        (
            "beta",
            ScoreConfig {
                policy: Policy::LoadAware { beta: -0.1 },
                ..d
            },
        ),
        (
            "beta",
            ScoreConfig {
                policy: Policy::LoadAware { beta: f32::NAN },
                ..d
            },
        ),
        (
            "tie_epsilon",
            ScoreConfig {
                tie_epsilon: 0.6,
                ..d
            },
        ),
        (
            "near_tie_band",
            ScoreConfig {
                near_tie_band: -1.0,
                ..d
            },
        ),
        (
            "least_load_tps",
            ScoreConfig {
                least_load_tps: 0.0,
                ..d
            },
        ),
        (
            "default_prefill_tps",
            ScoreConfig {
                default_prefill_tps: f32::INFINITY,
                ..d
            },
        ),
        (
            "default_decode_tps",
            ScoreConfig {
                default_decode_tps: 0.5,
                ..d
            },
        ),
        (
            "kv_barrier_s",
            ScoreConfig {
                kv_barrier_s: 61.0,
                ..d
            },
        ),
        (
            "tokens_per_request",
            ScoreConfig {
                tokens_per_request: 0,
                ..d
            },
        ),
        (
            "watermark",
            ScoreConfig {
                watermark: 2.5,
                ..d
            },
        ),
        (
            "owner_slack",
            ScoreConfig {
                owner_slack: 1.5,
                ..d
            },
        ),
        (
            "escape_margin_s",
            ScoreConfig {
                escape_margin_s: f32::NAN,
                ..d
            },
        ),
        (
            "escape_margin_rel",
            ScoreConfig {
                escape_margin_rel: 100.5,
                ..d
            },
        ),
        (
            "escape_margin_rel",
            ScoreConfig {
                escape_margin_rel: -0.1,
                ..d
            },
        ),
        (
            "imbalance_abs",
            ScoreConfig {
                imbalance_abs: -1.0,
                ..d
            },
        ),
        (
            "imbalance_rel",
            ScoreConfig {
                imbalance_rel: 0.5,
                ..d
            },
        ),
        (
            "cache_threshold",
            ScoreConfig {
                cache_threshold: 1.1,
                ..d
            },
        ),
        (
            "dynamo_overlap_weight",
            ScoreConfig {
                dynamo_overlap_weight: -2.0,
                ..d
            },
        ),
    ];
    for (knob, c) in cases {
        let e = c.validate().unwrap_err();
        assert_eq!(e.field, knob);
        assert!(e.to_string().starts_with(knob), "{e}");
    }
}

#[test]
fn shared_config_refuses_bad_values_and_keeps_the_old_one() {
    let cell = SharedConfig::new(ScoreConfig::default()).unwrap();
    let e = cell.update(|c| c.watermark = -0.5).unwrap_err();
    assert_eq!(e.field, "watermark");
    assert_eq!(*cell.load(), ScoreConfig::default());
    cell.update(|c| c.watermark = 0.8).unwrap();
    assert_eq!(cell.load().watermark, 0.8);
    assert!(
        SharedConfig::new(ScoreConfig {
            owner_slack: 9.0,
            ..ScoreConfig::default()
        })
        .is_err()
    );
}

/// Two admin writers changing different knobs through `update` at the same time never
/// lose each other's change: every increment of both lands (a read-copy-set that is not
/// atomic loses some whenever the writers interleave).
#[test]
fn concurrent_updates_of_different_knobs_all_land() {
    const N: u32 = 2_000;
    let cell = Arc::new(SharedConfig::new(ScoreConfig::default()).unwrap());
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let cell = cell.clone();
            kvroute_core::sync::thread::spawn(move || {
                for _ in 0..N {
                    if w == 0 {
                        cell.update(|c| c.tokens_per_request += 1).unwrap();
                    } else {
                        cell.update(|c| c.imbalance_abs += 1.0).unwrap();
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let c = cell.load();
    // Defaults 512 tokens and 64 requests (ScoreConfig docs), plus N increments each.
    assert_eq!(c.tokens_per_request, 512 + N);
    assert_eq!(c.imbalance_abs, 64.0 + N as f32);
}

/// A writer flips between two configurations whose knobs change together; readers only
/// ever see one of the two whole values.
#[test]
fn readers_never_see_half_an_update() {
    let a = ScoreConfig {
        watermark: 0.9,
        owner_slack: 0.1,
        ..ScoreConfig::default()
    };
    let b = ScoreConfig {
        watermark: 0.5,
        owner_slack: 0.3,
        ..ScoreConfig::default()
    };
    let cell = Arc::new(SharedConfig::new(a).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (cell, stop) = (cell.clone(), stop.clone());
            kvroute_core::sync::thread::spawn(move || {
                let mut seen = 0u64;
                while !stop.load(Ordering::Relaxed) || seen < 1_000 {
                    let c = cell.load();
                    assert!(*c == a || *c == b, "torn: {c:?}");
                    seen += 1;
                }
            })
        })
        .collect();
    for i in 0..2_000 {
        cell.set(if i % 2 == 0 { b } else { a }).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
}
