//! The [`Router`]: construction, worker lifecycle, KV events, load telemetry, live knobs
//! and stats. Routing itself is in `route.rs`.
//!
//! # Locks
//! * `membership` (read-write): events take it shared, adding and removing workers take it
//!   exclusively, so an event of a worker being removed lands wholly before the removal
//!   (and is cleared by it) or fails with [`EventError::UnknownWorker`]; a re-added worker
//!   never inherits a late event of its predecessor. `route` never takes it.
//! * `load` (mutex): the single-writer load publisher. `route` never takes it; it reads
//!   published snapshots lock-free.
//! * The registry's, the index's writer lock and the reservation table's admin locks are
//!   their crates' own.

use kvroute_core::EngineHash;
use kvroute_core::sync::atomic::AtomicU64;
use kvroute_core::sync::{Mutex, MutexGuard, RwLock};
use kvroute_core::{EngineId, LoadSample, Nanos, Number, OutOfRange, UpdateError};
use kvroute_core::{SequenceHash, Slot, SlotGeneration, WorkerId};
use kvroute_index::index::{BlockStore, RemoveOutcome, StoreOutcome};
use kvroute_index::runs::{RunIndex, RunIndexStats};
use kvroute_index::{BlockHasher, RegistryError, WorkerRegistry};
use kvroute_load::{
    EngineConfig, LoadPublisher, LoadReader, PublishError, ReservationTable, Reserved, SweepReport,
    TableError,
};
use kvroute_score::{NearTieRng, ScoreConfig, SharedConfig};
use kvroute_wire::{SglangRankLoad, VllmLoadUpdate};

use crate::breaker::{Breakers, Outcome, Transition};
use crate::carry::{CarryState, Departure};
use crate::config::{AdmissionConfig, RouterConfig, RouterConfigError};
use crate::decision::Decision;
use crate::error::{EventError, WorkerError};
use crate::stats::{Counters, RouterStats};

/// The publisher and the latest time it was given.
pub(crate) struct LoadState {
    pub publisher: LoadPublisher,
    /// The `now` of the latest [`Router::publish`] (caller's clock); used when the router
    /// must republish on its own (worker removal) and to start a new worker's sweep clock.
    pub last_now: Nanos,
    /// Departures of removed workers and the reservations carried into re-added ones
    /// (`carry.rs`).
    pub carry: CarryState,
}

/// The routing core a gateway embeds; see the crate docs for the flow. `Send + Sync`:
/// share it (`Arc<Router>`) between request threads, the event ingest and the telemetry
/// thread.
pub struct Router {
    pub(crate) hasher: BlockHasher,
    pub(crate) block_size: usize,
    pub(crate) max_rescores: u32,
    /// The engines' context length, when configured (`RouterConfig::max_model_len`).
    pub(crate) max_model_len: Option<u32>,
    pub(crate) admission: Option<AdmissionConfig>,
    near_tie_seed: u64,
    /// A snapshot older than this at a decision's time is not trusted (see `route`).
    pub(crate) max_load_age: Nanos,
    registry: WorkerRegistry,
    pub(crate) index: RunIndex,
    membership: RwLock<()>,
    load: Mutex<LoadState>,
    pub(crate) reader: LoadReader,
    pub(crate) table: ReservationTable,
    pub(crate) score: SharedConfig,
    /// Decision numbers handed out in blocks to the threads' scratch buffers
    /// (`scratch::SeqBlock`): a decision takes the next number of its thread's block,
    /// which gives both of its per-decision indices (the rotating tie cursor, its low 32
    /// bits, and the near-tie draw). From one thread: 0, 1, 2, ….
    pub(crate) decision_seq: AtomicU64,
    pub(crate) counters: Counters,
    /// Per-worker breakers fed by request outcomes (`breaker.rs`).
    breakers: Breakers,
    pub(crate) ingest: crate::ingest::IngestState,
    /// Predicted residency of routed prompts (`predicted.rs`); `None` when disabled.
    pub(crate) predictions: Option<crate::predicted::Predictions>,
    /// Unique in the process: tags this router's per-thread scratch buffers (`scratch.rs`).
    pub(crate) id: u64,
    /// Held only by the router: the scratch sets that served it keep a weak reference, and
    /// empty themselves once it reads no strong count (`scratch.rs`, *Memory*).
    pub(crate) alive: std::sync::Arc<()>,
}

impl core::fmt::Debug for Router {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Router")
            .field("block_size", &self.block_size)
            .field("registry", &self.registry)
            .field("score", &*self.score.guard())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every operation under these locks leaves its state whole before it can panic.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Router {
    /// A router with no worker.
    ///
    /// # Errors
    /// [`RouterConfigError`] naming the first setting out of range
    /// ([`RouterConfig::validate`]).
    pub fn new(config: RouterConfig) -> Result<Self, RouterConfigError> {
        config.validate()?;
        // Every part's own bounds were checked above with the same constants, so none of
        // the constructors below can refuse these values.
        let index = RunIndex::new(config.index_config()).map_err(RouterConfigError::OutOfRange)?;
        let table = ReservationTable::new(config.worker_slots, config.reservation_ttl).map_err(
            |e| match e {
                TableError::BadConfig(e) => RouterConfigError::OutOfRange(e),
                // `new` refuses nothing else.
                _ => RouterConfigError::OutOfRange(OutOfRange {
                    field: "reservation_ttl",
                    value: Number::Int(config.reservation_ttl.0),
                    bounds: kvroute_load::reserve::TTL,
                }),
            },
        )?;
        let (mut publisher, reader) =
            LoadPublisher::new(config.load_config()).map_err(RouterConfigError::OutOfRange)?;
        // Both were built with `worker_slots` slots, so the table is never too small.
        let attached = publisher.attach_reservations(table.clone());
        debug_assert!(attached.is_ok());
        let score = SharedConfig::new(config.score).map_err(RouterConfigError::Score)?;
        Ok(Self {
            hasher: BlockHasher::new(config.block_size, config.namespace),
            block_size: config.block_size,
            max_rescores: config.max_rescores,
            max_model_len: config.max_model_len,
            max_load_age: config.max_load_age,
            admission: config.admission,
            near_tie_seed: config.near_tie_seed,
            registry: WorkerRegistry::new(config.worker_slots),
            index,
            membership: RwLock::new(()),
            load: Mutex::new(LoadState {
                publisher,
                last_now: Nanos::ZERO,
                carry: CarryState::new(config.worker_slots),
            }),
            reader,
            table,
            score,
            decision_seq: AtomicU64::new(0),
            counters: Counters::new(config.worker_slots),
            breakers: Breakers::new(config.worker_slots, config.breaker),
            ingest: crate::ingest::IngestState::new(config.worker_slots),
            predictions: config.predicted.map(|p| {
                let bs = u32::try_from(config.block_size).unwrap_or(u32::MAX);
                crate::predicted::Predictions::new(p.entries, p.min_tokens.div_ceil(bs), p.ttl)
            }),
            id: crate::scratch::next_router_id(),
            alive: std::sync::Arc::new(()),
        })
    }

    // ----- workers -------------------------------------------------------------------

    /// Registers `worker` (one DP rank) in the lowest free slot and returns the slot. It is
    /// routable from the next [`publish`](Self::publish); until it reports load it is
    /// `Missing`, which makes load-weighing policies fall back to `least_load` (that is the
    /// fallback rule, by design).
    ///
    /// A worker id removed less than one reservation TTL ago comes back with the work its
    /// engine still has: its last load report (aging from when it was observed) and the
    /// reservations the removal released, held until its own next report is published
    /// (or two TTLs), so admission never exceeds its bound across a remove and add. See
    /// [`RouterStats::carried`] and [`end_carried`](Self::end_carried).
    ///
    /// # Errors
    /// [`WorkerError::AlreadyRegistered`], [`WorkerError::Full`], or
    /// [`WorkerError::Inconsistent`] (a bug; undone).
    pub fn add_worker(&self, worker: WorkerId) -> Result<Slot, WorkerError> {
        let _m = self.membership.write().unwrap_or_else(|p| p.into_inner());
        let (slot, generation, added) = self.registry.get_or_add(worker).map_err(|e| match e {
            RegistryError::Full { capacity } => WorkerError::Full { capacity },
            _ => WorkerError::Inconsistent("registry"),
        })?;
        if !added {
            return Err(WorkerError::AlreadyRegistered(worker));
        }
        // Before the reservation table knows the tenancy, so before any decision under it.
        self.counters.start_tenancy(slot, generation);
        self.breakers.reset(slot, generation);
        let undo_registry = || {
            if let Ok(retired) = self.registry.remove(worker) {
                let _ = self.registry.release(retired);
            }
        };
        let mut load = lock(&self.load);
        if load.publisher.add_worker(slot, worker, generation).is_err() {
            undo_registry();
            return Err(WorkerError::Inconsistent("load publisher"));
        }
        if self
            .table
            .add_worker(slot, generation, load.last_now)
            .is_err()
        {
            let _ = load.publisher.remove_worker(worker);
            undo_registry();
            return Err(WorkerError::Inconsistent("reservation table"));
        }
        self.ingest.forget(slot);
        let now = load.last_now;
        let LoadState {
            publisher, carry, ..
        } = &mut *load;
        carry.readd(publisher, &self.table, (worker, slot, generation), now);
        Ok(slot)
    }

    /// Removes `worker`: unregisters it, drops its index residency, its load lane, every
    /// reservation on it and its block-size mismatch counts (and its engine's
    /// [`configure_engine`](Self::configure_engine) facts when it was the engine's last
    /// registered rank), republishes the load snapshot (at the latest `now` given to
    /// [`publish`](Self::publish)) so decisions stop choosing it, and only then frees the
    /// slot, so a worker re-added later (here or in this slot) inherits no residency and no
    /// guard. Its last report and the released reservations are kept for one reservation
    /// TTL, for a re-addition of the same worker id ([`add_worker`](Self::add_worker)).
    /// Outstanding [`Decision`](crate::Decision) guards of the old tenancy become no-ops.
    ///
    /// If every snapshot buffer is pinned by readers the republication is skipped; a
    /// decision still reading the old snapshot then fails to reserve on the removed slot
    /// and re-scores.
    ///
    /// # Errors
    /// [`WorkerError::UnknownWorker`]; [`WorkerError::Inconsistent`] (a bug) when a part
    /// did not hold the worker (the other parts are still cleaned and the slot freed).
    pub fn remove_worker(&self, worker: WorkerId) -> Result<(), WorkerError> {
        let _m = self.membership.write().unwrap_or_else(|p| p.into_inner());
        let retired = self.registry.remove(worker).map_err(|e| match e {
            RegistryError::UnknownWorker(w) => WorkerError::UnknownWorker(w),
            _ => WorkerError::Inconsistent("registry"),
        })?;
        let (slot, generation) = (retired.slot(), retired.generation());
        let mut bad = None;
        if self.index.remove_worker(slot).is_err() {
            bad = Some("index");
        }
        self.ingest.forget(slot);
        self.ingest.forget_worker(worker);
        self.breakers.reset(slot, SlotGeneration(0));
        {
            let mut load = lock(&self.load);
            let report = load.publisher.last_report(worker);
            let engine = load.publisher.engine_config(worker.engine_id);
            if load.publisher.remove_worker(worker).is_err() {
                bad = Some("load publisher");
            }
            let released = match self.table.remove_worker(slot, generation) {
                Ok(r) => r,
                Err(_) => {
                    bad = Some("reservation table");
                    Default::default()
                }
            };
            let now = load.last_now;
            let (ttl, capacity) = (self.table.ttl(), self.table.capacity());
            let departure = Departure {
                worker,
                at: now,
                report,
                released,
                engine,
            };
            load.carry.depart(departure, ttl, capacity);
            let _ = load.publisher.publish(now);
        }
        if self.registry.release(retired).is_err() {
            bad = Some("registry release");
        }
        bad.map_or(Ok(()), |part| Err(WorkerError::Inconsistent(part)))
    }

    /// Every registered worker with its slot, in slot order.
    pub fn workers(&self) -> Vec<(Slot, WorkerId)> {
        self.registry.workers()
    }

    /// The slot of a registered worker.
    pub fn slot_of(&self, worker: WorkerId) -> Option<Slot> {
        self.registry.slot_of(worker)
    }

    // ----- KV events -----------------------------------------------------------------

    pub(crate) fn with_slot<T>(
        &self,
        worker: WorkerId,
        f: impl FnOnce(Slot) -> Result<T, EventError>,
    ) -> Result<T, EventError> {
        let _m = self.membership.read().unwrap_or_else(|p| p.into_inner());
        let slot = self
            .registry
            .slot_of(worker)
            .ok_or(EventError::UnknownWorker(worker))?;
        f(slot)
    }

    /// [`with_slot`](Self::with_slot) for a typed event: an unknown worker is also counted
    /// in [`IngestStats::unknown_worker_events`](crate::IngestStats).
    fn with_event_slot<T>(
        &self,
        worker: WorkerId,
        f: impl FnOnce(Slot) -> Result<T, EventError>,
    ) -> Result<T, EventError> {
        let r = self.with_slot(worker, f);
        if let Err(EventError::UnknownWorker(_)) = r {
            self.count_unknown_worker_event();
        }
        r
    }

    /// Applies a `BlockStored` event of `worker`: the index re-hashes `store.token_ids`
    /// (chaining from `store.parent`, an engine hash this worker stored before) and marks
    /// the blocks resident.
    ///
    /// # Errors
    /// [`EventError::UnknownWorker`] (counted in [`ingest_stats`](Self::ingest_stats),
    /// `unknown_worker_events`, as for every typed event); [`EventError::Index`] for a
    /// block-size or token-count mismatch or an unknown parent (counted in
    /// [`index_stats`](Self::index_stats)).
    pub fn store(
        &self,
        worker: WorkerId,
        store: &BlockStore<'_>,
    ) -> Result<StoreOutcome, EventError> {
        self.with_event_slot(worker, |slot| Ok(self.index.store(slot, store)?))
    }

    /// Applies a store whose chained hashes the producer computed with kvroute's scheme:
    /// pairs of (engine hash, chained hash) of consecutive blocks of one chain, in sequence
    /// order, the first one the child of `parent` (an engine hash this worker stored
    /// before), or with no parent a chain's first block (or a block that already starts a
    /// run of the index), as an engine's `BlockStored` event is.
    /// [`RunIndex::store_hashes`] relies on that shape: pairs that are not one chain are
    /// indexed as if they were.
    ///
    /// # Errors
    /// [`EventError::UnknownWorker`]; [`EventError::Index`] with
    /// [`IndexError::UnknownParent`](kvroute_index::index::IndexError::UnknownParent) when
    /// the worker has not indexed `parent` (counted in [`index_stats`](Self::index_stats),
    /// nothing stored).
    pub fn store_hashes(
        &self,
        worker: WorkerId,
        parent: Option<EngineHash>,
        blocks: &[(EngineHash, SequenceHash)],
    ) -> Result<StoreOutcome, EventError> {
        self.with_event_slot(worker, |slot| {
            Ok(self.index.store_hashes(slot, parent, blocks)?)
        })
    }

    /// Applies a `BlockRemoved` event of `worker` (engine hashes it stored; unknown ones are
    /// counted and skipped).
    ///
    /// # Errors
    /// [`EventError::UnknownWorker`].
    pub fn remove_blocks(
        &self,
        worker: WorkerId,
        block_hashes: &[EngineHash],
    ) -> Result<RemoveOutcome, EventError> {
        self.with_event_slot(worker, |slot| Ok(self.index.remove(slot, block_hashes)?))
    }

    /// Applies `AllBlocksCleared` of `worker` (cache reset, OOM, sleep, restart): it holds
    /// nothing any more, so `route` credits it no cache (and no predicted residency).
    /// Returns how many engine hashes it had.
    ///
    /// # Errors
    /// [`EventError::UnknownWorker`].
    pub fn clear_blocks(&self, worker: WorkerId) -> Result<usize, EventError> {
        self.with_event_slot(worker, |slot| Ok(self.clear_cache(slot)?))
    }

    /// Clears `slot`'s residency in the index and drops its predicted-residency credits
    /// (the prefixes routed there before are gone with the cache). Returns how many engine
    /// hashes it had. Ingest's own clears (`ingest::apply`) do the same.
    ///
    /// # Errors
    /// The index's [`IndexError::SlotOutOfRange`](kvroute_index::index::IndexError).
    pub(crate) fn clear_cache(
        &self,
        slot: Slot,
    ) -> Result<usize, kvroute_index::index::IndexError> {
        let had = self.index.clear(slot)?;
        if let Some(p) = &self.predictions {
            p.forget_slot(slot);
        }
        Ok(had)
    }

    /// Sizes the index's map of `worker`'s blocks (engine hash → position) for `blocks`
    /// at once, so that it does not grow while the engine fills its cache: pass the
    /// engine's KV capacity per rank in blocks (vLLM's `num_gpu_blocks`, Dynamo's
    /// `total_kv_blocks`), plus any offload tier whose blocks it reports. The memory is
    /// allocated at once, 16 to 20 bytes per reserved block (12-byte slots, sized by
    /// quarters to at least 4/3 of `blocks`), whether or not the engine fills it; reserve
    /// for engines that will. The map still grows if the worker holds more, keeps the
    /// reservation across cache clears (`AllBlocksCleared`, restarts, replays), and drops
    /// it with [`remove_worker`](Self::remove_worker). The last call sets it: a smaller
    /// count lowers it, 0 removes it. A count above the configured `max_blocks_per_worker`
    /// reserves for that cap. The call holds the index's writer lock while it allocates
    /// and writes the map (a time in proportion to `blocks`), so make it when the worker
    /// registers. Optional:
    /// without it the map grows by a quarter at a time as blocks arrive, each growth
    /// moving every entry (`RunIndex::reserve_worker`).
    ///
    /// # Errors
    /// [`EventError::UnknownWorker`] (a configuration call: not counted as an unknown
    /// worker's KV event).
    pub fn reserve_worker_blocks(&self, worker: WorkerId, blocks: usize) -> Result<(), EventError> {
        self.with_slot(worker, |slot| {
            Ok(self.index.reserve_worker(slot, blocks)?)
        })
    }

    // ----- load telemetry ------------------------------------------------------------

    /// Sets the deployment facts of `engine` (every DP rank of it): DP size, per-rank
    /// scheduler cap (required before vLLM load updates, which do not report it) and
    /// throughputs; see [`EngineConfig`]. Takes effect at the next publication. Kept while
    /// any rank of the engine is registered; removing its last rank forgets it (configure
    /// the engine again when its ranks come back), unless one comes back within a
    /// reservation TTL ([`add_worker`](Self::add_worker): the facts return with it).
    ///
    /// # Errors
    /// [`OutOfRange`] naming the field out of range; nothing changes.
    pub fn configure_engine(
        &self,
        engine: EngineId,
        config: EngineConfig,
    ) -> Result<(), OutOfRange> {
        lock(&self.load)
            .publisher
            .configure_engine(engine.0, config)
    }

    /// Applies one rank's load figures observed at `now` (caller's clock); visible from the
    /// next [`publish`](Self::publish).
    ///
    /// The observation time is judged at that publication, against the publication's own
    /// time: a report from the future (observed after the publication's `now`) is dropped
    /// there and counted in `LoadStats::rejected_future`, and one older than the maximum
    /// load age makes the worker `Stale`. So an update accepted here can still be dropped
    /// at the next `publish`; the published snapshot's `LoadStats` and the worker's
    /// validity ([`load_reader`](Self::load_reader)) tell.
    ///
    /// # Errors
    /// [`UpdateError`] (unknown worker, bad values: the worker becomes `Invalid`,
    /// superseded); counted in the snapshot's `LoadStats`.
    pub fn update_load(
        &self,
        worker: WorkerId,
        sample: LoadSample,
        now: Nanos,
    ) -> Result<(), UpdateError> {
        lock(&self.load).publisher.apply_sample(worker, sample, now)
    }

    /// Applies a vLLM update (all DP ranks of one engine, as
    /// [`parse_vllm_metrics`](crate::parse_vllm_metrics) returns it) observed at `now`. vLLM
    /// reports no scheduler cap: each rank's cap is the engine's `max_running_per_rank`
    /// from [`configure_engine`](Self::configure_engine). Each rank is applied on its own.
    ///
    /// # Errors
    /// The first rejection, every one counted: [`UpdateError::EmptyUpdate`],
    /// [`UpdateError::DuplicateRank`]; per rank [`UpdateError::UnknownWorker`],
    /// [`UpdateError::Superseded`], [`UpdateError::MissingCap`] when the engine was never
    /// configured with a cap (call `configure_engine` first), or a bad gauge (the rank
    /// becomes `Invalid`).
    pub fn update_vllm_load(&self, update: &VllmLoadUpdate, now: Nanos) -> Result<(), UpdateError> {
        let mut load = lock(&self.load);
        let reports = update.to_reports(load.publisher.configured_cap(update.engine_id));
        load.publisher.apply_ranks(update.engine_id, &reports, now)
    }

    /// Applies one SGLang `/v1/loads` rank entry (as
    /// [`parse_sglang_loads`](crate::parse_sglang_loads) returns them) received at `now`; a
    /// report older by the engine's own `timestamp` than one already applied is dropped.
    ///
    /// # Errors
    /// [`UpdateError::UnknownWorker`], [`UpdateError::Superseded`], or a bad field (the rank
    /// becomes `Invalid`); every one counted.
    pub fn update_sglang_load(
        &self,
        update: &SglangRankLoad,
        now: Nanos,
    ) -> Result<(), UpdateError> {
        lock(&self.load)
            .publisher
            .apply_ranks(update.engine_id, &[update.to_report()], now)
    }

    /// Publishes the load figures applied so far as of `now` (caller's clock): computes
    /// validity (stale after the configured age), reconciles reservations with the new
    /// reports, and makes the snapshot visible to decisions. Returns the publication number.
    ///
    /// The first publication's time sets the router's clock, against which later load
    /// reports and publications are checked (`RouterConfig::max_clock_lead`).
    ///
    /// # Errors
    /// [`PublishError::AllBuffersPinned`]: readers hold every spare buffer; nothing changed,
    /// retry at the next tick. [`PublishError::FromTheFuture`]: `now` is further ahead of
    /// the clock than `max_clock_lead`; nothing changed (counted in `LoadStats`).
    pub fn publish(&self, now: Nanos) -> Result<u64, PublishError> {
        let mut load = lock(&self.load);
        let mut seq = load.publisher.publish(now)?;
        load.last_now = load.last_now.max(now);
        // Breakers run on the clock of accepted publications only (a refused time never
        // moves it); those due go half-open and their workers are candidates again at once.
        let mut readmitted = false;
        for slot in self.breakers.due(load.last_now) {
            if let Some((worker, _)) = self.registry.worker_at(slot) {
                readmitted |= load.publisher.set_excluded(worker, false).unwrap_or(false);
            }
        }
        if readmitted {
            let clock = load.last_now;
            if let Ok(s) = load.publisher.publish(clock) {
                seq = s;
            }
        }
        let LoadState {
            publisher,
            carry,
            last_now,
        } = &mut *load;
        carry.published(publisher, &self.table, *last_now);
        Ok(seq)
    }

    /// The TTL sweeper of reservations (call it at least every reservation TTL): drops
    /// reservations older than about one to two TTLs (leaked guards, lost completions) and
    /// counts them in [`RouterStats::reservations_swept`].
    pub fn sweep(&self, now: Nanos) -> SweepReport {
        self.table.sweep(now)
    }

    // ----- outcomes ---------------------------------------------------------------------

    /// Ends a decision with the request's outcome: releases its reservation (as dropping
    /// it does) and feeds the worker's breaker (`breaker.rs`: failures open it, which takes
    /// the worker out of the candidates for a cooldown). Dropping a decision instead
    /// records no outcome.
    pub fn finish(&self, decision: Decision, outcome: Outcome) {
        let (worker, generation) = (decision.worker, decision.generation);
        let decided_at = decision.reservation.reserved_at();
        drop(decision);
        self.outcome(worker, generation, outcome, Some(decided_at));
    }

    /// Records the outcome of a request routed to `worker` under the tenancy `generation`
    /// ([`Decision::generation`]) when the decision itself was not kept (its reservation
    /// handed to the engine's telemetry, say). An outcome of a removed worker, or of an
    /// earlier tenancy of its slot, is counted as stale and changes nothing.
    ///
    /// Without the decision's time, an outcome recorded while the worker's breaker is
    /// half-open counts as its probe, even for a request routed before the breaker opened
    /// ([`finish`](Self::finish) tells them apart).
    pub fn record_outcome(&self, worker: WorkerId, generation: SlotGeneration, outcome: Outcome) {
        self.outcome(worker, generation, outcome, None);
    }

    fn outcome(
        &self,
        worker: WorkerId,
        generation: SlotGeneration,
        outcome: Outcome,
        decided_at: Option<Nanos>,
    ) {
        let slot = self.registry.slot_of(worker);
        let registered = self.registry.len();
        let t = self
            .breakers
            .record(slot, generation, outcome, decided_at, registered);
        if t == Transition::Opened {
            let mut load = lock(&self.load);
            // Only the tenancy the breaker opened for: a removal or re-addition that ran
            // meanwhile shows in the registry, and excluding by worker id would then hit
            // the new tenancy, whose breaker is closed.
            let current = slot.and_then(|s| self.registry.worker_at(s));
            if current != Some((worker, generation)) {
                return;
            }
            // Excluded from the next publication; published at once so that decisions stop
            // choosing it (skipped when every buffer is pinned: the next one carries it).
            if load.publisher.set_excluded(worker, true).is_ok() {
                let now = load.last_now;
                let _ = load.publisher.publish(now);
            }
        }
    }

    // ----- knobs, stats, inspection ----------------------------------------------------

    /// The scorer configuration new decisions use (an owned `Arc`: one reference-count
    /// increment, no lock).
    pub fn score_config(&self) -> std::sync::Arc<ScoreConfig> {
        self.score.load()
    }

    /// Replaces the scorer configuration while routing: decisions that start after this
    /// returns use it; no decision sees half of it.
    ///
    /// # Errors
    /// [`OutOfRange`] naming the knob out of range; nothing changes.
    pub fn set_score_config(&self, config: ScoreConfig) -> Result<(), OutOfRange> {
        self.score.set(config)
    }

    /// Changes some scorer knobs while routing: `change` edits a copy of the current
    /// configuration, which is installed if valid. Atomic against other
    /// `update_score_config` and [`set_score_config`](Self::set_score_config) calls, so two
    /// admin writers changing different knobs never lose each other's change.
    ///
    /// ```
    /// # let router = kvroute::Router::new(kvroute::RouterConfig::new(4, 16)).unwrap();
    /// router.update_score_config(|c| c.tie_epsilon = 0.01).unwrap();
    /// assert_eq!(router.score_config().tie_epsilon, 0.01);
    /// ```
    ///
    /// # Errors
    /// [`OutOfRange`] naming the knob out of range; nothing changes.
    pub fn update_score_config(
        &self,
        change: impl FnOnce(&mut ScoreConfig),
    ) -> Result<(), OutOfRange> {
        self.score.update(change)
    }

    /// A plain copy of the router's counters, with the decisions of every registered
    /// worker. Takes the registry's lock briefly once per worker (routing never takes it).
    pub fn stats(&self) -> RouterStats {
        let tenants = self.registry.workers().into_iter().filter_map(|(slot, _)| {
            let (worker, generation) = self.registry.worker_at(slot)?;
            Some((slot, worker, generation))
        });
        let mut st = self.counters.snapshot(self.table.stats(), tenants);
        st.carried = lock(&self.load).carry.stats();
        st.breaker = self.breakers.stats();
        if let Some(p) = &self.predictions {
            st.predictions = p.stats();
        }
        st
    }

    /// Ends the work carried into `worker` when it was added back (for a gateway that
    /// knows its engine restarted, so the requests it had in flight are gone) and returns
    /// the amounts that were still reserved; zero when nothing is carried.
    pub fn end_carried(&self, worker: WorkerId) -> Reserved {
        lock(&self.load).carry.end_carried(worker)
    }

    /// The index's counters and gauges (rejected events, runs, positions, residencies,
    /// memory in bytes); takes the index's writer lock and walks its runs (`O(runs)`), so
    /// it is not for the hot path.
    pub fn index_stats(&self) -> RunIndexStats {
        self.index.stats()
    }

    /// Read access to the run-compressed prefix index (gauges, `worker_blocks`,
    /// `engine_hashes`, direct matching into [`Overlaps`](crate::Overlaps),
    /// `collect_garbage`).
    pub fn index(&self) -> &RunIndex {
        &self.index
    }

    /// A reader of the published load snapshots.
    pub fn load_reader(&self) -> LoadReader {
        self.reader.clone()
    }

    /// Live reservations on `worker` (requests and tokens), with the requests its last
    /// report counted that have ended since ([`Reserved::finished`]), or `None` when it is
    /// not registered.
    pub fn reserved(&self, worker: WorkerId) -> Option<Reserved> {
        let slot = self.registry.slot_of(worker)?;
        let generation = self.table.tenancy(slot)?;
        self.table.reserved_for(slot, generation)
    }

    /// The near-tie draw of decision number `n` (from
    /// [`decision_seq`](Self::decision_seq)): the first output of [`NearTieRng`] seeded
    /// with the router's seed plus `n` times the golden-ratio constant.
    pub(crate) fn draw(&self, n: u64) -> u64 {
        const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
        NearTieRng::new(self.near_tie_seed.wrapping_add(n.wrapping_mul(GOLDEN))).next_u64()
    }
}
