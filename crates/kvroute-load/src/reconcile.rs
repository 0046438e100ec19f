//! Reconciliation of reservations with telemetry: how the two are combined without ever
//! counting a request twice.
//!
//! # The rule
//! For each slot and each reservable field (requests, prefill tokens, decode tokens):
//!
//! > effective = the published telemetry figure + the reservations made since the last
//! > publication that carried a telemetry report of that field for the slot.
//!
//! It is enforced by the publisher, not by arithmetic at read time: when a publication
//! carries a new accepted report of a field for a slot, the publisher first drops that
//! field's reservations on the slot ([`ReservationTable::reconcile`]), then makes the
//! snapshot visible. Fields that the slot's telemetry does not report (vLLM reports no token
//! figures) are never reconciled; for them the reservations are the only source.
//!
//! # Why no request is counted twice
//! A report is observed by the engine before the router receives it, and the router receives
//! it before it publishes it. Every reservation still live after the reconciliation was made
//! after that reconciliation, hence after the observation, and its request reached the
//! engine later still: the report cannot include it. Every reservation made before the
//! reconciliation was dropped by it. So the telemetry figure and the live reservations
//! count disjoint sets of requests. This needs no clock agreement between router and engine.
//!
//! The reader's side: a decision must load the snapshot *before* reading the counters
//! ([`effective_load`] does). The publisher's drops happen-before its publication, which
//! happens-before any load that returns it, so counters read after loading a snapshot never
//! include a reservation that snapshot's telemetry already counts. A decision still holding
//! an older snapshot may see counters already reconciled by a newer one: it undercounts,
//! it never double counts.
//!
//! # Requests that end before the next report
//! A request already absorbed by telemetry keeps being counted by the report after it
//! ends, until the next report: one telemetry period normally, but for as long as the
//! slot's reports stop (a blackout), and all at once when an engine loses its requests (a
//! restart), so that a worker whose figures froze while loaded, or that was just emptied,
//! would look loaded. Its guard still sees it end, so the table counts such requests per
//! slot, and the effective request count subtracts them *beyond the request reservations
//! the last reconciliation absorbed* ([`Reserved::finished`]: ended − absorbed, at least
//! 0; both reset by the next reconciliation of the requests field), whatever the slot's
//! validity.
//!
//! Why the offset: the reconciliation also drops reservations made between the report's
//! observation and its publication, which the report does not count (below). Call them
//! `U` and the absorbed reservations `A` (so `U ≤ A`), the ended requests `F` and the live
//! reservations `R`. The true count is `reported + R + U − F`; the estimate is
//! `reported + R − max(0, F − A)`, so it errs by `(F − U) − max(0, F − A)`: where `F ≤ A`
//! by `F − U`, exactly as subtracting nothing does, and where `F > A` by `A − U ≥ 0`: it
//! then never under-states, and over-states by at most the reservations one publication
//! absorbed. In steady state `F` and `A` are both about one period's arrivals and mostly
//! cancel; a restart or a blackout makes `F` far larger than `A`, and the excess is
//! subtracted. Subtracting all of `F` under-states by up to `U` (on a fresh report that
//! measured worse on the conversation trace at 8x); subtracting nothing from a fresh
//! report left a restarted engine looking full for a telemetry period (`docs/RESULTS.md`,
//! "The scenarios").
//!
//! # What it gives up
//! Requests reserved between a report's observation and its publication are in neither
//! figure until the next report (an undercount of at most one telemetry delay's worth of
//! dispatches per slot), though their ends are then offset as above. The absorbed count is
//! kept up to 4,095 per slot (`reserve/finished.rs`); more absorbed reservations in one
//! period offset only that many. With several router replicas, each sees only its own
//! requests end and only its own reservations.
//!
//! `max(reported, reserved)` was rejected: it undercounts whenever old engine work and new
//! reservations are disjoint (the normal case), and it cannot be applied per request.

use kvroute_core::Slot;

use crate::reserve::{ReservationTable, Reserved};
use crate::snapshot::LoadSnapshot;
use kvroute_core::Fields;

/// A slot's load with reservations folded in by the rule in the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EffectiveLoad {
    /// Reported running + waiting, plus reserved requests, less the reported ones seen to
    /// end since beyond the reservations the report's publication absorbed
    /// ([`Reserved::finished`]; at least 0) (requests).
    pub requests: u64,
    /// Reported waiting uncached prefill tokens (0 when not reported), plus reserved
    /// prefill tokens (tokens).
    pub prefill_tokens: u64,
    /// Reported active decode tokens (0 when not reported), plus reserved decode tokens
    /// (tokens).
    pub decode_tokens: u64,
    /// The reserved part alone.
    pub reserved: Reserved,
}

/// The effective load of `slot`: the snapshot's figures plus the live reservations of the
/// same tenancy. Reads the counters after the snapshot (the caller loaded it before calling).
/// Returns `None` for a vacant slot. When the table holds another tenancy than the snapshot
/// (the worker was replaced since), reservations are left out.
pub fn effective_load(
    snapshot: &LoadSnapshot,
    table: &ReservationTable,
    slot: Slot,
) -> Option<EffectiveLoad> {
    let s = snapshot.slot(slot)?;
    let reserved = table.reserved_for(slot, s.generation).unwrap_or_default();
    let reported = |bit: Fields, v: u32| {
        if s.reported.contains(bit) {
            u64::from(v)
        } else {
            0
        }
    };
    Some(EffectiveLoad {
        requests: (u64::from(s.running) + u64::from(s.waiting) + reserved.requests)
            .saturating_sub(reserved.finished),
        prefill_tokens: reported(Fields::PREFILL_TOKENS, s.waiting_prefill_tokens)
            + reserved.prefill_tokens,
        decode_tokens: reported(Fields::DECODE_TOKENS, s.active_decode_tokens)
            + reserved.decode_tokens,
        reserved,
    })
}
