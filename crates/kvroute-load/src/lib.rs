//! kvroute's view of how loaded each worker is: published load snapshots and decision-time
//! reservations.
//!
//! * [`publish`]: a single-writer publication cell (RCU over a ring of buffers, split
//!   reference counts); readers never lock and never wait.
//! * [`LoadPublisher`] (module `publisher`): the telemetry thread's handle: typed updates
//!   ([`LoadSample`], [`VllmLoadUpdate`], [`SglangRankLoad`]), validity, per-engine grouping,
//!   publication of a [`LoadSnapshot`] read through a [`LoadReader`].
//! * [`LoadSnapshot`] (module `snapshot`): the immutable structure of arrays, lanes padded to
//!   [`LANE_PAD`].
//! * [`reserve`]: per-slot reservation counters and the RAII [`Reservation`] guard.
//! * [`reconcile`]: the rule combining telemetry and reservations without double counting.
//!
//! Time is always the caller's ([`Nanos`]); the crate never reads a clock and does no I/O.
//! Every atomic, lock and thread comes from `kvroute_sync`, so the lock-free protocols are
//! modelled by loom under `RUSTFLAGS="--cfg kvroute_loom"` (see `src/loom_models`).

mod cell;
mod lanes;
#[cfg(test)]
mod loom_models;
pub mod publish;
mod publisher;
pub mod reconcile;
pub mod reserve;
mod snapshot;
mod time;
mod update;

pub use lanes::{Fields, LANE_PAD, Validity, padded_len};
pub use publish::{PublishError, SnapshotGuard, SnapshotReader, SnapshotWriter, snapshot_cell};
pub use publisher::{
    ConfigError, EngineConfig, LoadConfig, LoadPublisher, LoadReader, WorkerError,
};
pub use reconcile::{EffectiveLoad, effective_load};
pub use reserve::{
    GROUP_SLOTS, Reservation, ReservationStats, ReservationTable, ReserveError, Reserved,
    SweepReport, TableError, Work,
};
pub use snapshot::{EngineLoad, LoadSnapshot, LoadStats, NO_ENGINE, SlotLoad};
pub use time::Nanos;
pub use update::{
    LoadSample, SglangRankLoad, TokenCapacity, UpdateError, VllmLoadUpdate, VllmRankLoad,
    check_token_capacity, int_count,
};
