//! Helpers shared by the router's tests: fleets built through the public API only.
#![allow(dead_code)]

use kvroute::{
    BlockStore, EngineHash, HashNamespace, LoadSample, Nanos, Router, RouterConfig, WorkerId,
};

/// Tokens per block in these tests.
pub const BS: usize = 16;

/// The time every test publishes and routes at.
pub const NOW: Nanos = Nanos::from_secs(10);

/// A router of `slots` slots (block size [`BS`]) after `tweak`, with workers `1..=n`
/// (DP rank 0) added in slots `0..n`.
pub fn router(
    slots: usize,
    n: u64,
    tweak: impl FnOnce(&mut RouterConfig),
) -> (Router, Vec<WorkerId>) {
    let mut cfg = RouterConfig::new(slots, BS);
    tweak(&mut cfg);
    let r = Router::new(cfg).expect("valid config");
    let workers: Vec<WorkerId> = (1..=n).map(|i| WorkerId::new(i, 0)).collect();
    for (i, w) in workers.iter().enumerate() {
        assert_eq!(r.add_worker(*w).expect("room").0, i as u32);
    }
    (r, workers)
}

/// `n` deterministic token ids starting from a seed.
pub fn tokens(seed: u32, n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| {
            seed.wrapping_mul(7919)
                .wrapping_add(i.wrapping_mul(104_729))
                % 152_000
        })
        .collect()
}

/// Worker `w` reports it stored the full blocks of `prompt` in one event (engine hashes
/// `base + i`).
pub fn store(r: &Router, w: WorkerId, prompt: &[u32], base: u64) {
    let blocks = prompt.len() / BS;
    let hashes: Vec<EngineHash> = (0..blocks as u64).map(|i| EngineHash(base + i)).collect();
    r.store(
        w,
        &BlockStore {
            parent: None,
            block_hashes: &hashes,
            token_ids: &prompt[..blocks * BS],
            block_size: BS,
            namespace: HashNamespace::DEFAULT,
        },
    )
    .expect("store applies");
}

/// A fresh report: cap 64, prefill 8,000 and decode 1,000 tokens/s reported.
pub fn sample(running: u32, waiting: u32, queued: u32, decode: u32, kv: f32) -> LoadSample {
    {
        let mut c = LoadSample::new(running, waiting, 64, kv);
        c.waiting_prefill_tokens = Some(queued);
        c.active_decode_tokens = Some(decode);
        c.decode_tps = Some(1_000.0);
        c.prefill_tps = Some(8_000.0);
        c
    }
}

/// An idle fresh report.
pub fn idle() -> LoadSample {
    sample(0, 0, 0, 0, 0.0)
}

/// Reports `idle()` for every worker but those listed, the given samples for those, and
/// publishes at [`NOW`].
pub fn publish(r: &Router, workers: &[WorkerId], loaded: &[(WorkerId, LoadSample)]) {
    for w in workers {
        let s = loaded
            .iter()
            .find(|(x, _)| x == w)
            .map_or_else(idle, |(_, s)| *s);
        r.update_load(*w, s, NOW).expect("valid sample");
    }
    r.publish(NOW).expect("publishes");
}
