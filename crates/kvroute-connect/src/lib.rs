//! The I/O around a kvroute [`Router`]: connects it to live vLLM and
//! SGLang engines, as quinn is around quinn-proto. The Router stays sans-IO; this crate
//! owns the sockets, the timers and the tokio tasks.
//!
//! ```text
//! engine DP rank ── PUB ──► socket thread (libzmq SUB, reconnect with backoff)
//!                              │ bounded queue (overflow: counted, worker marked for replay)
//!                              ▼
//!                           ingest task ── decode_message ──► Router::ingest(Live)
//!                              │ IngestReport::replay / overflow
//!                              ▼
//!                 ROUTER ◄── replay client ──► Router::ingest(Replay), else skip_replay
//! telemetry ── HTTP poller (/v1/loads, /metrics), LoadStat SUB ──► Router::update_*_load
//! timer ── Router::tick(now) every Router::tick_interval (publish, sweep, metrics)
//! ```
//!
//! * [`Connector::start`] with the Router and [`ConnectOptions`], then
//!   [`Connector::add_engine`] per [`EngineSpec`] (or every engine of a
//!   [`ConnectConfig::from_toml`] file); [`Connector::remove_engine`] at run time;
//!   [`Connector::shutdown`] stops and joins every task and thread.
//! * Each DP rank is the worker `WorkerId::new(engine id, dp_rank)`, registered with the
//!   Router when the engine is added and removed with it.
//! * A sequence gap, a decode error and a queue overflow all end in a replay from the
//!   rank's replay socket (module `replay`, the engines' ROUTER protocol); an engine that
//!   no longer holds the range is handled by the Router's rules (the worker is cleared),
//!   and a rank without a replay socket or whose replay fails is given up with
//!   `Router::skip_replay`. An engine restart (sequence reset) goes through the Router's
//!   own rules.
//! * Counters and gauges per rank and per engine: [`RankStats`], [`TelemetryStats`], and
//!   the `metrics` facade (names in the docs of [`RankStats`]' module, `stats`).
//! * Telemetry that stops is never silently fresh: a failed poll applies nothing, is
//!   counted by [`TelemetryErrorKind`], and the next tick past `max_load_age` marks the
//!   workers stale.
//!
//! libzmq (the `zmq` crate) carries the sockets: it reconnects on its own with bounded
//! exponential backoff and reports connects and disconnects, which the pure-Rust `zeromq`
//! crate's SUB socket does not (it stays silent after a publisher restart).

mod clock;
mod config;
mod connector;
pub mod http;
mod rank;
pub mod replay;
mod socket;
mod stats;
mod telemetry;

pub use clock::Clock;
pub use config::{
    ConfigError, ConnectConfig, ConnectOptions, EngineKind, EngineSpec, RankSpec, offset_endpoint,
};
pub use connector::{ConnectError, Connector};
pub use http::HttpError;
pub use replay::ReplayError;
pub use stats::{RankStats, TelemetryStats};
pub use telemetry::{ERROR_KINDS, TelemetryError, TelemetryErrorKind};

/// Resolves once `stop` holds `true` (or its sender is gone).
pub(crate) async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    loop {
        if *stop.borrow_and_update() {
            return;
        }
        if stop.changed().await.is_err() {
            return;
        }
    }
}

// The kvroute types this crate's signatures use.
pub use kvroute::{Nanos, OutOfRange, Router, UpdateError, WireError, WorkerError, WorkerId};
