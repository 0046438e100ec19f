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
//! snapshot visible. A token field that a report lacks but the snapshot estimates from the
//! report's request counts counts as reported (below).
//!
//! # Fields a report estimates
//! Every report carries request counts; vLLM's carries no token figures. A slot's token
//! figure it lacks is estimated from its counts, `waiting × tokens per waiting request`
//! and `running × tokens per running request`, the per-request figures measured on the
//! fresh slots that report them ([`LoadSnapshot::tokens_per_waiting`],
//! [`LoadSnapshot::tokens_per_running`]). The counts include the reserved requests the
//! report has seen, so a measured estimate covers their tokens as the report covers their
//! requests: a publication reconciles a counts-only report's token fields with its
//! requests wherever some fresh slot reports that field. Left unreconciled, a counts-only
//! slot would count each request twice, once in the estimate and once in its reservation
//! (which lives until the request ends or the TTL sweep): on the conversation trace at 16x
//! with half the engines on vLLM's gauges, those engines' reserved prefill tokens equalled
//! their whole queue, so under `least_load` they looked twice as loaded as they were and
//! ran 16-18 requests against the others' 25-30 (`docs/RESULTS.md`, "Fault programs on
//! the trace").
//!
//! Where no fresh slot reports a token field (a fleet all on vLLM's gauges, or one whose
//! reporting slots are all stale), the estimate is the configured prior alone, a guess,
//! and a counts-only slot's reservations stay the measure of the tokens the router sent
//! it: they are kept until their requests end (or the sweep), not reconciled. Reconciled
//! there too, the all-gauges trace was costed at the prior per request and lost 8 % of
//! its output at 16x (`docs/RESULTS.md`, `partial-telemetry`'s notes).
//!
//! # What the estimate gives up
//! * When the reporting slots have no waiting (running) request, the estimate per waiting
//!   (running) request is their reported tokens plus the prior, over one request: the
//!   prior alone when they report 0. The condition is which slots report, not what they
//!   hold: tried on whether they held any waiting or running request, the condition
//!   flipped with every lull at moderate load, and each flip under-stated the counts-only
//!   slots (their reservations dropped by the last measured publication, the prior after
//!   it): in `partial-telemetry` at 16x `least_load` then ran 24.1 requests on the
//!   counts-only half against 18.9.
//! * A fleet whose reporting slots go stale and come back is off for one report of each
//!   counts-only slot: after a measured publication dropped its reservations, an unmeasured
//!   one under-states it (they are not restored); after an unmeasured publication kept
//!   them, a measured one before the slot reports again counts them beside the estimate.
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
    /// Reported waiting uncached prefill tokens (where not reported, `waiting ×`
    /// [`LoadSnapshot::tokens_per_waiting`], rounded to the nearest token), plus reserved
    /// prefill tokens (tokens).
    pub prefill_tokens: u64,
    /// Reported active decode tokens (where not reported, `running ×`
    /// [`LoadSnapshot::tokens_per_running`], rounded), plus reserved decode tokens (tokens).
    pub decode_tokens: u64,
    /// The reserved part alone.
    pub reserved: Reserved,
}

/// The effective load of `slot`: the snapshot's figures plus the live reservations of the
/// same tenancy. A token figure the slot's report lacks is estimated from its request
/// counts with `tokens_per_request` (tokens; the router's
/// `ScoreConfig::tokens_per_request`) as the prior of the per-request figure (module docs,
/// "Fields a report estimates"). Reads the counters after the snapshot (the caller loaded
/// it before calling). Returns `None` for a vacant slot. When the table holds another
/// tenancy than the snapshot (the worker was replaced since), reservations are left out.
pub fn effective_load(
    snapshot: &LoadSnapshot,
    table: &ReservationTable,
    slot: Slot,
    tokens_per_request: u32,
) -> Option<EffectiveLoad> {
    let prior = tokens_per_request as f32;
    let s = snapshot.slot(slot)?;
    let reserved = table.reserved_for(slot, s.generation).unwrap_or_default();
    let figure = |bit: Fields, v: u32, count: u32, per_request: f32| {
        if s.reported.contains(bit) {
            u64::from(v)
        } else {
            // Saturating conversion: at most 2^32 requests × a finite figure.
            (f64::from(count) * f64::from(per_request)).round() as u64
        }
    };
    Some(EffectiveLoad {
        requests: (u64::from(s.running) + u64::from(s.waiting) + reserved.requests)
            .saturating_sub(reserved.finished),
        prefill_tokens: figure(
            Fields::PREFILL_TOKENS,
            s.waiting_prefill_tokens,
            s.waiting,
            snapshot.tokens_per_waiting(prior),
        ) + reserved.prefill_tokens,
        decode_tokens: figure(
            Fields::DECODE_TOKENS,
            s.active_decode_tokens,
            s.running,
            snapshot.tokens_per_running(prior),
        ) + reserved.decode_tokens,
        reserved,
    })
}
