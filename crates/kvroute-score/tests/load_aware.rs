//! The `load_aware` score `matched/prompt − beta·(load − mean)/max(1, mean)` on a
//! hand-computed example, against pure affinity (`kv_aware`).

mod common;

use common::{both, cfg, slot};
use kvroute_score::{Fleet, Policy, Reason, SlotFigures};

fn w(overlap: f32, load: f32) -> Option<SlotFigures> {
    Some(SlotFigures {
        overlap_blocks: overlap,
        requests: load,
        ..SlotFigures::idle()
    })
}

/// Prompt 2,048 tokens = 128 blocks of 16. A holds 128 blocks (rate 1.0) with load 6, B 64
/// blocks (0.5) with load 2, C nothing with load 1; mean load 3.
/// beta 1: A 1 − 3/3 = 0; B 0.5 + 1/3 = 0.8333; C 0 + 2/3 = 0.6667: B wins (cost −0.8333).
/// beta 0.5: A 0.5; B 0.6667; C 0.3333: B. beta 0: A (1.0) — pure affinity.
#[test]
fn load_aware_score_hand_computed() {
    let f = Fleet::from_slots(&[w(128.0, 6.0), w(64.0, 2.0), w(0.0, 1.0)]);
    let c = both(&f, 2_048, &cfg(Policy::LoadAware { beta: 1.0 }), 0);
    assert_eq!((slot(&c), c.reason), (1, Reason::Spill));
    assert!((c.cost + 0.833_333).abs() < 1e-5, "{c:?}");
    let c = both(&f, 2_048, &cfg(Policy::LoadAware { beta: 0.5 }), 0);
    assert_eq!(slot(&c), 1);
    assert!((c.cost + 0.666_667).abs() < 1e-5, "{c:?}");
    let c = both(&f, 2_048, &cfg(Policy::LoadAware { beta: 0.0 }), 0);
    assert_eq!((slot(&c), c.reason), (0, Reason::CacheHold));
    assert!((c.cost + 1.0).abs() < 1e-6);
}

/// The control: `kv_aware` sends it to A however busy.
#[test]
fn kv_aware_control_chases_the_cache() {
    let f = Fleet::from_slots(&[w(128.0, 600.0), w(64.0, 2.0), w(0.0, 1.0)]);
    let c = both(&f, 2_048, &cfg(Policy::KvAware), 2);
    assert_eq!((slot(&c), c.reason), (0, Reason::CacheHold));
}

/// The original router's control, `kv_aware_first`: of several holders of the deepest
/// prefix it takes the first in slot order however busy, where `kv_aware` takes the one
/// with fewer requests. Slots 1 and 3 hold all 128 blocks with 50 and 3 requests, slot 0
/// holds 64, slot 2 nothing: `kv_aware_first` takes slot 1 at every cursor, `kv_aware`
/// slot 3. With no holder (a miss) it takes the fewest requests (slot 2 of 9, 4, 1, 7) at
/// every cursor; with two workers tied on fewest, the cursor rotates over them.
#[test]
fn kv_aware_first_takes_the_first_deepest_holder_however_busy() {
    let f = Fleet::from_slots(&[w(64.0, 0.0), w(128.0, 50.0), w(0.0, 0.0), w(128.0, 3.0)]);
    for cursor in 0..4 {
        let c = both(&f, 2_048, &cfg(Policy::KvAwareFirst), cursor);
        assert_eq!(
            (slot(&c), c.reason),
            (1, Reason::CacheHold),
            "cursor {cursor}"
        );
        assert_eq!(c.cost, -128.0);
        let c = both(&f, 2_048, &cfg(Policy::KvAware), cursor);
        assert_eq!(slot(&c), 3, "cursor {cursor}");
    }
    let miss = Fleet::from_slots(&[w(0.0, 9.0), w(0.0, 4.0), w(0.0, 1.0), w(0.0, 7.0)]);
    for cursor in 0..4 {
        let c = both(&miss, 2_048, &cfg(Policy::KvAwareFirst), cursor);
        assert_eq!(
            (slot(&c), c.reason),
            (2, Reason::CacheMiss),
            "cursor {cursor}"
        );
        assert_eq!(c.cost, 1.0);
    }
    let tied = Fleet::from_slots(&[w(0.0, 2.0), w(0.0, 5.0), w(0.0, 2.0)]);
    let picks: Vec<u32> = (0..4)
        .map(|cursor| slot(&both(&tied, 2_048, &cfg(Policy::KvAwareFirst), cursor)))
        .collect();
    assert_eq!(picks, [0, 2, 0, 2]);
}
