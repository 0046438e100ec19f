//! A short prefix every request shares (a one-block system prompt before a long unique
//! part) is not ownership: it saves almost no prefill, so no policy may send the traffic to
//! whichever engine cached it first, nor starve the engines that never served it.
//!
//! 8 idle workers; 400 requests of the same 16-token system prompt (one block) followed by
//! 512 unique tokens, 32 in flight at a time (each decision held until 32 more were made),
//! each engine storing the full blocks of every prompt it serves, as its KV events would.

mod common;

use std::collections::VecDeque;

use common::{BS, publish, router, store, tokens};
use kvroute::{Policy, RouteRequest, RouterConfig};

/// Decisions per worker (in worker order) for `policy`, with a system prompt of
/// `system_tokens` tokens.
fn spread(policy: Policy, system_tokens: usize) -> Vec<u32> {
    let (r, ws) = router(8, 8, |c: &mut RouterConfig| c.score.policy = policy);
    publish(&r, &ws, &[]);
    let system = tokens(7, system_tokens);
    let mut counts = vec![0u32; ws.len()];
    let mut in_flight = VecDeque::new();
    for i in 0..400u32 {
        let mut prompt = system.clone();
        prompt.extend(tokens(1_000 + i, 512));
        let d = r
            .route(&RouteRequest::tokens(&prompt, 64, common::NOW))
            .unwrap();
        let w = ws.iter().position(|&w| w == d.worker).unwrap();
        counts[w] += 1;
        store(&r, d.worker, &prompt, u64::from(i) * 1_000 + 1);
        in_flight.push_back(d);
        if in_flight.len() > 32 {
            in_flight.pop_front();
        }
    }
    counts
}

/// The one-block system prompt (3 % of each prompt) under `owner_pressure`, `load_aware`
/// and the default policy: every worker gets between half and 1.5 times its fair share of
/// 400 / 8 = 50 requests (before, `owner_pressure` sent all 400 to the first engine that
/// cached the block).
#[test]
fn a_one_block_shared_prefix_does_not_pile_onto_its_first_owner() {
    for policy in ["owner_pressure", "load_aware:0.5", "projected_time"] {
        let counts = spread(policy.parse().unwrap(), BS);
        assert_eq!(counts.iter().sum::<u32>(), 400);
        for (w, &n) in counts.iter().enumerate() {
            assert!(
                (25..=75).contains(&n),
                "{policy}: worker {w} got {n}: {counts:?}"
            );
        }
    }
}

/// The same rule keeps a prefix worth keeping: a 4,096-token prefix (256 blocks) of a
/// 4,160-token prompt stays on its owner while its pressure is below the watermark, as
/// incident B's rule wants (32 in flight on a cap of 64: occupancy 0.5 at most).
#[test]
fn a_long_shared_prefix_stays_on_its_owner() {
    let (r, ws) = router(8, 8, |c: &mut RouterConfig| {
        c.score.policy = Policy::OwnerPressure
    });
    publish(&r, &ws, &[]);
    let system = tokens(7, 4_096);
    store(&r, ws[2], &system, 1);
    let mut in_flight = VecDeque::new();
    for i in 0..100u32 {
        let mut prompt = system.clone();
        prompt.extend(tokens(1_000 + i, 64));
        let d = r
            .route(&RouteRequest::tokens(&prompt, 64, common::NOW))
            .unwrap();
        assert_eq!(d.worker, ws[2], "request {i}: {d:?}");
        in_flight.push_back(d);
        if in_flight.len() > 32 {
            in_flight.pop_front();
        }
    }
}
