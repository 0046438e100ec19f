#!/usr/bin/env bash
# Runs kvroute's cargo-fuzz targets for a bounded time each (default 60 s; FUZZ_SECONDS to
# change), on the stable toolchain (FUZZ_TOOLCHAIN to pick another). Installs cargo-fuzz
# from crates.io when it is missing.
#
# Targets are built with AddressSanitizer (FUZZ_SANITIZER=none to build without). rustc
# takes the sanitizer flag (-Zsanitizer) only on nightly, so for a sanitized build on stable
# this script sets RUSTC_BOOTSTRAP=1 for the fuzz builds alone (the fuzz crate is its own
# workspace with its own target folder; nothing else is built with it).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
secs="${FUZZ_SECONDS:-60}"
toolchain="${FUZZ_TOOLCHAIN:-stable}"
sanitizer="${FUZZ_SANITIZER:-address}"
if [ "$sanitizer" != none ] && [ "$toolchain" != nightly ]; then
  export RUSTC_BOOTSTRAP=1
fi
# Seed the corpora from the shared example payloads (read in place, not copied).
bash ./seed_wire_decode.sh || echo "NOTICE: shared data missing; wire_decode starts from an empty corpus"
bash ./seed_decode_apply.sh || echo "NOTICE: shared data missing; decode_apply starts from an empty corpus"
for target in $(cargo "+$toolchain" fuzz list); do
  extra=()
  if [ "$target" = decode_apply ]; then
    # The Router's index frees a retired node only after an epoch grace period, so each run
    # ends with frees still deferred; LeakSanitizer then scans the whole heap after every
    # run (two thirds of the time) and finds them reachable. Leak checks stay on for the
    # other targets.
    extra+=(-detect_leaks=0)
  fi
  echo "== fuzz $target (${secs}s, $toolchain, sanitizer $sanitizer)"
  cargo "+$toolchain" fuzz run -s "$sanitizer" "$target" -- -max_total_time="$secs" "${extra[@]}"
done
