#!/usr/bin/env bash
# Compares the decision of this working tree with that of another revision, side by side
# with kv-index's ChainIndex lookup (benches/peer-dynamo's `decision_pairs`), on builds
# with the code layout fixed: every function and every jump target that is not fallen
# into aligned to 64 bytes, so that neither side's hot loops move to other fetch
# boundaries when only kvroute's code changed (an unchanged ChainIndex lookup moved by
# 13-20 % between two ordinary builds; docs/BENCHMARKS.md, "2026-12-06 (night)").
#
#   bash scripts/decision-ab.sh REV [PAIRS] [ROUNDS] [WORKERS...]
#
# REV: the revision to compare against (a commit, tag or branch). PAIRS (default 6): how
# many times the two binaries run one after the other, alternating which goes first.
# ROUNDS (default 61) and WORKERS (default 512) are passed to `decision_pairs`.
#
# Prints each run's line (both sides' medians and the ChainIndex / kvroute ratio), then
# the median ratio of each build and in how many pairs this tree's ratio was the higher.
# Read the kvroute medians too: on a machine whose speed drifts, a ratio compares the two
# sides of one run, not two runs. REV is checked out in a git worktree under
# target/decision-ab (kept between runs; its build is reused when REV is unchanged).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $# -lt 1 ]]; then
  sed -n '2,19p' "$0" >&2
  exit 2
fi
rev="$1"
pairs="${2:-6}"
rounds="${3:-61}"
shift $(( $# < 3 ? $# : 3 ))
workers=("$@")
if [[ ${#workers[@]} -eq 0 ]]; then
  workers=(512)
fi

root="$(pwd)"
work="$root/target/decision-ab"
mkdir -p "$work"
base_src="$work/base-src"
commit="$(git rev-parse --verify "$rev^{commit}")"
if [[ -d "$base_src" ]]; then
  git -C "$base_src" checkout -q --detach "$commit"
else
  git worktree add -q --detach "$base_src" "$commit"
fi

export RUSTFLAGS="-C llvm-args=-align-all-functions=6 -C llvm-args=-align-all-nofallthru-blocks=6"
build() {
  (cd "$1/benches/peer-dynamo" &&
    cargo build --release -q --bin decision_pairs --target-dir "$2")
}
echo "== building $rev ($commit) and this tree, layout fixed" >&2
build "$base_src" "$work/base-target"
build "$root" "$work/head-target"
base_bin="$work/base-target/release/decision_pairs"
head_bin="$work/head-target/release/decision_pairs"

results="$work/results.txt"
: > "$results"
for ((i = 0; i < pairs; i++)); do
  if ((i % 2 == 0)); then order=(base head); else order=(head base); fi
  for side in "${order[@]}"; do
    bin="$base_bin"
    [[ $side == head ]] && bin="$head_bin"
    "$bin" "$rounds" "${workers[@]}" | grep ' workers:' | sed "s/^/$side /" | tee -a "$results"
  done
done

echo
echo "median ChainIndex / kvroute ratio per build and worker count (pairs where this tree's is higher):"
awk '
  {
    side = $1; w = $2
    for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+x$/) { r = substr($i, 1, length($i) - 1); break }
    n[side, w]++; v[side, w, n[side, w]] = r; ws[w] = 1
  }
  function median(side, w,    k, j, t, m, a) {
    m = n[side, w]
    for (k = 1; k <= m; k++) a[k] = v[side, w, k]
    for (k = 1; k <= m; k++) for (j = k + 1; j <= m; j++) if (a[j] < a[k]) { t = a[k]; a[k] = a[j]; a[j] = t }
    return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
  }
  END {
    for (w in ws) {
      higher = 0
      for (k = 1; k <= n["head", w] && k <= n["base", w]; k++) if (v["head", w, k] > v["base", w, k]) higher++
      printf "  %s workers: '"$rev"' %.2fx, this tree %.2fx (%d of %d pairs)\n", w, median("base", w), median("head", w), higher, n["head", w]
    }
  }' "$results"
