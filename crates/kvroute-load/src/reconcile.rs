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
//! slot's reports stop (a blackout), so that a worker whose figures froze while loaded
//! would look loaded however much it drained. Its guard still sees it end, so the table
//! counts such requests per slot ([`Reserved::finished`], reset by the next reconciliation
//! of the requests field), and the effective request count of a slot whose figures are
//! not fresh subtracts them. A fresh slot's count is left alone: within one period the
//! over-count of ended requests and the under-count below (requests reserved between a
//! report's observation and its publication) are both bounded by the period and offset
//! each other, and subtracting only one of them would make every fresh worker look idler
//! than it is (measured in `docs/RESULTS.md`, "The scenarios").
//!
//! # What it gives up
//! Requests reserved between a report's observation and its publication are in neither
//! figure until the next report (an undercount of at most one telemetry delay's worth of
//! dispatches per slot), and when they end they are subtracted although the report never
//! counted them (the same bound again). Both err towards "looks idler", which the
//! reservations of concurrent decisions in the next period correct. With several router
//! replicas, each sees only its own requests end and only its own reservations.
//!
//! `max(reported, reserved)` was rejected: it undercounts whenever old engine work and new
//! reservations are disjoint (the normal case), and it cannot be applied per request.

use kvroute_core::Slot;

use crate::lanes::Validity;
use crate::reserve::{ReservationTable, Reserved};
use crate::snapshot::LoadSnapshot;
use kvroute_core::Fields;

/// A slot's load with reservations folded in by the rule in the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EffectiveLoad {
    /// Reported running + waiting, plus reserved requests, less (where the slot's
    /// telemetry is not fresh) the reported ones seen to end since
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
        requests: (u64::from(s.running) + u64::from(s.waiting) + reserved.requests).saturating_sub(
            if s.validity == Validity::Fresh {
                0
            } else {
                reserved.finished
            },
        ),
        prefill_tokens: reported(Fields::PREFILL_TOKENS, s.waiting_prefill_tokens)
            + reserved.prefill_tokens,
        decode_tokens: reported(Fields::DECODE_TOKENS, s.active_decode_tokens)
            + reserved.decode_tokens,
        reserved,
    })
}
