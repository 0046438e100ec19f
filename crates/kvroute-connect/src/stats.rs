//! Per-rank and per-engine counters and gauges: kept as plain atomics (read with
//! [`RankStats`] / [`TelemetryStats`]) and mirrored, as they change, into the process's
//! `metrics` recorder.
//! (metric names: the crate docs, "Metrics").

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use kvroute::WorkerId;
use metrics::{Counter, Gauge, counter, gauge};

/// A counter kept both as an atomic and as a `metrics` handle.
#[derive(Debug)]
pub(crate) struct Tally {
    value: AtomicU64,
    handle: Counter,
}

impl Tally {
    fn new(name: &'static str, labels: &[(&'static str, String)]) -> Self {
        Self {
            value: AtomicU64::new(0),
            handle: counter!(name, labels),
        }
    }

    /// A counter without labels.
    pub(crate) fn plain(name: &'static str) -> Self {
        Self::new(name, &[])
    }

    pub(crate) fn add(&self, n: u64) {
        self.value.fetch_add(n, Relaxed);
        self.handle.increment(n);
    }

    pub(crate) fn get(&self) -> u64 {
        self.value.load(Relaxed)
    }
}

/// The live counters of one rank.
#[derive(Debug)]
pub(crate) struct RankCounters {
    pub worker: WorkerId,
    pub connected: AtomicBool,
    connected_gauge: Gauge,
    pub batches: Tally,
    pub ingested: Tally,
    pub gaps: Tally,
    pub resets: Tally,
    pub replays: Tally,
    pub replay_failures: Tally,
    pub replays_skipped: Tally,
    pub reconnects: Tally,
    pub overflows: Tally,
    pub decode_errors: Tally,
    pub ingest_errors: Tally,
    pub queue_depth: AtomicU64,
    queue_gauge: Gauge,
    /// The last lag, as `f64` bits (seconds).
    lag: AtomicU64,
    lag_gauge: Gauge,
}

impl RankCounters {
    pub(crate) fn new(worker: WorkerId) -> Self {
        let l = vec![
            ("engine_id", worker.engine_id.to_string()),
            ("dp_rank", worker.dp_rank.to_string()),
        ];
        let t = |name| Tally::new(name, &l);
        Self {
            worker,
            connected: AtomicBool::new(false),
            connected_gauge: gauge!("kvroute_connect_connected", &l),
            batches: t("kvroute_connect_batches_total"),
            ingested: t("kvroute_connect_ingested_total"),
            gaps: t("kvroute_connect_gaps_total"),
            resets: t("kvroute_connect_resets_total"),
            replays: t("kvroute_connect_replays_total"),
            replay_failures: t("kvroute_connect_replay_failures_total"),
            replays_skipped: t("kvroute_connect_replays_skipped_total"),
            reconnects: t("kvroute_connect_reconnects_total"),
            overflows: t("kvroute_connect_overflows_total"),
            decode_errors: t("kvroute_connect_decode_errors_total"),
            ingest_errors: t("kvroute_connect_ingest_errors_total"),
            queue_depth: AtomicU64::new(0),
            queue_gauge: gauge!("kvroute_connect_queue_depth", &l),
            lag: AtomicU64::new(0f64.to_bits()),
            lag_gauge: gauge!("kvroute_connect_lag_seconds", &l),
        }
    }

    pub(crate) fn set_connected(&self, up: bool) {
        self.connected.store(up, Relaxed);
        self.connected_gauge.set(if up { 1.0 } else { 0.0 });
    }

    pub(crate) fn set_queue_depth(&self, n: usize) {
        self.queue_depth.store(n as u64, Relaxed);
        self.queue_gauge.set(n as f64);
    }

    pub(crate) fn set_lag(&self, seconds: f64) {
        self.lag.store(seconds.to_bits(), Relaxed);
        self.lag_gauge.set(seconds);
    }

    pub(crate) fn snapshot(&self) -> RankStats {
        RankStats {
            worker: self.worker,
            connected: self.connected.load(Relaxed),
            batches: self.batches.get(),
            ingested: self.ingested.get(),
            gaps: self.gaps.get(),
            resets: self.resets.get(),
            replays: self.replays.get(),
            replay_failures: self.replay_failures.get(),
            replays_skipped: self.replays_skipped.get(),
            reconnects: self.reconnects.get(),
            overflows: self.overflows.get(),
            decode_errors: self.decode_errors.get(),
            ingest_errors: self.ingest_errors.get(),
            queue_depth: self.queue_depth.load(Relaxed),
            lag_seconds: f64::from_bits(self.lag.load(Relaxed)),
        }
    }
}

/// A copy of one rank's counters (since the rank was added) and gauges.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct RankStats {
    /// The worker (engine id, DP rank).
    pub worker: WorkerId,
    /// Whether its PUB socket is connected now.
    pub connected: bool,
    /// Live messages received from the socket.
    pub batches: u64,
    /// Messages (live and replayed, end markers included) handed to `Router::ingest`.
    pub ingested: u64,
    /// Gaps in the live sequence.
    pub gaps: u64,
    /// Engine restarts detected by the Router.
    pub resets: u64,
    /// Replays served from the replay socket.
    pub replays: u64,
    /// Replays that failed (no answer within the timeout, socket error).
    pub replay_failures: u64,
    /// Pending replays given up with `skip_replay` (no replay socket, failed, or short).
    pub replays_skipped: u64,
    /// Connections after the first one.
    pub reconnects: u64,
    /// Live batches dropped at a full queue; each marked the worker for a replay.
    pub overflows: u64,
    /// Messages the decoder rejected.
    pub decode_errors: u64,
    /// Messages the Router rejected wholly or partly.
    pub ingest_errors: u64,
    /// Batches waiting between socket and ingest.
    pub queue_depth: u64,
    /// Wall clock minus the last ingested batch's `ts` (seconds; 0 before any).
    pub lag_seconds: f64,
}

/// The telemetry counters of one engine.
#[derive(Debug)]
pub(crate) struct TelemetryCounters {
    pub applied: Tally,
    pub errors: [Tally; crate::telemetry::ERROR_KINDS],
}

impl TelemetryCounters {
    pub(crate) fn new(engine_id: u64) -> Self {
        let e = engine_id.to_string();
        let errors = crate::telemetry::TelemetryErrorKind::ALL.map(|k| {
            let l = [("engine_id", e.clone()), ("kind", k.name().to_owned())];
            Tally::new("kvroute_connect_telemetry_errors_total", &l)
        });
        Self {
            applied: Tally::new("kvroute_connect_telemetry_polls_total", &[("engine_id", e)]),
            errors,
        }
    }

    pub(crate) fn snapshot(&self, engine_id: u64) -> TelemetryStats {
        TelemetryStats {
            engine_id,
            applied: self.applied.get(),
            errors: self.errors.each_ref().map(Tally::get),
        }
    }
}

/// A copy of one engine's telemetry counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TelemetryStats {
    /// The engine.
    pub engine_id: u64,
    /// Reports applied to the Router (one per poll or `LoadStat` frame).
    pub applied: u64,
    /// Errors by kind, indexed by `TelemetryErrorKind as usize`
    /// ([`TelemetryErrorKind::ALL`](crate::TelemetryErrorKind::ALL) order).
    pub errors: [u64; crate::telemetry::ERROR_KINDS],
}

impl TelemetryStats {
    /// Errors of one kind.
    pub fn errors_of(&self, kind: crate::TelemetryErrorKind) -> u64 {
        self.errors[kind as usize]
    }

    /// Errors of every kind.
    pub fn total_errors(&self) -> u64 {
        self.errors.iter().sum()
    }
}

/// The connector-wide counters of its tasks and threads (kept across engine removals).
#[derive(Debug)]
pub(crate) struct TaskCounters {
    pub panics: Tally,
    pub cancellations: Tally,
}

impl TaskCounters {
    pub(crate) fn new() -> Self {
        Self {
            panics: Tally::plain("kvroute_connect_task_panics_total"),
            cancellations: Tally::plain("kvroute_connect_task_cancellations_total"),
        }
    }

    pub(crate) fn snapshot(&self) -> TaskStats {
        TaskStats {
            task_panics: self.panics.get(),
            task_cancellations: self.cancellations.get(),
        }
    }
}

/// A copy of the connector's task counters, since [`Connector::start`](crate::Connector::start),
/// over every engine ever connected (removed ones included).
///
/// The tasks and threads counted: each rank's ingest task and socket thread, each rank's
/// `LoadStat` thread, each engine's telemetry poller, the `Router::tick` timer, and the
/// blocking jobs they start (replay fetches, the joins of threads at a stop).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskStats {
    /// Tasks and threads that ended in a panic (a count of tasks, each counted once, when
    /// the panic unwinds out of it, not when it is joined). What the task did stops with
    /// it: a rank whose ingest task panicked ingests nothing more until its engine is
    /// removed and added again, an engine whose poller panicked polls no more (its
    /// workers turn stale). The panic message goes to the process's panic hook (stderr
    /// by default).
    pub task_panics: u64,
    /// Tasks found cancelled when joined (a count of tasks) though the connector had not
    /// cancelled them: their tokio runtime shut down under them (a connector outlived the
    /// runtime it was started in). A stop or a shutdown ends tasks by a signal, never by
    /// cancelling them, and the tasks of an engine whose [`add_engine`] failed half-way are
    /// aborted on purpose: neither is counted.
    ///
    /// [`add_engine`]: crate::Connector::add_engine
    pub task_cancellations: u64,
}
