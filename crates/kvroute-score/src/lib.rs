//! kvroute's scorer: every worker slot scored in one structure-of-arrays pass, and the
//! routing policies as configurations of that pass.
//!
//! * [`Fleet`] (module `fleet`): the request's view of every slot as padded `f32` lanes,
//!   filled from a load snapshot, the live reservations and the prefix match.
//! * `cost`: each policy's per-worker formula, written once over a lane type.
//! * `coef`: the per-slot coefficients of `projected_time` and `least_load` that depend on
//!   no request, folded once per publication ([`Fleet::prepare_costs`],
//!   [`Fleet::fill_with`]); the SIMD passes compute from them, the same bits as from the
//!   lanes.
//! * `select`: the SIMD pass and its scalar reference: costs, masked argmin, tie keys.
//! * [`Scorer`] (module `decide`): the policies and their reason codes.
//! * [`ScoreConfig`], [`SharedConfig`] (module `config`): knobs, bounds, live updates read
//!   without a lock ([`SharedConfig::guard`]).
//!
//! # SIMD
//! The pass is written once over eight-lane vectors and compiled for several instruction
//! sets; [`SimdPath`] names them and [`Scorer::score`] runs the fastest the CPU has,
//! chosen once per process ([`SimdPath::active`]):
//! * `Avx2` (x86 and x86_64): 256-bit AVX2 code (`core::arch` intrinsics in functions
//!   compiled with `#[target_feature(enable = "avx2,bmi1,popcnt")]`), built into every
//!   build and run when the CPU reports AVX2, BMI1 and POPCNT (`is_x86_feature_detected!`,
//!   cached). No AVX-512 path: none was measured to pay, and valgrind cannot run it.
//! * `Portable`: the `wide` crate's `f32x8`, whose implementation is picked at compile
//!   time from the target features: a default `x86_64` build (SSE2 only) runs each `f32x8`
//!   as two 128-bit SSE registers; with `-C target-cpu=native` on an AVX machine it is one
//!   256-bit register; on `aarch64` two NEON registers; elsewhere a portable array
//!   fallback. The fallback where AVX2 is missing, and the only vector path on other
//!   targets.
//! * `Scalar`: the reference, [`Scorer::score_reference`] (plain scalar code).
//!
//! Every path performs the same IEEE operations per lane (no fused multiply-add), so the
//! result never depends on the build or the CPU: each agrees bit for bit with the scalar
//! reference on the chosen slot, its reason and its cost (`tests/prop_simd_vs_scalar.rs`
//! runs every available path). `KVROUTE_SIMD=scalar|portable|avx2` forces the path of
//! [`Scorer::score`] for a process (tests, benches); [`Scorer::score_with`] runs a given
//! one.
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

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
mod avx2;
mod coef;
mod config;
mod cost;
mod decide;
mod fleet;
mod lane;
mod path;
mod policy;
mod reason;
mod rng;
mod select;
#[cfg(feature = "serde")]
mod serde_impls;
mod sparse;

pub use config::{ConfigGuard, Policy, ProjectedMode, ScoreConfig, SharedConfig, bounds};
pub use decide::{ScoreRequest, Scorer, TieInput};
pub use fleet::{Aggregates, Fleet, SlotFigures};
pub use path::SimdPath;
pub use policy::{ParsePolicyError, PolicyKind};
pub use reason::{Choice, Counterfactual, FallbackCause, ParseReasonError, Reason};
pub use rng::NearTieRng;
