#!/usr/bin/env bash
# Compares this working tree with another revision on one of benches/peer-dynamo's paired
# binaries (`decision_pairs`: kvroute's decision beside kv-index's ChainIndex lookup;
# `ingest_pairs`: RunIndex's ingest beside ChainIndex's), on builds with the code layout
# fixed: every function and every jump target that is not fallen into aligned to 64
# bytes, so that neither side's hot loops move to other fetch boundaries when only
# kvroute's code changed (an unchanged ChainIndex lookup moved by 13-20 % between two
# ordinary builds; docs/BENCHMARKS.md, "2026-12-06 (night)").
#
#   bash scripts/peer-ab.sh [--bin decision_pairs|ingest_pairs] REV [PAIRS] [ARGS...]
#
# REV: the revision to compare against (a commit, tag or branch). PAIRS (default 6): how
# many times the two binaries run one after the other, alternating which goes first.
# ARGS are passed to the binary (default `61 512` for decision_pairs: rounds and worker
# counts; `41` for ingest_pairs: rounds).
#
# Prints each run's ratio lines (both sides' medians and the peer / kvroute ratio), then
# per row the median ratio of each build and in how many pairs this tree's was the
# higher. Read the medians too: on a machine whose speed drifts, a ratio compares the two
# sides of one run, not two runs. REV is checked out in a git worktree under
# target/peer-ab (kept between runs; cargo reuses its build when REV is unchanged).
set -euo pipefail
cd "$(dirname "$0")/.."

bin=decision_pairs
if [[ "${1:-}" == --bin ]]; then
  bin="${2:-}"
  shift 2
fi
case "$bin" in
  decision_pairs) default_args=(61 512) ;;
  ingest_pairs) default_args=(41) ;;
  *) echo "peer-ab.sh: --bin decision_pairs or ingest_pairs, not '$bin'" >&2; exit 2 ;;
esac
if [[ $# -lt 1 ]]; then
  sed -n '2,21p' "$0" >&2
  exit 2
fi
rev="$1"
pairs="${2:-6}"
shift $(( $# < 2 ? $# : 2 ))
args=("$@")
if [[ ${#args[@]} -eq 0 ]]; then
  args=("${default_args[@]}")
fi

root="$(pwd)"
work="$root/target/peer-ab"
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
    cargo build --release -q --bin "$bin" --target-dir "$2")
}
echo "== building $rev ($commit) and this tree, layout fixed" >&2
build "$base_src" "$work/base-target"
build "$root" "$work/head-target"
base_bin="$work/base-target/release/$bin"
head_bin="$work/head-target/release/$bin"

results="$work/results.txt"
: > "$results"
for ((i = 0; i < pairs; i++)); do
  if ((i % 2 == 0)); then order=(base head); else order=(head base); fi
  for side in "${order[@]}"; do
    exe="$base_bin"
    [[ $side == head ]] && exe="$head_bin"
    "$exe" "${args[@]}" | grep -E '[0-9.]+x \[' | sed "s/^ */$side /" | tee -a "$results"
  done
done

echo
echo "median peer / kvroute ratio per build and row (pairs where this tree's is higher):"
awk '
  {
    side = $1; line = $0; sub(/^[a-z]+ /, "", line); w = substr(line, 1, index(line, ":") - 1)
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
      printf "  %s: '"$rev"' %.2fx, this tree %.2fx (%d of %d pairs)\n", w, median("base", w), median("head", w), higher, n["head", w]
    }
  }' "$results"
