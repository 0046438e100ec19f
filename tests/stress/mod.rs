//! The parts of the router stress test (`router_stress.rs`): the fleet plan, the token tree
//! every thread draws from (`index_common::tree`), the caller's clock, and the run's stop
//! rule. The threads themselves are in `writer` (KV events and worker lifecycle), `routing`
//! (decisions and their reservations) and `control` (load telemetry, publication, sweeping,
//! knobs).

pub mod control;
pub mod routing;
pub mod writer;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use kvroute::{Nanos, Slot, WorkerId};

pub use crate::index_common::tree::{BRANCHES, BS, DEPTH, PREFIX, Tree};

/// Worker slots of the router (more than the fleet plan ever registers at once).
pub const SLOTS: usize = 48;
/// `max_blocks_per_worker`: small, so that bursts of stores evict.
pub const CAP: usize = 64;
/// First engine hash of the writers' bursts of blocks nobody queries.
pub const NOISE_EH: u64 = 1 << 32;
/// Writer threads; each owns [`WORKERS_PER_WRITER`] workers.
pub const WRITERS: usize = 3;
/// Workers per writer: the first [`DIRECT_PER_WRITER`] get their events through the
/// `Router::store` family, the others through `Router::ingest` (sequence numbers, gaps,
/// replays).
pub const WORKERS_PER_WRITER: usize = 8;
/// See [`WORKERS_PER_WRITER`].
pub const DIRECT_PER_WRITER: usize = 5;
/// Threads calling `route`.
pub const ROUTERS: usize = 3;
/// Re-scores allowed per decision (small, so that the unchecked last attempt happens).
pub const MAX_RESCORES: u32 = 2;
/// Largest expected output of a request (tokens).
pub const MAX_OUTPUT: u32 = 256;
/// Largest prompt of a request (tokens): a whole path plus a partial block.
pub const MAX_PROMPT: u32 = (DEPTH * BS + BS - 1) as u32;
/// Reservation TTL (caller's clock): a few telemetry rounds, so the sweeper drops some.
pub const TTL: Nanos = Nanos::from_millis(40);
/// Load reports older than this are stale (caller's clock).
pub const MAX_AGE: Nanos = Nanos::from_millis(100);
/// What one telemetry round advances the caller's clock by.
pub const TICK: Nanos = Nanos::from_millis(5);

/// Minimum operations per writer, decisions per routing thread and rounds per control
/// thread, whatever the duration: the run's coverage does not depend on the machine's speed.
pub const MIN_WRITER_OPS: u64 = 3_000;
/// See [`MIN_WRITER_OPS`].
pub const MIN_DECISIONS: u64 = 2_000;
/// See [`MIN_WRITER_OPS`].
pub const MIN_ROUNDS: u64 = 100;

/// The workers registered before the run and never written or removed during it, in slots
/// `0..3`: they hold fixed blocks (see [`stable_plan`]), so a decision for one of them has an
/// overlap known in advance.
pub const STABLE: [WorkerId; 3] = [
    WorkerId::new(1, 0),
    WorkerId::new(2, 0),
    WorkerId::new(3, 0),
];

/// The workers writer `w` owns: engines `100·(w+1) + i/2` with DP ranks `i % 2`.
pub fn owned_by(w: usize) -> Vec<WorkerId> {
    (0..WORKERS_PER_WRITER)
        .map(|i| WorkerId::new(100 * (w as u64 + 1) + (i / 2) as u64, (i % 2) as u32))
        .collect()
}

/// Every worker that can ever be registered.
pub fn universe() -> Vec<WorkerId> {
    let mut all = STABLE.to_vec();
    all.extend((0..WRITERS).flat_map(owned_by));
    all
}

/// What the stable workers hold: (slot, branch, block positions). Slot 0 holds branch 0
/// whole, slot 1 branch 1 except block 7, slot 2 nothing.
pub fn stable_plan() -> [(Slot, usize, &'static [usize]); 3] {
    [
        (Slot(0), 0, &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]),
        (Slot(1), 1, &[0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11]),
        (Slot(2), 0, &[]),
    ]
}

/// The caller's clock (kvroute reads none): advanced by the telemetry thread, read by all.
#[derive(Debug)]
pub struct Clock(AtomicU64);

impl Clock {
    /// A clock at `start`.
    pub fn new(start: Nanos) -> Self {
        Self(AtomicU64::new(start.0))
    }

    /// The current time.
    pub fn now(&self) -> Nanos {
        Nanos(self.0.load(Ordering::Relaxed))
    }

    /// Moves the clock forward by `d` and returns the new time.
    pub fn advance(&self, d: Nanos) -> Nanos {
        Nanos(self.0.fetch_add(d.0, Ordering::Relaxed) + d.0)
    }
}

/// Decisions each routing thread makes in the quiet window at least (see [`Run`]).
pub const MIN_QUIET_DECISIONS: u64 = 500;

/// The stop rule. The run ends with a *quiet window*: the telemetry and sweeper threads stop
/// first ([`Run::quiet`]), so that nothing reconciles or sweeps reservations any more, while
/// writers and routing threads go on; a reservation a guard fails to return in the window
/// stays visible at the end. A thread keeps going until its part is over *and* it has done
/// its minimum number of operations.
#[derive(Debug, Default)]
pub struct Run {
    quiet: AtomicBool,
    stop: AtomicBool,
}

impl Run {
    /// Starts the quiet window: the control threads stop.
    pub fn quiet(&self) {
        self.quiet.store(true, Ordering::Relaxed);
    }

    /// Whether the quiet window has started.
    pub fn is_quiet(&self) -> bool {
        self.quiet.load(Ordering::Relaxed)
    }

    /// Tells every thread that the duration is over.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Whether a writer or routing thread that has done `done` operations of its minimum
    /// `min` goes on.
    pub fn keep_going(&self, done: u64, min: u64) -> bool {
        done < min || !self.stop.load(Ordering::Relaxed)
    }

    /// Whether a control thread that has done `done` rounds of its minimum `min` goes on.
    pub fn keep_controlling(&self, done: u64, min: u64) -> bool {
        done < min || !self.is_quiet()
    }
}
