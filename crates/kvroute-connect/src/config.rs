//! Which engines to connect to: engine specs (one per engine, one [`RankSpec`] per DP
//! rank) and the connector's knobs, built in code or read from TOML.
//!
//! ```toml
//! queue_capacity = 4096            # batches between a rank's socket and its ingest
//! replay_timeout_ms = 5000         # a replay answer silent this long has failed
//! reconnect_initial_ms = 100       # libzmq's reconnect backoff: doubles up to the max
//! reconnect_max_ms = 5000
//! # tick_interval_ms = 500         # default: Router::tick_interval (staleness bound / 4)
//!
//! [[engine]]
//! id = 1
//! kind = "sglang"                  # or "vllm"
//! dp_size = 2                      # rank r publishes at the base port + r, as the engines do
//! events = "tcp://10.0.0.5:5557"
//! replay = "tcp://10.0.0.5:5567"   # optional: without it, a gap is skipped (skip_replay)
//! load_stat = "tcp://10.0.0.5:5577" # optional, SGLang's pushed LoadStat
//! telemetry = "http://10.0.0.5:30000/v1/loads"   # optional: /v1/loads or vLLM's /metrics
//! max_running_per_rank = 256       # vLLM's max_num_seqs (required for vLLM telemetry)
//! ```
//!
//! An engine may list its ranks instead of `dp_size` (`[[engine.rank]]` with `dp_rank`,
//! `events`, and optionally `replay`, `load_stat`). Every rank is the worker
//! `WorkerId::new(id, dp_rank)`, as the Router names workers.

use core::fmt;
use core::time::Duration;

use kvroute::WorkerId;
use serde::Deserialize;

/// Which engine family publishes: decides the telemetry format polled at `telemetry`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum EngineKind {
    /// vLLM: telemetry is Prometheus text (`GET /metrics`).
    Vllm,
    /// SGLang: telemetry is `GET /v1/loads` JSON, optionally `LoadStat` frames pushed on
    /// ZMQ.
    Sglang,
}

/// One engine DP rank: one KV event publisher.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RankSpec {
    /// The DP rank (the worker's `dp_rank`).
    pub dp_rank: u32,
    /// The rank's PUB endpoint (`tcp://host:port`, `ipc://path`).
    pub events: String,
    /// The rank's replay ROUTER endpoint, if the engine runs one.
    #[serde(default)]
    pub replay: Option<String>,
    /// The rank's SGLang `LoadStat` PUB endpoint, if it pushes one.
    #[serde(default)]
    pub load_stat: Option<String>,
}

impl RankSpec {
    /// A rank with its events endpoint, no replay and no pushed load.
    pub fn new(dp_rank: u32, events: impl Into<String>) -> Self {
        Self {
            dp_rank,
            events: events.into(),
            replay: None,
            load_stat: None,
        }
    }

    /// With a replay endpoint.
    pub fn with_replay(mut self, replay: impl Into<String>) -> Self {
        self.replay = Some(replay.into());
        self
    }

    /// With a `LoadStat` endpoint.
    pub fn with_load_stat(mut self, load_stat: impl Into<String>) -> Self {
        self.load_stat = Some(load_stat.into());
        self
    }
}

/// One engine: its id, kind, ranks and telemetry.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineSpec {
    /// The engine id (the workers' `engine_id`).
    pub id: u64,
    /// vLLM or SGLang.
    pub kind: EngineKind,
    /// The topic the publisher sends (empty by default in both engines); a prefix filter.
    pub topic: String,
    /// Its DP ranks, each a worker.
    pub ranks: Vec<RankSpec>,
    /// The telemetry URL (`http://host:port/path`), polled every `poll_interval`.
    pub telemetry: Option<String>,
    /// Interval between telemetry polls.
    pub poll_interval: Duration,
    /// A poll not answered within this is a timeout error.
    pub poll_timeout: Duration,
    /// The per-rank scheduler cap (vLLM's `max_num_seqs`; SGLang's `max_running_requests`
    /// for `LoadStat` frames, which do not carry it). Required for vLLM telemetry.
    pub max_running_per_rank: Option<u32>,
}

impl EngineSpec {
    /// An engine with these ranks, no telemetry, polls every 500 ms with a 1 s timeout.
    pub fn new(id: u64, kind: EngineKind, ranks: Vec<RankSpec>) -> Self {
        Self {
            id,
            kind,
            topic: String::new(),
            ranks,
            telemetry: None,
            poll_interval: Duration::from_millis(500),
            poll_timeout: Duration::from_secs(1),
            max_running_per_rank: None,
        }
    }

    /// With an HTTP telemetry URL.
    pub fn with_telemetry(mut self, url: impl Into<String>) -> Self {
        self.telemetry = Some(url.into());
        self
    }

    /// With the per-rank scheduler cap.
    pub fn with_max_running_per_rank(mut self, cap: u32) -> Self {
        self.max_running_per_rank = Some(cap);
        self
    }

    /// With a topic.
    pub fn with_topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = topic.into();
        self
    }

    /// With these poll interval and timeout.
    pub fn with_polling(mut self, interval: Duration, timeout: Duration) -> Self {
        self.poll_interval = interval;
        self.poll_timeout = timeout;
        self
    }

    /// The workers of this engine, in rank order.
    pub fn workers(&self) -> Vec<WorkerId> {
        self.ranks
            .iter()
            .map(|r| WorkerId::new(self.id, r.dp_rank))
            .collect()
    }

    /// Checks the spec: at least one rank, distinct ranks, a cap for vLLM telemetry and
    /// for `LoadStat` frames, a non-zero poll interval and timeout.
    ///
    /// # Errors
    /// [`ConfigError::Engine`] naming the engine and the problem.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |why: String| Err(ConfigError::Engine { id: self.id, why });
        if self.ranks.is_empty() {
            return bad("no DP rank".into());
        }
        let mut seen: Vec<u32> = self.ranks.iter().map(|r| r.dp_rank).collect();
        seen.sort_unstable();
        if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
            return bad(format!("DP rank {} listed twice", w[0]));
        }
        if self.kind == EngineKind::Vllm
            && self.telemetry.is_some()
            && self.max_running_per_rank.is_none()
        {
            return bad("vLLM telemetry needs max_running_per_rank (max_num_seqs)".into());
        }
        if self.ranks.iter().any(|r| r.load_stat.is_some()) && self.max_running_per_rank.is_none() {
            return bad("LoadStat frames need max_running_per_rank (they do not carry it)".into());
        }
        if self.poll_interval.is_zero() || self.poll_timeout.is_zero() {
            return bad("poll_interval_ms and poll_timeout_ms must be > 0".into());
        }
        Ok(())
    }
}

/// The connector's knobs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectOptions {
    /// Batches queued between a rank's socket and its ingest; a batch arriving at a full
    /// queue is counted as an overflow and the worker marked for a replay.
    pub queue_capacity: usize,
    /// A replay answer silent this long has failed (the worker's replay is skipped).
    pub replay_timeout: Duration,
    /// libzmq's first reconnect delay; it doubles on each failure up to `reconnect_max`.
    pub reconnect_initial: Duration,
    /// The reconnect delay's bound.
    pub reconnect_max: Duration,
    /// The interval of `Router::tick`; `None`: `Router::tick_interval`.
    pub tick_interval: Option<Duration>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            queue_capacity: 4096,
            replay_timeout: Duration::from_secs(5),
            reconnect_initial: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(5),
            tick_interval: None,
        }
    }
}

impl ConnectOptions {
    /// Checks the knobs: the replay timeout and a set tick interval must be above zero (a
    /// zero interval cannot drive a timer; a zero timeout would fail every replay before it
    /// is asked).
    ///
    /// # Errors
    /// [`ConfigError::Option`] naming the knob.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.replay_timeout.is_zero() {
            return Err(ConfigError::Option {
                name: "replay_timeout_ms",
                why: "must be above zero",
            });
        }
        if self.tick_interval.is_some_and(|d| d.is_zero()) {
            return Err(ConfigError::Option {
                name: "tick_interval_ms",
                why: "must be above zero (leave it out for the Router's own interval)",
            });
        }
        Ok(())
    }
}

/// A config file: the knobs and the engines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectConfig {
    /// The knobs.
    pub options: ConnectOptions,
    /// The engines.
    pub engines: Vec<EngineSpec>,
}

/// A rejected configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The TOML text did not parse or had an unknown key (the parser's message).
    Toml(String),
    /// An engine spec is inconsistent.
    Engine {
        /// The engine id.
        id: u64,
        /// What is wrong.
        why: String,
    },
    /// Two engines share an id.
    DuplicateEngine(u64),
    /// An endpoint has no port to offset by the DP rank (`dp_size` with a non-TCP base).
    NoPort(String),
    /// A knob out of its range (its name and what is wrong).
    Option {
        /// The knob, as the config file names it.
        name: &'static str,
        /// What is wrong.
        why: &'static str,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Toml(m) => write!(f, "config: {m}"),
            Self::Engine { id, why } => write!(f, "engine {id}: {why}"),
            Self::DuplicateEngine(id) => write!(f, "engine {id} listed twice"),
            Self::NoPort(e) => write!(f, "endpoint {e:?} has no port to offset by DP rank"),
            Self::Option { name, why } => write!(f, "{name}: {why}"),
        }
    }
}

impl std::error::Error for ConfigError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEngine {
    id: u64,
    kind: EngineKind,
    #[serde(default)]
    topic: String,
    dp_size: Option<u32>,
    events: Option<String>,
    replay: Option<String>,
    load_stat: Option<String>,
    #[serde(default)]
    rank: Vec<RankSpec>,
    telemetry: Option<String>,
    poll_interval_ms: Option<u64>,
    poll_timeout_ms: Option<u64>,
    max_running_per_rank: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    queue_capacity: Option<usize>,
    replay_timeout_ms: Option<u64>,
    reconnect_initial_ms: Option<u64>,
    reconnect_max_ms: Option<u64>,
    tick_interval_ms: Option<u64>,
    #[serde(default)]
    engine: Vec<FileEngine>,
}

/// `tcp://host:port` with the port moved up by `offset` (the engines' DP rank rule: rank
/// `r` binds base + `r`); other schemes get `_dp{r}` appended for `r > 0`, as the engines
/// name their inproc / ipc sockets.
///
/// # Errors
/// [`ConfigError::NoPort`] for a TCP endpoint without a numeric port.
pub fn offset_endpoint(endpoint: &str, offset: u32) -> Result<String, ConfigError> {
    if offset == 0 {
        return Ok(endpoint.to_owned());
    }
    if !endpoint.starts_with("tcp://") {
        return Ok(format!("{endpoint}_dp{offset}"));
    }
    let no_port = || ConfigError::NoPort(endpoint.to_owned());
    let (base, port) = endpoint.rsplit_once(':').ok_or_else(no_port)?;
    let port: u32 = port.parse().map_err(|_| no_port())?;
    let port = port.checked_add(offset).filter(|&p| p <= 65535);
    Ok(format!("{base}:{}", port.ok_or_else(no_port)?))
}

impl FileEngine {
    fn into_spec(self) -> Result<EngineSpec, ConfigError> {
        let id = self.id;
        let ranks = if !self.rank.is_empty() {
            self.rank
        } else {
            let (Some(n), Some(events)) = (self.dp_size, self.events.as_deref()) else {
                return Err(ConfigError::Engine {
                    id,
                    why: "needs `dp_size` and `events`, or `[[engine.rank]]` entries".into(),
                });
            };
            let offset = |e: &Option<String>, r| e.as_deref().map(|e| offset_endpoint(e, r));
            (0..n)
                .map(|r| {
                    Ok(RankSpec {
                        dp_rank: r,
                        events: offset_endpoint(events, r)?,
                        replay: offset(&self.replay, r).transpose()?,
                        load_stat: offset(&self.load_stat, r).transpose()?,
                    })
                })
                .collect::<Result<_, ConfigError>>()?
        };
        let mut spec = EngineSpec::new(id, self.kind, ranks);
        spec.topic = self.topic;
        spec.telemetry = self.telemetry;
        spec.max_running_per_rank = self.max_running_per_rank;
        if let Some(ms) = self.poll_interval_ms {
            spec.poll_interval = Duration::from_millis(ms);
        }
        if let Some(ms) = self.poll_timeout_ms {
            spec.poll_timeout = Duration::from_millis(ms);
        }
        spec.validate()?;
        Ok(spec)
    }
}

impl ConnectConfig {
    /// Reads a config from TOML text (format in the module docs).
    ///
    /// # Errors
    /// [`ConfigError`]: unparsable text or an unknown key, an engine without ranks, a
    /// duplicated engine id or DP rank, vLLM telemetry without a cap, a knob out of range
    /// ([`ConnectOptions::validate`]).
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let file: File = toml::from_str(text).map_err(|e| ConfigError::Toml(e.to_string()))?;
        let mut options = ConnectOptions::default();
        let ms = Duration::from_millis;
        if let Some(n) = file.queue_capacity {
            options.queue_capacity = n.max(1);
        }
        if let Some(v) = file.replay_timeout_ms {
            options.replay_timeout = ms(v);
        }
        if let Some(v) = file.reconnect_initial_ms {
            options.reconnect_initial = ms(v);
        }
        if let Some(v) = file.reconnect_max_ms {
            options.reconnect_max = ms(v);
        }
        options.tick_interval = file.tick_interval_ms.map(ms);
        options.validate()?;
        let mut engines: Vec<EngineSpec> = Vec::new();
        for e in file.engine {
            let spec = e.into_spec()?;
            if engines.iter().any(|x| x.id == spec.id) {
                return Err(ConfigError::DuplicateEngine(spec.id));
            }
            engines.push(spec);
        }
        Ok(Self { options, engines })
    }
}
