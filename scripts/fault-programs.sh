#!/usr/bin/env bash
# Sweeps the conversation trace (its first 3,000 requests, 16 engines) under each example
# fault program in docs/fault-programs (every policy x rate scales 1, 4, 16 x seeds 1-5)
# and prints, per program and load, the policies significantly ahead of the default on
# out tok/s, TTFT p95 and E2E p95 (paired t-test, 95 %), and the default's imbalance while
# requests wait and lowest generation share: the table in docs/RESULTS.md, "Fault
# programs on the trace". About 12 minutes on a 2-core machine.
#
#   bash scripts/fault-programs.sh [RATE_SCALES]     e.g. 1,2,4,8,16 (default 1,4,16)
#
# Needs the shared data (KVROUTE_DATA_DIR, default ../shared/data beside the checkout).
set -euo pipefail
cd "$(dirname "$0")/.."
data="${KVROUTE_DATA_DIR:-../shared/data}"
scales="${1:-1,4,16}"
cargo build --release -p kvroute-sim
sim=./target/release/kvroute-sim
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for f in docs/fault-programs/*.json; do
  name=$(basename "$f" .json)
  "$sim" --quiet --faults "$f" sweep --trace "$data/traces/mooncake_conversation_trace.jsonl" \
    --rate-scales "$scales" --json "$out/$name.json" >/dev/null
done
python3 - "$out" <<'PY'
import json, pathlib, sys
rows = ["| program | rate | peers significantly ahead (out tok/s, TTFT p95, E2E p95) | imb wait | gen min % |",
        "|---|---:|---|---:|---:|"]
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    d = json.loads(path.read_text())
    metric = {m: i for i, m in enumerate(d["metrics"])}
    ref = d["policies"].index(d["reference"])
    for s, scale in enumerate(d["rate_scales"]):
        ahead = []
        for p, policy in enumerate(d["policies"]):
            if p == ref:
                continue
            for m, label in (("out_tok_s", "out tok/s"), ("ttft_p95", "TTFT p95"), ("e2e_p95", "E2E p95")):
                if d["cells"][p][s][metric[m]]["mark"] in ("best", "better"):
                    ahead.append(f"`{policy}` {label}")
        cell = lambda m: d["cells"][ref][s][metric[m]]
        fmt = lambda c: "-" if c["mean"] is None else f"{c['mean']:.2f}"
        rows.append(f"| `{path.stem}` | {scale:g}x | {', '.join(ahead) or 'none'} | "
                    f"{fmt(cell('imbalance_waiting'))} | {fmt(cell('gen_share_min_pct'))} |")
print("\n".join(rows))
PY
