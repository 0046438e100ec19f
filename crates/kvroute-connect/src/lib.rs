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
//!   the `metrics` facade (names below, "Metrics").
//! * No task or thread of the connector ends unseen: one that panics is counted as it
//!   unwinds, one found cancelled under the connector (its runtime shut down) when it is
//!   joined, in [`TaskStats`] ([`Connector::task_stats`], and the figures
//!   [`Connector::shutdown`] returns).
//! * Telemetry that stops is never silently fresh: a failed poll applies nothing, is
//!   counted by [`TelemetryErrorKind`], and the next tick past `max_load_age` marks the
//!   workers stale.
//!
//! # Metrics
//! Recorded through the `metrics` facade as they change (install any recorder); the same
//! figures are in [`RankStats`], [`TelemetryStats`] and [`TaskStats`].
//!
//! | metric | kind | labels | meaning |
//! |---|---|---|---|
//! | `kvroute_connect_connected` | gauge | `engine_id`, `dp_rank` | 1 while the rank's PUB socket is connected |
//! | `kvroute_connect_batches_total` | counter | same | live messages received from the socket |
//! | `kvroute_connect_ingested_total` | counter | same | messages (live and replayed) handed to `Router::ingest` |
//! | `kvroute_connect_gaps_total` | counter | same | gaps in the live sequence (`SeqOutcome::Gap`) |
//! | `kvroute_connect_resets_total` | counter | same | engine restarts the Router detected |
//! | `kvroute_connect_replays_total` | counter | same | replays served from the replay socket |
//! | `kvroute_connect_replay_failures_total` | counter | same | replays that failed (no answer, socket error) |
//! | `kvroute_connect_replays_skipped_total` | counter | same | pending replays given up (`skip_replay`) |
//! | `kvroute_connect_reconnects_total` | counter | same | connections after the first |
//! | `kvroute_connect_overflows_total` | counter | same | batches that met a full queue (worker marked for replay) |
//! | `kvroute_connect_decode_errors_total` | counter | same | messages `decode_message` rejected |
//! | `kvroute_connect_ingest_errors_total` | counter | same | messages `Router::ingest` rejected (wholly or partly) |
//! | `kvroute_connect_queue_depth` | gauge | same | batches waiting between socket and ingest |
//! | `kvroute_connect_lag_seconds` | gauge | same | wall clock minus the last batch's `ts` (seconds) |
//! | `kvroute_connect_ticks_total` | counter | | `Router::tick` calls |
//! | `kvroute_connect_publish_errors_total` | counter | | ticks whose publication failed |
//! | `kvroute_connect_telemetry_polls_total` | counter | `engine_id` | telemetry reports applied |
//! | `kvroute_connect_telemetry_errors_total` | counter | `engine_id`, `kind` | failed polls or frames, by [`TelemetryErrorKind::name`](crate::TelemetryErrorKind::name) |
//! | `kvroute_connect_task_panics_total` | counter | | tasks and threads of the connector that panicked |
//! | `kvroute_connect_task_cancellations_total` | counter | | tasks found cancelled, not by the connector, when joined |
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
mod task;
mod telemetry;

pub use clock::Clock;
pub use config::{
    ConfigError, ConnectConfig, ConnectOptions, EngineKind, EngineSpec, RankSpec, offset_endpoint,
};
pub use connector::{ConnectError, Connector};
pub use http::HttpError;
pub use replay::ReplayError;
pub use stats::{RankStats, TaskStats, TelemetryStats};
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
