//! Router replicas that see the same telemetry. One deterministic router sends a burst to
//! the single best worker; two independently seeded routers with near-tie randomisation
//! spread it.

use kvroute_score::{
    Fleet, NearTieRng, Policy, ScoreConfig, ScoreRequest, Scorer, SlotFigures, TieInput,
};

/// Four workers with 1,000, 1,010, 1,020 and 1,030 queued tokens: `least_load` 0.5, 0.505,
/// 0.51, 0.515 s. The default band (0.1 %) holds only slot 0; a 5 % near-tie band holds
/// all four (0.515 <= 0.5 · 1.05 = 0.525).
#[test]
fn seeded_routers_spread_a_burst_one_deterministic_router_sends_to_one_worker() {
    let slots: Vec<_> = [1_000.0, 1_010.0, 1_020.0, 1_030.0]
        .map(|q| {
            Some(SlotFigures {
                queued_tokens: q,
                ..SlotFigures::idle()
            })
        })
        .to_vec();
    let f = Fleet::from_slots(&slots);
    let req = ScoreRequest {
        prompt_tokens: 100,
        block_size: 16,
        expected_output_tokens: 256,
    };
    let mut s = Scorer::new();

    let det = ScoreConfig::with_policy(Policy::LeastLoad);
    let mut counts = [0u32; 4];
    for cursor in 0..16 {
        let c = s.score(
            &f,
            req,
            &det,
            TieInput {
                cursor,
                random: None,
            },
        );
        counts[c.slot.unwrap().index()] += 1;
    }
    assert_eq!(counts, [16, 0, 0, 0]);

    let rnd = {
        let mut c = det;
        c.near_tie_band = 0.05;
        c
    };
    let mut counts = [0u32; 4];
    for seed in [0x5EED_0001u64, 0x5EED_0002] {
        let mut rng = NearTieRng::new(seed);
        for cursor in 0..8 {
            let tie = TieInput {
                cursor,
                random: Some(rng.next_u64()),
            };
            let a = s.score(&f, req, &rnd, tie);
            let b = s.score_reference(&f, req, &rnd, tie);
            assert!(a.same_as(&b));
            counts[a.slot.unwrap().index()] += 1;
        }
    }
    assert_eq!(counts.iter().sum::<u32>(), 16);
    assert!(counts.iter().filter(|&&n| n > 0).count() >= 2, "{counts:?}");
    assert!(counts[0] < 16, "{counts:?}");

    // Off by default: a draw without a band changes nothing.
    let c = s.score(
        &f,
        req,
        &det,
        TieInput {
            cursor: 3,
            random: Some(7),
        },
    );
    assert_eq!(c.slot.unwrap().index(), 0);
}
