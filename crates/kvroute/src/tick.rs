//! [`Router::tick`]: the one periodic call of a gateway (publish, sweep, metrics export),
//! and the interval to call it at, derived from the staleness bound.

use kvroute_core::Nanos;
use kvroute_load::{PublishError, SweepReport};

use crate::router::Router;

/// What one [`Router::tick`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TickReport {
    /// The publication number, or why nothing was published this tick (retry at the next
    /// one; see [`Router::publish`]).
    pub publication: Result<u64, PublishError>,
    /// What the reservation sweeper dropped ([`Router::sweep`]).
    pub swept: SweepReport,
}

impl Router {
    /// The periodic work of a gateway, in one call at `now` (caller's clock): publishes
    /// the load snapshot ([`publish`](Self::publish), where staleness is judged), runs the
    /// reservation sweeper ([`sweep`](Self::sweep)) and, with the cargo feature `metrics`,
    /// exports the counters (`Router::export_metrics`). Call it every
    /// [`tick_interval`](Self::tick_interval), whether or not telemetry arrived: a worker
    /// whose telemetry stopped is marked stale by the first tick after its last good report
    /// is `max_load_age` old, never left fresh.
    pub fn tick(&self, now: Nanos) -> TickReport {
        let publication = self.publish(now);
        let swept = self.sweep(now);
        #[cfg(feature = "metrics")]
        self.export_metrics();
        TickReport { publication, swept }
    }

    /// The recommended interval between [`tick`](Self::tick)s: a quarter of the smaller of
    /// `max_load_age` (the staleness bound) and the reservation TTL, so a worker whose
    /// telemetry stopped is stale at most `max_load_age × 1.25` after its last good report,
    /// and the sweeper runs several times per TTL. At least 1 ms.
    pub fn tick_interval(&self) -> Nanos {
        let bound = self.max_load_age.0.min(self.table.ttl().0);
        Nanos((bound / 4).max(1_000_000))
    }
}
