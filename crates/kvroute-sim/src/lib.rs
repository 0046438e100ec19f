//! kvroute's fleet simulator: replays request traces and built-in scenarios through the
//! real [`kvroute::Router`] and compares routing policies side by side.
//!
//! Only the engines and the clock are simulated. The router sees the world the way it does
//! in production: through KV event batches encoded as the engine's msgpack wire format
//! (decoded by `kvroute-wire`, applied by [`kvroute::Router::ingest`]) and through load
//! telemetry, each with configurable delay, loss and reordering.
//!
//! # Layout
//! - [`request`]: what a workload asks of the fleet ([`SimRequest`]).
//! - [`workload`]: the Mooncake trace reader and the built-in scenarios.
//! - [`engine`]: one inference engine (continuous batching, prefix cache, KV events).
//! - [`net`]: the event and telemetry channels between engines and the router.
//! - [`fault`]: scheduled faults (restart, disconnect, telemetry blackout, event loss).
//! - [`driver`]: the discrete-event loop that runs one policy over one workload.
//! - [`result`]: what a run records ([`RunResult`]).
//! - [`report`]: metrics, the side-by-side table, JSON and SVG output.

pub mod driver;
pub mod engine;
pub mod fault;
pub mod net;
pub mod report;
pub mod request;
pub mod result;
pub mod workload;

pub use request::{PromptSpec, SimRequest};
pub use result::{ChannelStats, EngineSample, Probe, RequestRecord, RunResult};
