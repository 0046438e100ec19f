#!/usr/bin/env bash
# Runs the router stress test (tests/router_stress.rs) under AddressSanitizer: many threads
# storing, removing, routing, publishing, sweeping and changing knobs on one Router, with
# real epoch reclamation, so a use-after-free, double free or out-of-bounds access on any
# path it reaches aborts the run with ASan's report. Then the run-compressed index's
# readers-against-writer test and its stores that break the chain property (kvroute-index's
# tests/run_index_concurrent.rs and run_index_bad_input.rs, 64 cases) the same way.
#
#   bash scripts/asan.sh               # the full run: 60 s
#   ASAN_SECS=20 bash scripts/asan.sh  # a shorter one (what .ci/run does)
#
# Needs only the stable toolchain: RUSTC_BOOTSTRAP=1 lets stable rustc take
# -Zsanitizer=address. The explicit --target keeps build scripts and proc-macros
# uninstrumented; the standard library is the prebuilt one (not instrumented, but its
# allocations go through ASan's allocator, which is what catches a freed block being used).
# Release build with debug assertions and overflow checks on, in its own target folder.
set -euo pipefail
cd "$(dirname "$0")/.."

host="$(rustc -vV | sed -n 's/^host: //p')"
case "$host" in
  x86_64-unknown-linux-gnu | aarch64-unknown-linux-gnu) ;;
  *) echo "asan.sh: AddressSanitizer runs are set up for Linux x86_64/aarch64, not $host" >&2; exit 1 ;;
esac

export KVROUTE_STRESS_SECS="${ASAN_SECS:-60}"
export RUSTC_BOOTSTRAP=1
export RUSTFLAGS="-Zsanitizer=address -Cforce-frame-pointers=yes ${RUSTFLAGS:-}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/asan"
export CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true
export CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:detect_stack_use_after_return=1:abort_on_error=1:halt_on_error=1}"

echo "== router stress test under AddressSanitizer (${KVROUTE_STRESS_SECS} s)"
cargo test --release --target "$host" -p kvroute-integration --test router_stress \
  -- --ignored --exact router_stress_full --nocapture

echo "== RunIndex readers against its writer, and stores that break the chain property, under AddressSanitizer"
cargo test --release --target "$host" -p kvroute-index --test run_index_concurrent
PROPTEST_CASES="${ASAN_PROPTEST_CASES:-64}" \
  cargo test --release --target "$host" -p kvroute-index --test run_index_bad_input
