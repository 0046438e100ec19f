//! Checking the workload and options, and building the router, the engines and the state.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use kvroute::{Policy, Router, RouterConfig, WorkerId};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use super::{ReqState, Sim, Status};
use crate::driver::queue::Queue;
use crate::driver::{RunError, RunOptions};
use crate::engine::{Catalog, Engine};
use crate::fault::{FaultWindows, secs_to_ns};
use crate::result::RunResult;
use crate::workload::Workload;

impl<'a> Sim<'a> {
    pub(in crate::driver) fn new(
        w: &'a Workload,
        policy: Policy,
        opts: &'a RunOptions<'a>,
    ) -> Result<Self, RunError> {
        let fleet = &w.fleet;
        if fleet.engines == 0 {
            return Err(RunError::NoEngines);
        }
        fleet.engine.validate().map_err(RunError::Engine)?;
        fleet
            .channels
            .validate()
            .map_err(|(f, r)| RunError::Channel(f, r))?;
        let pos = |v: f64| v.is_finite() && v > 0.0;
        let nonneg = |v: f64| v.is_finite() && v >= 0.0;
        if !nonneg(opts.sample_interval_s) {
            return Err(RunError::Option(
                "sample_interval_s",
                "finite and >= 0 seconds",
            ));
        }
        if !nonneg(opts.retry_backoff_s) {
            return Err(RunError::Option(
                "retry_backoff_s",
                "finite and >= 0 seconds",
            ));
        }
        if !pos(opts.sweep_interval_s) {
            return Err(RunError::Option(
                "sweep_interval_s",
                "finite and > 0 seconds",
            ));
        }
        if opts.horizon_s.is_some_and(|h| !nonneg(h)) {
            return Err(RunError::Option("horizon_s", "finite and >= 0 seconds"));
        }
        if opts.probes.iter().any(|&p| !nonneg(p)) {
            return Err(RunError::Option("probes", "finite and >= 0 seconds"));
        }
        for (index, f) in w.faults.iter().enumerate() {
            f.check(fleet.engines)
                .map_err(|why| RunError::Fault { index, why })?;
        }
        let mut index_of = HashMap::with_capacity(w.requests.len());
        for (index, r) in w.requests.iter().enumerate() {
            if index_of.insert(r.id, index as u32).is_some() {
                return Err(RunError::Request {
                    index,
                    why: "duplicate id",
                });
            }
            if !nonneg(r.arrival_s) {
                return Err(RunError::Request {
                    index,
                    why: "arrival_s must be finite and >= 0 seconds",
                });
            }
            if r.pinned.is_some_and(|e| e >= fleet.engines) {
                return Err(RunError::Request {
                    index,
                    why: "pinned to an engine not in the fleet",
                });
            }
        }
        let mut children = vec![Vec::new(); w.requests.len()];
        for (index, r) in w.requests.iter().enumerate() {
            if let Some(f) = r.follows {
                let Some(&p) = index_of.get(&f.parent) else {
                    return Err(RunError::Request {
                        index,
                        why: "follows an unknown request",
                    });
                };
                if p as usize == index || !nonneg(f.think_s) {
                    return Err(RunError::Request {
                        index,
                        why: "follows itself or has a bad think_s",
                    });
                }
                children[p as usize].push(index as u32);
            }
        }
        // A follow-up chain must end at a request that arrives on its own.
        for (index, r) in w.requests.iter().enumerate() {
            let mut cur = r.follows;
            let mut hops = 0;
            while let Some(f) = cur {
                hops += 1;
                if hops > w.requests.len() {
                    return Err(RunError::Request {
                        index,
                        why: "follow-up cycle",
                    });
                }
                cur = w.requests[index_of[&f.parent] as usize].follows;
            }
        }

        let engines_n = fleet.engines as usize;
        let bs = fleet.engine.block_size as usize;
        let mut rc = RouterConfig::new(engines_n, bs);
        rc.admission = opts.admission;
        rc.breaker = opts.breaker;
        rc.predicted = opts.predicted;
        rc.near_tie_seed = opts.seed;
        // What a deployment configures: the engines' context, so that an output asked past
        // it is costed and reserved as what the engine will generate (a context outside
        // the router's bounds is the router's typed error below).
        rc.max_model_len = Some(fleet.engine.max_model_len);
        rc.max_blocks_per_worker = rc
            .max_blocks_per_worker
            .max(2 * fleet.engine.kv_blocks as usize);
        let mut score = opts.score.unwrap_or_default();
        score.policy = policy;
        rc.score = score;
        let router = Router::new(rc).map_err(|e| RunError::Router(e.to_string()))?;
        // A deployment reserves each engine's block map for its KV capacity, which a
        // long-running engine fills; a simulated run reserves it only when its requests
        // carry at least that many blocks per engine (a reservation is allocated whether
        // or not it fills, and the demo's 51 engines never fill theirs).
        let workload_blocks: u64 = w
            .requests
            .iter()
            .map(|r| (u64::from(r.prompt.len()) + u64::from(r.output_tokens)).div_ceil(bs as u64))
            .sum();
        let capacity = u64::from(fleet.engine.kv_blocks);
        let reserve = (workload_blocks >= capacity * engines_n as u64).then_some(capacity as usize);
        let workers: Vec<WorkerId> = (0..engines_n).map(|e| WorkerId::new(e as u64, 0)).collect();
        for e in registration_order(engines_n, opts.seed) {
            let wid = workers[e];
            router
                .add_worker(wid)
                .map_err(|e| RunError::Router(e.to_string()))?;
            // What a deployment knows of each engine: its KV capacity, so the index sizes
            // the worker's block map once instead of growing it as the cache fills.
            if let Some(blocks) = reserve {
                router
                    .reserve_worker_blocks(wid, blocks)
                    .map_err(|e| RunError::Router(e.to_string()))?;
            }
            router
                .configure_engine(
                    kvroute::EngineId(e as u64),
                    kvroute::EngineConfig::new()
                        .with_dp_size(1)
                        .with_max_running_per_rank(fleet.engine.max_running)
                        .with_decode_tps(fleet.engine.decode_tps(fleet.engine.max_running) as f32)
                        .with_single_sequence_decode_tps(fleet.engine.decode_tps(1) as f32)
                        .with_prefill_tps(fleet.engine.prefill_tps as f32),
                )
                .map_err(|e| RunError::Router(e.to_string()))?;
        }
        let mut chan = fleet.channels;
        // A forced telemetry mode holds for every engine, the partial-telemetry faults too.
        let mut faults = w.faults.clone();
        if let Some(t) = opts.telemetry {
            chan.telemetry = t;
            faults.retain(|f| !matches!(f.kind, crate::fault::FaultKind::PartialTelemetry { .. }));
        }
        // One engine's batches are at least a step apart, so a jitter up to the step's fixed
        // cost never reorders them.
        let buffer_replays = chan.replay
            && chan.replay_buffer_batches > 0
            && (chan.event_loss > 0.0
                || chan.event_jitter_s > fleet.engine.step_base_s
                || !w.faults.is_empty());
        let reqs = w
            .requests
            .iter()
            .map(|r| ReqState {
                status: Status::Pending,
                arrived: false,
                decision: None,
                engine: None,
                arrival: secs_to_ns(r.arrival_s),
                first_token: None,
                finish: None,
                cached: 0,
                predicted: 0,
                rejections: 0,
                reason: "",
            })
            .collect();
        let cat = match opts.prompt_hashes {
            Some(h) if !h.fit(w) => return Err(RunError::PromptHashes),
            Some(h) => Arc::clone(&h.cat),
            None => Arc::new(Catalog::new(&w.requests, fleet.engine.block_size)),
        };
        let res = RunResult {
            workload: w.name.clone(),
            engines: fleet.engines,
            ..RunResult::default()
        };
        Ok(Self {
            w,
            opts,
            chan,
            cat,
            router,
            workers,
            engines: (0..engines_n)
                .map(|_| Engine::new(&fleet.engine, 0))
                .collect(),
            q: Queue::default(),
            rng: StdRng::seed_from_u64(opts.seed),
            faults: FaultWindows::new(&faults, fleet.engines),
            buffer_replays,
            replay_buf: vec![VecDeque::new(); engines_n],
            replay_inflight: vec![false; engines_n],
            wake_pending: vec![false; engines_n],
            reqs,
            children,
            notices: Vec::new(),
            spare_bufs: Vec::new(),
            res,
            now: 0,
            horizon: opts.horizon_s.map_or(u64::MAX, secs_to_ns),
            done: 0,
            progress_pct: None,
        })
    }
}

/// Seed offset of the registration order's draw, so that it is independent of the channel
/// draws seeded with the run's seed itself.
const REGISTRATION_SEED_OFFSET: u64 = 0x5EED_0F0D;

/// The order in which the `engines` engines register with the router for `seed`: a
/// uniformly random permutation of `0..engines` (Fisher-Yates, seeded). The router gives
/// slots in registration order and rotates its exact ties over the tied slots in slot
/// order, so the seed decides which engine wins the `k`-th tie, as the arbitrary order in
/// which a real gateway discovers its engines does.
pub(in crate::driver) fn registration_order(engines: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..engines).collect();
    let mut rng = StdRng::seed_from_u64(seed ^ REGISTRATION_SEED_OFFSET);
    order.shuffle(&mut rng);
    order
}

#[cfg(test)]
mod tests {
    use super::registration_order;

    #[test]
    fn registration_order_is_a_seeded_permutation() {
        let a = registration_order(16, 1);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..16).collect::<Vec<_>>(), "every engine once");
        assert_eq!(a, registration_order(16, 1), "same seed, same order");
        assert_ne!(a, registration_order(16, 2), "another seed, another order");
        assert_eq!(registration_order(1, 9), vec![0]);
        assert!(registration_order(0, 9).is_empty());
    }
}
