//! The two decision paths of the decision rows.
//!
//! * kvroute: [`kvroute_router`] builds the `Router` of kvroute's `route` bench (the fleet in
//!   its index, every worker's [`WorkerLoad`] published); [`kvroute_decide`] is one
//!   `Router::route` with precomputed chained hashes: match + snapshot + score (policy
//!   `projected_time`, enforce) + reserve, and the reservation released when the decision
//!   is dropped.
//! * peer: [`PeerDecider::decide`] is what the peer's selection core does for a request
//!   whose block hashes are known (its `prepare` step, then its selector): the concurrent
//!   radix tree's match details (`find_match_details_impl`, the call its indexer makes) →
//!   `OverlapAnalysis::signals` (effective overlap and cached tokens per worker) → the
//!   request's overlap signals → `DefaultWorkerSelector::select_worker` with
//!   precomputed per-worker load projections (`KvRouterConfig::default()`: temperature 0,
//!   so a deterministic argmin). Not included: booking the request in the peer's
//!   active-sequence tracker (kvroute's time does include its reserve and release).

use std::collections::{HashMap, HashSet};

use dynamo_kv_router::indexer::TieredMatchDetails;
use dynamo_kv_router::protocols::{
    LocalBlockHash, RoutingConstraints, WorkerConfigLike, WorkerId, WorkerWithDpRank,
};
use dynamo_kv_router::scheduling::{OverlapAnalysis, OverlapSignals, ScheduleMode};
use dynamo_kv_router::{
    ConcurrentRadixTreeCompressed, DefaultWorkerSelector, KvRouterConfig, SchedulingRequest,
    WorkerSelectionInput, WorkerSelector,
};
use kvroute::{Nanos, RouteRequest, Router, RouterConfig, SequenceHash};
use kvroute_bench::{BLOCK_SIZE, ConversationFleet, REQUEST_BLOCKS};
use rustc_hash::FxHashMap;

use crate::load::WorkerLoad;
use crate::peer::worker;

/// The decision time (the caller's clock).
pub const NOW: Nanos = Nanos::from_secs(100);
/// Prompt tokens of every routed request (128 blocks of 16).
pub const PROMPT_TOKENS: u32 = (REQUEST_BLOCKS * BLOCK_SIZE) as u32;
/// Expected output tokens of every routed request.
pub const OUTPUT_TOKENS: u32 = 256;
/// KV capacity each worker reports to the peer (blocks).
pub const TOTAL_KV_BLOCKS: u64 = 131_072;

/// kvroute's router holding `fleet` in its index, every worker with its [`WorkerLoad`]
/// published at [`NOW`] (slot `w` = worker `w`).
///
/// # Panics
/// If the router rejects the configuration, a worker or a sample (a bug in the benchmark).
pub fn kvroute_router(fleet: &ConversationFleet) -> Router {
    let mut cfg = RouterConfig::new(fleet.workers, BLOCK_SIZE);
    cfg.expected_blocks = fleet.distinct_blocks();
    let router = Router::new(cfg).expect("valid config");
    for w in 0..fleet.workers {
        let slot = router
            .add_worker(kvroute::WorkerId::new(w as u64, 0))
            .expect("room");
        assert_eq!(slot.index(), w);
    }
    fleet.populate_runs(router.index());
    for w in 0..fleet.workers {
        let sample = WorkerLoad::of(w).kvroute_sample();
        router
            .update_load(kvroute::WorkerId::new(w as u64, 0), sample, NOW)
            .expect("valid sample");
    }
    router.publish(NOW).expect("publishes");
    router
}

/// One kvroute decision for a prompt given by its chained hashes; returns the chosen slot
/// (the decision, with its reservation, is dropped before returning).
///
/// # Panics
/// If routing fails (a bug in the benchmark: every worker is fresh).
pub fn kvroute_decide(router: &Router, hashes: &[SequenceHash]) -> usize {
    let req = RouteRequest::hashes(hashes, PROMPT_TOKENS, OUTPUT_TOKENS, NOW);
    router.route(&req).expect("routes").slot.index()
}

/// A worker as the peer's selector sees it: one DP rank, [`TOTAL_KV_BLOCKS`] of KV, no
/// taints.
#[derive(Debug, Default)]
pub struct PeerWorker {
    taints: HashSet<String>,
}

impl WorkerConfigLike for PeerWorker {
    fn data_parallel_start_rank(&self) -> u32 {
        0
    }

    fn data_parallel_size(&self) -> u32 {
        1
    }

    fn max_num_batched_tokens(&self) -> Option<u64> {
        None
    }

    fn total_kv_blocks(&self) -> Option<u64> {
        Some(TOTAL_KV_BLOCKS)
    }

    fn taints(&self) -> &HashSet<String> {
        &self.taints
    }
}

/// The peer's selector with its workers and a reusable request (loads precomputed).
pub struct PeerDecider {
    config: KvRouterConfig,
    selector: DefaultWorkerSelector,
    workers: HashMap<WorkerId, PeerWorker>,
    request: SchedulingRequest,
}

impl PeerDecider {
    /// A decider for workers `0..workers`, each with its [`WorkerLoad`].
    pub fn new(workers: usize) -> Self {
        let config = KvRouterConfig::default();
        let selector = DefaultWorkerSelector::new(Some(config.clone()), "prefill");
        let worker_loads: FxHashMap<WorkerWithDpRank, _> = (0..workers)
            .map(|w| (worker(w), WorkerLoad::of(w).peer_projection()))
            .collect();
        let request = SchedulingRequest {
            mode: ScheduleMode::QueryOnly { request_id: None },
            token_seq: None,
            isl_tokens: PROMPT_TOKENS as usize,
            lora_name: None,
            expected_output_tokens: Some(OUTPUT_TOKENS),
            affinity_target: None,
            pinned_worker: None,
            allowed_worker_ids: None,
            routing_constraints: RoutingConstraints::default(),
            router_config_override: None,
            track_prefill_tokens: true,
            priority_jump: 0.0,
            strict_priority: 0,
            policy_class: None,
            session_context: None,
            overlap: OverlapSignals::default(),
            kv_transfer_candidates: None,
            retain_kv_transfer_chain: false,
            shared_cache_hits: None,
            worker_loads,
            resp_tx: None,
        };
        Self {
            config,
            selector,
            workers: (0..workers)
                .map(|w| (w as WorkerId, PeerWorker::default()))
                .collect(),
            request,
        }
    }

    /// One peer decision for a prompt given by its local hashes, against `tree`; returns the
    /// chosen worker's index.
    ///
    /// # Panics
    /// If the selector fails (a bug in the benchmark: every worker is eligible).
    pub fn decide(
        &mut self,
        tree: &ConcurrentRadixTreeCompressed,
        hashes: &[LocalBlockHash],
    ) -> usize {
        let tiered = TieredMatchDetails {
            device: tree.find_match_details_impl(hashes, false),
            ..TieredMatchDetails::default()
        };
        self.request.overlap =
            OverlapAnalysis::new(&self.config, BLOCK_SIZE as u32, &tiered).signals();
        let input = WorkerSelectionInput::configured(
            &self.workers,
            &self.request,
            self.request.eligibility(),
            BLOCK_SIZE as u32,
        );
        let chosen = self.selector.select_worker(input).expect("selects");
        chosen.worker.worker_id as usize
    }
}
