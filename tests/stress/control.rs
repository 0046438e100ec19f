//! The control threads: load telemetry and publication (the caller's clock advances one
//! [`TICK`] per round), the reservation sweeper, and live knob changes.

use std::collections::HashMap;
use std::time::Duration;

use kvroute::{
    LoadSample, Nanos, Policy, PublishError, Reserved, Router, ScoreConfig, Slot, UpdateError,
    WorkerId,
};

use super::{Clock, MIN_ROUNDS, Run, SLOTS, STABLE, TICK, universe};
use crate::index_common::Rng;

/// What the telemetry thread did.
#[derive(Clone, Copy, Debug, Default)]
pub struct TelemetryOut {
    pub rounds: u64,
    pub publications: u64,
    /// Publications refused because readers held every spare buffer.
    pub pinned: u64,
    /// Bad samples sent (refused; the worker becomes invalid until its next good one).
    pub invalid_samples: u64,
    /// Updates that lost the race with the worker's removal (refused as unknown).
    pub raced_updates: u64,
}

/// A random report: requests, tokens and throughputs, sometimes without token figures.
fn sample(rng: &mut Rng) -> LoadSample {
    let tokens = rng.below(10) > 0;
    {
        let mut c = LoadSample::new(
            rng.below(32) as u32,
            rng.below(8) as u32,
            32,
            rng.below(101) as f32 / 100.0,
        );
        c.waiting_prefill_tokens = tokens.then(|| rng.below(4_096) as u32);
        c.active_decode_tokens = tokens.then(|| rng.below(8_192) as u32);
        c.decode_tps = Some(500.0 + rng.below(1_500) as f32);
        c.prefill_tps = Some(4_000.0 + rng.below(8_000) as f32);
        c
    }
}

/// Per round: checks the worker list, reports load for the registered workers (some stay
/// silent for a while and go stale, a few reports are bad), and publishes.
pub fn telemetry(router: &Router, clock: &Clock, run: &Run, seed: u64) -> TelemetryOut {
    let mut rng = Rng::new(seed);
    let mut out = TelemetryOut::default();
    let all = universe();
    let mut silent_until: HashMap<WorkerId, u64> = HashMap::new();
    let mut last_publication = 0;
    loop {
        let last = !run.keep_controlling(out.rounds + 1, MIN_ROUNDS);
        let now = clock.advance(TICK);
        let workers = router.workers();
        assert!(workers.windows(2).all(|p| p[0].0 < p[1].0), "{workers:?}");
        assert!(
            workers
                .iter()
                .all(|(s, w)| s.index() < SLOTS && all.contains(w))
        );
        for (k, w) in STABLE.iter().enumerate() {
            assert!(workers.contains(&(Slot(k as u32), *w)));
        }
        for &(_, w) in &workers {
            if silent_until.get(&w).is_some_and(|&r| r > out.rounds) {
                continue;
            }
            if rng.below(400) == 0 {
                // Silent for 30 rounds (150 ms of the caller's clock): stale after 100 ms.
                silent_until.insert(w, out.rounds + 30);
                continue;
            }
            let mut s = sample(&mut rng);
            let bad = rng.below(100) == 0;
            if bad {
                s.kv_usage = f32::NAN;
                out.invalid_samples += 1;
            }
            match router.update_load(w, s, now) {
                Ok(()) => assert!(!bad, "a NaN KV usage was accepted"),
                Err(UpdateError::UnknownWorker(x)) => {
                    assert!(x == w && !STABLE.contains(&w), "{x} refused");
                    out.raced_updates += 1;
                }
                Err(e) => assert!(bad, "a good sample of {w} refused: {e}"),
            }
        }
        let mut published = router.publish(now);
        while published == Err(PublishError::AllBuffersPinned) {
            out.pinned += 1;
            if !last {
                break;
            }
            // The last round publishes for sure: no report is left for a later publication
            // (a worker's removal republishes) to reconcile in the quiet window.
            std::thread::yield_now();
            published = router.publish(now);
        }
        match published {
            Ok(n) => {
                assert!(
                    n > last_publication,
                    "publication {n} after {last_publication}"
                );
                last_publication = n;
                out.publications += 1;
            }
            Err(e) => assert_eq!(e, PublishError::AllBuffersPinned),
        }
        out.rounds += 1;
        if last {
            return out;
        }
    }
}

/// Sweeps at the caller's clock until told to stop; returns the rounds and the total
/// released (the router's `reservations_swept` must equal it: nothing else sweeps).
pub fn sweeper(router: &Router, clock: &Clock, run: &Run) -> (u64, Reserved) {
    let mut rounds = 0;
    let mut released = Reserved::default();
    while run.keep_controlling(rounds, MIN_ROUNDS) {
        let r = router.sweep(clock.now());
        assert!(r.slots_aged as usize <= SLOTS);
        released.requests += r.released.requests;
        released.prefill_tokens += r.released.prefill_tokens;
        released.decode_tokens += r.released.decode_tokens;
        rounds += 1;
        std::thread::sleep(Duration::from_micros(200));
    }
    (rounds, released)
}

/// Every policy label (`load_aware` with beta 0.5, each `projected_time` mode), with and
/// without near-tie randomisation.
pub fn configs() -> Vec<ScoreConfig> {
    let mut out = Vec::new();
    for policy in Policy::LABELED {
        for near_tie_band in [0.0, 0.05] {
            out.push({
                let mut c = ScoreConfig::default();
                c.policy = policy;
                c.near_tie_band = near_tie_band;
                c
            });
        }
    }
    out
}

/// Changes the scorer's knobs while decisions run (through the quiet window too); a bad
/// configuration is refused and changes nothing (this is the only thread that sets them, so the current one is known).
pub fn knobs(router: &Router, run: &Run, seed: u64) -> u64 {
    let mut rng = Rng::new(seed);
    let configs = configs();
    let mut current = *router.score_config();
    let mut rounds = 0;
    while run.keep_going(rounds, MIN_ROUNDS) {
        let c = configs[rng.below(configs.len() as u64) as usize];
        if rng.below(10) == 0 {
            let bad = {
                let mut c = c;
                c.tie_epsilon = 0.9;
                c
            };
            assert!(router.set_score_config(bad).is_err());
        } else {
            router.set_score_config(c).unwrap();
            current = c;
        }
        assert_eq!(*router.score_config(), current);
        rounds += 1;
        std::thread::sleep(Duration::from_micros(200));
    }
    rounds
}

/// The caller's clock's start.
pub const START: Nanos = Nanos::from_secs(1);
