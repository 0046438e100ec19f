#!/usr/bin/env bash
# Runs kvroute's cargo-fuzz targets for a bounded time each (default 60 s; FUZZ_SECONDS to
# change). Needs a nightly toolchain (cargo-fuzz builds with sanitizers) and installs
# cargo-fuzz from crates.io when it is missing.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
secs="${FUZZ_SECONDS:-60}"
# Seed the decoder's corpus from the shared example payloads (read in place, not copied).
bash ./seed_wire_decode.sh || echo "NOTICE: shared data missing; wire_decode starts from an empty corpus"
for target in $(cargo +nightly fuzz list); do
  echo "== fuzz $target (${secs}s)"
  cargo +nightly fuzz run "$target" -- -max_total_time="$secs"
done
