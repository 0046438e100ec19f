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
        ("beta", {
            let mut c = d;
            c.policy = Policy::LoadAware { beta: -0.1 };
            c
        }),
        ("beta", {
            let mut c = d;
            c.policy = Policy::LoadAware { beta: f32::NAN };
            c
        }),
        ("tie_epsilon", {
            let mut c = d;
            c.tie_epsilon = 0.6;
            c
        }),
        ("near_tie_band", {
            let mut c = d;
            c.near_tie_band = -1.0;
            c
        }),
        ("fallback_fraction", {
            let mut c = d;
            c.fallback_fraction = 1.5;
            c
        }),
        ("least_load_tps", {
            let mut c = d;
            c.least_load_tps = 0.0;
            c
        }),
        ("default_prefill_tps", {
            let mut c = d;
            c.default_prefill_tps = f32::INFINITY;
            c
        }),
        ("default_decode_tps", {
            let mut c = d;
            c.default_decode_tps = 0.5;
            c
        }),
        ("kv_barrier_s", {
            let mut c = d;
            c.kv_barrier_s = 61.0;
            c
        }),
        ("tokens_per_request", {
            let mut c = d;
            c.tokens_per_request = 0;
            c
        }),
        ("watermark", {
            let mut c = d;
            c.watermark = 2.5;
            c
        }),
        ("owner_slack", {
            let mut c = d;
            c.owner_slack = 1.5;
            c
        }),
        ("escape_margin_s", {
            let mut c = d;
            c.escape_margin_s = f32::NAN;
            c
        }),
        ("escape_margin_rel", {
            let mut c = d;
            c.escape_margin_rel = 100.5;
            c
        }),
        ("escape_margin_rel", {
            let mut c = d;
            c.escape_margin_rel = -0.1;
            c
        }),
        ("imbalance_abs", {
            let mut c = d;
            c.imbalance_abs = -1.0;
            c
        }),
        ("imbalance_rel", {
            let mut c = d;
            c.imbalance_rel = 0.5;
            c
        }),
        ("cache_threshold", {
            let mut c = d;
            c.cache_threshold = 1.1;
            c
        }),
        ("dynamo_overlap_weight", {
            let mut c = d;
            c.dynamo_overlap_weight = -2.0;
            c
        }),
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
        SharedConfig::new({
            let mut c = ScoreConfig::default();
            c.owner_slack = 9.0;
            c
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
    let a = {
        let mut c = ScoreConfig::default();
        c.watermark = 0.9;
        c.owner_slack = 0.1;
        c
    };
    let b = {
        let mut c = ScoreConfig::default();
        c.watermark = 0.5;
        c.owner_slack = 0.3;
        c
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
                    let g = cell.guard();
                    assert!(*g == a || *g == b, "torn guard: {g:?}");
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

/// A guard keeps the value it loaded while writers replace it (one decision, one value),
/// and a refused `set` leaves the current value in place for new guards.
#[test]
fn a_guard_keeps_its_value_across_writes() {
    let cell = SharedConfig::new(ScoreConfig::default()).unwrap();
    let held = cell.guard();
    cell.set(ScoreConfig::with_policy(Policy::LeastLoad))
        .unwrap();
    cell.update(|c| c.tie_epsilon = 0.25).unwrap();
    // Still the default: `projected_time` enforce and tie_epsilon 0.001 (ScoreConfig docs).
    assert_eq!(*held, ScoreConfig::default());
    assert_eq!(held.tie_epsilon, 1e-3);
    let mut bad = ScoreConfig::with_policy(Policy::KvAware);
    bad.tie_epsilon = 0.75;
    assert_eq!(cell.set(bad).unwrap_err().field, "tie_epsilon");
    let now = cell.guard();
    assert_eq!(now.policy, Policy::LeastLoad);
    assert_eq!(now.tie_epsilon, 0.25);
    drop(held);
    // More guards at once than a thread has debt slots (arc-swap keeps 8) all read the
    // current value.
    let many: Vec<_> = (0..20).map(|_| cell.guard()).collect();
    cell.set(ScoreConfig::default()).unwrap();
    assert!(
        many.iter()
            .all(|g| g.policy == Policy::LeastLoad && g.tie_epsilon == 0.25)
    );
    assert_eq!(*cell.guard(), ScoreConfig::default());
}

/// Stamps: distinct for every install of every cell, unchanged by a refused write, and
/// `load_stamped` returns the current value with the current stamp when nothing races it.
#[test]
fn every_install_gets_a_stamp_no_other_install_has() {
    let a = SharedConfig::new(ScoreConfig::default()).unwrap();
    let b = SharedConfig::new(ScoreConfig::default()).unwrap();
    let mut seen = vec![a.stamp(), b.stamp()];
    a.set(ScoreConfig::with_policy(Policy::LeastLoad)).unwrap();
    seen.push(a.stamp());
    a.update(|c| c.tie_epsilon = 0.25).unwrap();
    seen.push(a.stamp());
    b.update(|c| c.watermark = 0.8).unwrap();
    seen.push(b.stamp());
    let mut distinct = seen.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), seen.len(), "{seen:?}");
    let before = a.stamp();
    assert!(a.update(|c| c.watermark = -1.0).is_err());
    assert!(a.set(ScoreConfig::with_policy(Policy::KvAware)).is_ok());
    assert_ne!(a.stamp(), before);
    let before = a.stamp();
    let mut bad = ScoreConfig::default();
    bad.tie_epsilon = 0.75;
    assert!(a.set(bad).is_err());
    assert_eq!(a.stamp(), before);
    let (stamp, value) = a.load_stamped();
    assert_eq!((stamp, value.policy), (before, Policy::KvAware));
}

/// A value cached under a stamp is never older than the value installed with that stamp:
/// a writer installs values numbered by `tokens_per_request` and records each one's stamp;
/// readers caching `load_stamped` pairs check that the value's number is at least the
/// number installed with its stamp.
#[test]
fn a_stamped_value_is_never_older_than_its_stamp() {
    const N: u32 = 2_000;
    let cell = Arc::new(SharedConfig::new(ScoreConfig::default()).unwrap());
    let installed = Arc::new(kvroute_core::sync::Mutex::new(
        std::collections::HashMap::new(),
    ));
    installed
        .lock()
        .unwrap()
        .insert(cell.stamp(), ScoreConfig::default().tokens_per_request);
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (cell, stop, installed) = (cell.clone(), stop.clone(), installed.clone());
            kvroute_core::sync::thread::spawn(move || {
                let mut pairs = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let (stamp, value) = cell.load_stamped();
                    pairs.push((stamp, value.tokens_per_request));
                }
                // The writer records a stamp after installing it; once it has stopped,
                // every stamp seen is in the map.
                let installed = installed.lock().unwrap();
                for (stamp, number) in pairs {
                    let at = installed[&stamp];
                    assert!(number >= at, "stamp {stamp}: value {number} < {at}");
                }
            })
        })
        .collect();
    for i in 1..=N {
        cell.update(|c| c.tokens_per_request = 512 + i).unwrap();
        installed.lock().unwrap().insert(cell.stamp(), 512 + i);
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
}
