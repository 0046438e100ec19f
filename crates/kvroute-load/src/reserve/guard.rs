//! The RAII reservation guard.
//!
//! A [`Reservation`] holds, per field (requests, prefill tokens, decode tokens), at most one
//! [`Entry`]: what it added and where. Every way of ending it (drop on completion, cancel,
//! client disconnect or panic unwinding; [`Reservation::commit`]; [`Reservation::release`])
//! goes through one routine that `take`s each entry before returning it, so each entry is
//! returned at most once; an entry whose bucket was already dropped (swept, reconciled,
//! worker removed) is returned as a no-op. A request entry dropped by a reconciliation is
//! instead counted, when the guard is dropped or released (not committed), in the slot's
//! ended requests (`finished.rs`). A leaked guard (`mem::forget`) is dropped by the TTL
//! sweeper.
//!
//! # Orderings
//! The guard performs no atomic operation of its own; it calls the field operations of
//! `field.rs` (exact by per-word modification order) and holds an `Arc` of the lease it
//! was made through (the table's own, or a `TableLease`'s), which holds the table.
//! Two of them are ordered for readers of totals (`table.rs`, `# Orderings`):
//! * Returning: the request count is taken back before the tokens (all `Relaxed`), so a
//!   reservation being returned never shows its request without its tokens for longer than
//!   a read that straddles the return itself.
//! * [`Reservation::first_token`] first grows the decode entry, then takes the prefill
//!   entry back with `Release`; a reader loads prefill with `Acquire` before decode, so if
//!   it misses the prefill tokens it sees them as decode tokens (it may count them twice
//!   for a moment, never zero times).
//! * Returning ends by lowering the slot's group count (`Release`, once per guard, after
//!   the fields; `group.rs`).
//! * A request entry found dead is followed by an `Acquire` fence before the ended-request
//!   count is read, pairing with the clearing's `Release` (`finished.rs`, `# Orderings`).

use core::fmt;

use kvroute_core::sync::Arc;
use kvroute_core::sync::atomic::{Ordering, fence};
use kvroute_core::{Slot, SlotGeneration};

use super::field::Entry;
use super::table::{DECODE, Lease, PREFILL, REQUESTS, Reserved, Work};
use kvroute_core::Nanos;

/// A request's reservation on one worker slot; releases what it still holds when dropped.
///
/// `Send` and `Sync`: it may travel with the request across threads and `await`s.
#[must_use = "dropping a reservation releases it at once"]
pub struct Reservation {
    /// The lease it was made through (the table's own, or a `TableLease`'s): what keeps
    /// the table alive.
    lease: Arc<Lease>,
    slot: Slot,
    generation: SlotGeneration,
    reserved_at: Nanos,
    work: Work,
    prior: Reserved,
    entries: [Option<Entry>; 3],
    decoding: bool,
    /// Whether the guard is still counted in its slot's group (`group.rs`).
    counted: bool,
    /// The slot's ended-request tag when it reserved (`finished.rs`).
    since: u32,
}

/// What a successful reserve made: the guard's contents besides its table and slot.
pub(crate) struct Made {
    pub(crate) reserved_at: Nanos,
    pub(crate) work: Work,
    pub(crate) prior: Reserved,
    pub(crate) entries: [Option<Entry>; 3],
    /// The slot's ended-request tag before the request count was added (`finished.rs`).
    pub(crate) since: u32,
}

impl Reservation {
    pub(crate) fn new(lease: Arc<Lease>, slot: Slot, generation: SlotGeneration, m: Made) -> Self {
        Self {
            lease,
            slot,
            generation,
            reserved_at: m.reserved_at,
            work: m.work,
            prior: m.prior,
            entries: m.entries,
            decoding: false,
            counted: true,
            since: m.since,
        }
    }

    /// The reserved slot.
    pub fn slot(&self) -> Slot {
        self.slot
    }

    /// The tenancy it was reserved under.
    pub fn generation(&self) -> SlotGeneration {
        self.generation
    }

    /// When it was made (the caller's clock, as passed to `reserve`).
    pub fn reserved_at(&self) -> Nanos {
        self.reserved_at
    }

    /// The work it was made for.
    pub fn work(&self) -> Work {
        self.work
    }

    /// What was reserved on the slot just before this reservation (requests and tokens).
    /// The young age cohort's part is exact (the value this reservation's compare-and-swap
    /// replaced); the older cohort's part was read just before. A decision that read
    /// `r` reserved requests and gets `prior().requests > r` knows another decision reserved
    /// the same slot in between.
    pub fn prior(&self) -> Reserved {
        self.prior
    }

    /// Whether [`first_token`](Self::first_token) was called.
    pub fn is_decoding(&self) -> bool {
        self.decoding
    }

    /// The amounts this guard has not yet returned. Some may already have been dropped from
    /// the table by the sweeper, reconciliation or worker removal; returning those is a
    /// no-op.
    pub fn held(&self) -> Reserved {
        let a = |f: usize| self.entries[f].map_or(0, |e| u64::from(e.amount));
        Reserved {
            requests: a(REQUESTS),
            prefill_tokens: a(PREFILL),
            decode_tokens: a(DECODE),
            finished: 0,
        }
    }

    /// The request produced its first token: its prefill is done. The prefill tokens still
    /// held move to the decode counter (they are now context that decode attends over), in
    /// the decode entry's own bucket, saturating at `u32::MAX` (the amount actually moved is
    /// what is later returned). If telemetry has already absorbed the decode part
    /// (reconciled) or the worker was removed, the prefill part is released and nothing is
    /// added; if the prefill part was already absorbed, nothing moves. Returns whether a
    /// live prefill part was released; later calls do nothing.
    ///
    /// The decode tokens grow before the prefill tokens are taken back (module docs), so a
    /// concurrent reader never sees the request without these tokens.
    pub fn first_token(&mut self) -> bool {
        if self.decoding {
            return false;
        }
        self.decoding = true;
        let Some(pre) = self.entries[PREFILL].take() else {
            return false;
        };
        let cell = self.lease.table.slot_cell(self.slot);
        let mut grown = 0;
        if pre.amount > 0 {
            if let Some(dec) = self.entries[DECODE].as_mut() {
                match cell.fields[DECODE].grow(dec, pre.amount) {
                    Some(add) => grown = add,
                    None => self.entries[DECODE] = None,
                }
            }
        }
        if self
            .lease
            .table
            .count_return(cell.fields[PREFILL].sub(pre, Ordering::Release))
        {
            if grown < pre.amount && self.entries[DECODE].is_some() {
                // The decode bucket could not take all of it: the move was cut.
                self.lease.table.count_saturated();
            }
            return true;
        }
        // The prefill part was already dropped (reconciled): undo the move.
        if grown > 0 {
            if let Some(dec) = self.entries[DECODE].as_mut() {
                let moved = Entry {
                    amount: grown,
                    ..*dec
                };
                dec.amount -= grown;
                if !self
                    .lease
                    .table
                    .count_return(cell.fields[DECODE].sub(moved, Ordering::Relaxed))
                {
                    self.entries[DECODE] = None;
                }
            }
        }
        false
    }

    /// Hands the request over to the engine's telemetry: the caller knows the engine's own
    /// figures now count it (for example, a response that reports the request queued). The
    /// amounts still live in the table are released at once, exactly once. Returns them.
    pub fn commit(mut self) -> Reserved {
        self.return_all(false)
    }

    /// Releases now (as drop does) and returns the amounts that were still live. Like a
    /// drop, it tells the table that the request has ended: if telemetry had already
    /// absorbed it, it is counted in the slot's [`Reserved::finished`].
    pub fn release(mut self) -> Reserved {
        self.return_all(true)
    }

    /// Returns what is still held; `ended`: the request left the engine (drop, release),
    /// as opposed to being handed over to its telemetry (commit).
    fn return_all(&mut self, ended: bool) -> Reserved {
        let cell = self.lease.table.slot_cell(self.slot);
        let mut live = Reserved::default();
        for f in [REQUESTS, PREFILL, DECODE] {
            let Some(e) = self.entries[f].take() else {
                continue;
            };
            if self
                .lease
                .table
                .count_return(cell.fields[f].sub(e, Ordering::Relaxed))
            {
                let amount = u64::from(e.amount);
                match f {
                    REQUESTS => live.requests += amount,
                    PREFILL => live.prefill_tokens += amount,
                    _ => live.decode_tokens += amount,
                }
            } else if f == REQUESTS && ended {
                // Dropped in bulk. If a reconciliation did it, the report counts the
                // request: count its end (`finished.rs`). The fence pairs with the
                // clearing's `Release`, so the reconciliation's new tag is seen; the group
                // is raised first and the raise kept only for the count's 0 → 1 step.
                fence(Ordering::Acquire);
                self.lease.table.groups.raise(self.slot.index());
                if cell.finished.count_end(self.since) != Some(true) {
                    self.lease.table.groups.lower(self.slot.index());
                }
            }
        }
        // After the per-slot amounts are returned, once (`group.rs`).
        if core::mem::take(&mut self.counted) {
            self.lease.table.groups.lower(self.slot.index());
        }
        live
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.return_all(true);
    }
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("slot", &self.slot)
            .field("generation", &self.generation)
            .field("reserved_at", &self.reserved_at)
            .field("held", &self.held())
            .field("decoding", &self.decoding)
            .finish()
    }
}
