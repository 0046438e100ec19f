//! Decision-time reservations.
//!
//! When a decision picks a worker slot it immediately adds the request's work (one
//! request, its uncached prefill tokens, its expected decode tokens) to the slot's counters,
//! so a concurrent decision sees it, and gets a [`Reservation`] guard back. The tokens are
//! added before the request count, and readers load the request count first, so a decision
//! never sees a held reservation's request without its tokens (`table.rs`, `# Orderings`).
//!
//! Lifecycle of a guard:
//! * [`ReservationTable::reserve`] (or [`ReservationTable::reserve_at_most`]) adds the work
//!   and reports in [`Reservation::prior`] what was already reserved on the slot, so a
//!   decision can detect that a sibling reserved the same slot since it read the counters.
//! * [`Reservation::first_token`] moves the prefill tokens to decode.
//! * [`Reservation::commit`] hands the request over to the engine's telemetry.
//! * Drop (completion, cancellation, disconnect, panic) releases what is still held. If
//!   reconciliation already dropped the request (a report counts it), the guard instead
//!   counts it in the slot's ended requests ([`Reserved::finished`]), which a decision
//!   subtracts from that report until the next one (`finished.rs`).
//!
//! Everything a guard added is returned exactly once: by the guard, or in bulk by the TTL
//! sweeper ([`ReservationTable::sweep`]), by reconciliation with telemetry
//! ([`ReservationTable::reconcile`], see [`crate::reconcile`]) or by worker removal
//! ([`ReservationTable::remove_worker`]), after which the guard's own return is a no-op.
//!
//! Counters never wrap and never go below zero: they are unsigned 32-bit values per age
//! cohort, additions are checked (the request count is refused past `u32::MAX`; a token
//! amount that does not fit is cut to what fits, counted in
//! [`ReservationStats::saturated_tokens`], so that one request with an absurd expected
//! output cannot make every later reservation on its worker fail), and a guard subtracts only what it added,
//! only from a bucket that still holds it (tagged buckets, `field.rs`).
//! Unsigned counters with exact take-back make "never negative" a structural property
//! rather than a clamp; the clamp that exists is counted and stays 0 in practice.
//!
//! Each guard is also counted in its slot's group of [`GROUP_SLOTS`] slots until it is
//! returned, so a scan of every slot skips groups where no guard is out (`group.rs`).
//!
//! Modules: `field` (one counter: two tagged buckets), `finished` (the ended-request
//! count), `table` (slots, tenancy protocol, control-path operations), `group` (guards out
//! per group of slots), `guard` (the RAII guard). Each has its `# Orderings` section.

mod field;
mod finished;
mod group;
mod guard;
mod table;

pub use group::GROUP_SLOTS;
pub use guard::Reservation;
pub use table::{
    ReservationStats, ReservationTable, ReserveError, Reserved, SweepReport, TTL, TableError,
    TableLease, Work,
};
