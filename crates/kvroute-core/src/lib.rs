//! kvroute's shared vocabulary and its one synchronisation shim: the types every other
//! kvroute crate speaks, so that none depends on another for vocabulary alone.
//!
//! | module | what |
//! |---|---|
//! | [`sync`] | std atomics, `Arc`, locks, threads and `UnsafeCell`, or loom's under `--cfg kvroute_loom` |
//! | `worker` | [`EngineId`], [`WorkerId`] (an engine's DP rank), [`Slot`] (its dense lane), [`SlotGeneration`] (the lane's tenancy) |
//! | `hash` | [`EngineHash`] (the engine's own block hash), [`SequenceHash`] (kvroute's chained content hash), [`HashNamespace`] (LoRA / cache-salt seed) |
//! | `time` | [`Nanos`]: the caller's clock; kvroute never reads one |
//! | `load` | [`LoadSample`]: one worker's load figures, engine-neutral, with the validation every producer shares ([`UpdateError`]) |
//! | `rng` | [`SplitMix64`]: the one small seeded generator |
//! | [`cpu`] | whether the run-time dispatched AVX2 copies of the hot paths may run ([`cpu::avx2_enabled`]) |
//! | `bounds` | [`Bounds`] and [`OutOfRange`]: every bounded setting's range, written once, and the one out-of-range error |
//!
//! The crate does no I/O and allocates nothing (`cpu` reads one environment variable once).

mod bounds;
pub mod cpu;
mod extra_keys;
mod hash;
pub mod load;
mod rng;
pub mod sync;
mod time;
mod worker;

pub use bounds::{Bounds, Number, OutOfRange};
pub use extra_keys::{BlockExtraKeys, ExtraKeysDigest, ExtraKeysHasher};
pub use hash::{EngineHash, HashNamespace, SequenceHash, XXH3_SEED};
pub use load::{Fields, LoadSample, RankReport, UpdateError};
pub use rng::SplitMix64;
pub use time::Nanos;
pub use worker::{EngineId, Slot, SlotGeneration, WorkerId};
