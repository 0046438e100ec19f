//! Helpers shared by the scorer's tests.
#![allow(dead_code)]

use kvroute_core::Slot;
use kvroute_score::{
    Choice, Fleet, Policy, ScoreConfig, ScoreRequest, Scorer, SimdPath, SlotFigures, TieInput,
};

/// A config with `policy` and every other knob at its default.
pub fn cfg(policy: Policy) -> ScoreConfig {
    ScoreConfig::with_policy(policy)
}

/// The vector paths this machine runs (`SimdPath::Portable` always, `SimdPath::Avx2` on a
/// CPU with AVX2), each to be compared with the scalar reference.
pub fn vector_paths() -> Vec<SimdPath> {
    SimdPath::ALL
        .into_iter()
        .filter(|p| *p != SimdPath::Scalar && p.is_available())
        .collect()
}

/// Scores with every available path, asserts each agrees with the scalar reference,
/// returns the choice of `Scorer::score`. The request gives no expected output
/// (`tokens_per_request` is assumed).
pub fn both(fleet: &Fleet, prompt: u32, cfg: &ScoreConfig, cursor: u32) -> Choice {
    both_out(fleet, prompt, 0, cfg, cursor)
}

/// [`both`] for a request of `prompt` tokens expecting `output` tokens.
pub fn both_out(fleet: &Fleet, prompt: u32, output: u32, cfg: &ScoreConfig, cursor: u32) -> Choice {
    let req = ScoreRequest {
        prompt_tokens: prompt,
        block_size: 16,
        expected_output_tokens: output,
    };
    let tie = TieInput {
        cursor,
        random: None,
    };
    let mut s = Scorer::new();
    let b = s.score_reference(fleet, req, cfg, tie);
    for path in vector_paths() {
        let a = s.score_with(path, fleet, req, cfg, tie);
        assert!(a.same_as(&b), "{path} {a:?} != scalar {b:?}");
    }
    let a = s.score(fleet, req, cfg, tie);
    assert!(a.same_as(&b), "score {a:?} != scalar {b:?}");
    a
}

/// The chosen slot index.
pub fn slot(c: &Choice) -> u32 {
    c.slot.map(|Slot(s)| s).expect("a slot was chosen")
}

/// `n` idle fresh workers.
pub fn idle(n: usize) -> Vec<Option<SlotFigures>> {
    vec![Some(SlotFigures::idle()); n]
}
