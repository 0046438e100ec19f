//! The router's counters as [`metrics`](https://docs.rs/metrics/0.24) counters and gauges
//! (cargo feature `metrics`).
//!
//! kvroute keeps its own tallies ([`RouterStats`], [`IngestStats`]); exporting copies them
//! into whatever recorder the process installed (Prometheus, StatsD, …). Call
//! [`Router::export_metrics`] periodically (each scrape, or every few seconds): every
//! counter is set to its absolute value ([`Counter::absolute`](::metrics::Counter::absolute)),
//! so calls can be as frequent or rare as wanted and nothing is counted twice. The
//! counters are monotonic since the router was built (the per-worker ones since the worker
//! was added); a counter that is still zero may be absent until it first moves (decisions,
//! block-size mismatches).
//! [`describe_metrics`] registers each name's unit and description once.
//!
//! A worker removed and added again starts counting its decisions from zero
//! ([`RouterStats::workers`]); `kvroute_worker_decisions_total` carries the tenancy's
//! `generation` ([`SlotGeneration`](crate::SlotGeneration)) so that the new tenancy is a new
//! series instead of one that goes backwards (which `absolute` would not show: the
//! `metrics` crate's own counters keep the largest value set);
//! `kvroute_ingest_block_size_mismatches_total` carries it for the same reason.
//! `sum without (generation)` totals a worker over its tenancies while the recorder keeps
//! the old series.
//!
//! | metric | kind | labels | source |
//! |---|---|---|---|
//! | `kvroute_decisions_total` | counter | `policy` ([`Policy::label`](crate::Policy::label): the name, with `projected_time`'s mode unless enforce, e.g. `projected_time:shadow`), `reason` ([`Reason::name`](crate::Reason::name)) | [`RouterStats::decisions`] |
//! | `kvroute_worker_decisions_total` | counter | `engine_id`, `dp_rank`, `generation`, `reason` | [`RouterStats::workers`]: decisions that went to each registered worker during its current tenancy of its slot, by reason (non-zero ones) |
//! | `kvroute_fallbacks_total` | counter | `cause`: `missing`, `invalid`, `stale`, `partial` | [`RouterStats::fallbacks`] |
//! | `kvroute_shadow_disagreements_total` | counter | | [`RouterStats::shadow_disagreements`] |
//! | `kvroute_rescores_total` | counter | | [`RouterStats::rescores`] |
//! | `kvroute_unchecked_reserves_total` | counter | | [`RouterStats::unchecked_reserves`] |
//! | `kvroute_admission_redirects_total` | counter | | [`RouterStats::admission_redirects`] |
//! | `kvroute_outputs_capped_total` | counter | | [`RouterStats::outputs_capped`] |
//! | `kvroute_rejections_total` | counter | `kind`: `invalid_request`, `no_eligible_worker`, `over_bound`, `contended`, `saturated` | [`RouterStats::rejections`] |
//! | `kvroute_reservation_refusals_total` | counter | `cause`: `stale`, `saturated`, `contended` | [`ReservationStats`](kvroute_load::ReservationStats) `rejected_*` |
//! | `kvroute_reservations_swept_total` | counter | `field`: `requests`, `prefill_tokens`, `decode_tokens` | [`RouterStats::reservations_swept`] (requests; tokens) |
//! | `kvroute_reservations_reconciled_total` | counter | `field` as above | `reservations.reconciled` |
//! | `kvroute_reservations_removed_total` | counter | `field` as above | `reservations.removed` |
//! | `kvroute_reservation_underflow_clamped_total` | counter | | `reservations.underflow_clamped` |
//! | `kvroute_reservation_saturated_tokens_total` | counter | | `reservations.saturated_tokens` |
//! | `kvroute_carried_readditions_total` | counter | | [`CarryStats::readditions`](crate::CarryStats::readditions): workers added back that carried work |
//! | `kvroute_carried_reports_total` | counter | | [`CarryStats::reports`](crate::CarryStats::reports) |
//! | `kvroute_carried_total` | counter | `field` as above | [`CarryStats::reserved`](crate::CarryStats::reserved): work reserved again under the new tenancies |
//! | `kvroute_carried_returned_total` | counter | `field` as above | [`CarryStats::returned`](crate::CarryStats::returned) |
//! | `kvroute_carried_dropped_requests_total` | counter | | [`CarryStats::dropped_requests`](crate::CarryStats::dropped_requests) |
//! | `kvroute_outcomes_total` | counter | `outcome`: `completed`, `failed`, `cancelled` | [`RouterStats::breaker`] ([`Router::finish`](crate::Router::finish)) |
//! | `kvroute_stale_outcomes_total` | counter | | [`BreakerStats::stale_outcomes`](crate::BreakerStats::stale_outcomes) |
//! | `kvroute_breaker_transitions_total` | counter | `transition`: `opened`, `reopened`, `half_opened`, `closed`, `refused` | [`BreakerStats`](crate::BreakerStats) |
//! | `kvroute_breakers_open` | gauge | | [`BreakerStats::open_now`](crate::BreakerStats::open_now) (workers) |
//! | `kvroute_predictions_total` | counter | `event`: `recorded`, `contended`, `credited`, `retired`, `cleared` | [`RouterStats::predictions`] (predicted residency; zero while it is off) |
//! | `kvroute_ingest_<counter>_total` | counter | | each `u64` counter of [`IngestStats`], by field name (`kvroute_ingest_gaps_total`, `kvroute_ingest_stored_blocks_total`, …) |
//! | `kvroute_ingest_untrusted_workers` | gauge | | [`IngestStats::untrusted_workers`] (workers) |
//! | `kvroute_ingest_block_size_mismatches_total` | counter | `engine_id`, `dp_rank`, `generation`, `engine_block_size`, `router_block_size` | [`IngestStats::block_size_mismatches`] (rejected stores) |

use ::metrics::{Unit, counter, describe_counter, describe_gauge, gauge};

use crate::ingest::IngestStats;
use crate::router::Router;
use crate::stats::RouterStats;
use kvroute_load::Reserved;
use kvroute_score::{FallbackCause, Reason};

/// Sets the three counters of `name`, one per reservation field.
fn reserved(name: &'static str, r: &Reserved) {
    for (field, v) in [
        ("requests", r.requests),
        ("prefill_tokens", r.prefill_tokens),
        ("decode_tokens", r.decode_tokens),
    ] {
        counter!(name, "field" => field).absolute(v);
    }
}

impl RouterStats {
    /// Records these figures into the current `metrics` recorder (names in the module docs
    /// of [`kvroute::metrics`](crate::metrics)); every counter is set to its absolute value.
    pub fn record_metrics(&self) {
        for d in &self.decisions {
            counter!(
                "kvroute_decisions_total",
                "policy" => d.policy,
                "reason" => d.reason.name(),
            )
            .absolute(d.count);
        }
        for w in &self.workers {
            for reason in Reason::ALL {
                let n = w.with_reason(reason);
                if n > 0 {
                    counter!(
                        "kvroute_worker_decisions_total",
                        "engine_id" => w.worker.engine_id.to_string(),
                        "dp_rank" => w.worker.dp_rank.to_string(),
                        "generation" => w.generation.0.to_string(),
                        "reason" => reason.name(),
                    )
                    .absolute(n);
                }
            }
        }
        for cause in FallbackCause::ALL {
            counter!("kvroute_fallbacks_total", "cause" => cause.name())
                .absolute(self.fallbacks.get(cause));
        }
        counter!("kvroute_shadow_disagreements_total").absolute(self.shadow_disagreements);
        counter!("kvroute_rescores_total").absolute(self.rescores);
        counter!("kvroute_unchecked_reserves_total").absolute(self.unchecked_reserves);
        counter!("kvroute_admission_redirects_total").absolute(self.admission_redirects);
        counter!("kvroute_outputs_capped_total").absolute(self.outputs_capped);
        for (kind, v) in self.rejections.named() {
            counter!("kvroute_rejections_total", "kind" => kind).absolute(v);
        }
        let t = &self.reservations;
        for (cause, v) in [
            ("stale", t.rejected_stale),
            ("saturated", t.rejected_saturated),
            ("contended", t.rejected_contended),
        ] {
            counter!("kvroute_reservation_refusals_total", "cause" => cause).absolute(v);
        }
        reserved("kvroute_reservations_swept_total", &self.reservations_swept);
        reserved("kvroute_reservations_reconciled_total", &t.reconciled);
        reserved("kvroute_reservations_removed_total", &t.removed);
        counter!("kvroute_reservation_underflow_clamped_total").absolute(t.underflow_clamped);
        counter!("kvroute_reservation_saturated_tokens_total").absolute(t.saturated_tokens);
        let c = &self.carried;
        counter!("kvroute_carried_readditions_total").absolute(c.readditions);
        counter!("kvroute_carried_reports_total").absolute(c.reports);
        reserved("kvroute_carried_total", &c.reserved);
        reserved("kvroute_carried_returned_total", &c.returned);
        counter!("kvroute_carried_dropped_requests_total").absolute(c.dropped_requests);
        let b = &self.breaker;
        for (outcome, v) in [
            ("completed", b.completed),
            ("failed", b.failed),
            ("cancelled", b.cancelled),
        ] {
            counter!("kvroute_outcomes_total", "outcome" => outcome).absolute(v);
        }
        counter!("kvroute_stale_outcomes_total").absolute(b.stale_outcomes);
        for (transition, v) in [
            ("opened", b.opened),
            ("reopened", b.reopened),
            ("half_opened", b.half_opened),
            ("closed", b.closed),
            ("refused", b.open_refused),
        ] {
            counter!("kvroute_breaker_transitions_total", "transition" => transition).absolute(v);
        }
        gauge!("kvroute_breakers_open").set(b.open_now as f64);
        let p = &self.predictions;
        for (event, v) in [
            ("recorded", p.recorded),
            ("contended", p.contended),
            ("credited", p.credited),
            ("retired", p.retired),
            ("cleared", p.cleared),
        ] {
            counter!("kvroute_predictions_total", "event" => event).absolute(v);
        }
    }
}

impl IngestStats {
    /// Records these figures into the current `metrics` recorder (names in the module docs
    /// of [`kvroute::metrics`](crate::metrics)): counters set to their absolute values, the
    /// untrusted-worker gauge set.
    pub fn record_metrics(&self) {
        for (name, _, v) in self.metric_counters() {
            counter!(name).absolute(v);
        }
        gauge!("kvroute_ingest_untrusted_workers").set(self.untrusted_workers as f64);
        for m in &self.block_size_mismatches {
            counter!(
                "kvroute_ingest_block_size_mismatches_total",
                "engine_id" => m.worker.engine_id.to_string(),
                "dp_rank" => m.worker.dp_rank.to_string(),
                "generation" => m.generation.0.to_string(),
                "engine_block_size" => m.engine_block_size.to_string(),
                "router_block_size" => m.router_block_size.to_string(),
            )
            .absolute(m.stores);
        }
    }
}

impl Router {
    /// Records [`stats`](Self::stats) and [`ingest_stats`](Self::ingest_stats) into the
    /// current `metrics` recorder (the global one, or a thread's local one); see the module
    /// docs of [`kvroute::metrics`](crate::metrics) for the names. Takes the ingest path's
    /// mismatch-table lock briefly; never blocks routing.
    pub fn export_metrics(&self) {
        self.stats().record_metrics();
        self.ingest_stats().record_metrics();
    }
}

/// Registers the unit and description of every kvroute metric with the current recorder
/// (call once, after installing it). Each `kvroute_ingest_<counter>_total` is described by
/// its field's doc on [`IngestStats`].
pub fn describe_metrics() {
    let c = |name: &'static str, unit: Unit, text: &'static str| {
        describe_counter!(name, unit, text);
    };
    c(
        "kvroute_decisions_total",
        Unit::Count,
        "Routing decisions by policy (with projected_time's mode) and reason.",
    );
    c(
        "kvroute_worker_decisions_total",
        Unit::Count,
        "Routing decisions by the worker they went to (since it was added) and reason.",
    );
    c(
        "kvroute_fallbacks_total",
        Unit::Count,
        "Decisions that fell back to load-only scoring, by the telemetry that forced it.",
    );
    c(
        "kvroute_shadow_disagreements_total",
        Unit::Count,
        "Shadow-mode decisions whose counterfactual chose another worker.",
    );
    c(
        "kvroute_rescores_total",
        Unit::Count,
        "Re-scores after a concurrent decision took the chosen worker.",
    );
    c(
        "kvroute_unchecked_reserves_total",
        Unit::Count,
        "Decisions that reserved without the sibling check (re-scores ran out).",
    );
    c(
        "kvroute_admission_redirects_total",
        Unit::Count,
        "Decisions admission moved off the scorer's pick.",
    );
    c(
        "kvroute_outputs_capped_total",
        Unit::Count,
        "route calls whose expected output was cut to the engines' context (max_model_len).",
    );
    c(
        "kvroute_rejections_total",
        Unit::Count,
        "route calls that returned an error, by kind.",
    );
    c(
        "kvroute_reservation_refusals_total",
        Unit::Count,
        "Reservations the table refused, by cause.",
    );
    for (name, text) in [
        (
            "kvroute_reservations_swept_total",
            "Reserved requests or tokens dropped by the TTL sweeper.",
        ),
        (
            "kvroute_reservations_reconciled_total",
            "Reserved requests or tokens dropped because telemetry counted them.",
        ),
        (
            "kvroute_reservations_removed_total",
            "Reserved requests or tokens dropped because their worker was removed.",
        ),
    ] {
        c(name, Unit::Count, text);
    }
    c(
        "kvroute_reservation_underflow_clamped_total",
        Unit::Count,
        "Reservation subtractions clamped at zero.",
    );
    c(
        "kvroute_reservation_saturated_tokens_total",
        Unit::Count,
        "Reservation token amounts cut to fit under the counter's maximum.",
    );
    c(
        "kvroute_predictions_total",
        Unit::Count,
        "Predicted-residency entries recorded, lost to contention, credited, retired by \
         the worker's events, or dropped with its cleared cache.",
    );
    c(
        "kvroute_outcomes_total",
        Unit::Count,
        "Routed requests by outcome, as the gateway reported them.",
    );
    c(
        "kvroute_stale_outcomes_total",
        Unit::Count,
        "Outcomes of a removed worker or an earlier tenancy of its slot: ignored.",
    );
    c(
        "kvroute_breaker_transitions_total",
        Unit::Count,
        "Per-worker breaker transitions, and openings refused by the open-share cap.",
    );
    describe_gauge!(
        "kvroute_breakers_open",
        Unit::Count,
        "Workers whose breaker is open: no candidates until their cooldown ends."
    );
    c(
        "kvroute_carried_readditions_total",
        Unit::Count,
        "Workers added back soon after their removal that carried their in-flight work.",
    );
    c(
        "kvroute_carried_reports_total",
        Unit::Count,
        "Last load reports given to workers added back soon after their removal.",
    );
    c(
        "kvroute_carried_total",
        Unit::Count,
        "Requests or tokens reserved again under a re-added worker's new tenancy.",
    );
    c(
        "kvroute_carried_returned_total",
        Unit::Count,
        "Carried requests or tokens the router returned itself, still reserved then.",
    );
    c(
        "kvroute_carried_dropped_requests_total",
        Unit::Count,
        "Requests of a removed worker not carried into its re-addition (over the limit).",
    );
    c(
        "kvroute_ingest_block_size_mismatches_total",
        Unit::Count,
        "Stores rejected because the engine's block size differs from the router's.",
    );
    describe_gauge!(
        "kvroute_ingest_untrusted_workers",
        Unit::Count,
        "Workers whose prefix overlap routing currently treats as zero."
    );
    for (name, doc, _) in IngestStats::default().metric_counters() {
        describe_counter!(name, Unit::Count, doc.trim());
    }
}
