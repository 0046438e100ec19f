//! kvroute's view of which worker holds which KV-cache blocks.
//!
//! * [`hash`]: block hashing (XXH3-64, seed 1337, chained), the router's own block keys.
//! * [`registry`]: `WorkerId`s (engine id, DP rank) interned to dense slots with generations.
//! * [`index`]: the concurrent block-hash prefix index: per-worker residency bitsets on
//!   nodes addressed by chained hash, lock-free matching, epoch-based reclamation.
//! * [`runs`]: the run-compressed prefix index (runs of chain positions with one coverage
//!   view each), the successor of [`index`]'s node-per-block layout.
//! * [`slots`]: the open-addressing map of the run index's per-worker lane maps, for keys
//!   that are already uniform hashes, and a cache-line prefetch.
//!
//! The crate does no I/O and needs no async runtime.

pub mod hash;
pub mod index;
pub mod registry;
pub mod runs;
pub mod slots;

#[cfg(all(test, kvroute_loom))]
mod loom_models;

pub use hash::{BlockHasher, LocalBlockHash};
pub use registry::{RegistryError, RetiredSlot, WorkerRegistry};
