//! The `Router::route` benchmark shape: a [`ConversationFleet`] stored in a router's index,
//! every worker with fresh, varied, deterministic load, policy `projected_time` (enforce,
//! the default).

use kvroute::{LoadSample, Nanos, RouteRequest, Router, RouterConfig, SequenceHash, WorkerId};

use crate::{BLOCK_SIZE, ConversationFleet, REQUEST_BLOCKS};

/// The caller's clock for every routing benchmark (100 s).
pub const NOW: Nanos = Nanos::from_secs(100);
/// Prompt length of every routed request: one whole 128-block request (2,048 tokens).
pub const PROMPT_TOKENS: u32 = (REQUEST_BLOCKS * BLOCK_SIZE) as u32;
/// Expected output of every routed request (tokens).
pub const OUTPUT_TOKENS: u32 = 256;

/// The load sample worker `w` reports: `w % 7` running, `w % 3` waiting (1,000 prefill
/// tokens each), 2,300 decode tokens per running request, KV usage `(w % 10) / 20`, cap 64,
/// 1,000 decode and 8,000 prefill tokens/s.
pub fn load_sample(w: usize) -> LoadSample {
    let running = (w % 7) as u32;
    let waiting = (w % 3) as u32;
    {
        let mut c = LoadSample::new(running, waiting, 64, (w % 10) as f32 / 20.0);
        c.waiting_prefill_tokens = Some(waiting * 1_000);
        c.active_decode_tokens = Some(running * 2_300);
        c.decode_tps = Some(1_000.0);
        c.prefill_tps = Some(8_000.0);
        c
    }
}

/// A router holding `fleet` in its index (worker `w` = `WorkerId::new(w, 0)` in slot `w`),
/// every worker with [`load_sample`]`(w)`, published at [`NOW`].
///
/// # Panics
/// If the router refuses the fleet (a bug in the shape, not a measured condition).
pub fn router(fleet: &ConversationFleet) -> Router {
    router_with(fleet, |_| {})
}

/// [`router`] with `tweak` applied to its configuration first (for example predicted
/// residency on).
pub fn router_with(fleet: &ConversationFleet, tweak: impl FnOnce(&mut RouterConfig)) -> Router {
    let mut cfg = RouterConfig::new(fleet.workers, BLOCK_SIZE);
    cfg.expected_blocks = fleet.distinct_blocks();
    tweak(&mut cfg);
    let router = Router::new(cfg).expect("valid config");
    for w in 0..fleet.workers {
        let slot = router.add_worker(WorkerId::new(w as u64, 0)).expect("room");
        assert_eq!(slot.index(), w);
    }
    fleet.populate_runs(router.index());
    for w in 0..fleet.workers {
        router
            .update_load(WorkerId::new(w as u64, 0), load_sample(w), NOW)
            .expect("valid sample");
    }
    router.publish(NOW).expect("publishes");
    router
}

/// The routed request for `hashes`: [`PROMPT_TOKENS`] prompt tokens given as chained hashes,
/// [`OUTPUT_TOKENS`] expected output, at [`NOW`].
pub fn request(hashes: &[SequenceHash]) -> RouteRequest<'_> {
    RouteRequest::hashes(hashes, PROMPT_TOKENS, OUTPUT_TOKENS, NOW)
}
