//! The loom models of kvroute-index's lock-free protocols, one file per protocol. Built only
//! under `RUSTFLAGS="--cfg kvroute_loom"` (`scripts/loom.sh`): each model runs under
//! `loom::model`, which explores every interleaving of its threads with loom's atomics.

mod node;
mod runs;
mod table;
