//! Side-by-side benchmark of kvroute against `dynamo-kv-router` 1.6.1 from crates.io (NVIDIA
//! Dynamo's KV-aware router: its compressed radix tree and its default worker selector) and
//! SMG's `kv-index` 2.0.0 (its run-compressed `ChainIndex`; match and ingest rows only).
//!
//! Both sides get the same workload, built once by `kvroute_bench` with the same fixed seeds
//! as kvroute's own criterion benches:
//!
//! * [`peer`]: the fleet and the store events translated into the peer's
//!   `RouterEvent`s (its engine block hashes = the same engine hashes kvroute stores; its
//!   per-block `LocalBlockHash`es computed from the same token ids with the peer's own
//!   `compute_block_hash_for_seq`), and the peer's indexes built from them.
//! * [`chain`]: the same fleet and store events as `kv-index` stores (its content hashes
//!   computed from the same token ids with its own `compute_request_content_hashes`), and its
//!   `ChainIndex` with one block map per worker built from them.
//! * [`load`]: one load table per fleet, given to kvroute as `LoadSample`s and to the
//!   peer as `WorkerLoadProjection`s.
//! * [`decide`]: the two decision paths (kvroute's `Router::route` with precomputed hashes;
//!   the peer's match details → overlap signals → `DefaultWorkerSelector::select_worker`).
//! * [`report`]: reads the medians criterion saved in this run and prints the ratio table.
//!
//! Run it with `cargo bench` from this crate's folder; `README.md` says what each row times.

pub mod chain;
pub mod decide;
pub mod load;
pub mod peer;
pub mod report;

/// Worker counts of the match and decision rows (as kvroute's own benches).
pub const WORKER_COUNTS: [usize; 4] = [16, 128, 512, 1024];
/// Workers registered for the ingest rows (as kvroute's `ingest` bench).
pub const STORE_WORKERS: usize = 512;
/// Store events replayed per measured iteration of the ingest rows (as kvroute's bench).
pub const STORE_EVENTS: usize = 256;

/// Seed of the conversation fleet (the same as kvroute's `index` and `route` benches).
pub const FLEET_SEED: u64 = 0x6b76_726f_7574_6501;
/// Seed of the rotating query order.
pub const ORDER_SEED: u64 = 0x6b76_726f_7574_6502;
/// Seed of the new-conversation ("cold") query.
pub const COLD_SEED: u64 = 0x6b76_726f_7574_6503;
/// Seed of the store events.
pub const EVENTS_SEED: u64 = 0x6b76_726f_7574_6504;
