#!/usr/bin/env bash
# Runs kvroute's loom models: every lock-free protocol explored under loom's scheduler, in
# release mode with bounded preemptions. LOOM_MAX_PREEMPTIONS can be raised for a deeper
# (slower) search.
set -euo pipefail
cd "$(dirname "$0")/.."
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
RUSTFLAGS="--cfg kvroute_loom ${RUSTFLAGS:-}" \
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom" \
  cargo test --release -p kvroute-index --lib -- loom_
# Load snapshot publication and reservations (tests/loom_*.rs of kvroute-load).
RUSTFLAGS="--cfg kvroute_loom ${RUSTFLAGS:-}" \
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom" \
  cargo test --release -p kvroute-load --lib --tests -- loom_
# The decision's optimistic re-score loop on the real reservation table (kvroute's
# src/rescore/loom_models.rs).
RUSTFLAGS="--cfg kvroute_loom ${RUSTFLAGS:-}" \
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom" \
  cargo test --release -p kvroute --lib -- loom_
