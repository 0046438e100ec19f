//! Load telemetry: the HTTP pollers (SGLang `GET /v1/loads` JSON, vLLM `GET /metrics`
//! Prometheus text) and SGLang's pushed `LoadStat` frames, each applied to the Router at
//! the connector's clock.
//!
//! A poll that fails (timeout, connection refused, a status other than 200, a body the
//! decoder rejects, figures the Router rejects) applies nothing: it is counted by
//! [`TelemetryErrorKind`] and kept as the engine's last error. The engine's workers then
//! age from their last good report and the next `Router::tick` after `max_load_age` marks
//! them stale: telemetry that stops never leaves a worker silently fresh.

use core::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use kvroute::{
    Router, UpdateError, WireError, WorkerId, decode_load_stat, parse_sglang_loads,
    parse_vllm_metrics,
};
use tokio::sync::watch;

use crate::clock::Clock;
use crate::config::{EngineKind, EngineSpec};
use crate::http::{self, HttpError};
use crate::stats::TelemetryCounters;
use crate::task::Tasks;

/// How many [`TelemetryErrorKind`]s there are.
pub const ERROR_KINDS: usize = 5;

/// The kinds of telemetry failure, as counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TelemetryErrorKind {
    /// No complete answer within the poll timeout.
    Timeout = 0,
    /// The connection failed (refused, reset) or the URL is not `http://`.
    Connect = 1,
    /// An HTTP status other than 200.
    Status = 2,
    /// A body or frame that does not decode (bad HTTP framing, not UTF-8, not the engine's
    /// format).
    Malformed = 3,
    /// Figures the Router rejected (unknown worker, missing cap, out-of-range gauges).
    Rejected = 4,
}

impl TelemetryErrorKind {
    /// Every kind, in counter order.
    pub const ALL: [Self; ERROR_KINDS] = [
        Self::Timeout,
        Self::Connect,
        Self::Status,
        Self::Malformed,
        Self::Rejected,
    ];

    /// The `kind` label of `kvroute_connect_telemetry_errors_total`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Connect => "connect",
            Self::Status => "status",
            Self::Malformed => "malformed",
            Self::Rejected => "rejected",
        }
    }
}

/// Why one telemetry report was not applied.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum TelemetryError {
    /// The HTTP exchange failed.
    Http(HttpError),
    /// The body or frame did not decode.
    Wire(WireError),
    /// The Router rejected the figures.
    Rejected(UpdateError),
    /// A `LoadStat` frame carrying another DP rank than the socket's (a wiring error):
    /// not applied (counted as rejected), so one rank's figures never land on another.
    RankMismatch {
        /// The rank the socket was configured for.
        socket_rank: u32,
        /// The rank the frame carries.
        frame_rank: u32,
    },
}

impl TelemetryError {
    /// The counted kind.
    pub fn kind(&self) -> TelemetryErrorKind {
        match self {
            Self::Http(HttpError::Timeout) => TelemetryErrorKind::Timeout,
            Self::Http(HttpError::Io(_) | HttpError::BadUrl(_)) => TelemetryErrorKind::Connect,
            Self::Http(HttpError::Status(_)) => TelemetryErrorKind::Status,
            Self::Http(_) | Self::Wire(_) => TelemetryErrorKind::Malformed,
            Self::Rejected(_) | Self::RankMismatch { .. } => TelemetryErrorKind::Rejected,
        }
    }
}

impl fmt::Display for TelemetryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Http(e) => write!(f, "telemetry request: {e}"),
            Self::Wire(e) => write!(f, "telemetry body: {e}"),
            Self::Rejected(e) => write!(f, "telemetry rejected by the router: {e}"),
            Self::RankMismatch {
                socket_rank,
                frame_rank,
            } => write!(
                f,
                "LoadStat of DP rank {frame_rank} on the socket of rank {socket_rank}"
            ),
        }
    }
}

impl std::error::Error for TelemetryError {}

/// One engine's telemetry state, shared by its poller and its `LoadStat` threads.
pub(crate) struct EngineTelemetry {
    pub router: Arc<Router>,
    pub spec: EngineSpec,
    pub clock: Clock,
    pub counters: TelemetryCounters,
    pub last_error: Mutex<Option<TelemetryError>>,
}

impl EngineTelemetry {
    fn record(&self, r: Result<(), TelemetryError>) {
        match r {
            Ok(()) => self.counters.applied.add(1),
            Err(e) => {
                self.counters.errors[e.kind() as usize].add(1);
                *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            }
        }
    }

    /// Applies one telemetry body of this engine's kind, received now.
    fn apply_body(&self, body: &str) -> Result<(), TelemetryError> {
        let (id, now) = (self.spec.id, self.clock.now());
        match self.spec.kind {
            EngineKind::Vllm => {
                let u = parse_vllm_metrics(id, body).map_err(TelemetryError::Wire)?;
                self.router
                    .update_vllm_load(&u, now)
                    .map_err(TelemetryError::Rejected)
            }
            EngineKind::Sglang => {
                let ranks = parse_sglang_loads(id, body).map_err(TelemetryError::Wire)?;
                let mut first = Ok(());
                for r in &ranks {
                    if let Err(e) = self.router.update_sglang_load(r, now) {
                        first = first.and(Err(TelemetryError::Rejected(e)));
                    }
                }
                first
            }
        }
    }

    /// One poll of the engine's telemetry URL.
    pub(crate) async fn poll_once(&self) -> Result<(), TelemetryError> {
        let Some(url) = &self.spec.telemetry else {
            return Ok(());
        };
        let body = http::get(url, self.spec.poll_timeout)
            .await
            .map_err(TelemetryError::Http)?;
        self.apply_body(&body)
    }

    /// Polls every `poll_interval` until `stop` turns true.
    pub(crate) async fn run_poller(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut every = tokio::time::interval(self.spec.poll_interval);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = crate::stopped(&mut stop) => break,
                _ = every.tick() => {
                    let r = self.poll_once().await;
                    self.record(r);
                }
            }
        }
    }

    /// Applies one `LoadStat` payload pushed by rank `dp_rank`.
    fn apply_load_stat(&self, dp_rank: u32, payload: &[u8]) -> Result<(), TelemetryError> {
        let st = decode_load_stat(payload).map_err(TelemetryError::Wire)?;
        if st.dp_rank != dp_rank {
            return Err(TelemetryError::RankMismatch {
                socket_rank: dp_rank,
                frame_rank: st.dp_rank,
            });
        }
        let cap = self.spec.max_running_per_rank.unwrap_or(0);
        let sample = st
            .to_sample(self.spec.id, cap)
            .map_err(TelemetryError::Rejected)?;
        let worker = WorkerId::new(self.spec.id, dp_rank);
        self.router
            .update_load(worker, sample, self.clock.now())
            .map_err(TelemetryError::Rejected)
    }
}

/// Starts the thread that subscribes to one rank's `LoadStat` socket (topic `load`,
/// frames `[topic, seq, payload]`) until `stop` is set (through `tasks`: its panic counted).
///
/// # Errors
/// The libzmq error of creating or connecting the socket.
pub(crate) fn spawn_load_stat(
    ctx: &zmq::Context,
    t: Arc<EngineTelemetry>,
    dp_rank: u32,
    endpoint: &str,
    stop: Arc<AtomicBool>,
    tasks: &Tasks,
) -> Result<JoinHandle<()>, zmq::Error> {
    let sub = ctx.socket(zmq::SUB)?;
    sub.set_linger(0)?;
    sub.set_subscribe(b"load")?;
    sub.connect(endpoint)?;
    tasks
        .thread(format!("kvroute-load-{}-{dp_rank}", t.spec.id), move || {
            while !stop.load(Ordering::Relaxed) {
                if !matches!(sub.poll(zmq::POLLIN, 50), Ok(n) if n > 0) {
                    continue;
                }
                while let Ok(frames) = sub.recv_multipart(zmq::DONTWAIT) {
                    let r = match frames.last() {
                        Some(p) if frames.len() >= 2 => t.apply_load_stat(dp_rank, p),
                        _ => Err(TelemetryError::Wire(WireError::FrameCount {
                            got: frames.len(),
                        })),
                    };
                    t.record(r);
                }
            }
        })
        .map_err(|_| zmq::Error::ENOMEM)
}
