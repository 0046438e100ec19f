//! The load publisher: the single telemetry thread's handle. It keeps the working state of
//! every slot, applies typed updates, computes validity once per publication and publishes
//! an immutable [`LoadSnapshot`] that readers load through a [`LoadReader`].
//!
//! Workers are registered with the publisher by slot (the slot and generation the
//! worker registry (`kvroute_index::WorkerRegistry`) assigned). Removing a worker from the
//! router takes three steps: `registry.remove(w)`, then `publisher.remove_worker(w)` and
//! `table.remove_worker(slot, generation)`, then `registry.release(retired)`.
//!
//! Validity of a registered slot, first match wins:
//! 1. no good report ever, and none rejected → `Missing`;
//! 2. the latest report was rejected for bad values → `Invalid`;
//! 3. the last good report is older than `max_age` at publication time → `Stale`;
//! 4. another DP rank of the engine is not current, or fewer ranks are registered than the
//!    engine's configured `dp_size` → `Partial`;
//! 5. otherwise `Fresh`.
//!
//! The publisher's state needs no atomics (it is `&mut self`, one thread); publication
//! goes through `publish.rs`, reconciliation through the reservation table.
//!
//! # Orderings
//! One atomic: the process-wide counter behind [`LoadSnapshot::stamp`], incremented with
//! `Relaxed`. Only the distinctness of its values matters (every read-modify-write of one
//! atomic sees a distinct value in its modification order); the snapshot carrying a stamp
//! is published through `publish.rs`, whose orderings make the stamp visible with it.

use core::fmt;
use std::collections::HashMap;

use kvroute_core::{
    Bounds, Fields, LoadSample, Nanos, OutOfRange, RankReport, Slot, SlotGeneration, UpdateError,
    WorkerId,
};

use crate::lanes::Validity;
use crate::pinned::PinnedReader;
use crate::publish::{PublishError, SnapshotGuard, SnapshotReader, SnapshotWriter, snapshot_cell};
use crate::reserve::ReservationTable;
use crate::snapshot::{EngineLoad, LoadSnapshot, LoadStats, NO_ENGINE};

/// Construction parameters of a [`LoadPublisher`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoadConfig {
    /// Number of slots (the registry's capacity), `1..=u32::MAX`.
    pub capacity: usize,
    /// A slot whose last good report is older than this is `Stale` (caller's clock, > 0).
    pub max_age: Nanos,
    /// Snapshot buffers, `2..=65536`: one is current, the rest let publication proceed while
    /// readers still hold older snapshots. Memory is `buffers` snapshots.
    pub buffers: usize,
    /// How far ahead of the publisher's clock (the latest time published) a report or a
    /// publication may be (caller's clock, > 0): one further ahead is refused with
    /// [`UpdateError::FromTheFuture`] / [`PublishError::FromTheFuture`] and counted, so one
    /// wrong time cannot make every later report look superseded or stop staleness. A
    /// publication refused so is accepted when the next attempt confirms it (no earlier,
    /// within this lead of it): a real jump of the caller's clock costs one tick. Before
    /// the first publication there is no clock yet: that publication's time sets it, and
    /// figures it finds observed more than this after it are dropped (the slot reads
    /// `Missing` again, counted).
    pub max_clock_lead: Nanos,
}

impl LoadConfig {
    /// Default maximum age: 2 s.
    pub const DEFAULT_MAX_AGE: Nanos = Nanos::from_secs(2);
    /// Default buffer count: 4.
    pub const DEFAULT_BUFFERS: usize = 4;
    /// Default clock lead: 60 s.
    pub const DEFAULT_MAX_CLOCK_LEAD: Nanos = Nanos::from_secs(60);

    /// `capacity` slots with the default age, buffer count and clock lead.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            max_age: Self::DEFAULT_MAX_AGE,
            buffers: Self::DEFAULT_BUFFERS,
            max_clock_lead: Self::DEFAULT_MAX_CLOCK_LEAD,
        }
    }
}

/// Deployment facts about one engine (all its DP ranks) that telemetry does not carry.
///
/// Throughputs resolve per lane in this order: what the rank's telemetry reports, else
/// this engine's configured figure, else the scorer's fleet-wide assumption
/// (`ScoreConfig::default_prefill_tps` / `default_decode_tps`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct EngineConfig {
    /// DP ranks the engine runs (> 0). When set, an engine with fewer registered ranks is
    /// `Partial`; when `None`, the registered ranks are taken as the whole engine.
    pub dp_size: Option<u32>,
    /// Scheduler cap per rank (requests, > 0; vLLM's `max_num_seqs`). Required for
    /// vLLM-style updates, which do not report it.
    pub max_running_per_rank: Option<u32>,
    /// Decode throughput per rank used when telemetry reports none (tokens/s, finite, >= 0).
    pub decode_tps: Option<f32>,
    /// Prefill throughput per rank used when telemetry reports none (tokens/s, finite, >= 0).
    pub prefill_tps: Option<f32>,
    /// Tokens/s one sequence decodes at when it runs alone on a rank (the inverse of the
    /// inter-token latency at batch 1; finite, >= 0). Together with [`decode_tps`] taken
    /// as the throughput with the batch full and the cap ([`max_running_per_rank`], else
    /// the reported cap), it gives the rank's decode step model: a step of `n` sequences
    /// lasts `base + n·per_seq` seconds, with `base + per_seq = 1/single` and
    /// `base + cap·per_seq = cap/decode_tps` (the two measured points of a line;
    /// `LoadSnapshot::decode_step_base_s`). Without it, or where the two points do not
    /// make a line with `base, per_seq >= 0`, the step is taken as processor sharing at the
    /// decode throughput (`base` 0).
    ///
    /// [`decode_tps`]: Self::decode_tps
    /// [`max_running_per_rank`]: Self::max_running_per_rank
    pub single_sequence_decode_tps: Option<f32>,
}

/// Valid [`LoadConfig::capacity`]: `1..=2^32 - 1` slots.
pub const CAPACITY: Bounds = Bounds::ints(1, u32::MAX as u64, "slots");
/// Valid [`LoadConfig::max_age`]: any positive age (ns of the caller's clock).
pub const MAX_AGE: Bounds = Bounds::ints(1, u64::MAX, "ns");
/// Valid [`LoadConfig::max_clock_lead`]: any positive lead (ns of the caller's clock).
pub const MAX_CLOCK_LEAD: Bounds = Bounds::ints(1, u64::MAX, "ns");
/// Valid [`LoadConfig::buffers`]: `2..=65536`.
pub const BUFFERS: Bounds = Bounds::ints(2, 65_536, "");
/// Valid [`EngineConfig::dp_size`]: `1..=2^32 - 1` ranks.
pub const DP_SIZE: Bounds = Bounds::ints(1, u32::MAX as u64, "ranks");
/// Valid [`EngineConfig::max_running_per_rank`]: `1..=2^32 - 1` requests.
pub const MAX_RUNNING_PER_RANK: Bounds = Bounds::ints(1, u32::MAX as u64, "requests");
/// Valid [`EngineConfig::decode_tps`], [`EngineConfig::prefill_tps`] and
/// [`EngineConfig::single_sequence_decode_tps`]: `0..=1e9`
/// tokens/s.
pub const ENGINE_TPS: Bounds = Bounds::floats(0.0, 1e9, "tokens/s");

/// [`LoadPublisher::attach_reservations`] was given a table with fewer slots than the
/// publisher has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableTooSmall {
    /// The table's slots.
    pub table: usize,
    /// The publisher's slots ([`LoadConfig::capacity`]).
    pub publisher: usize,
}

impl fmt::Display for TableTooSmall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the reservation table has {} slots, fewer than the publisher's {}",
            self.table, self.publisher
        )
    }
}

impl std::error::Error for TableTooSmall {}

/// Errors of worker registration with the publisher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkerError {
    /// The slot is beyond the capacity.
    UnknownSlot(Slot),
    /// The slot already has a worker.
    Occupied(Slot),
    /// The worker is already registered (in the given slot).
    AlreadyRegistered(WorkerId, Slot),
    /// The worker is not registered.
    UnknownWorker(WorkerId),
    /// Generation 0 marks a vacant slot in the snapshot's generation lane; a tenancy
    /// starts at 1.
    ZeroGeneration(Slot),
}

impl fmt::Display for WorkerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownSlot(s) => write!(f, "slot {} is out of range", s.0),
            Self::Occupied(s) => write!(f, "slot {} is occupied", s.0),
            Self::AlreadyRegistered(w, s) => write!(f, "{w} is already in slot {}", s.0),
            Self::UnknownWorker(w) => write!(f, "{w} is not registered"),
            Self::ZeroGeneration(s) => {
                write!(f, "slot {}: generation 0 is the vacant marker", s.0)
            }
        }
    }
}

impl std::error::Error for WorkerError {}

/// A cloneable, lock-free reader of published snapshots.
#[derive(Clone, Debug)]
pub struct LoadReader {
    inner: SnapshotReader<LoadSnapshot>,
}

impl LoadReader {
    /// The latest published snapshot, pinned until the guard drops: one wait-free atomic
    /// increment (see [`SnapshotReader::load`], including its abort condition).
    #[inline]
    pub fn load(&self) -> SnapshotGuard<'_, LoadSnapshot> {
        self.inner.load()
    }

    /// A reader of the same snapshots with an announcement slot of its own, for a thread
    /// that loads many times: its loads write only that slot's cache line, none that
    /// other readers write (see [`SnapshotReader::pinned`] and [`PinnedReader::load`]).
    /// Registers the slot under the cell's registration lock.
    pub fn pinned(&self) -> PinnedReader<LoadSnapshot> {
        self.inner.pinned()
    }
}

#[derive(Clone, Copy, Debug)]
struct Good {
    sample: LoadSample,
    observed_at: Nanos,
}

/// A worker's last good report as the publisher held it (its figures, the time they were
/// observed, and the engine's own timestamp), taken with
/// [`LoadPublisher::last_report`] before the worker is removed and given to
/// [`LoadPublisher::carry_report`] when the same worker is added back: an engine that
/// did not restart still has the work it reported. Opaque: its figures are the report's.
#[derive(Clone, Copy, Debug)]
pub struct LastReport {
    good: Good,
    engine_ts: Option<f64>,
}

impl LastReport {
    /// When the report's figures were observed (caller's clock).
    pub fn observed_at(&self) -> Nanos {
        self.good.observed_at
    }
}

#[derive(Clone, Debug, Default)]
struct SlotState {
    tenant: Option<(WorkerId, SlotGeneration)>,
    good: Option<Good>,
    /// Set when the latest report was rejected for bad values; cleared by a good one.
    invalid: bool,
    /// The engine's own timestamp of the last good SGLang report (seconds).
    engine_ts: Option<f64>,
    /// Reservable fields reported since the last publication (to reconcile; a token field
    /// the report lacks is added at the publication when the fleet's estimate of it is
    /// measured: `reconcile.rs`, "Fields a report estimates").
    unreconciled: Fields,
    /// Taken out of the candidates by the router (`set_excluded`).
    excluded: bool,
}

/// The single writer of load snapshots; see the module docs.
pub struct LoadPublisher {
    config: LoadConfig,
    slots: Vec<SlotState>,
    by_worker: HashMap<WorkerId, Slot>,
    engine_configs: HashMap<u64, EngineConfig>,
    writer: SnapshotWriter<LoadSnapshot>,
    reservations: Option<ReservationTable>,
    stats: LoadStats,
    /// The latest time published (`None` before the first publication).
    clock: Option<Nanos>,
    /// The time of the last publication refused as too far ahead, if the next attempt may
    /// confirm it.
    refused_jump: Option<Nanos>,
    // Scratch reused by every publication.
    own: Vec<Validity>,
    order: Vec<(u64, u32)>,
    engine_of: Vec<u32>,
    engines: Vec<EngineLoad>,
}

impl fmt::Debug for LoadPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadPublisher")
            .field("config", &self.config)
            .field("workers", &self.by_worker.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl LoadConfig {
    /// Checks every field against its bounds ([`CAPACITY`], [`MAX_AGE`], [`BUFFERS`]).
    ///
    /// # Errors
    /// [`OutOfRange`] naming the first field out of range.
    pub fn validate(&self) -> Result<(), OutOfRange> {
        CAPACITY.check_usize("capacity", self.capacity)?;
        MAX_AGE.check_int("max_age", self.max_age.0)?;
        MAX_CLOCK_LEAD.check_int("max_clock_lead", self.max_clock_lead.0)?;
        BUFFERS.check_usize("buffers", self.buffers)?;
        Ok(())
    }
}

impl EngineConfig {
    /// Nothing configured: every rank registered is the whole engine, no cap, throughputs
    /// from telemetry or the scorer's defaults. Add facts with the `with_*` methods.
    pub const fn new() -> Self {
        Self {
            dp_size: None,
            max_running_per_rank: None,
            decode_tps: None,
            prefill_tps: None,
            single_sequence_decode_tps: None,
        }
    }

    /// The engine runs `dp_size` DP ranks (fewer registered makes its ranks `Partial`).
    pub const fn with_dp_size(self, dp_size: u32) -> Self {
        Self {
            dp_size: Some(dp_size),
            ..self
        }
    }

    /// Each rank's scheduler cap (requests; vLLM's `max_num_seqs`).
    pub const fn with_max_running_per_rank(self, cap: u32) -> Self {
        Self {
            max_running_per_rank: Some(cap),
            ..self
        }
    }

    /// Each rank's decode throughput when telemetry reports none (tokens/s).
    pub const fn with_decode_tps(self, tps: f32) -> Self {
        Self {
            decode_tps: Some(tps),
            ..self
        }
    }

    /// Each rank's prefill throughput when telemetry reports none (tokens/s).
    pub const fn with_prefill_tps(self, tps: f32) -> Self {
        Self {
            prefill_tps: Some(tps),
            ..self
        }
    }

    /// Each rank's decode speed for one sequence alone (tokens/s; see
    /// [`single_sequence_decode_tps`](Self::single_sequence_decode_tps)).
    pub const fn with_single_sequence_decode_tps(self, tps: f32) -> Self {
        Self {
            single_sequence_decode_tps: Some(tps),
            ..self
        }
    }

    /// Checks every field that is set against its bounds ([`DP_SIZE`],
    /// [`MAX_RUNNING_PER_RANK`], [`ENGINE_TPS`]).
    ///
    /// # Errors
    /// [`OutOfRange`] naming the first field out of range.
    pub fn validate(&self) -> Result<(), OutOfRange> {
        if let Some(n) = self.dp_size {
            DP_SIZE.check_int("dp_size", u64::from(n))?;
        }
        if let Some(n) = self.max_running_per_rank {
            MAX_RUNNING_PER_RANK.check_int("max_running_per_rank", u64::from(n))?;
        }
        if let Some(v) = self.decode_tps {
            ENGINE_TPS.check_f32("decode_tps", v)?;
        }
        if let Some(v) = self.prefill_tps {
            ENGINE_TPS.check_f32("prefill_tps", v)?;
        }
        if let Some(v) = self.single_sequence_decode_tps {
            ENGINE_TPS.check_f32("single_sequence_decode_tps", v)?;
        }
        Ok(())
    }
}

impl LoadPublisher {
    /// A publisher with every slot vacant, and a reader. The initial snapshot (publication
    /// 0) is empty.
    ///
    /// # Errors
    /// [`OutOfRange`] for a field outside its bounds ([`LoadConfig::validate`]).
    pub fn new(config: LoadConfig) -> Result<(Self, LoadReader), OutOfRange> {
        config.validate()?;
        let (writer, reader) =
            snapshot_cell(config.buffers, |_| LoadSnapshot::empty(config.capacity)).map_err(
                |_| OutOfRange {
                    field: "buffers",
                    value: kvroute_core::Number::Int(config.buffers as u64),
                    bounds: BUFFERS,
                },
            )?;
        let n = config.capacity;
        Ok((
            Self {
                config,
                slots: vec![SlotState::default(); n],
                by_worker: HashMap::new(),
                engine_configs: HashMap::new(),
                writer,
                reservations: None,
                stats: LoadStats::default(),
                clock: None,
                refused_jump: None,
                own: vec![Validity::Vacant; n],
                order: Vec::with_capacity(n),
                engine_of: vec![NO_ENGINE; n],
                engines: Vec::new(),
            },
            LoadReader { inner: reader },
        ))
    }

    /// Attaches the reservation table to reconcile at each publication (see
    /// [`crate::reconcile`]).
    ///
    /// # Errors
    /// [`TableTooSmall`] when the table has fewer slots than the publisher.
    pub fn attach_reservations(&mut self, table: ReservationTable) -> Result<(), TableTooSmall> {
        if table.capacity() < self.config.capacity {
            return Err(TableTooSmall {
                table: table.capacity(),
                publisher: self.config.capacity,
            });
        }
        self.reservations = Some(table);
        Ok(())
    }

    /// A new reader.
    pub fn reader(&self) -> LoadReader {
        LoadReader {
            inner: self.writer.reader(),
        }
    }

    /// The publisher's counters.
    pub fn stats(&self) -> LoadStats {
        self.stats
    }

    /// The configuration.
    pub fn config(&self) -> LoadConfig {
        self.config
    }

    /// Sets (replaces) the deployment facts of engine `engine_id`; takes effect at the next
    /// publication (and for caps, at the next vLLM-style update). The facts are kept while
    /// any rank of the engine is registered, and forgotten when its last registered rank is
    /// removed ([`remove_worker`](Self::remove_worker)), so that engines coming and going do
    /// not accumulate state; an engine whose ranks are all removed and later added again
    /// is configured again. Facts set before any rank is added are kept until then.
    ///
    /// # Errors
    /// [`OutOfRange`] for a field outside its bounds ([`EngineConfig::validate`]); nothing
    /// changes.
    pub fn configure_engine(
        &mut self,
        engine_id: u64,
        cfg: EngineConfig,
    ) -> Result<(), OutOfRange> {
        cfg.validate()?;
        self.engine_configs.insert(engine_id, cfg);
        Ok(())
    }

    /// Registers `worker` in `slot` for tenancy `generation` (as the registry assigned).
    /// The slot starts `Missing`.
    ///
    /// # Errors
    /// [`WorkerError::UnknownSlot`], [`WorkerError::Occupied`],
    /// [`WorkerError::AlreadyRegistered`] or [`WorkerError::ZeroGeneration`] (nothing
    /// changes).
    pub fn add_worker(
        &mut self,
        slot: Slot,
        worker: WorkerId,
        generation: SlotGeneration,
    ) -> Result<(), WorkerError> {
        if generation.0 == 0 {
            return Err(WorkerError::ZeroGeneration(slot));
        }
        let st = self
            .slots
            .get_mut(slot.index())
            .ok_or(WorkerError::UnknownSlot(slot))?;
        if st.tenant.is_some() {
            return Err(WorkerError::Occupied(slot));
        }
        if let Some(&s) = self.by_worker.get(&worker) {
            return Err(WorkerError::AlreadyRegistered(worker, s));
        }
        *st = SlotState {
            tenant: Some((worker, generation)),
            ..SlotState::default()
        };
        self.by_worker.insert(worker, slot);
        Ok(())
    }

    /// Unregisters `worker`; its slot is vacant from the next publication. Returns the slot
    /// and its generation. When it was the last registered rank of its engine, the engine's
    /// configuration ([`configure_engine`](Self::configure_engine)) is forgotten too
    /// (`O(registered workers)`).
    ///
    /// # Errors
    /// [`WorkerError::UnknownWorker`].
    pub fn remove_worker(
        &mut self,
        worker: WorkerId,
    ) -> Result<(Slot, SlotGeneration), WorkerError> {
        let slot = self
            .by_worker
            .remove(&worker)
            .ok_or(WorkerError::UnknownWorker(worker))?;
        let st = &mut self.slots[slot.index()];
        let generation = st.tenant.map_or(SlotGeneration(0), |t| t.1);
        *st = SlotState::default();
        let engine = worker.engine_id;
        if !self.by_worker.keys().any(|w| w.engine_id == engine) {
            self.engine_configs.remove(&engine);
        }
        Ok((slot, generation))
    }

    /// The last good report held for `worker`, or `None` when it has none (or is not
    /// registered).
    pub fn last_report(&self, worker: WorkerId) -> Option<LastReport> {
        let st = &self.slots[self.by_worker.get(&worker)?.index()];
        Some(LastReport {
            good: st.good?,
            engine_ts: st.engine_ts,
        })
    }

    /// Gives a re-added `worker` the last report of its previous tenancy, as if it had
    /// arrived then: the same figures, observed at the same time (so the lane ages, and
    /// turns `Stale`, from that time), and the same engine timestamp (so a late report of
    /// the previous tenancy is still superseded). Held only until the worker's own next
    /// report replaces it. Not counted as an applied sample and not reconciled (its
    /// figures were reconciled when they first arrived). Returns `false`, changing nothing,
    /// when the lane already holds a report, or one of its own rejected for bad values.
    ///
    /// # Errors
    /// [`UpdateError::UnknownWorker`] (counted) when `worker` is not registered.
    pub fn carry_report(
        &mut self,
        worker: WorkerId,
        report: LastReport,
    ) -> Result<bool, UpdateError> {
        let slot = self.lookup(worker)?;
        let st = &mut self.slots[slot.index()];
        if st.good.is_some() || st.invalid {
            return Ok(false);
        }
        st.good = Some(report.good);
        st.engine_ts = report.engine_ts;
        Ok(true)
    }

    /// Takes `worker` out of the candidates (`true`) or puts it back (`false`) from the
    /// next publication ([`LoadSnapshot::excluded`]): for a worker whose requests fail
    /// while its telemetry looks healthy (the router's breaker). Its figures, validity and
    /// reconciliation go on as before. Returns whether the flag changed.
    ///
    /// # Errors
    /// [`UpdateError::UnknownWorker`] (counted).
    pub fn set_excluded(&mut self, worker: WorkerId, excluded: bool) -> Result<bool, UpdateError> {
        let slot = self.lookup(worker)?;
        let st = &mut self.slots[slot.index()];
        let changed = st.excluded != excluded;
        st.excluded = excluded;
        Ok(changed)
    }

    /// When the figures held for `worker` were observed (caller's clock), or `None` when it
    /// has no report (or is not registered).
    pub fn report_time(&self, worker: WorkerId) -> Option<Nanos> {
        let st = &self.slots[self.by_worker.get(&worker)?.index()];
        st.good.map(|g| g.observed_at)
    }

    fn lookup(&mut self, worker: WorkerId) -> Result<Slot, UpdateError> {
        self.by_worker.get(&worker).copied().ok_or_else(|| {
            self.stats.rejected_unknown += 1;
            UpdateError::UnknownWorker(worker)
        })
    }

    /// Refuses (and counts) a report further ahead of the clock than `max_clock_lead`.
    fn check_clock(&mut self, worker: WorkerId, now: Nanos) -> Result<(), UpdateError> {
        match self.clock {
            Some(clock) if now > clock.saturating_add(self.config.max_clock_lead) => {
                self.stats.rejected_future += 1;
                Err(UpdateError::FromTheFuture { worker, now, clock })
            }
            _ => Ok(()),
        }
    }

    /// Counts `err` against `slot` (and marks the slot invalid for bad values). Every kind
    /// is counted: a decoder's rejection handed over in a [`RankReport`] may be any of them.
    fn reject(&mut self, slot: Slot, err: UpdateError) -> UpdateError {
        if err.marks_invalid() {
            self.stats.rejected_invalid += 1;
            self.slots[slot.index()].invalid = true;
        } else {
            match err {
                UpdateError::Superseded(_) => self.stats.rejected_superseded += 1,
                UpdateError::FromTheFuture { .. } => self.stats.rejected_future += 1,
                _ => self.stats.rejected_unknown += 1,
            }
        }
        err
    }

    /// Checks an engine timestamp: finite and not negative.
    fn check_engine_time(worker: WorkerId, engine_time: Option<f64>) -> Result<(), UpdateError> {
        match engine_time {
            Some(t) if !t.is_finite() => Err(UpdateError::NotFinite {
                worker,
                field: "engine_time",
            }),
            Some(t) if t < 0.0 => Err(UpdateError::Negative {
                worker,
                field: "engine_time",
                value: t,
            }),
            _ => Ok(()),
        }
    }

    /// Rejects (and counts) a report older than the figures held, by `now` or by the
    /// engine's own timestamp. Checked before validation, so a late report with bad values
    /// never marks a slot holding newer good figures `Invalid`.
    fn check_current(
        &mut self,
        slot: Slot,
        worker: WorkerId,
        now: Nanos,
        engine_ts: Option<f64>,
    ) -> Result<(), UpdateError> {
        let st = &self.slots[slot.index()];
        let older_here = st.good.is_some_and(|g| g.observed_at > now);
        let older_there = matches!((st.engine_ts, engine_ts), (Some(a), Some(b)) if b < a);
        if older_here || older_there {
            return Err(self.reject(slot, UpdateError::Superseded(worker)));
        }
        Ok(())
    }

    fn accept(
        &mut self,
        slot: Slot,
        worker: WorkerId,
        sample: LoadSample,
        now: Nanos,
        engine_ts: Option<f64>,
    ) -> Result<(), UpdateError> {
        self.check_current(slot, worker, now, engine_ts)?;
        let st = &mut self.slots[slot.index()];
        st.good = Some(Good {
            sample,
            observed_at: now,
        });
        st.invalid = false;
        if engine_ts.is_some() {
            st.engine_ts = engine_ts;
        }
        st.unreconciled = st
            .unreconciled
            .union(sample.reported().intersect(Fields::RESERVABLE));
        self.stats.samples_applied += 1;
        Ok(())
    }

    /// Applies one rank's exact figures observed at `now` (caller's clock).
    ///
    /// # Errors
    /// [`UpdateError::UnknownWorker`]; a validation error of [`LoadSample::validate`] (the
    /// slot becomes `Invalid`, its figures stay); [`UpdateError::Superseded`] when `now` is
    /// older than the figures held. Every error is counted in [`LoadStats`].
    pub fn apply_sample(
        &mut self,
        worker: WorkerId,
        sample: LoadSample,
        now: Nanos,
    ) -> Result<(), UpdateError> {
        let slot = self.lookup(worker)?;
        self.check_clock(worker, now)?;
        self.check_current(slot, worker, now, None)?;
        if let Err(e) = sample.validate(worker) {
            return Err(self.reject(slot, e));
        }
        self.accept(slot, worker, sample, now, None)
    }

    /// The deployment facts configured for engine `engine_id`
    /// ([`configure_engine`](Self::configure_engine)), if any.
    pub fn engine_config(&self, engine_id: u64) -> Option<EngineConfig> {
        self.engine_configs.get(&engine_id).copied()
    }

    /// The running-request cap configured for every DP rank of engine `engine_id`
    /// ([`EngineConfig::max_running_per_rank`]), for decoders of engines that do not report
    /// their cap (vLLM); `None` when the engine has no configuration or no cap.
    pub fn configured_cap(&self, engine_id: u64) -> Option<u32> {
        self.engine_configs
            .get(&engine_id)
            .and_then(|c| c.max_running_per_rank)
    }

    /// Applies one engine's update observed at `now`: every listed rank is checked and
    /// applied on its own (a bad rank never blocks its siblings' good figures). A rank whose
    /// report carries an [`engine_time`](RankReport::engine_time) older than the last one
    /// accepted for it is dropped as superseded, as is any report older than the figures
    /// held by the router's clock.
    ///
    /// # Errors
    /// The first rejection (every one is counted): [`UpdateError::EmptyUpdate`] for no rank;
    /// [`UpdateError::DuplicateRank`] (nothing applied, the rank marked invalid); per rank,
    /// [`UpdateError::UnknownWorker`], [`UpdateError::Superseded`], the report's own
    /// rejection, or a bad value in its sample or its `engine_time` (validated as
    /// [`apply_sample`](Self::apply_sample) validates; that rank marked invalid, its
    /// figures kept).
    pub fn apply_ranks(
        &mut self,
        engine_id: u64,
        ranks: &[RankReport],
        now: Nanos,
    ) -> Result<(), UpdateError> {
        if ranks.is_empty() {
            self.stats.rejected_unknown += 1;
            return Err(UpdateError::EmptyUpdate { engine_id });
        }
        for (i, r) in ranks.iter().enumerate() {
            if ranks[..i].iter().any(|p| p.dp_rank == r.dp_rank) {
                let w = WorkerId::new(engine_id, r.dp_rank);
                let err = UpdateError::DuplicateRank(w);
                return Err(match self.by_worker.get(&w).copied() {
                    Some(slot) => self.reject(slot, err),
                    None => {
                        self.stats.rejected_invalid += 1;
                        err
                    }
                });
            }
        }
        let mut first_err = None;
        for r in ranks {
            let w = WorkerId::new(engine_id, r.dp_rank);
            let result = self.lookup(w).and_then(|slot| {
                self.check_clock(w, now)?;
                self.check_current(slot, w, now, r.engine_time)?;
                // The fields of a report are public: a sample is validated here as
                // `apply_sample` validates it, whoever built it, and so is its timestamp.
                let checked = Self::check_engine_time(w, r.engine_time)
                    .and_then(|()| r.sample.clone())
                    .and_then(|sample| sample.validate(w).map(|()| sample));
                match checked {
                    Ok(sample) => self.accept(slot, w, sample, now, r.engine_time),
                    Err(e) => Err(self.reject(slot, e)),
                }
            });
            if let Err(e) = result {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Computes validity as of `now`, reconciles the reservations of fields reported since
    /// the last publication, and publishes a new snapshot. Returns its publication number.
    ///
    /// The first publication's time sets the publisher's clock; a later one moves it
    /// forward, never back: one given an earlier time than the clock is computed as of the
    /// clock (a worker found stale does not read fresh again without a new report).
    ///
    /// # Errors
    /// [`PublishError::AllBuffersPinned`] (counted): readers still hold every spare buffer;
    /// nothing changed (no reconciliation either), retry at the next tick.
    /// [`PublishError::FromTheFuture`] (counted): `now` is more than `max_clock_lead` ahead
    /// of the clock, and not a confirmation of the previous such attempt (one no earlier
    /// than it and within the lead of it, which is accepted: the caller's clock really
    /// jumped); nothing changed.
    pub fn publish(&mut self, now: Nanos) -> Result<u64, PublishError> {
        let lead = self.config.max_clock_lead;
        if let Some(clock) = self.clock {
            if now > clock.saturating_add(lead) {
                // A real jump of the caller's clock (a stalled process, a suspended host) is
                // confirmed by the next attempt, no earlier and within the lead of this one;
                // one wild time is not.
                let confirmed = self
                    .refused_jump
                    .is_some_and(|first| now >= first && now <= first.saturating_add(lead));
                if !confirmed {
                    self.refused_jump = Some(now);
                    self.stats.publish_future += 1;
                    return Err(PublishError::FromTheFuture { now, clock });
                }
            }
        }
        self.refused_jump = None;
        if self.clock.is_none() {
            // The clock starts now: figures reported before it for a time too far ahead of
            // it would read current forever and make every later report superseded.
            let limit = now.saturating_add(self.config.max_clock_lead);
            for st in &mut self.slots {
                if st.good.is_some_and(|g| g.observed_at > limit) {
                    st.good = None;
                    st.engine_ts = None;
                    // Nothing published counts the reservations those figures would have
                    // covered: they are not reconciled away.
                    st.unreconciled = Fields::NONE;
                    self.stats.rejected_future += 1;
                }
            }
        }
        // The clock never goes back: a publication given an earlier time is evaluated at
        // the clock, so a worker found stale never reads fresh again without a new report.
        let now = self.clock.map_or(now, |c| c.max(now));
        let seq = self.publish_at(now)?;
        self.clock = Some(now);
        Ok(seq)
    }

    fn publish_at(&mut self, now: Nanos) -> Result<u64, PublishError> {
        let Self {
            config,
            slots,
            engine_configs,
            writer,
            reservations,
            stats,
            own,
            order,
            engine_of,
            engines,
            ..
        } = self;
        let mut staged = match writer.begin() {
            Ok(s) => s,
            Err(e) => {
                stats.publish_pinned += 1;
                return Err(e);
            }
        };
        // 1. Each slot's own validity.
        for (v, st) in own.iter_mut().zip(slots.iter()) {
            *v = match (st.tenant, st.good) {
                (None, _) => Validity::Vacant,
                _ if st.invalid => Validity::Invalid,
                (Some(_), None) => Validity::Missing,
                (Some(_), Some(g)) if now.saturating_since(g.observed_at) > config.max_age => {
                    Validity::Stale
                }
                _ => Validity::Fresh,
            };
        }
        // 2. Engines: group ranks by engine_id (ascending), sum current ranks.
        order.clear();
        for (i, st) in slots.iter().enumerate() {
            if let Some((w, _)) = st.tenant {
                order.push((w.engine_id, i as u32));
            }
        }
        order.sort_unstable();
        engines.clear();
        engine_of.iter_mut().for_each(|e| *e = NO_ENGINE);
        for &(engine_id, i) in order.iter() {
            if engines.last().is_none_or(|e| e.engine_id != engine_id) {
                engines.push(EngineLoad {
                    engine_id,
                    dp_size: 0,
                    ranks_registered: 0,
                    ranks_current: 0,
                    running: 0,
                    waiting: 0,
                    max_running: 0,
                });
            }
            let e = engines.last_mut().expect("pushed above");
            e.ranks_registered += 1;
            if own[i as usize] == Validity::Fresh {
                let s = slots[i as usize].good.expect("fresh has figures").sample;
                e.ranks_current += 1;
                e.running += u64::from(s.running);
                e.waiting += u64::from(s.waiting);
                e.max_running += u64::from(s.max_running);
            }
            engine_of[i as usize] = (engines.len() - 1) as u32;
        }
        for e in engines.iter_mut() {
            e.dp_size = engine_configs
                .get(&e.engine_id)
                .and_then(|c| c.dp_size)
                .unwrap_or(e.ranks_registered);
        }
        stats.publications += 1;
        let stats_now = *stats;
        // Publications only happen here, so this equals the cell's publication count.
        let seq = stats_now.publications;
        let stamp = next_stamp();
        // 3. Fill the staged snapshot (not yet visible).
        let measured = staged.fill(|snap| {
            snap.seq = seq;
            snap.stamp = stamp;
            snap.published_at = now;
            snap.stats = stats_now;
            snap.engines.clear();
            snap.engines.extend_from_slice(engines);
            for (i, st) in slots.iter().enumerate() {
                write_slot(snap, i, st, own[i], engine_of[i], engines, engine_configs);
            }
            snap.reported_tokens = crate::snapshot::ReportedTokens::of(snap);
            snap.reported_tokens.measured()
        });
        // 4. Reconcile reservations before the new figures become visible. A report of the
        // requests covers the token fields it lacks where the snapshot estimates them from
        // its counts with measured figures (`reconcile.rs`, "Fields a report estimates").
        if let Some(table) = reservations.as_ref() {
            for (i, st) in slots.iter_mut().enumerate() {
                let mut fields = st.unreconciled;
                if fields.contains(Fields::REQUESTS) {
                    fields = fields.union(measured);
                }
                if let (Some((_, generation)), false) = (st.tenant, fields.is_empty()) {
                    table.reconcile(Slot(i as u32), generation, fields);
                }
                st.unreconciled = Fields::NONE;
            }
        } else {
            slots
                .iter_mut()
                .for_each(|st| st.unreconciled = Fields::NONE);
        }
        Ok(staged.publish())
    }
}

/// The next publication stamp ([`LoadSnapshot::stamp`]): 1, 2, … across every publisher of
/// the process.
///
/// The counter is a plain `std` atomic, not the `kvroute_core::sync` shim's: it only hands out
/// distinct numbers (`Relaxed` suffices, no data is published through it) and is not part
/// of any protocol the loom models check; a `static` loom atomic is not possible.
fn next_stamp() -> u64 {
    static STAMPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    STAMPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn write_slot(
    snap: &mut LoadSnapshot,
    i: usize,
    st: &SlotState,
    own: Validity,
    engine: u32,
    engines: &[EngineLoad],
    configs: &HashMap<u64, EngineConfig>,
) {
    let Some((worker, generation)) = st.tenant else {
        snap.running[i] = 0;
        snap.waiting[i] = 0;
        snap.max_running[i] = 0;
        snap.waiting_prefill_tokens[i] = 0;
        snap.active_decode_tokens[i] = 0;
        snap.kv_usage[i] = 0.0;
        snap.utilization[i] = 0.0;
        snap.decode_tps[i] = 0.0;
        snap.decode_step_base_s[i] = 0.0;
        snap.decode_step_tps[i] = 0.0;
        snap.prefill_tps[i] = 0.0;
        snap.engine_occupancy[i] = 0.0;
        snap.engine_requests[i] = 0;
        snap.engine_max_running[i] = 0;
        snap.validity[i] = Validity::Vacant;
        snap.excluded[i] = false;
        snap.reported[i] = Fields::NONE;
        snap.observed_at[i] = Nanos::ZERO;
        snap.generation[i] = 0;
        snap.worker[i] = None;
        snap.engine_index[i] = NO_ENGINE;
        return;
    };
    let e = &engines[engine as usize];
    let cfg = configs.get(&worker.engine_id).copied().unwrap_or_default();
    let sample = st.good.map(|g| g.sample);
    let s = sample.unwrap_or(LoadSample::idle(0));
    let mut reported = sample.map_or(Fields::NONE, |s| s.reported());
    let decode = s.decode_tps.or(cfg.decode_tps);
    let prefill = s.prefill_tps.or(cfg.prefill_tps);
    if decode.is_some() {
        reported = reported | Fields::DECODE_TPS;
    }
    if prefill.is_some() {
        reported = reported | Fields::PREFILL_TPS;
    }
    snap.running[i] = s.running;
    snap.waiting[i] = s.waiting;
    snap.max_running[i] = s.max_running;
    // Aged to the publication (module `drain`): what the engine has prefilled since.
    let age = st.good.map_or(Nanos::ZERO, |g| {
        snap.published_at.saturating_since(g.observed_at)
    });
    snap.waiting_prefill_tokens[i] = crate::drain::queued_at(&s, prefill, age);
    snap.active_decode_tokens[i] = s.active_decode_tokens.unwrap_or(0);
    snap.kv_usage[i] = s.kv_usage;
    snap.utilization[i] = s.utilization.unwrap_or(0.0);
    snap.decode_tps[i] = decode.unwrap_or(0.0);
    let cap = cfg
        .max_running_per_rank
        .or((s.max_running > 0).then_some(s.max_running));
    let (base, step_tps) = decode_step(cfg.single_sequence_decode_tps, cfg.decode_tps, cap)
        .unwrap_or((0.0, decode.unwrap_or(0.0)));
    snap.decode_step_base_s[i] = base;
    snap.decode_step_tps[i] = step_tps;
    snap.prefill_tps[i] = prefill.unwrap_or(0.0);
    let occupancy = e.occupancy();
    snap.engine_occupancy[i] = occupancy.unwrap_or(0.0);
    let known = occupancy.is_some();
    snap.engine_requests[i] = if known { e.running + e.waiting } else { 0 };
    snap.engine_max_running[i] = if known { e.max_running } else { 0 };
    snap.validity[i] = if own == Validity::Fresh && !e.is_complete() {
        Validity::Partial
    } else {
        own
    };
    snap.reported[i] = reported;
    snap.excluded[i] = st.excluded;
    snap.observed_at[i] = st.good.map_or(Nanos::ZERO, |g| g.observed_at);
    snap.generation[i] = generation.0;
    snap.worker[i] = Some(worker);
    snap.engine_index[i] = engine;
}

/// The decode step model `(base seconds, tokens/s per sequence)` of a rank from its configured
/// single-sequence speed `single`, full-batch throughput `full` and cap (requests): the line
/// through `(1, 1/single)` and `(cap, cap/full)` in (batch, step seconds), so a step of `n`
/// sequences lasts `base + n/step_tps` (`EngineConfig::single_sequence_decode_tps`).
/// `None` where a figure is missing or zero, the cap is below 2, or the line has a negative
/// base or slope (then processor sharing applies).
pub(crate) fn decode_step(
    single: Option<f32>,
    full: Option<f32>,
    cap: Option<u32>,
) -> Option<(f32, f32)> {
    let (single, full, cap) = (f64::from(single?), f64::from(full?), f64::from(cap?));
    if !(single > 0.0 && full > 0.0 && cap >= 2.0) {
        return None;
    }
    let (s1, sm) = (1.0 / single, cap / full);
    let per_seq = (sm - s1) / (cap - 1.0);
    let base = s1 - per_seq;
    (per_seq > 0.0 && base >= 0.0).then(|| (base as f32, (1.0 / per_seq) as f32))
}

#[cfg(test)]
mod decode_step_tests {
    use super::decode_step;

    /// A step of `0.0069 + 0.0001·n` seconds (the simulator's 8B engine): alone a sequence
    /// decodes at 1/0.007 = 142.857 tokens/s, a batch of 32 at 32/0.0101 = 3,168.3 tokens/s.
    /// The line through (1, 0.007) and (32, 0.0101) has slope 0.0031/31 = 0.0001 s (10,000
    /// tokens/s inverted) and base 0.0069 s.
    #[test]
    fn two_measured_points_give_the_step_line() {
        let (base, tps) = decode_step(Some(1.0 / 0.007), Some(32.0 / 0.0101), Some(32)).unwrap();
        assert!((base - 0.0069).abs() < 1e-7, "{base}");
        assert!((tps - 10_000.0).abs() < 0.5, "{tps}");
    }

    /// No line: a figure missing or zero, a cap below 2, a step of the full batch shorter
    /// than one sequence's alone (32 at 6,400 tokens/s: 0.005 s against 0.01 s at 100
    /// tokens/s alone, a negative slope), or a slope so steep that the base would be
    /// negative (a batch of 4 at 100 tokens/s against 200 alone: slope (0.04 − 0.005)/3,
    /// base 0.005 − 0.011 67 < 0).
    #[test]
    fn no_line_without_two_consistent_points() {
        assert_eq!(decode_step(None, Some(3_000.0), Some(32)), None);
        assert_eq!(decode_step(Some(140.0), None, Some(32)), None);
        assert_eq!(decode_step(Some(140.0), Some(3_000.0), None), None);
        assert_eq!(decode_step(Some(0.0), Some(3_000.0), Some(32)), None);
        assert_eq!(decode_step(Some(140.0), Some(3_000.0), Some(1)), None);
        assert_eq!(decode_step(Some(100.0), Some(6_400.0), Some(32)), None);
        assert_eq!(decode_step(Some(200.0), Some(100.0), Some(4)), None);
    }
}
