//! kvroute's view of how loaded each worker is: published load snapshots and decision-time
//! reservations.
//!
//! * [`publish`]: a single-writer publication cell (RCU over a ring of buffers, split
//!   reference counts); readers never lock and never wait. A [`PinnedReader`] (module
//!   `pinned`) announces the buffer it reads in a slot of its own instead, so loads from
//!   many threads write no shared cache line.
//! * [`LoadPublisher`] (module `publisher`): the telemetry thread's handle: engine-neutral
//!   updates (a `kvroute_core::LoadSample` per rank, or an engine's `kvroute_core::RankReport`s with
//!   the engine's own timestamps), validity, per-engine grouping, publication of a
//!   [`LoadSnapshot`] read through a [`LoadReader`]. Engines' own formats (vLLM gauges,
//!   SGLang `/v1/loads`) are turned into samples by `kvroute-wire`.
//! * [`LoadSnapshot`] (module `snapshot`): the immutable structure of arrays, lanes padded to
//!   [`LANE_PAD`].
//! * [`reserve`]: per-slot reservation counters and the RAII [`Reservation`] guard.
//! * [`reconcile`]: the rule combining telemetry and reservations without double counting.
//!
//! Time is always the caller's (`kvroute_core::Nanos`); the crate never reads a clock and does no I/O.
//! Every atomic, lock and thread comes from `kvroute_core::sync`, so the lock-free protocols are
//! modelled by loom under `RUSTFLAGS="--cfg kvroute_loom"` (models in `src/loom_models`).

mod drain;
mod lanes;
#[cfg(test)]
mod loom_models;
mod pinned;
pub mod publish;
mod publisher;
pub mod reconcile;
pub mod reserve;
mod snapshot;

pub use lanes::{LANE_PAD, Validity, padded_len};
pub use pinned::{PinnedGuard, PinnedReader};
pub use publish::{PublishError, SnapshotGuard, SnapshotReader, SnapshotWriter, snapshot_cell};
pub use publisher::{
    BUFFERS, CAPACITY, DP_SIZE, ENGINE_TPS, EngineConfig, LastReport, LoadConfig, LoadPublisher,
    LoadReader, MAX_AGE, MAX_CLOCK_LEAD, MAX_RUNNING_PER_RANK, TableTooSmall, WorkerError,
};
pub use reconcile::{EffectiveLoad, effective_load};
pub use reserve::{
    GROUP_SLOTS, Reservation, ReservationStats, ReservationTable, ReserveError, Reserved,
    SweepReport, TableError, TableLease, Work,
};
pub use snapshot::{EngineLoad, LoadSnapshot, LoadStats, NO_ENGINE, SlotLoad};
