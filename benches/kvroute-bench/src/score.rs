//! The scorer-pass benchmark shape: a fixed fleet of varied loads, every slot fresh, a few
//! cache owners (so no fallback shortcut applies), and the request scored against it.

use kvroute_score::{Fleet, ScoreRequest, SlotFigures};

/// The scored request: a 2,048-token prompt in blocks of 16, 256 output tokens expected.
pub const SCORE_REQUEST: ScoreRequest = ScoreRequest {
    prompt_tokens: 2_048,
    block_size: 16,
    expected_output_tokens: 256,
};

/// The fleet of `workers` slots: slot `w` has `w % 9` requests, `(37 w) % 4,000` queued and
/// `(53 w) % 20,000` decode tokens, KV usage `(w % 10) / 12`, utilization `(w % 7) / 8`,
/// occupancy `(w % 9) / 32`; every 16th slot (`w % 16 == 3`) holds all 128 blocks of the
/// prompt, every other slot the 32-block system prompt.
pub fn fleet(workers: usize) -> Fleet {
    let slots: Vec<Option<SlotFigures>> = (0..workers)
        .map(|w| {
            let mut f = SlotFigures::idle();
            f.requests = (w % 9) as f32;
            f.queued_tokens = ((w * 37) % 4_000) as f32;
            f.decode_tokens = ((w * 53) % 20_000) as f32;
            f.kv_usage = ((w % 10) as f32) / 12.0;
            f.utilization = ((w % 7) as f32) / 8.0;
            f.occupancy = Some(((w % 9) as f32) / 32.0);
            f.overlap_blocks = if w % 16 == 3 { 128.0 } else { 32.0 };
            Some(f)
        })
        .collect();
    Fleet::from_slots(&slots)
}
