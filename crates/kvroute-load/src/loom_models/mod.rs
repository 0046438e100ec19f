//! The loom models of kvroute-load's lock-free protocols, one file per protocol. Under
//! `RUSTFLAGS="--cfg kvroute_loom"` (`scripts/loom.sh`) each model runs under every
//! interleaving loom explores; built normally (`cargo test`), each runs once as a smoke test
//! (`kvroute_core::sync::model`).

mod reservations;
mod snapshot;
