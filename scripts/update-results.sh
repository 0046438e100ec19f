#!/usr/bin/env bash
# Runs the default sweeps (the conversation trace's first 3,000 requests, with full
# telemetry, with vLLM's gauges only and on the H100-sized engine, `long-context`,
# `no-sharing` and every scenario; every policy x rate scales 1-16 x seeds 1-5) and writes
# their tables into
# docs/RESULTS.md between its `<!-- sweep NAME ... -->` and `<!-- end sweep NAME -->`
# markers. The prose around the tables ("Reading") is not regenerated: read the new
# tables and update it by hand. About 8 minutes on an idle 2-core machine.
#
# Needs the shared data (KVROUTE_DATA_DIR, default ../shared/data beside the checkout).
set -euo pipefail
cd "$(dirname "$0")/.."
data="${KVROUTE_DATA_DIR:-../shared/data}"
cargo build --release -p kvroute-sim
sim=./target/release/kvroute-sim
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"$sim" --quiet sweep --trace "$data/traces/mooncake_conversation_trace.jsonl" >"$out/trace.md"
"$sim" --quiet --telemetry gauges sweep --trace "$data/traces/mooncake_conversation_trace.jsonl" \
  >"$out/trace-gauges.md"
"$sim" --quiet --engine llama-8b-h100 sweep \
  --trace "$data/traces/mooncake_conversation_trace.jsonl" >"$out/trace-h100.md"
"$sim" --quiet sweep --workload long-context >"$out/long-context.md"
"$sim" --quiet sweep --workload no-sharing >"$out/no-sharing.md"
scenarios="hot-owner-51 owner-canary zipf-prefixes burst-siblings restart event-loss fail-fast flap partial-telemetry straggler"
for s in $scenarios; do
  "$sim" --quiet sweep --workload "$s" >"$out/$s.md"
done
python3 - "$out" docs/RESULTS.md $scenarios <<'PY'
import pathlib, re, sys
out, doc = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
text = doc.read_text()
for name in ("trace", "trace-gauges", "trace-h100", "long-context", "no-sharing", *sys.argv[3:]):
    body = []
    for line in (out / f"{name}.md").read_text().splitlines():
        if line.startswith("== sweep"):
            continue  # the command's own header
        m = re.fullmatch(r"rate x(\S+)", line.strip())
        body.append(f"**Rate x{m.group(1)}**" if m else line)
    # Keep the tables; the legend after the last one is the doc's "Reading the marks".
    last = max(i for i, line in enumerate(body) if line.startswith("|"))
    table = "\n".join(body[: last + 1]).strip("\n")
    begin = re.compile(rf"(<!-- sweep {re.escape(name)}:[^\n]*-->\n).*?(<!-- end sweep {re.escape(name)} -->)", re.S)
    text, n = begin.subn(lambda m: m.group(1) + "\n" + table + "\n\n" + m.group(2), text)
    if n != 1:
        sys.exit(f"docs/RESULTS.md: the markers of sweep {name} are missing")
doc.write_text(text)
print("docs/RESULTS.md: sweep tables rewritten; update the prose around them")
PY
