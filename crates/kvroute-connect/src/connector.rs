//! The [`Connector`]: one subscriber and one ingest task per engine DP rank, the telemetry
//! pollers, and the `Router::tick` timer; engines added and removed at run time; a
//! shutdown that stops and joins every task and thread it started.

use core::fmt;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use kvroute::{EngineConfig, EngineId, OutOfRange, Router, WorkerError, WorkerId};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::clock::Clock;
use crate::config::{ConfigError, ConnectOptions, EngineSpec};
use crate::rank::RankIngest;
use crate::socket::{self, SocketParams};
use crate::stats::{RankCounters, RankStats, Tally, TaskStats, TelemetryCounters, TelemetryStats};
use crate::task::Tasks;
use crate::telemetry::{self, EngineTelemetry, TelemetryError};

/// Why an engine could not be added or removed.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ConnectError {
    /// The spec is inconsistent.
    Config(ConfigError),
    /// An engine with this id is connected already.
    DuplicateEngine(u64),
    /// No engine with this id is connected.
    UnknownEngine(u64),
    /// The Router refused a worker (already registered, no free slot); nothing was added.
    Worker(WorkerError),
    /// The Router refused the engine's configuration (cap out of range); nothing was added.
    EngineConfig(OutOfRange),
    /// libzmq refused a rank's socket or endpoint; nothing was added.
    Socket {
        /// The rank.
        worker: WorkerId,
        /// libzmq's message.
        message: String,
    },
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(e) => write!(f, "{e}"),
            Self::DuplicateEngine(id) => write!(f, "engine {id} is connected already"),
            Self::UnknownEngine(id) => write!(f, "engine {id} is not connected"),
            Self::Worker(e) => write!(f, "router refused a worker: {e}"),
            Self::EngineConfig(e) => write!(f, "router refused the engine config: {e}"),
            Self::Socket { worker, message } => write!(f, "socket of {worker}: {message}"),
        }
    }
}

impl std::error::Error for ConnectError {}

struct RankHandle {
    counters: Arc<RankCounters>,
    thread_stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    task: Option<JoinHandle<()>>,
}

struct EngineHandle {
    spec: EngineSpec,
    ranks: Vec<RankHandle>,
    telemetry: Arc<EngineTelemetry>,
    stop: watch::Sender<bool>,
    poller: Option<JoinHandle<()>>,
}

impl EngineHandle {
    /// Stops and joins everything of the engine (a task found cancelled counted in
    /// `tasks`; a panic was counted as it happened).
    async fn stop(mut self, tasks: &Tasks) {
        let _ = self.stop.send(true);
        let mut threads = Vec::new();
        for r in &mut self.ranks {
            r.thread_stop.store(true, Ordering::Relaxed);
            threads.append(&mut r.threads);
        }
        let mut handles: Vec<JoinHandle<()>> = self
            .ranks
            .iter_mut()
            .filter_map(|r| r.task.take())
            .collect();
        handles.extend(self.poller.take());
        for t in handles {
            tasks.join(t).await;
        }
        let joined = tasks.spawn_blocking(move || {
            for t in threads {
                // An error is the thread's panic, counted as it unwound (`Tasks::thread`).
                let _ = t.join();
            }
        });
        tasks.join(joined).await;
    }
}

/// Connects a [`Router`] to live engines. Build it inside a tokio runtime (it spawns
/// tasks); end it with [`shutdown`](Self::shutdown), which joins everything it started.
pub struct Connector {
    router: Arc<Router>,
    ctx: zmq::Context,
    options: ConnectOptions,
    clock: Clock,
    engines: Mutex<BTreeMap<u64, EngineHandle>>,
    tick_stop: watch::Sender<bool>,
    tick_task: Mutex<Option<JoinHandle<()>>>,
    ticks: Arc<Tally>,
    publish_errors: Arc<Tally>,
    tasks: Tasks,
    next_socket: AtomicU64,
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connector")
            .field("options", &self.options)
            .field("engines", &self.lock().keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Connector {
    /// Starts the `Router::tick` timer (every `options.tick_interval`, or
    /// `Router::tick_interval`) with no engine connected.
    ///
    /// # Errors
    /// [`ConfigError::Option`] for a knob out of range ([`ConnectOptions::validate`]);
    /// nothing is started.
    ///
    /// # Panics
    /// Outside a tokio runtime (tokio's own panic when spawning).
    pub fn start(router: Arc<Router>, options: ConnectOptions) -> Result<Self, ConfigError> {
        options.validate()?;
        let (tick_stop, stop_rx) = watch::channel(false);
        let clock = Clock::new();
        let ticks = Arc::new(Tally::plain("kvroute_connect_ticks_total"));
        let publish_errors = Arc::new(Tally::plain("kvroute_connect_publish_errors_total"));
        let every = options
            .tick_interval
            .unwrap_or_else(|| core::time::Duration::from_nanos(router.tick_interval().0));
        let tasks = Tasks::new();
        let task = tasks.spawn(run_ticks(
            router.clone(),
            clock,
            every,
            stop_rx,
            (ticks.clone(), publish_errors.clone()),
        ));
        Ok(Self {
            router,
            ctx: zmq::Context::new(),
            options,
            clock,
            engines: Mutex::new(BTreeMap::new()),
            tick_stop,
            tick_task: Mutex::new(Some(task)),
            ticks,
            publish_errors,
            tasks,
            next_socket: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, EngineHandle>> {
        self.engines.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The Router fed by this connector.
    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// The connector's clock, the time every report and tick is given at: pass it to
    /// `RouteRequest`s too.
    pub fn now(&self) -> kvroute::Nanos {
        self.clock.now()
    }

    /// `Router::tick`s run so far, and those whose publication failed.
    pub fn ticks(&self) -> (u64, u64) {
        (self.ticks.get(), self.publish_errors.get())
    }

    /// The connector's task counters: its tasks and threads that panicked, or that were
    /// cancelled under it, since [`start`](Self::start) (see [`TaskStats`]).
    pub fn task_stats(&self) -> TaskStats {
        self.tasks.stats()
    }

    /// Registers every rank of `spec` with the Router (`WorkerId::new(spec.id, dp_rank)`),
    /// configures the engine's cap when given, and starts its sockets, ingest tasks and
    /// telemetry. All or nothing: on an error, what was added is undone.
    ///
    /// # Errors
    /// [`ConnectError`]: an invalid spec, a duplicate engine, a worker the Router refuses,
    /// an endpoint libzmq refuses.
    pub fn add_engine(&self, spec: EngineSpec) -> Result<(), ConnectError> {
        spec.validate().map_err(ConnectError::Config)?;
        let mut engines = self.lock();
        if engines.contains_key(&spec.id) {
            return Err(ConnectError::DuplicateEngine(spec.id));
        }
        let workers = spec.workers();
        let undo = |n: usize| {
            for w in &workers[..n] {
                let _ = self.router.remove_worker(*w);
            }
        };
        for (i, w) in workers.iter().enumerate() {
            if let Err(e) = self.router.add_worker(*w) {
                undo(i);
                return Err(ConnectError::Worker(e));
            }
        }
        if let Some(cap) = spec.max_running_per_rank {
            let dp = u32::try_from(spec.ranks.len()).unwrap_or(u32::MAX);
            let cfg = EngineConfig::new()
                .with_max_running_per_rank(cap)
                .with_dp_size(dp);
            if let Err(e) = self.router.configure_engine(EngineId(spec.id), cfg) {
                undo(workers.len());
                return Err(ConnectError::EngineConfig(e));
            }
        }
        match self.spawn_engine(spec.clone()) {
            Ok(h) => {
                engines.insert(spec.id, h);
                Ok(())
            }
            Err(e) => {
                undo(workers.len());
                Err(e)
            }
        }
    }

    fn spawn_engine(&self, spec: EngineSpec) -> Result<EngineHandle, ConnectError> {
        let (stop, stop_rx) = watch::channel(false);
        let telemetry = Arc::new(EngineTelemetry {
            router: self.router.clone(),
            spec: spec.clone(),
            clock: self.clock,
            counters: TelemetryCounters::new(spec.id),
            last_error: Mutex::new(None),
        });
        let mut ranks: Vec<RankHandle> = Vec::new();
        let fail = |ranks: Vec<RankHandle>, worker, e: zmq::Error| {
            for r in ranks {
                r.thread_stop.store(true, Ordering::Relaxed);
                if let Some(t) = r.task {
                    // Cancelled on purpose and never joined: not a `task_cancellations`.
                    t.abort();
                }
            }
            ConnectError::Socket {
                worker,
                message: e.to_string(),
            }
        };
        for rank in &spec.ranks {
            let worker = WorkerId::new(spec.id, rank.dp_rank);
            let counters = Arc::new(RankCounters::new(worker));
            let (tx, rx) = mpsc::channel(self.options.queue_capacity.max(1));
            let overflow = Arc::new(AtomicBool::new(false));
            let thread_stop = Arc::new(AtomicBool::new(false));
            let n = self.next_socket.fetch_add(1, Ordering::Relaxed);
            let ms = |d: core::time::Duration| i32::try_from(d.as_millis()).unwrap_or(i32::MAX);
            let params = SocketParams {
                ctx: self.ctx.clone(),
                endpoint: rank.events.clone(),
                topic: spec.topic.as_bytes().to_vec(),
                reconnect_initial_ms: ms(self.options.reconnect_initial),
                reconnect_max_ms: ms(self.options.reconnect_max),
                queue: tx,
                counters: counters.clone(),
                overflow: overflow.clone(),
                stop: thread_stop.clone(),
                monitor_name: format!("kvroute-monitor-{n}"),
                tasks: self.tasks.clone(),
            };
            let sub = match socket::spawn(params) {
                Ok(t) => t,
                Err(e) => return Err(fail(ranks, worker, e)),
            };
            let mut threads = vec![sub];
            if let Some(ep) = &rank.load_stat {
                match telemetry::spawn_load_stat(
                    &self.ctx,
                    telemetry.clone(),
                    rank.dp_rank,
                    ep,
                    thread_stop.clone(),
                    &self.tasks,
                ) {
                    Ok(t) => threads.push(t),
                    Err(e) => {
                        thread_stop.store(true, Ordering::Relaxed);
                        return Err(fail(ranks, worker, e));
                    }
                }
            }
            let ingest = RankIngest {
                router: self.router.clone(),
                worker,
                ctx: self.ctx.clone(),
                replay_endpoint: rank.replay.clone(),
                replay_timeout: self.options.replay_timeout,
                counters: counters.clone(),
                overflow,
                tasks: self.tasks.clone(),
            };
            let task = self.tasks.spawn(ingest.run(rx, stop_rx.clone()));
            ranks.push(RankHandle {
                counters,
                thread_stop,
                threads,
                task: Some(task),
            });
        }
        let poller = spec
            .telemetry
            .is_some()
            .then(|| self.tasks.spawn(telemetry.clone().run_poller(stop_rx)));
        Ok(EngineHandle {
            spec,
            ranks,
            telemetry,
            stop,
            poller,
        })
    }

    /// Stops engine `id` (joins its tasks and threads) and removes its workers from the
    /// Router.
    ///
    /// # Errors
    /// [`ConnectError::UnknownEngine`]; [`ConnectError::Worker`] when the Router no longer
    /// held one of its workers (the others are removed).
    pub async fn remove_engine(&self, id: u64) -> Result<(), ConnectError> {
        let h = self
            .lock()
            .remove(&id)
            .ok_or(ConnectError::UnknownEngine(id))?;
        let workers = h.spec.workers();
        h.stop(&self.tasks).await;
        let mut first = Ok(());
        for w in workers {
            if let Err(e) = self.router.remove_worker(w) {
                first = first.and(Err(ConnectError::Worker(e)));
            }
        }
        first
    }

    /// The ids of the connected engines, in order.
    pub fn engines(&self) -> Vec<u64> {
        self.lock().keys().copied().collect()
    }

    /// Every connected rank's counters, by engine then rank.
    pub fn rank_stats(&self) -> Vec<RankStats> {
        let e = self.lock();
        e.values()
            .flat_map(|h| h.ranks.iter().map(|r| r.counters.snapshot()))
            .collect()
    }

    /// One rank's counters.
    pub fn rank(&self, worker: WorkerId) -> Option<RankStats> {
        self.rank_stats().into_iter().find(|s| s.worker == worker)
    }

    /// Every connected engine's telemetry counters.
    pub fn telemetry_stats(&self) -> Vec<TelemetryStats> {
        let e = self.lock();
        e.values()
            .map(|h| h.telemetry.counters.snapshot(h.spec.id))
            .collect()
    }

    /// The last telemetry error of engine `id`, if any.
    pub fn last_telemetry_error(&self, id: u64) -> Option<TelemetryError> {
        let e = self.lock();
        let h = e.get(&id)?;
        let last = h
            .telemetry
            .last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        last.clone()
    }

    /// Stops everything this connector started (every engine's sockets, tasks and
    /// threads, the tick timer) and waits for all of them to end. The workers stay
    /// registered in the Router.
    ///
    /// A rank in the middle of a replay finishes it first (bounded by the replay timeout
    /// per silent message), and a poll in flight by its poll timeout.
    ///
    /// Returns the final [`task_stats`](Self::task_stats), the tasks found cancelled while
    /// joining them here included.
    pub async fn shutdown(self) -> TaskStats {
        let engines = core::mem::take(&mut *self.lock());
        for (_, h) in engines {
            h.stop(&self.tasks).await;
        }
        let _ = self.tick_stop.send(true);
        let task = self
            .tick_task
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(t) = task {
            self.tasks.join(t).await;
        }
        self.tasks.stats()
    }
}

impl Drop for Connector {
    /// A connector dropped without [`shutdown`](Connector::shutdown) still stops what it
    /// started (tasks and threads end on their own soon after, unjoined).
    fn drop(&mut self) {
        for h in self.lock().values() {
            let _ = h.stop.send(true);
            for r in &h.ranks {
                r.thread_stop.store(true, Ordering::Relaxed);
            }
        }
        let _ = self.tick_stop.send(true);
    }
}

async fn run_ticks(
    router: Arc<Router>,
    clock: Clock,
    every: core::time::Duration,
    mut stop: watch::Receiver<bool>,
    (ticks, errors): (Arc<Tally>, Arc<Tally>),
) {
    let mut iv = tokio::time::interval(every);
    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = crate::stopped(&mut stop) => break,
            _ = iv.tick() => {
                let r = router.tick(clock.now());
                ticks.add(1);
                if r.publication.is_err() {
                    errors.add(1);
                }
            }
        }
    }
}
