//! Misses and ties: a cache miss goes to the least-loaded worker (not the first or the
//! "smallest"), ties rotate over every tied worker, and a tied conversation stays on the
//! worker that holds its cache.

mod common;

use common::{both, cfg, idle, slot};
use kvroute_score::{Fleet, Policy, PolicyKind, SlotFigures};

/// Every policy label but `round_robin`, `load_aware` with beta 1.0.
fn cache_and_load_policies() -> Vec<Policy> {
    Policy::LABELED
        .into_iter()
        .filter(|p| p.kind() != PolicyKind::RoundRobin)
        .map(|p| match p {
            Policy::LoadAware { .. } => Policy::LoadAware { beta: 1.0 },
            p => p,
        })
        .collect()
}

fn loaded(requests: f32, tokens: f32, kv: f32) -> Option<SlotFigures> {
    Some(SlotFigures {
        requests,
        queued_tokens: tokens,
        decode_tokens: tokens,
        kv_usage: kv,
        occupancy: Some(requests / 64.0),
        ..SlotFigures::idle()
    })
}

/// A miss must not go to the "smallest" engine regardless of load. Here no worker holds any
/// block; slot 0 is the busiest and slot 2 the idlest by every measure, so every policy
/// that looks at load sends the miss to slot 2, whatever the cursor.
#[test]
fn a_miss_goes_to_the_least_loaded_not_the_first() {
    let f = Fleet::from_slots(&[
        loaded(50.0, 20_000.0, 0.5),
        loaded(10.0, 4_000.0, 0.2),
        loaded(1.0, 100.0, 0.01),
        loaded(5.0, 2_000.0, 0.1),
    ]);
    for policy in cache_and_load_policies() {
        for cursor in 0..8 {
            let c = both(&f, 1_000, &cfg(policy), cursor);
            assert_eq!(slot(&c), 2, "{policy:?} cursor {cursor}: {c:?}");
        }
    }
}

/// A fixed tie-breaker would always pick the same engine. Five identical idle workers: the
/// rotating cursor visits each of them.
#[test]
fn ties_rotate_over_every_worker() {
    let f = Fleet::from_slots(&idle(5));
    for policy in cache_and_load_policies() {
        let picks: Vec<u32> = (0..5)
            .map(|cur| slot(&both(&f, 256, &cfg(policy), cur)))
            .collect();
        assert_eq!(picks, vec![0, 1, 2, 3, 4], "{policy:?}");
    }
    let rr: Vec<u32> = (0..7)
        .map(|cur| slot(&both(&f, 256, &cfg(Policy::RoundRobin), cur)))
        .collect();
    assert_eq!(rr, vec![0, 1, 2, 3, 4, 0, 1]);
}

/// Two engines with identical scores must not make selection alternate in a multi-turn
/// chat. Two idle workers; turn 1 goes where the cursor says; from then on the worker
/// holding the conversation's prefix keeps it, even when the cursor points at the other and
/// even for `least_load`, whose cost ignores the cache (the overlap tie key decides).
#[test]
fn a_tied_conversation_stays_on_its_cache_owner() {
    for policy in cache_and_load_policies() {
        let mut owner_blocks = [0.0f32; 2];
        let mut owner = None;
        for turn in 0..6u32 {
            let slots: Vec<_> = owner_blocks
                .iter()
                .map(|&b| {
                    Some(SlotFigures {
                        overlap_blocks: b,
                        ..SlotFigures::idle()
                    })
                })
                .collect();
            let prompt = 512 * (turn + 1);
            let c = both(&Fleet::from_slots(&slots), prompt, &cfg(policy), turn);
            let s = slot(&c);
            if let Some(o) = owner {
                assert_eq!(s, o, "{policy:?} turn {turn}: {c:?}");
            }
            owner = Some(s);
            // The engine stores the whole prompt (blocks of 16 tokens).
            owner_blocks[s as usize] = (prompt / 16) as f32;
        }
    }
}
