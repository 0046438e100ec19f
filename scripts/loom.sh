#!/usr/bin/env bash
# Runs kvroute's loom models: every lock-free protocol explored under loom's scheduler, in
# release mode with bounded preemptions. LOOM_MAX_PREEMPTIONS can be raised for a deeper
# (slower) search.
#
# Each crate keeps its models in one place, `src/loom_models/` (kvroute: `src/loom_models.rs`),
# unit tests of the crate so that they reach its private protocols:
# * kvroute-index: the node protocol and the node table (`loom_models/{node,table}.rs`), and
#   the run index's publication (`loom_models/runs.rs`);
# * kvroute-load: snapshot publication and reservations (`loom_models/{snapshot,reservations}.rs`);
# * kvroute: the decision's optimistic re-score loop on the real reservation table, the
#   predicted-residency entry's sequence lock and the per-thread decision tallies.
set -euo pipefail
cd "$(dirname "$0")/.."
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
RUSTFLAGS="--cfg kvroute_loom ${RUSTFLAGS:-}" \
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom" \
  cargo test --release -p kvroute-index -p kvroute-load -p kvroute --lib -- loom_models::
