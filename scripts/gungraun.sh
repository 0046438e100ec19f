#!/usr/bin/env bash
# kvroute's instruction-count regression gate: runs the gungraun (callgrind) benches of the
# hot paths in benches/kvroute-gungraun and compares each bench's instruction count with
# benches/kvroute-gungraun/baseline.json; fails when any count is more than 10% above its
# baseline, when a baselined bench did not run, or when a bench has no baseline.
#
#   bash scripts/gungraun.sh               check against the committed baseline
#   bash scripts/gungraun.sh --rebaseline  measure and rewrite the baseline (commit it,
#                                          saying why the counts moved)
#
# Needs valgrind (installed with apt-get when missing and running as root) and
# gungraun-runner of exactly the gungraun library's version (from Cargo.lock; installed with
# `cargo install --locked` when missing or another version).
#
# CPU level: the benches are built for the plain x86-64 baseline (SSE2), the level kvroute's
# default build and its criterion figures use, with RUSTFLAGS set here so that a
# caller's RUSTFLAGS (target-cpu=native, say) cannot change what is counted; valgrind
# cannot run AVX-512 code. The scorer picks its AVX2 pass at run time where the CPU has
# AVX2 (kvroute_score::SimdPath), and valgrind reports AVX2 (never AVX-512) as it emulates
# it, so on an AVX2 machine the scorer's counts are the AVX2 pass's. They build in their own target directory (target/gungraun) so
# these flags do not rebuild the main one. Counts are exact for a given build and machine
# kind; glibc picks its memcpy and friends by CPU features, so another machine kind may
# need its own baseline.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=check
case "${1:-}" in
  "") ;;
  --rebaseline) mode=rebaseline ;;
  *) echo "usage: $0 [--rebaseline]" >&2; exit 2 ;;
esac

baseline=benches/kvroute-gungraun/baseline.json
version=$(awk '/^name = "gungraun"$/ { getline; gsub(/"/, "", $3); print $3 }' Cargo.lock)
if [[ -z "$version" ]]; then
  echo "gungraun is not in Cargo.lock" >&2
  exit 2
fi

if ! command -v valgrind >/dev/null; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq valgrind >/dev/null
  else
    echo "valgrind is missing: install it (apt-get install valgrind)" >&2
    exit 2
  fi
fi
if [[ "$(gungraun-runner --version 2>/dev/null || true)" != "gungraun-runner $version" ]]; then
  echo "== installing gungraun-runner $version"
  cargo install --locked --version "$version" gungraun-runner
fi

export CARGO_TARGET_DIR="${GUNGRAUN_TARGET_DIR:-$PWD/target/gungraun}"
export RUSTFLAGS="-C target-cpu=x86-64"
unset CARGO_ENCODED_RUSTFLAGS

summary="$CARGO_TARGET_DIR/hot_paths.jsonl"
mkdir -p "$CARGO_TARGET_DIR"
echo "== gungraun benches (callgrind; RUSTFLAGS=$RUSTFLAGS)"
cargo bench -p kvroute-gungraun --bench hot_paths -- --output-format=json >"$summary"

gate=(cargo run --release --quiet -p kvroute-gungraun --)
if [[ $mode == rebaseline ]]; then
  with="RUSTFLAGS='$RUSTFLAGS', bench profile; $(rustc --version); $(valgrind --version); gungraun $version"
  "${gate[@]}" rebaseline --baseline "$baseline" --summary "$summary" --measured-with "$with"
else
  "${gate[@]}" check --baseline "$baseline" --summary "$summary"
fi
