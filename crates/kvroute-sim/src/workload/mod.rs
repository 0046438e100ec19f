//! Workloads: the Mooncake trace reader, the built-in scenarios, the generated workloads,
//! the arrival reshaping (rate scale, jitter) the sweep applies to any of them, and fault
//! programs read from a file and added to any of them.

use crate::engine::EngineConfig;
use crate::fault::Fault;
use crate::net::ChannelConfig;
use crate::request::SimRequest;

pub mod arrivals;
pub mod faults;
pub mod generated;
pub mod scenarios;
pub mod synth;
pub mod trace;

use scenarios::{SCENARIOS, Scenario};

/// The fleet a workload runs on.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetSpec {
    /// Number of engines.
    pub engines: u32,
    /// Every engine's configuration.
    pub engine: EngineConfig,
    /// The channels between engines and router.
    pub channels: ChannelConfig,
}

/// A complete simulation input.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// Short name (`"hot-owner-51"`, `"trace"`).
    pub name: String,
    /// What it reproduces (one paragraph).
    pub description: String,
    /// Requests, in arrival order (follow-ups anywhere).
    pub requests: Vec<SimRequest>,
    /// The fleet.
    pub fleet: FleetSpec,
    /// Faults on the schedule.
    pub faults: Vec<Fault>,
    /// When the routed load starts (seconds of virtual time): a scenario's setup, its
    /// pinned requests and the state they build on their engines, runs before it. A rate
    /// scale compresses the timeline after it and leaves the setup as it is
    /// ([`arrivals::scale_arrivals`]). 0 for traces and workloads without a setup.
    pub load_start_s: f64,
}

impl Workload {
    /// Requests the router places (every request but the scenario's pinned ones).
    pub fn routed_requests(&self) -> usize {
        self.requests.iter().filter(|r| r.pinned.is_none()).count()
    }
}

/// The scenario or generated workload called `name` (the names `kvroute-sim scenario`
/// takes), if any.
pub fn find_named(name: &str) -> Option<&'static Scenario> {
    scenarios::find(name).or_else(|| generated::find(name))
}

/// Every named workload: the scenarios, then the generated workloads.
pub fn named() -> impl Iterator<Item = &'static Scenario> {
    SCENARIOS.iter().chain(generated::GENERATED.iter())
}
