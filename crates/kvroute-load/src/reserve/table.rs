//! The per-slot reservation counters and their control-path operations.
//!
//! Each slot has one cache line: its tenancy (the [`SlotGeneration`] of the worker in it,
//! 0 when vacant) and three [`FieldCell`]s (requests, prefill tokens, decode tokens).
//! Decisions call [`ReservationTable::reserve`] and read [`ReservationTable::reserved`];
//! they never take a lock. Adding and removing workers, reconciliation and sweeping are
//! control-path operations serialised by one admin mutex.
//!
//! # Tenancy protocol (why a stale reservation never reaches a new tenant)
//! * `remove_worker` swaps the tenancy to vacant, then clears every field (re-tagging both
//!   buckets). `add_worker` stores the new generation (the fields are already clear).
//! * `reserve(slot, generation, ..)` checks the tenancy, adds to the three fields (tokens
//!   first, the request count last; see Orderings), then
//!   re-validates with `compare_exchange(generation, generation)` on the tenancy. If that
//!   fails, it takes its additions back (only from buckets still carrying its tags) and
//!   returns [`ReserveError::StaleSlot`]; no guard is created.
//! * A guard only ever subtracts from buckets carrying the tags it added under, and tags
//!   are never reused within 2^32 re-taggings, so a guard of an old tenancy finds its
//!   buckets re-tagged by the removal and does nothing.
//!
//! So a successful reservation's additions precede the removal's clearing in each word's
//! modification order (see Orderings) and are dropped by it; a failed one takes back
//! exactly what it added. A new tenant can transiently see the additions of a reserve
//! that raced with the removal and has not yet re-validated (at most one request per racing
//! decision, taken back by that decision).
//!
//! # Orderings
//! * Re-validation is an RMW with `AcqRel`; removal's `swap(VACANT, AcqRel)` is an RMW on the
//!   same word. If the re-validation comes first in the tenancy's modification order, the
//!   removal's swap reads its value (or a later RMW's, continuing the release sequence), so
//!   the reserve's field additions happen-before the removal's clearing swaps, which then
//!   come later in each field word's modification order and drop them. If the removal comes
//!   first, the re-validation reads vacant (or a newer generation) and fails.
//! * `add_worker` stores the generation with `Release` under the admin lock; the reserve
//!   path's first check is an `Acquire` load (only an early exit; correctness rests on the
//!   re-validation).
//! * Readers of totals for a tenancy (`reserved_for`, `reserved_nonzero`) check it with an
//!   `Acquire` load before reading the fields. Like the reserve path's first check it is a
//!   filter against tenancies already replaced: a removal (and a new tenancy) racing with
//!   the read can still change the fields in between, so the figures may mix both; they
//!   only inform a score, and the decision's reservation re-validates the tenancy.
//! * Whole reservations (why a reader never sees a request count without its tokens):
//!   `reserve` adds the prefill and decode tokens (`Relaxed`), then the request count with a
//!   `Release` compare-and-swap. Readers of totals (`reserved`, `reserved_for`,
//!   `reserved_nonzero`) load the request buckets with `Acquire` first, then the tokens. A
//!   reader whose request load reads a reservation's addition (or any later value: every
//!   later write of that word is a read-modify-write, which continues the release
//!   sequence) synchronises with it, so its token loads see that reservation's token
//!   additions or later values of those words. Later token values drop that reservation's
//!   tokens only if they are being returned or dropped (the guard's return, a refusal's
//!   take-back, sweeping, reconciliation, removal), never while it is held and live: a
//!   sibling decision never counts a held reservation's request without its tokens (loom:
//!   `loom_reader_never_sees_requests_without_tokens`). The converse (tokens without the
//!   request) is visible for a moment and over-counts, the safe side.
//! * [`Reservation::first_token`] moves prefill to decode: it grows decode, then takes
//!   prefill back with `Release`; readers load prefill with `Acquire` before decode, so the
//!   moved tokens are counted once or (for a moment) twice, never zero times.
//! * A return racing with a read can still show the request without its tokens (the read
//!   straddles the return; no order of the return's steps avoids it without a retrying
//!   reader). That reservation is ending, not a sibling's, and such figures only inform a
//!   score.
//! * `reserve_at_most` checks the limit with a `Relaxed` load before adding anything (an
//!   early exit, so a contended decision rarely shows its tokens), and again in the request
//!   count's compare-and-swap, which decides; a refusal there takes the tokens back.
//! * Group counts (`group.rs`): a successful `reserve` raises its slot's group count
//!   (`Release`) after its field additions and its re-validation; a guard lowers it
//!   (`Release`) after returning its fields. `reserved_nonzero` loads a group's count
//!   (`Acquire`) before its slots and skips the group when it reads 0: it never misses a
//!   reservation whose `reserve` returned before the scan began (its raise happens-before
//!   the load, and the count stays at least 1 until its own guard lowers it), and a scan
//!   that reads a concurrent reservation's raise sees its fields whole. A concurrent one may
//!   be seen or not, as before (loom: `loom_group_count_never_hides_a_reservation`).
//! * Reads of totals come after loading the load snapshot (an `Acquire`), which is what the
//!   reconciliation rule needs (`reconcile.rs`). Control-path operations (`age`, `clear`)
//!   are `Relaxed` read-modify-writes under the admin lock.
//! * Statistics counters are `Relaxed`: they are independent monotonic tallies.

use core::fmt;

use kvroute_core::sync::atomic::{AtomicU64, Ordering};
use kvroute_core::sync::{Arc, Mutex};
use kvroute_core::{Bounds, OutOfRange, Slot, SlotGeneration};

use super::field::{AddRefused, Entry, FieldCell, Returned};
use super::finished::FinishedCell;
use super::group::{GROUP_SLOTS, GroupCounts};
use super::guard::{Made, Reservation};
use kvroute_core::{Fields, Nanos};

/// Valid reservation TTLs: any positive age (ns of the caller's clock).
pub const TTL: Bounds = Bounds::ints(1, u64::MAX, "ns");

pub(crate) const REQUESTS: usize = 0;
pub(crate) const PREFILL: usize = 1;
pub(crate) const DECODE: usize = 2;
const FIELD_NAMES: [&str; 3] = ["requests", "prefill_tokens", "decode_tokens"];
const FIELD_BITS: [Fields; 3] = [
    Fields::REQUESTS,
    Fields::PREFILL_TOKENS,
    Fields::DECODE_TOKENS,
];
const VACANT: u64 = 0;

/// The work a request adds to a worker while it is reserved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Work {
    /// Prompt tokens the worker must prefill (not in its cache) (tokens).
    pub prefill_tokens: u32,
    /// Decode work expected: output tokens, plus the prompt once prefilled (tokens).
    pub decode_tokens: u32,
}

/// Reserved amounts on a slot (or held by a guard): requests and tokens, and, in a slot's
/// totals, the ended requests its last telemetry report still counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reserved {
    /// Requests.
    pub requests: u64,
    /// Prefill tokens (tokens).
    pub prefill_tokens: u64,
    /// Decode tokens (tokens).
    pub decode_tokens: u64,
    /// In a slot's totals: requests whose reservations a reconciliation dropped (the
    /// slot's last telemetry report counts them) and whose guards have since been dropped
    /// or released, less the request reservations the last reconciliation of the requests
    /// field dropped (at most 4,095 of them; the report may not count those), at least 0.
    /// The report over-states the slot's load by at least this many requests until the
    /// next report of its requests (which resets it). Not a reserved amount: a decision
    /// subtracts it from the report (`kvroute_load::reconcile`'s module docs, "Requests
    /// that end before the next report"). Always 0 in a guard's amounts, in what a return,
    /// sweep, reconciliation or removal reports, and in the statistics (requests).
    pub finished: u64,
}

impl Reserved {
    fn add_field(&mut self, field: usize, amount: u64) {
        match field {
            REQUESTS => self.requests += amount,
            PREFILL => self.prefill_tokens += amount,
            _ => self.decode_tokens += amount,
        }
    }

    /// Whether every amount is zero.
    pub fn is_zero(&self) -> bool {
        *self == Reserved::default()
    }
}

/// Why a reservation was not made (nothing is held after any of these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReserveError {
    /// The slot is beyond the table's capacity.
    UnknownSlot(Slot),
    /// The slot is vacant or holds another tenancy than `generation` (the worker was removed
    /// or replaced since the decision read the snapshot).
    StaleSlot {
        /// The slot.
        slot: Slot,
        /// The generation the caller expected.
        generation: SlotGeneration,
    },
    /// The request counter of one age cohort would pass `u32::MAX` (token counters
    /// saturate instead: [`ReservationStats::saturated_tokens`]).
    Saturated {
        /// The slot.
        slot: Slot,
        /// The counter.
        field: &'static str,
    },
    /// [`ReservationTable::reserve_at_most`]: the slot already held more reserved requests
    /// than allowed; another decision got there first.
    Contended {
        /// The slot.
        slot: Slot,
        /// Reserved requests found on the slot.
        prior_requests: u64,
    },
}

impl fmt::Display for ReserveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownSlot(s) => write!(f, "slot {} is out of range", s.0),
            Self::StaleSlot { slot, generation } => write!(
                f,
                "slot {} no longer holds generation {}",
                slot.0, generation.0
            ),
            Self::Saturated { slot, field } => {
                write!(f, "slot {}: reserved {field} would overflow", slot.0)
            }
            Self::Contended {
                slot,
                prior_requests,
            } => write!(
                f,
                "slot {} already has {prior_requests} reserved requests",
                slot.0
            ),
        }
    }
}

impl std::error::Error for ReserveError {}

/// Errors of the table's control-path operations.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum TableError {
    /// The slot is beyond the table's capacity.
    UnknownSlot(Slot),
    /// `add_worker` on a slot that is not vacant.
    Occupied(Slot),
    /// The slot does not hold this generation.
    NotTenant {
        /// The slot.
        slot: Slot,
        /// The generation given.
        generation: SlotGeneration,
    },
    /// Generation 0 is reserved for "vacant"; the registry never hands it out.
    ZeroGeneration,
    /// A capacity or TTL outside its bounds ([`CAPACITY`](crate::CAPACITY),
    /// [`TTL`](crate::reserve::TTL)).
    BadConfig(OutOfRange),
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownSlot(s) => write!(f, "slot {} is out of range", s.0),
            Self::Occupied(s) => write!(f, "slot {} is occupied", s.0),
            Self::NotTenant { slot, generation } => {
                write!(
                    f,
                    "slot {} does not hold generation {}",
                    slot.0, generation.0
                )
            }
            Self::ZeroGeneration => write!(f, "generation 0 means vacant"),
            Self::BadConfig(e) => write!(f, "reservation table: {e}"),
        }
    }
}

impl std::error::Error for TableError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::BadConfig(e) => Some(e),
            _ => None,
        }
    }
}

/// Monotonic counters of the table (since construction).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReservationStats {
    /// Reserves refused as stale (wrong or vacant tenancy).
    pub rejected_stale: u64,
    /// Reserves refused because the request counter of one age cohort would pass
    /// `u32::MAX`.
    pub rejected_saturated: u64,
    /// Token amounts of a reservation cut to fit under `u32::MAX` in their age cohort (one
    /// per field cut, and one per first-token move of prefill tokens into a decode bucket
    /// that could not take them all): the reservation holds, and later returns, what
    /// fitted; while a bucket sits at `u32::MAX` the slot's reserved tokens are
    /// under-stated by the cut part.
    pub saturated_tokens: u64,
    /// `reserve_at_most` refusals (another decision reserved first).
    pub rejected_contended: u64,
    /// Amounts dropped by the TTL sweeper.
    pub swept: Reserved,
    /// Amounts dropped by reconciliation with telemetry.
    pub reconciled: Reserved,
    /// Amounts dropped because their worker was removed.
    pub removed: Reserved,
    /// Subtractions clamped at zero (0 unless a tag wrapped; see `field.rs`).
    pub underflow_clamped: u64,
}

/// What one [`ReservationTable::sweep`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Slots aged.
    pub slots_aged: u32,
    /// Amounts dropped.
    pub released: Reserved,
}

struct AtomicReserved([AtomicU64; 3]);

impl AtomicReserved {
    fn new() -> Self {
        Self([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)])
    }

    fn add(&self, r: &Reserved) {
        for (i, v) in [r.requests, r.prefill_tokens, r.decode_tokens]
            .into_iter()
            .enumerate()
        {
            if v != 0 {
                self.0[i].fetch_add(v, Ordering::Relaxed);
            }
        }
    }

    fn get(&self) -> Reserved {
        Reserved {
            requests: self.0[REQUESTS].load(Ordering::Relaxed),
            prefill_tokens: self.0[PREFILL].load(Ordering::Relaxed),
            decode_tokens: self.0[DECODE].load(Ordering::Relaxed),
            finished: 0,
        }
    }
}

struct Stats {
    rejected_stale: AtomicU64,
    rejected_saturated: AtomicU64,
    saturated_tokens: AtomicU64,
    rejected_contended: AtomicU64,
    swept: AtomicReserved,
    reconciled: AtomicReserved,
    removed: AtomicReserved,
    underflow_clamped: AtomicU64,
}

impl Stats {
    fn new() -> Self {
        Self {
            rejected_stale: AtomicU64::new(0),
            rejected_saturated: AtomicU64::new(0),
            saturated_tokens: AtomicU64::new(0),
            rejected_contended: AtomicU64::new(0),
            swept: AtomicReserved::new(),
            reconciled: AtomicReserved::new(),
            removed: AtomicReserved::new(),
            underflow_clamped: AtomicU64::new(0),
        }
    }
}

/// One slot: tenancy, three fields and the ended-request count, on its own cache line.
#[repr(align(64))]
pub(crate) struct SlotCell {
    tenancy: AtomicU64,
    pub(crate) fields: [FieldCell; 3],
    /// Ended requests the slot's last report counts (`finished.rs`).
    pub(crate) finished: FinishedCell,
}

impl SlotCell {
    /// The three totals, read requests first (`Acquire`), then prefill tokens (`Acquire`),
    /// then decode tokens, so that a reservation's request count is never read without its
    /// tokens (see `# Orderings`).
    fn totals(&self) -> Reserved {
        let requests = self.fields[REQUESTS].total(Ordering::Acquire);
        let prefill_tokens = self.fields[PREFILL].total(Ordering::Acquire);
        let decode_tokens = self.fields[DECODE].total(Ordering::Relaxed);
        Reserved {
            requests,
            prefill_tokens,
            decode_tokens,
            finished: u64::from(self.finished.get()),
        }
    }

    fn clear(&self, which: Fields) -> Reserved {
        let mut r = Reserved::default();
        for (f, bit) in FIELD_BITS.iter().enumerate() {
            if which.contains(*bit) {
                r.add_field(f, self.fields[f].clear());
            }
        }
        r
    }
}

struct Admin {
    /// Per slot: when it was last aged by the sweeper (caller's clock).
    last_aged: Vec<Nanos>,
}

/// The shared state behind a [`ReservationTable`] handle (guards hold it too).
pub(crate) struct Inner {
    slots: Box<[SlotCell]>,
    /// Guards out per group of slots (`group.rs`).
    pub(crate) groups: GroupCounts,
    ttl: Nanos,
    admin: Mutex<Admin>,
    stats: Stats,
}

impl Inner {
    pub(crate) fn slot_cell(&self, slot: Slot) -> &SlotCell {
        &self.slots[slot.index()]
    }

    /// Tallies a token amount cut to fit under `u32::MAX` in its bucket
    /// ([`ReservationStats::saturated_tokens`]).
    pub(crate) fn count_saturated(&self) {
        self.stats.saturated_tokens.fetch_add(1, Ordering::Relaxed);
    }

    /// Tallies a returned entry; `true` when it was live.
    pub(crate) fn count_return(&self, r: Returned) -> bool {
        match r {
            Returned::Released => true,
            Returned::Dead => false,
            Returned::Clamped => {
                self.stats.underflow_clamped.fetch_add(1, Ordering::Relaxed);
                true
            }
        }
    }

    /// Takes back the entries of a reservation that is being refused: the request count
    /// first, then the tokens (as a guard returns them).
    fn take_back(&self, cell: &SlotCell, entries: &[Option<Entry>; 3]) {
        for (f, e) in entries.iter().enumerate() {
            if let Some(e) = e {
                self.count_return(cell.fields[f].sub(*e, Ordering::Relaxed));
            }
        }
    }
}

/// What a guard holds to keep its table alive: the table, behind a reference count of
/// its own, so that guards made through one [`TableLease`] count on that lease's line
/// and not on the line every deciding thread writes. Aligned to a cache line, so that two
/// threads' leases never share one.
#[repr(align(64))]
pub(crate) struct Lease {
    pub(crate) table: Arc<Inner>,
}

/// Per-slot reservation counters; see the [module docs](crate::reserve). A cheap handle:
/// clones share one table (two `Arc`s: the table and the lease of the guards made through
/// it), and every method takes `&self`.
#[derive(Clone)]
pub struct ReservationTable {
    inner: Arc<Inner>,
    /// The lease of the guards made through the table itself (not through a
    /// [`TableLease`]).
    shared: Arc<Lease>,
}

/// A handle that reserves on one [`ReservationTable`] with guards of its own: each
/// guard it makes holds a reference to this lease (which holds the table), so making and
/// dropping guards counts on the lease's reference count, not the table's. A thread that
/// reserves often keeps a lease of its own, so that its reservations write no reference
/// count that other threads write (the table's, without leases, is one cache line every
/// reserving thread writes twice per reservation). Made by [`ReservationTable::lease`];
/// keeps the table alive while it or any of its guards lives. Cloning shares the lease.
#[derive(Clone)]
pub struct TableLease {
    table: ReservationTable,
    lease: Arc<Lease>,
}

impl fmt::Debug for TableLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableLease")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl TableLease {
    /// [`ReservationTable::reserve`], the guard held through this lease.
    ///
    /// # Errors
    /// As [`ReservationTable::reserve`].
    pub fn reserve(
        &self,
        slot: Slot,
        generation: SlotGeneration,
        work: Work,
        now: Nanos,
    ) -> Result<Reservation, ReserveError> {
        self.table
            .reserve_inner(slot, generation, work, now, None, &self.lease)
    }

    /// [`ReservationTable::reserve_at_most`], the guard held through this lease.
    ///
    /// # Errors
    /// As [`ReservationTable::reserve_at_most`].
    pub fn reserve_at_most(
        &self,
        slot: Slot,
        generation: SlotGeneration,
        work: Work,
        now: Nanos,
        max_prior_requests: u64,
    ) -> Result<Reservation, ReserveError> {
        self.table.reserve_inner(
            slot,
            generation,
            work,
            now,
            Some(max_prior_requests),
            &self.lease,
        )
    }

    /// The table it reserves on.
    pub fn table(&self) -> &ReservationTable {
        &self.table
    }
}

impl fmt::Debug for ReservationTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReservationTable")
            .field("capacity", &self.inner.slots.len())
            .field("ttl", &self.inner.ttl)
            .finish_non_exhaustive()
    }
}

impl ReservationTable {
    /// Default time after which the sweeper starts dropping a reservation (60 s).
    pub const DEFAULT_TTL: Nanos = Nanos::from_secs(60);

    /// A table of `capacity` slots (the registry's capacity). The sweeper drops a
    /// reservation no earlier than `ttl` after it was made, and no later than about
    /// `2 × ttl` plus one sweep period.
    ///
    /// # Errors
    /// [`TableError::BadConfig`] for a capacity outside [`CAPACITY`](crate::CAPACITY) or a
    /// TTL outside [`TTL`](crate::reserve::TTL) (zero).
    pub fn new(capacity: usize, ttl: Nanos) -> Result<Self, TableError> {
        crate::CAPACITY
            .check_usize("capacity", capacity)
            .map_err(TableError::BadConfig)?;
        TTL.check_int("ttl", ttl.0).map_err(TableError::BadConfig)?;
        let slots = (0..capacity)
            .map(|_| SlotCell {
                tenancy: AtomicU64::new(VACANT),
                fields: [FieldCell::new(), FieldCell::new(), FieldCell::new()],
                finished: FinishedCell::new(),
            })
            .collect();
        let inner = Arc::new(Inner {
            slots,
            groups: GroupCounts::new(capacity),
            ttl,
            admin: Mutex::new(Admin {
                last_aged: vec![Nanos::ZERO; capacity],
            }),
            stats: Stats::new(),
        });
        let shared = Arc::new(Lease {
            table: inner.clone(),
        });
        Ok(Self { inner, shared })
    }

    /// A [`TableLease`] of this table: guards of their own reference count (for a thread
    /// that reserves often). One allocation.
    pub fn lease(&self) -> TableLease {
        TableLease {
            table: self.clone(),
            lease: Arc::new(Lease {
                table: self.inner.clone(),
            }),
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.inner.slots.len()
    }

    /// The sweeper's TTL.
    pub fn ttl(&self) -> Nanos {
        self.inner.ttl
    }

    fn lock(&self) -> kvroute_core::sync::MutexGuard<'_, Admin> {
        // Every admin step leaves the table consistent, so a poisoned lock is usable.
        self.inner.admin.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn cell(&self, slot: Slot) -> Option<&SlotCell> {
        self.inner.slots.get(slot.index())
    }

    /// The generation of the worker in `slot`, or `None` when vacant or out of range.
    pub fn tenancy(&self, slot: Slot) -> Option<SlotGeneration> {
        let g = self.cell(slot)?.tenancy.load(Ordering::Acquire);
        (g != VACANT).then_some(SlotGeneration(g))
    }

    /// Starts a tenancy: the slot's counters are zero from here on. `now` starts the
    /// sweeper's clock for the slot.
    ///
    /// # Errors
    /// [`TableError::UnknownSlot`], [`TableError::ZeroGeneration`], or
    /// [`TableError::Occupied`] when the slot has a tenant (remove it first).
    pub fn add_worker(
        &self,
        slot: Slot,
        generation: SlotGeneration,
        now: Nanos,
    ) -> Result<(), TableError> {
        let cell = self.cell(slot).ok_or(TableError::UnknownSlot(slot))?;
        if generation.0 == VACANT {
            return Err(TableError::ZeroGeneration);
        }
        let mut admin = self.lock();
        if cell.tenancy.load(Ordering::Relaxed) != VACANT {
            return Err(TableError::Occupied(slot));
        }
        // The fields were cleared by the removal. A reserve that raced with it and has not
        // re-validated yet may still have its additions here; it takes them back itself
        // (module docs), so they are not cleared again.
        admin.last_aged[slot.index()] = now;
        cell.tenancy.store(generation.0, Ordering::Release);
        Ok(())
    }

    /// Ends a tenancy: every reservation on the slot is released at once (and counted in
    /// [`ReservationStats::removed`]); guards still out become no-ops. Returns the amounts
    /// released.
    ///
    /// # Errors
    /// [`TableError::UnknownSlot`], or [`TableError::NotTenant`] when the slot does not hold
    /// `generation`.
    pub fn remove_worker(
        &self,
        slot: Slot,
        generation: SlotGeneration,
    ) -> Result<Reserved, TableError> {
        let cell = self.cell(slot).ok_or(TableError::UnknownSlot(slot))?;
        let _admin = self.lock();
        if generation.0 == VACANT || cell.tenancy.load(Ordering::Relaxed) != generation.0 {
            return Err(TableError::NotTenant { slot, generation });
        }
        cell.tenancy.swap(VACANT, Ordering::AcqRel);
        if cell.finished.retire() > 0 {
            self.inner.groups.lower(slot.index());
        }
        let released = cell.clear(Fields::RESERVABLE);
        self.inner.stats.removed.add(&released);
        Ok(released)
    }

    /// Reconciliation with telemetry: drops every reservation of the `fields` (requests,
    /// prefill tokens, decode tokens; other bits are ignored) on `slot`, because a telemetry
    /// report observed after they were made now counts them. Called by the load publisher
    /// just before it publishes that report (see `reconcile.rs` for the rule). A no-op when
    /// the slot does not hold `generation`. Returns the amounts dropped. A reconciliation of
    /// the requests field also resets the slot's [`Reserved::finished`] count (the new
    /// report counts what has ended) and records the request reservations it drops, which
    /// offset the first as many ends; the guards it drops count themselves there when they
    /// end.
    pub fn reconcile(&self, slot: Slot, generation: SlotGeneration, fields: Fields) -> Reserved {
        let Some(cell) = self.cell(slot) else {
            return Reserved::default();
        };
        let _admin = self.lock();
        if generation.0 == VACANT || cell.tenancy.load(Ordering::Relaxed) != generation.0 {
            return Reserved::default();
        }
        // Before the request buckets are cleared (`finished.rs`, `# Orderings`).
        let requests = fields.contains(Fields::REQUESTS);
        if requests && cell.finished.reset() > 0 {
            self.inner.groups.lower(slot.index());
        }
        let dropped = cell.clear(fields);
        if requests {
            // The request reservations it dropped offset as many ends (`finished.rs`).
            cell.finished.absorb(dropped.requests);
        }
        self.inner.stats.reconciled.add(&dropped);
        dropped
    }

    /// The TTL sweeper: ages every occupied slot that was last aged at least `ttl` ago.
    /// A reservation survives one ageing and is dropped (and counted in
    /// [`ReservationStats::swept`]) by the next, so it lives at least `ttl`; call this at
    /// least every `ttl` to bound its life by about `2 × ttl`.
    pub fn sweep(&self, now: Nanos) -> SweepReport {
        let mut admin = self.lock();
        let mut report = SweepReport::default();
        for (i, cell) in self.inner.slots.iter().enumerate() {
            if cell.tenancy.load(Ordering::Relaxed) == VACANT
                || now.saturating_since(admin.last_aged[i]) < self.inner.ttl
            {
                continue;
            }
            for f in 0..3 {
                report
                    .released
                    .add_field(f, u64::from(cell.fields[f].age()));
            }
            admin.last_aged[i] = now;
            report.slots_aged += 1;
        }
        self.inner.stats.swept.add(&report.released);
        report
    }

    /// Reserved totals on `slot` (zero for an out-of-range slot). Each field is read on its
    /// own and the three are not one atomic snapshot, but a held reservation's request is
    /// never counted without its tokens (module docs, `# Orderings`).
    pub fn reserved(&self, slot: Slot) -> Reserved {
        self.cell(slot).map(SlotCell::totals).unwrap_or_default()
    }

    /// Reserved totals on `slot` if it holds `generation`, else `None` (so figures of one
    /// tenancy are never mixed with a snapshot of another).
    pub fn reserved_for(&self, slot: Slot, generation: SlotGeneration) -> Option<Reserved> {
        let cell = self.cell(slot)?;
        (cell.tenancy.load(Ordering::Acquire) == generation.0 && generation.0 != VACANT)
            .then(|| cell.totals())
    }

    /// Every live reservation of a snapshot's tenancies, in one pass over the table: clears
    /// `out`, then, for each slot `i < generations.len()` (and below the capacity) that
    /// holds the tenancy `generations[i]` (0 = vacant, skipped) and whose reserved totals
    /// are not all zero, pushes `(Slot(i), totals)`, in ascending slot order.
    ///
    /// The same figures as [`reserved_for`](Self::reserved_for) on each slot (a slot left
    /// out reads as zero), with the same orderings; pass a load snapshot's
    /// [`generation`](crate::LoadSnapshot::generation) lane, loaded before this call (the
    /// reconciliation rule). Allocates only when `out` must grow.
    ///
    /// Cost: one load per group of [`GROUP_SLOTS`](crate::reserve::GROUP_SLOTS) slots, and
    /// the slots themselves only of groups where a guard is out
    /// ([`guards_in_group`](Self::guards_in_group)): a group reading 0 is skipped. That never
    /// misses a reservation whose `reserve` returned before this call (module docs of
    /// `group.rs`, `# Orderings`); one made concurrently may be seen or not, as before.
    pub fn reserved_nonzero(&self, generations: &[u64], out: &mut Vec<(Slot, Reserved)>) {
        out.clear();
        let n = self.inner.slots.len().min(generations.len());
        // First the groups with a guard out, 64 groups per word of a bitset (one load and
        // one `or` per group), then only those groups' slots: the loop over every group
        // stays as small as the loads themselves.
        let groups = n.div_ceil(GROUP_SLOTS);
        let mut base = 0;
        while base < groups {
            let mut live = self.inner.groups.live_bits(base, groups);
            while live != 0 {
                let group = base + live.trailing_zeros() as usize;
                live &= live - 1;
                self.push_nonzero_of(group, n, generations, out);
            }
            base += 64;
        }
    }

    /// [`reserved_nonzero`](Self::reserved_nonzero)'s scan of one group's slots (below `n`).
    fn push_nonzero_of(
        &self,
        group: usize,
        n: usize,
        generations: &[u64],
        out: &mut Vec<(Slot, Reserved)>,
    ) {
        let start = group * GROUP_SLOTS;
        let end = n.min(start + GROUP_SLOTS);
        let cells = &self.inner.slots[start..end];
        for (i, (cell, &g)) in (start..end).zip(cells.iter().zip(&generations[start..end])) {
            if g == VACANT || cell.tenancy.load(Ordering::Acquire) != g {
                continue;
            }
            let r = cell.totals();
            if !r.is_zero() {
                out.push((Slot(i as u32), r));
            }
        }
    }

    /// Reservation guards handed out and not yet returned on the group of
    /// [`GROUP_SLOTS`](crate::reserve::GROUP_SLOTS) consecutive slots holding `slot` (0 for
    /// an out-of-range slot). It counts guards, not amounts: a guard whose amounts were
    /// already dropped (swept, reconciled, worker removed) still counts until it is
    /// returned. Loaded with `Acquire`: a reader that sees a guard counted here sees its
    /// reservation's counters whole (`group.rs`, `# Orderings`). What
    /// [`reserved_nonzero`](Self::reserved_nonzero) checks before reading a group.
    pub fn guards_in_group(&self, slot: Slot) -> u64 {
        if slot.index() >= self.capacity() {
            return 0;
        }
        self.inner.groups.live(slot.index() / GROUP_SLOTS)
    }

    /// The ended requests counted on `slot` since its last reconciliation, before the
    /// absorbed reservations offset them (what [`Reserved::finished`] subtracts them from).
    #[cfg(test)]
    pub(crate) fn ended_requests(&self, slot: Slot) -> u64 {
        self.cell(slot)
            .map_or(0, |c| u64::from(c.finished.ended_count()))
    }

    /// The table's counters.
    pub fn stats(&self) -> ReservationStats {
        let s = &self.inner.stats;
        ReservationStats {
            rejected_stale: s.rejected_stale.load(Ordering::Relaxed),
            rejected_saturated: s.rejected_saturated.load(Ordering::Relaxed),
            saturated_tokens: s.saturated_tokens.load(Ordering::Relaxed),
            rejected_contended: s.rejected_contended.load(Ordering::Relaxed),
            swept: s.swept.get(),
            reconciled: s.reconciled.get(),
            removed: s.removed.get(),
            underflow_clamped: s.underflow_clamped.load(Ordering::Relaxed),
        }
    }

    /// Reserves `work` plus one request on `slot` for the tenancy `generation` and returns
    /// the guard. `now` (caller's clock) is recorded in the guard.
    ///
    /// [`Reservation::prior`] tells the caller what was already reserved on the slot just
    /// before: if it differs from what the decision read, another decision reserved the same
    /// slot in between (use it to re-decide, or use [`reserve_at_most`](Self::reserve_at_most)).
    ///
    /// The tokens are added before the request count, so a concurrent reader that counts
    /// the request also counts its tokens.
    ///
    /// Cost: three compare-and-swaps on the slot's cache line plus one on its tenancy; no
    /// lock; retries only when another thread changed the same word at the same instant.
    ///
    /// # Errors
    /// [`ReserveError::UnknownSlot`], [`ReserveError::StaleSlot`] (also counted), or
    /// [`ReserveError::Saturated`] (counted).
    pub fn reserve(
        &self,
        slot: Slot,
        generation: SlotGeneration,
        work: Work,
        now: Nanos,
    ) -> Result<Reservation, ReserveError> {
        self.reserve_inner(slot, generation, work, now, None, &self.shared)
    }

    /// Like [`reserve`](Self::reserve), but reserves only if the slot holds at most
    /// `max_prior_requests` reserved requests at the moment of reserving (compare-and-swap
    /// on the requests counter). Two decisions that both read a slot as idle and call this
    /// with 0 cannot both win (for reservations in the same age cohort).
    ///
    /// # Errors
    /// As [`reserve`](Self::reserve), plus [`ReserveError::Contended`] (counted).
    pub fn reserve_at_most(
        &self,
        slot: Slot,
        generation: SlotGeneration,
        work: Work,
        now: Nanos,
        max_prior_requests: u64,
    ) -> Result<Reservation, ReserveError> {
        self.reserve_inner(
            slot,
            generation,
            work,
            now,
            Some(max_prior_requests),
            &self.shared,
        )
    }

    #[inline(always)]
    fn reserve_inner(
        &self,
        slot: Slot,
        generation: SlotGeneration,
        work: Work,
        now: Nanos,
        limit: Option<u64>,
        lease: &Arc<Lease>,
    ) -> Result<Reservation, ReserveError> {
        let cell = self.cell(slot).ok_or(ReserveError::UnknownSlot(slot))?;
        let stale = || {
            self.inner
                .stats
                .rejected_stale
                .fetch_add(1, Ordering::Relaxed);
            ReserveError::StaleSlot { slot, generation }
        };
        if generation.0 == VACANT || cell.tenancy.load(Ordering::Acquire) != generation.0 {
            return Err(stale());
        }
        let contended = |prior_requests: u64| {
            self.inner
                .stats
                .rejected_contended
                .fetch_add(1, Ordering::Relaxed);
            ReserveError::Contended {
                slot,
                prior_requests,
            }
        };
        // Early exit before touching the tokens; the request's compare-and-swap below is
        // what decides.
        if let Some(max) = limit {
            let prior = cell.fields[REQUESTS].total(Ordering::Relaxed);
            if prior > max {
                return Err(contended(prior));
            }
        }
        // Before the request count is added (`finished.rs`).
        let since = cell.finished.tag();
        let amounts = [1, work.prefill_tokens, work.decode_tokens];
        let mut entries: [Option<Entry>; 3] = [None; 3];
        let mut prior = Reserved::default();
        // Tokens first, the request count last with `Release`: a reader that sees the
        // request count sees the tokens (`# Orderings`).
        for f in [PREFILL, DECODE, REQUESTS] {
            let (lim, order) = if f == REQUESTS {
                (limit, Ordering::Release)
            } else {
                (None, Ordering::Relaxed)
            };
            // Token amounts saturate (what fits is held and later returned); the request
            // count is refused rather than cut, as admission bounds it.
            match cell.fields[f].add(amounts[f], lim, order, f != REQUESTS) {
                Ok((entry, p)) => {
                    if entry.amount < amounts[f] {
                        self.inner.count_saturated();
                    }
                    entries[f] = Some(entry);
                    prior.add_field(f, p);
                }
                Err(refused) => {
                    self.inner.take_back(cell, &entries);
                    return Err(match refused {
                        AddRefused::Saturated => {
                            self.inner
                                .stats
                                .rejected_saturated
                                .fetch_add(1, Ordering::Relaxed);
                            ReserveError::Saturated {
                                slot,
                                field: FIELD_NAMES[f],
                            }
                        }
                        AddRefused::OverLimit { prior } => contended(prior),
                    });
                }
            }
        }
        if cell
            .tenancy
            .compare_exchange(
                generation.0,
                generation.0,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            self.inner.take_back(cell, &entries);
            return Err(stale());
        }
        // Counted in its group only now that its counters are raised and it is sure to be
        // handed out (`group.rs`): a scan that skips the group cannot miss it once this
        // call has returned.
        self.inner.groups.raise(slot.index());
        Ok(Reservation::new(
            lease.clone(),
            slot,
            generation,
            Made {
                reserved_at: now,
                work,
                prior,
                entries,
                since,
            },
        ))
    }
}
