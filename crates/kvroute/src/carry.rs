//! In-flight work carried across a worker's removal and re-addition.
//!
//! Removing a worker drops its load lane, its reservations and its residency. When the same
//! worker id comes back soon after (a health check that failed once, a discovery refresh,
//! an operator's remove and add), the engine behind it usually did not restart: the
//! requests it reported and those routed to it since are still there until its own
//! telemetry says otherwise. A new tenancy that started at zero would let admission admit
//! a whole bound on top of them.
//!
//! # The rule
//! On removal the router keeps a *departure* for the worker id: its last good load report
//! and the reservations the removal released (requests and tokens), stamped with the
//! router's clock (the latest time published). When the same id is added back less than one
//! reservation TTL later, the new tenancy starts with
//! * that report, as of its original observation time
//!   ([`LoadPublisher::carry_report`]), so the lane turns `Stale` when that report would
//!   have, and the worker's own next report replaces it;
//! * the released reservations, made again under the new tenancy and held by the router
//!   (at most [`MAX_CARRIED`] requests; the tokens ride on the first);
//! * its engine's deployment facts ([`Router::configure_engine`](crate::Router::configure_engine)),
//!   when the removal of its last rank made the publisher forget them.
//!
//! Residency is never carried: blocks the index dropped are learnt again from the engine's
//! events, so the index never credits a block it cannot vouch for. Decision guards of the
//! old tenancy stay no-ops; the carried reservations stand for their requests instead.
//!
//! The carried reservations end as any reservation does when telemetry absorbs it: the
//! first publication of a report of the new tenancy reconciles their request counts (the
//! report was observed after they were made, so it counts those requests if they are still
//! running); the router then returns its guards. Without such a report they end two TTLs
//! after the re-addition (by the sweeper, or by the router returning them), and a removal
//! drops them with the rest of the tenancy's reservations (and carries them again).
//!
//! A departure older than one TTL is forgotten: by then the reservations it carried would
//! have been swept, and its report is stale. At most one departure per slot is kept (the
//! oldest goes first), so the state stays bounded whatever the churn.

use kvroute_core::{Nanos, Slot, SlotGeneration, WorkerId};
use kvroute_load::{
    EngineConfig, LastReport, LoadPublisher, Reservation, ReservationTable, Reserved, Work,
};

/// Most requests carried into one re-added worker (the rest of a larger figure is left to
/// its telemetry): bounds the guards the router holds per worker.
pub const MAX_CARRIED: u64 = 4096;

/// What a removal leaves for a re-addition of the same worker id.
#[derive(Debug)]
pub(crate) struct Departure {
    pub worker: WorkerId,
    /// The router's clock at the removal.
    pub at: Nanos,
    /// Its last good load report.
    pub report: Option<LastReport>,
    /// The reservations the removal released.
    pub released: Reserved,
    /// The engine's deployment facts, which the publisher forgets with its last rank.
    pub engine: Option<EngineConfig>,
}

/// Reservations carried into a tenancy, held until their amounts are known to be gone.
struct Carried {
    worker: WorkerId,
    slot: Slot,
    generation: SlotGeneration,
    /// The router's clock at the re-addition.
    at: Nanos,
    /// When the figures the lane held at the re-addition were observed (`None`: none).
    report_at: Option<Nanos>,
    guards: Vec<Reservation>,
}

/// Totals of what was carried (monotonic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CarryStats {
    /// Re-additions that found a departure and carried something.
    pub readditions: u64,
    /// Last reports given to re-added workers.
    pub reports: u64,
    /// Work reserved again under the new tenancies (requests and tokens).
    pub reserved: Reserved,
    /// Requests of departures past [`MAX_CARRIED`], or refused by the table, not carried.
    pub dropped_requests: u64,
    /// Carried work the router returned itself, still live when it did (two TTLs passed
    /// with no report, or [`Router::end_carried`](crate::Router::end_carried)); the rest
    /// of what was carried ended by reconciliation, sweeping or removal, counted by the
    /// reservation table.
    pub returned: Reserved,
}

/// `a += b`, field by field.
fn add(a: &mut Reserved, b: Reserved) {
    a.requests += b.requests;
    a.prefill_tokens += b.prefill_tokens;
    a.decode_tokens += b.decode_tokens;
}

/// Returns the guards, adding what was still live to `returned`. They are committed, not
/// released: carried work stands for requests the engine still had, handed over to its own
/// telemetry or given up, not requests seen to end (a release would count those already
/// reconciled in the slot's `Reserved::finished`).
fn end(guards: Vec<Reservation>, returned: &mut Reserved) -> Reserved {
    let mut live = Reserved::default();
    for g in guards {
        add(&mut live, g.commit());
    }
    add(returned, live);
    live
}

/// Departures and carried reservations; kept under the router's load lock.
pub(crate) struct CarryState {
    departures: Vec<Departure>,
    carried: Vec<Carried>,
    stats: CarryStats,
}

impl CarryState {
    /// Room for one departure per slot from the start (a departure owns no heap memory),
    /// so that worker churn never grows the router's footprint.
    pub fn new(capacity: usize) -> Self {
        Self {
            departures: Vec::with_capacity(capacity.max(1)),
            carried: Vec::new(),
            stats: CarryStats::default(),
        }
    }

    /// Records a departure (taken before the publisher forgets the worker's lane), and
    /// drops the guards carried into the tenancy being removed (the removal already
    /// released their amounts, which are part of `released`); keeps at most `capacity`
    /// departures, none older than `ttl`.
    pub fn depart(&mut self, departure: Departure, ttl: Nanos, capacity: usize) {
        let (worker, now) = (departure.worker, departure.at);
        // The removal dropped their amounts: returning them is a no-op.
        self.end_carried(worker);
        self.forget_older_than(now, ttl);
        self.departures.retain(|d| d.worker != worker);
        if self.departures.len() >= capacity.max(1) {
            self.departures.remove(0);
        }
        self.departures.push(departure);
    }

    /// Carries the departure of `worker`, if one younger than `ttl` is kept, into its new
    /// tenancy `(slot, generation)` (already added to the publisher and the table).
    pub fn readd(
        &mut self,
        publisher: &mut LoadPublisher,
        table: &ReservationTable,
        (worker, slot, generation): (WorkerId, Slot, SlotGeneration),
        now: Nanos,
    ) {
        self.forget_older_than(now, table.ttl());
        let Some(i) = self.departures.iter().position(|d| d.worker == worker) else {
            return;
        };
        let d = self.departures.remove(i);
        if let Some(cfg) = d.engine {
            // Its last rank's removal made the publisher forget the engine; the facts were
            // valid when set, so configuring them again cannot fail.
            if publisher.engine_config(worker.engine_id).is_none() {
                let _ = publisher.configure_engine(worker.engine_id, cfg);
            }
        }
        let carried_report = d
            .report
            .is_some_and(|r| publisher.carry_report(worker, r).unwrap_or(false));
        let mut guards = Vec::new();
        let wanted = d.released.requests.min(MAX_CARRIED);
        let mut reserved = Reserved::default();
        for k in 0..wanted {
            let work = if k == 0 {
                Work {
                    prefill_tokens: u32::try_from(d.released.prefill_tokens).unwrap_or(u32::MAX),
                    decode_tokens: u32::try_from(d.released.decode_tokens).unwrap_or(u32::MAX),
                }
            } else {
                Work::default()
            };
            let Ok(g) = table.reserve(slot, generation, work, now) else {
                break;
            };
            add(&mut reserved, g.held());
            guards.push(g);
        }
        if !carried_report && guards.is_empty() {
            return;
        }
        let s = &mut self.stats;
        s.readditions += 1;
        s.reports += u64::from(carried_report);
        add(&mut s.reserved, reserved);
        s.dropped_requests += d.released.requests - reserved.requests;
        if !guards.is_empty() {
            self.carried.push(Carried {
                worker,
                slot,
                generation,
                at: now,
                report_at: publisher.report_time(worker),
                guards,
            });
        }
    }

    /// After a publication at `now`: returns the guards whose amounts are gone or due,
    /// those of tenancies whose own report the publication reconciled (the lane holds
    /// figures observed after the ones it was carried with), and those carried two TTLs
    /// ago or more.
    pub fn published(&mut self, publisher: &LoadPublisher, table: &ReservationTable, now: Nanos) {
        let due = table.ttl().saturating_add(table.ttl());
        let mut i = 0;
        while i < self.carried.len() {
            let c = &self.carried[i];
            let tenant = table.tenancy(c.slot) == Some(c.generation);
            let reported = publisher.report_time(c.worker) > c.report_at;
            if tenant && !reported && now.saturating_since(c.at) < due {
                i += 1;
            } else {
                let c = self.carried.swap_remove(i);
                end(c.guards, &mut self.stats.returned);
            }
        }
    }

    /// Ends the work carried into `worker` now, returning what was still live.
    pub fn end_carried(&mut self, worker: WorkerId) -> Reserved {
        let mut live = Reserved::default();
        while let Some(i) = self.carried.iter().position(|c| c.worker == worker) {
            let c = self.carried.swap_remove(i);
            add(&mut live, end(c.guards, &mut self.stats.returned));
        }
        live
    }

    fn forget_older_than(&mut self, now: Nanos, ttl: Nanos) {
        self.departures.retain(|d| now.saturating_since(d.at) < ttl);
    }

    /// What was carried so far.
    pub fn stats(&self) -> CarryStats {
        self.stats
    }
}
