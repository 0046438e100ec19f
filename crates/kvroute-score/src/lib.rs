//! kvroute's scorer: every worker slot scored in one structure-of-arrays pass, and the
//! routing policies as configurations of that pass.
//!
//! * [`Fleet`] (module `fleet`): the request's view of every slot as padded `f32` lanes,
//!   filled from a load snapshot, the live reservations and the prefix match.
//! * `cost`: each policy's per-worker formula, written once over a lane type.
//! * `select`: the SIMD pass and its scalar reference: costs, masked argmin, tie keys.
//! * [`Scorer`] (module `decide`): the policies and their reason codes.
//! * [`ScoreConfig`], [`SharedConfig`] (module `config`): knobs, bounds, live updates read
//!   without a lock ([`SharedConfig::guard`]).
//!
//! # SIMD
//! The pass uses the `wide` crate's `f32x8`, which picks its implementation at compile
//! time from the target features. A default `cargo build` for `x86_64` has SSE2 only, so each
//! `f32x8` is two 128-bit SSE registers (4 lanes each); with `-C target-cpu=native` (or
//! `-C target-feature=+avx`) on an AVX machine it is one 256-bit register; on `aarch64` it
//! is two NEON registers; elsewhere a portable array fallback. There is no runtime feature
//! detection: the binary is as wide as it was built for. Every variant performs the same
//! IEEE operations per lane, so the result never depends on the build, and
//! [`Scorer::score_reference`] (plain scalar code) agrees bit for bit on the chosen slot,
//! its reason and its cost.
//!
//! # Policies
//! Lower cost wins. Per worker: `overlap` (blocks held), `requests` (running + waiting +
//! reserved), `queued`/`decode` (tokens, telemetry + reservations), `k` (KV usage),
//! `barrier = kv_barrier_s·k'/(1−k')`, `k' = clamp(k, 0, 0.999)` (seconds).
//! * `round_robin`: 0; the cursor decides.
//! * `least_load` (peers, the gateway): `(queued + decode)/tps + barrier` seconds.
//! * `kv_aware` (pure affinity, the control): `−overlap`, exact ties, then fewer requests.
//! * `kv_aware_first` (the original router's affinity, a control): the first slot holding
//!   the deepest prefix however busy; misses to the fewest requests.
//! * `load_aware{beta}` (hit rate less a load penalty):
//!   `−(matched/prompt − beta·(requests − mean)/max(1, mean))`.
//! * `owner_pressure` (scheduler occupancy in the owner's pressure): `max(k, util,
//!   occupancy)` with DP-summed occupancy, 0.9 watermark, 0.1 slack, hold on the
//!   least-pressured owner, old-pressure fallback.
//! * `projected_time` (the default): the latency the request adds to the worker, seconds:
//!   `queued/prefill_tps + slot wait + n·uncached/prefill_tps + output·(b + (2n − 1)·a) +
//!   barrier`, `n` the batch it runs in, a step of `n` sequences `b + a·n` seconds
//!   (derivation in module `cost`); off | shadow | enforce with the hard escape (an absolute
//!   and a load-relative margin).
//! * `dynamo_cost`, `lmetric`, `cache_aware`: the peers' models (`docs/FAILURE-MODES.md`).
//!
//! Policies that weigh load against cache fall back to `least_load` when any occupied
//! slot's telemetry is not fresh, with [`Reason::Fallback`] naming the worst cause; the
//! fallback chooses among slots whose own figures are trusted (fresh or partial) while any
//! exists.
//!
//! # Tie-breaking
//! Costs within a relative band `tie_epsilon` of the minimum tie; then fewer requests win;
//! then the deeper overlap (two equal scores never alternate a conversation off its cache
//! owner); then the first slot at or after a rotating cursor (a fixed tie-breaker would
//! always pick the same worker).
//! Optional near-tie randomisation with a per-router seed ([`NearTieRng`]) spreads router
//! replicas that read the same telemetry over near-equal workers instead of all picking
//! the same one; it is off by default.
//!
//! # Names
//! Policies, modes and reasons have stable names for counters, tables and command lines,
//! listed once: [`PolicyKind::ALL`], [`ProjectedMode::ALL`], [`Reason::ALL`] (each with a
//! dense `index()`), [`Policy::label`] (the mode included) and [`Policy::LABELED`].
//! [`Policy`] and [`Reason`] implement `Display` and `FromStr` (module `policy`).

mod config;
mod cost;
mod decide;
mod fleet;
mod lane;
mod policy;
mod reason;
mod rng;
mod select;
#[cfg(feature = "serde")]
mod serde_impls;

pub use config::{ConfigGuard, Policy, ProjectedMode, ScoreConfig, SharedConfig, bounds};
pub use decide::{ScoreRequest, Scorer, TieInput};
pub use fleet::{Aggregates, Fleet, SlotFigures};
pub use policy::{ParsePolicyError, PolicyKind};
pub use reason::{Choice, Counterfactual, FallbackCause, ParseReasonError, Reason};
pub use rng::NearTieRng;
