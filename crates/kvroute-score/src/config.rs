//! The scorer's one configuration type, its defaults and bounds, and the cell that lets
//! knobs change while routing.
//!
//! Every knob has one default and one valid range; [`ScoreConfig::validate`] rejects an
//! out-of-range value with an [`OutOfRange`] naming the knob and its range: knobs are
//! bounded, never clamped silently.
//!
//! [`SharedConfig`] holds the current configuration as an immutable `Arc`: a decision loads
//! it once and uses that one value throughout, so no decision sees half of an update, and
//! new decisions see a new value as soon as [`SharedConfig::set`] returns.
//!
//! # The cell
//! The `Arc` lives in an [`arc_swap::ArcSwap`]. A decision reads it with
//! [`SharedConfig::guard`]: no lock, and in the common case no reference-count update (the
//! guard records the pointer in one of its thread's few debt slots, which a writer
//! replacing the value settles before the old value can be freed; a thread holding more
//! guards at once than it has slots gets a counted reference instead, which is still
//! lock-free). Writers ([`SharedConfig::set`], [`SharedConfig::update`]) validate first and
//! are serialised by a mutex that readers never take, so an invalid value is never visible
//! and two concurrent updates never lose each other's change. The cell is not one of
//! kvroute's own lock-free protocols (arc-swap's atomics are its own, outside the
//! `kvroute_core::sync` shim and loom's models), so it holds a `std::sync::Arc` in every
//! build.
//!
//! Each installed value also gets a *stamp*, unique in the process (a new one per install,
//! from one process-wide counter), stored after the value. A caller that decides many times
//! on one thread (kvroute's router keeps one per thread in its scratch buffers) reads the
//! stamp, one plain atomic load, and keeps using the `Arc` it cached under that stamp, with
//! no read-modify-write at all; only when the stamp has changed does it take the new value
//! with [`SharedConfig::load_stamped`] (one reference count).
//!
//! # Orderings
//! * The stamp is stored with `SeqCst` after the value's `ArcSwap::store`, and read with
//!   `SeqCst` (a plain load on x86): a reader that sees a stamp sees the value installed
//!   with it or a later one, so a value cached under a stamp is never older than that
//!   stamp's.
//! * [`SharedConfig::load_stamped`] reads the stamp before the value: it may pair an older
//!   stamp with a newer value (an install between the two reads), never the converse, and
//!   the next stamp read then differs, so the cache is refreshed once more (harmless).
//! * The process-wide counter only hands out distinct numbers (`Relaxed`).

use core::fmt;
use core::ops::Deref;
use std::sync::Arc;

use arc_swap::ArcSwap;
use kvroute_core::OutOfRange;
use kvroute_core::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// `load_aware`'s beta range, `BETA_MIN..=BETA_MAX` (dimensionless).
pub(crate) const BETA_MIN: f32 = 0.0;
/// See [`BETA_MIN`].
pub(crate) const BETA_MAX: f32 = 100.0;

/// `projected_time`'s mode: whether its projected seconds decide, or are only recorded
/// beside a load-only dispatch. Written `enforce`, `shadow`, `off` (module `policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ProjectedMode {
    /// Dispatch by projected seconds, with the hard load escape; on a KV-bound fleet by
    /// the blocks cost ([`ScoreConfig::kv_bound_usage`]).
    #[default]
    Enforce,
    /// Dispatch as `least_load`; compute what `enforce` would have chosen and record it as
    /// the decision's counterfactual.
    Shadow,
    /// Dispatch exactly as `least_load`.
    Off,
}

/// A routing policy: each is one configuration of the same scoring pass. The formulas and
/// rules are listed in the crate docs, section *Policies*.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Policy {
    /// Rotate over occupied slots; ignores cache and load (baseline).
    RoundRobin,
    /// The gateway's load-only cost (`docs/FAILURE-MODES.md`, "The peers' cost models"): seconds of
    /// queued and in-flight tokens plus the KV barrier.
    LeastLoad,
    /// Pure affinity, the control that load-weighing policies are measured against:
    /// deepest overlap, then least load.
    KvAware,
    /// Cache hit rate less a load penalty, `matched/prompt − beta·(load − mean)/max(1,
    /// mean)`, higher wins: affinity that yields to a worker's excess load.
    LoadAware {
        /// Weight of the load term (dimensionless), `0.0..=100.0`: 1.0 as first proposed,
        /// 0.5 balanced better at the same hit rate ([`Policy::DEFAULT_LOAD_AWARE_BETA`]), 0
        /// disables balancing.
        beta: f32,
    },
    /// Cache-aware with the owner's pressure counting its scheduler occupancy (running +
    /// waiting over the running cap, summed over DP ranks) beside its KV usage, so an owner
    /// at its request cap with a long queue is pressured however little KV it uses.
    OwnerPressure,
    /// The latency the request adds to each worker, in seconds (the default): a cache
    /// owner loses once its queueing and decode delay exceed the cost of recomputing the
    /// prefix on a less loaded peer. While the fleet is KV-bound
    /// ([`ScoreConfig::kv_bound_usage`]) the blocks cost decides instead.
    ProjectedTime {
        /// off, shadow or enforce.
        mode: ProjectedMode,
    },
    /// Dynamo-style blocks cost (peer model).
    DynamoCost,
    /// LMetric `(prompt − matched)·(load + 1)` (peer model).
    LMetric,
    /// The gateway's imbalance-gated `cache_aware` (peer model).
    CacheAware,
    /// Pure affinity as the original `kv_aware` router describes it (a labelled control,
    /// `docs/FAILURE-MODES.md`, incident C): the first worker holding the deepest prefix,
    /// however busy, first in slot order (the order a router scanning its worker list
    /// meets them; the index keeps no store order, and a prefix held by several workers
    /// goes to the same one every time); a miss (no worker holds any of it) to the fewest
    /// requests. Unlike [`KvAware`](Self::KvAware), holders of the same depth are not
    /// split by load.
    KvAwareFirst,
}

impl Default for Policy {
    fn default() -> Self {
        Policy::ProjectedTime {
            mode: ProjectedMode::Enforce,
        }
    }
}

/// Every runtime knob of the scorer. Construct with [`Default`] and change fields; the
/// scorer only accepts values that pass [`validate`](Self::validate).
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct ScoreConfig {
    /// The policy.
    pub policy: Policy,
    /// Relative tie band: costs `c <= min + tie_epsilon·|min|` tie (dimensionless),
    /// `0.0..=0.5`, default 0.001.
    pub tie_epsilon: f32,
    /// Optional near-tie randomisation, so that router replicas reading the same telemetry
    /// do not all pick the same worker: when positive and the decision is
    /// given a random draw, the pick is uniform among the workers with costs within
    /// `max(tie_epsilon, near_tie_band)·|min|` of the minimum that hold the deepest overlap
    /// among those (so a conversation stays on its cache owner) (dimensionless),
    /// `0.0..=1.0`, default 0 (off).
    pub near_tie_band: f32,
    /// Share of the occupied workers whose telemetry may be not fresh (missing, stale,
    /// invalid, partial) before the load-weighing policies fall back to `least_load`
    /// fleet-wide (ratio), `0.0..=1.0`, default 0.5. Up to it, only those workers lose their
    /// cache credit and are costed from what is known of them; the rest of the fleet keeps
    /// cache-aware routing (`decide` module docs). 0: any such worker switches the fleet.
    pub fallback_fraction: f32,
    /// Router replicas routing to the same workers, each with its own reservations
    /// (count), `1..=1024`, default 1. A worker whose telemetry is stale is costed from its
    /// last report, less the requests the report counted that this router has seen end,
    /// plus what this router has routed there since: the whole change for a sole router,
    /// but only this replica's share when several route. So with more than one, such a
    /// worker is costed from its own figures only while this router has seen more of its
    /// reported requests end than it has routed to it since (its load is below the report:
    /// each replica only replaces what it saw end, so the replicas together never lift it
    /// above the report), and otherwise never below just above the best fresh worker
    /// (`decide` module docs).
    pub router_replicas: u32,
    /// Throughput `least_load` divides tokens by when the lane reports no prefill
    /// throughput (tokens/s), `1.0..=1e9`, default 2,000 (the gateway's constant).
    pub least_load_tps: f32,
    /// Prefill throughput assumed when a lane reports none (tokens/s), `1.0..=1e9`,
    /// default 8,000.
    pub default_prefill_tps: f32,
    /// Decode throughput assumed when a lane reports none (tokens/s), `1.0..=1e9`, default
    /// 1,000.
    pub default_decode_tps: f32,
    /// Coefficient of the KV-pressure barrier `kv_barrier_s · k/(1−k)` (seconds),
    /// `0.0..=60.0`, default 0.15 (the gateway's).
    pub kv_barrier_s: f32,
    /// Tokens assumed per request when telemetry reports request counts but no token
    /// figures, and the output assumed for a request that gives none
    /// (`ScoreRequest::expected_output_tokens` 0) (tokens),
    /// `1..=1_048_576`, default 512. For a slot without token figures it is the prior of
    /// the estimate from the slots that have them (`LoadSnapshot::tokens_per_waiting`,
    /// `tokens_per_running`: counted as one more request), so it decides alone only where
    /// no fresh slot reports token figures.
    pub tokens_per_request: u32,
    /// `owner_pressure`'s high watermark (ratio), `0.0..=2.0`, default 0.9.
    pub watermark: f32,
    /// Owner slack: a spill target must be at least this much less pressured than the best
    /// owner (ratio), `0.0..=1.0`, default 0.1 (`owner_pressure`).
    pub owner_slack: f32,
    /// `projected_time` hard load escape, absolute part (seconds), `0.0..=3600.0`, default
    /// 2.0. The load-only winner (least `least_load` seconds) is taken when the projected
    /// winner's `least_load` seconds exceed its own by more than this and by more than
    /// `escape_margin_s + escape_margin_rel · mean`, `mean` the mean `least_load` seconds of
    /// the occupied slots other than the projected winner.
    pub escape_margin_s: f32,
    /// `projected_time` hard load escape, load-relative part (dimensionless, a multiple of
    /// the other workers' mean `least_load` seconds), `0.0..=100.0`, default 2.0. In a
    /// saturated fleet every worker carries seconds of load and the ordinary spread between
    /// workers exceeds a fixed margin, so the escape fires only for a winner more loaded than
    /// the least-loaded worker by the absolute part plus twice the others' average load.
    /// With the others idle the margin is the absolute part. 0 keeps only the absolute part.
    /// Measured in `docs/RESULTS.md`.
    pub escape_margin_rel: f32,
    /// `projected_time`'s KV-bound switch (ratio), `0.0..=2.0`, default 0.9: while the mean
    /// KV usage of the occupied workers ([`Aggregates::mean_kv_usage`](crate::Aggregates::mean_kv_usage))
    /// is at least this, `projected_time` (enforce, and the counterfactual of shadow)
    /// decides by the blocks cost of `dynamo_cost` (KV in use plus queued and new prefill,
    /// less the cached prefix, in blocks) with [`Reason::KvBound`](crate::Reason::KvBound),
    /// instead of by projected seconds. Projected seconds model an engine whose batch is
    /// limited by its running slots; once the fleet's KV is nearly full, KV limits every
    /// batch and an engine's backlog drains at the rate its KV turns over, which the
    /// seconds do not see, so the fleet is balanced on KV work instead (`docs/RESULTS.md`,
    /// "The trace on the H100-sized engine", measures 0.8 to 0.95 and the switch off).
    /// The mean counts each worker's usage at most 1, so above 1 it never switches; at 0
    /// it always does. It is compared with this less 2⁻²⁰, the unit each worker's usage is
    /// rounded down to, so a fleet reporting exactly this everywhere switches. The usage is what the engines report: vLLM's
    /// `kv_cache_usage_perc` and SGLang's token usage both count cached blocks that no
    /// running request holds as free, so a warm prefix cache alone does not switch it. A
    /// worker without a good report counts 0 (the switch needs the reports' evidence).
    pub kv_bound_usage: f32,
    /// `cache_aware` imbalance gate, absolute part (requests), `0.0..=1e6`, default 64.
    pub imbalance_abs: f32,
    /// `cache_aware` imbalance gate, relative part (ratio), `1.0..=1000.0`, default 1.5.
    pub imbalance_rel: f32,
    /// `cache_aware` match-rate threshold (ratio), `0.0..=1.0`, default 0.3.
    pub cache_threshold: f32,
    /// Dynamo-style cost: weight of the prefill blocks (dimensionless), `0.0..=100.0`,
    /// default 1.0.
    pub dynamo_overlap_weight: f32,
}

impl ScoreConfig {
    /// Every knob at its default, with `policy`. Not validated until used
    /// ([`validate`](Self::validate)).
    pub fn with_policy(policy: Policy) -> Self {
        Self {
            policy,
            ..Self::default()
        }
    }
}

impl Default for ScoreConfig {
    fn default() -> Self {
        Self {
            policy: Policy::default(),
            tie_epsilon: 1e-3,
            near_tie_band: 0.0,
            fallback_fraction: 0.5,
            router_replicas: 1,
            least_load_tps: 2_000.0,
            default_prefill_tps: 8_000.0,
            default_decode_tps: 1_000.0,
            kv_barrier_s: 0.15,
            tokens_per_request: 512,
            watermark: 0.9,
            owner_slack: 0.1,
            escape_margin_s: 2.0,
            escape_margin_rel: 2.0,
            kv_bound_usage: 0.9,
            imbalance_abs: 64.0,
            imbalance_rel: 1.5,
            cache_threshold: 0.3,
            dynamo_overlap_weight: 1.0,
        }
    }
}

/// The bounds of every knob, written once: [`ScoreConfig::validate`] checks against them
/// and the knobs' docs state them.
pub mod bounds {
    use kvroute_core::Bounds;

    /// `Policy::LoadAware::beta`.
    pub const BETA: Bounds = Bounds::floats(super::BETA_MIN, super::BETA_MAX, "");
    /// [`ScoreConfig::tie_epsilon`](super::ScoreConfig::tie_epsilon).
    pub const TIE_EPSILON: Bounds = Bounds::floats(0.0, 0.5, "");
    /// [`ScoreConfig::near_tie_band`](super::ScoreConfig::near_tie_band).
    pub const NEAR_TIE_BAND: Bounds = Bounds::floats(0.0, 1.0, "");
    /// [`ScoreConfig::fallback_fraction`](super::ScoreConfig::fallback_fraction).
    pub const FALLBACK_FRACTION: Bounds = Bounds::floats(0.0, 1.0, "");
    /// [`ScoreConfig::router_replicas`](super::ScoreConfig::router_replicas).
    pub const ROUTER_REPLICAS: Bounds = Bounds::ints(1, 1024, "replicas");
    /// Every throughput knob (`least_load_tps`, `default_prefill_tps`,
    /// `default_decode_tps`).
    pub const TPS: Bounds = Bounds::floats(1.0, 1e9, "tokens/s");
    /// [`ScoreConfig::kv_barrier_s`](super::ScoreConfig::kv_barrier_s).
    pub const KV_BARRIER_S: Bounds = Bounds::floats(0.0, 60.0, "s");
    /// [`ScoreConfig::tokens_per_request`](super::ScoreConfig::tokens_per_request).
    pub const TOKENS_PER_REQUEST: Bounds = Bounds::ints(1, 1 << 20, "tokens");
    /// [`ScoreConfig::watermark`](super::ScoreConfig::watermark).
    pub const WATERMARK: Bounds = Bounds::floats(0.0, 2.0, "");
    /// [`ScoreConfig::owner_slack`](super::ScoreConfig::owner_slack).
    pub const OWNER_SLACK: Bounds = Bounds::floats(0.0, 1.0, "");
    /// [`ScoreConfig::escape_margin_s`](super::ScoreConfig::escape_margin_s).
    pub const ESCAPE_MARGIN_S: Bounds = Bounds::floats(0.0, 3600.0, "s");
    /// [`ScoreConfig::escape_margin_rel`](super::ScoreConfig::escape_margin_rel).
    pub const ESCAPE_MARGIN_REL: Bounds = Bounds::floats(0.0, 100.0, "");
    /// [`ScoreConfig::kv_bound_usage`](super::ScoreConfig::kv_bound_usage).
    pub const KV_BOUND_USAGE: Bounds = Bounds::floats(0.0, 2.0, "");
    /// [`ScoreConfig::imbalance_abs`](super::ScoreConfig::imbalance_abs).
    pub const IMBALANCE_ABS: Bounds = Bounds::floats(0.0, 1e6, "requests");
    /// [`ScoreConfig::imbalance_rel`](super::ScoreConfig::imbalance_rel).
    pub const IMBALANCE_REL: Bounds = Bounds::floats(1.0, 1000.0, "");
    /// [`ScoreConfig::cache_threshold`](super::ScoreConfig::cache_threshold).
    pub const CACHE_THRESHOLD: Bounds = Bounds::floats(0.0, 1.0, "");
    /// [`ScoreConfig::dynamo_overlap_weight`](super::ScoreConfig::dynamo_overlap_weight).
    pub const DYNAMO_OVERLAP_WEIGHT: Bounds = Bounds::floats(0.0, 100.0, "");
}

impl ScoreConfig {
    /// Checks every knob against its bounds (module [`bounds`]).
    ///
    /// # Errors
    /// The first knob out of range (NaN is out of every range), as an [`OutOfRange`]
    /// naming it (`"beta"` for the policy's parameter).
    pub fn validate(&self) -> Result<(), OutOfRange> {
        use bounds::*;
        if let Policy::LoadAware { beta } = self.policy {
            BETA.check_f32("beta", beta)?;
        }
        TIE_EPSILON.check_f32("tie_epsilon", self.tie_epsilon)?;
        NEAR_TIE_BAND.check_f32("near_tie_band", self.near_tie_band)?;
        FALLBACK_FRACTION.check_f32("fallback_fraction", self.fallback_fraction)?;
        ROUTER_REPLICAS.check_int("router_replicas", u64::from(self.router_replicas))?;
        TPS.check_f32("least_load_tps", self.least_load_tps)?;
        TPS.check_f32("default_prefill_tps", self.default_prefill_tps)?;
        TPS.check_f32("default_decode_tps", self.default_decode_tps)?;
        KV_BARRIER_S.check_f32("kv_barrier_s", self.kv_barrier_s)?;
        TOKENS_PER_REQUEST.check_int("tokens_per_request", u64::from(self.tokens_per_request))?;
        WATERMARK.check_f32("watermark", self.watermark)?;
        OWNER_SLACK.check_f32("owner_slack", self.owner_slack)?;
        ESCAPE_MARGIN_S.check_f32("escape_margin_s", self.escape_margin_s)?;
        ESCAPE_MARGIN_REL.check_f32("escape_margin_rel", self.escape_margin_rel)?;
        KV_BOUND_USAGE.check_f32("kv_bound_usage", self.kv_bound_usage)?;
        IMBALANCE_ABS.check_f32("imbalance_abs", self.imbalance_abs)?;
        IMBALANCE_REL.check_f32("imbalance_rel", self.imbalance_rel)?;
        CACHE_THRESHOLD.check_f32("cache_threshold", self.cache_threshold)?;
        DYNAMO_OVERLAP_WEIGHT.check_f32("dynamo_overlap_weight", self.dynamo_overlap_weight)?;
        Ok(())
    }
}

/// The current configuration, replaceable while routing (see the module docs, *The
/// cell*).
///
/// Readers never lock: [`guard`](Self::guard) borrows the current value without touching
/// its reference count in the common case, [`load`](Self::load) clones its `Arc`. Writers
/// validate before installing, so an invalid value never becomes visible, and are
/// serialised among themselves by a mutex readers never take.
pub struct SharedConfig {
    current: ArcSwap<ScoreConfig>,
    /// The installed value's stamp (module docs, *The cell*).
    stamp: AtomicU64,
    /// Held by `set` and `update` from the read of the current value to the install.
    writers: Mutex<()>,
}

impl fmt::Debug for SharedConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedConfig")
            .field("current", &*self.guard())
            .finish()
    }
}

/// A borrowed view of the configuration [`SharedConfig::guard`] loaded: dereferences to
/// that one [`ScoreConfig`] for as long as it lives, whatever writers install meanwhile.
///
/// Meant to be held for one decision, not stored: each thread has a few slots for guards
/// that hold no reference count, and while they are all taken further guards of that thread
/// count a reference like [`SharedConfig::load`] (still without a lock). A writer replacing
/// the value settles outstanding guards' slots by taking a reference for them, so holding a
/// guard never blocks a writer.
pub struct ConfigGuard<'a> {
    inner: arc_swap::Guard<Arc<ScoreConfig>>,
    _cell: core::marker::PhantomData<&'a SharedConfig>,
}

impl Deref for ConfigGuard<'_> {
    type Target = ScoreConfig;

    fn deref(&self) -> &ScoreConfig {
        &self.inner
    }
}

impl fmt::Debug for ConfigGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        ScoreConfig::fmt(self, f)
    }
}

/// A stamp no install of any [`SharedConfig`] in the process has had (1, 2, …).
fn next_stamp() -> u64 {
    static STAMPS: AtomicU64 = AtomicU64::new(1);
    STAMPS.fetch_add(1, Ordering::Relaxed)
}

impl SharedConfig {
    /// A cell holding `config`.
    ///
    /// # Errors
    /// [`OutOfRange`] when `config` does not [`validate`](ScoreConfig::validate).
    pub fn new(config: ScoreConfig) -> Result<Self, OutOfRange> {
        config.validate()?;
        Ok(Self {
            current: ArcSwap::from_pointee(config),
            stamp: AtomicU64::new(next_stamp()),
            writers: Mutex::new(()),
        })
    }

    /// The configuration new decisions use, borrowed: no lock and, in the common case, no
    /// reference-count update ([`ConfigGuard`]). One decision uses one loaded value
    /// throughout: a value installed after this returns is not seen through the guard.
    #[inline]
    pub fn guard(&self) -> ConfigGuard<'_> {
        ConfigGuard {
            inner: self.current.load(),
            _cell: core::marker::PhantomData,
        }
    }

    /// The configuration new decisions use, as an owned `Arc` (one reference-count
    /// increment, no lock); for a value kept beyond one decision. A decision reads it with
    /// [`guard`](Self::guard).
    pub fn load(&self) -> Arc<ScoreConfig> {
        self.current.load_full()
    }

    /// Replaces the whole configuration. Serialised with other writers; readers are never
    /// blocked.
    ///
    /// # Errors
    /// [`OutOfRange`] for an out-of-range knob; the current value is kept.
    pub fn set(&self, config: ScoreConfig) -> Result<(), OutOfRange> {
        config.validate()?;
        let _writer = self.writers.lock().unwrap_or_else(|p| p.into_inner());
        self.install(config);
        Ok(())
    }

    /// Stores a validated value, then its new stamp (module docs, *Orderings*). The caller
    /// holds the writers' mutex.
    fn install(&self, config: ScoreConfig) {
        self.current.store(Arc::new(config));
        self.stamp.store(next_stamp(), Ordering::SeqCst);
    }

    /// The installed value's stamp: unique in the process to that install (no other cell's
    /// value and no other install of this cell has it). One atomic load. A caller that
    /// cached the `Arc` returned with a stamp by [`load_stamped`](Self::load_stamped) may
    /// keep deciding with it while this returns the same stamp.
    #[inline]
    pub fn stamp(&self) -> u64 {
        self.stamp.load(Ordering::SeqCst)
    }

    /// The configuration as an owned `Arc`, with a stamp it is at least as new as (the
    /// stamp is read first; module docs, *Orderings*): cache the pair and compare the
    /// stamp with [`stamp`](Self::stamp) before each use.
    pub fn load_stamped(&self) -> (u64, Arc<ScoreConfig>) {
        let stamp = self.stamp();
        (stamp, self.current.load_full())
    }

    /// Applies `change` to a copy of the current configuration and installs it if valid,
    /// atomically: the writers' mutex is held from the read of the current value to the
    /// install, so two concurrent `update`s (or an `update` and a [`set`](Self::set)) never
    /// lose each other's change (each sees the other's result or precedes it). Decisions
    /// keep reading the previous value meanwhile and never wait (they do not take that
    /// mutex). `change` must not call [`set`](Self::set) or `update` on this cell (it
    /// would deadlock); reading it is fine.
    ///
    /// # Errors
    /// [`OutOfRange`] for an out-of-range knob; the current value is kept.
    pub fn update(&self, change: impl FnOnce(&mut ScoreConfig)) -> Result<(), OutOfRange> {
        // A poisoned mutex guards nothing but the order of writers: the cell always holds
        // a whole, validated value (replaced in one store).
        let _writer = self.writers.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = **self.current.load();
        change(&mut next);
        next.validate()?;
        self.install(next);
        Ok(())
    }
}
