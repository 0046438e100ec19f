//! The connector's clock: monotonic nanoseconds in the Router's time base ([`Nanos`]).

use std::time::Instant;

use kvroute::Nanos;

/// A monotonic clock starting at 1 s when created (so that no report is at time 0). Give
/// `route` requests the same clock ([`Connector::now`](crate::Connector::now)): the Router
/// compares every time it is given.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    /// A clock reading 1 s now.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
        }
    }

    /// The current time.
    pub fn now(&self) -> Nanos {
        let ns = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        Nanos(ns.saturating_add(1_000_000_000))
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}
