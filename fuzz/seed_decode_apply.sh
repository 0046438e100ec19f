#!/usr/bin/env bash
# Seeds fuzz/corpus/decode_apply (git-ignored) from the example payloads in
# ../shared/data/kv_events (engine_examples.json, examples.json), read in place: the data
# is never copied into the repository. Each payload is wrapped in the target's operation
# format (fuzz_targets/decode_apply.rs): op byte, sequence delta, u16 length, payload.
set -euo pipefail
cd "$(dirname "$0")"
data="${KVROUTE_DATA_DIR:-../../shared/data}/kv_events"
out=corpus/decode_apply
mkdir -p "$out"
python3 - "$data" "$out" <<'PY'
import json, struct, sys, pathlib
data, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])

def message(payload, worker=0, replay=False, shape=0, delta=0):
    op = (worker << 3) | (0x10 if replay else 0) | (shape << 5)
    return bytes([op, delta & 0xFF]) + struct.pack("<H", len(payload)) + payload

examples = []
for name in ("engine_examples.json", "examples.json"):
    for key, ex in json.loads((data / name).read_text()).items():
        payload = bytes.fromhex(ex["payload_hex"])
        dp = ex["decoded"][2] if len(ex["decoded"]) > 2 else None
        examples.append((key, payload, 1 if dp == 1 else 0))
for key, payload, worker in examples:
    (out / f"{key}.ops").write_bytes(message(payload, worker))
# Every example in order on its worker, each frame shape in turn.
all_in_order = b"".join(message(p, w, shape=i % 3) for i, (_, p, w) in enumerate(examples))
(out / "all_in_order.ops").write_bytes(all_in_order)
# A gap (two batches lost), a held batch, a replay from the frontier, the end marker, a
# restart (sequence back to 0), then a truncated replay and a skip.
p = [e[1] for e in examples if e[2] == 0]
gap = (message(p[0]) + message(p[1], delta=2) + message(p[2]) +
       message(p[3], replay=True) + message(p[0], replay=True) + bytes([4]) +
       message(p[1], delta=-100) + message(p[2], delta=3) + message(p[4], replay=True, delta=1) +
       bytes([5, 6, 7]))
(out / "gap_replay_restart.ops").write_bytes(gap)
# Generated batches (op kinds 2-3): stores with parents, a copy, a remove, on both workers,
# then a gap, a truncated replay and the end marker.
gen = (bytes([0x02, 0, 0x07, 0x00, 0x10, 0x80, 0x00, 0x00, 0x12, 0x01, 0x01,
              0x00, 0x02, 0x01, 0x02, 0x05, 0x00, 0x00, 0x00]) +
       bytes([0x0A, 0, 0x0B, 0x00, 0x30, 0x80, 0x04]) +
       bytes([0x02, 3, 0x07, 0x05, 0x01, 0x00, 0x00]) +
       bytes([0x12, 1, 0x07, 0x00, 0x05, 0x80, 0x03]) + bytes([4, 7]))
(out / "generated.ops").write_bytes(gen)
print(f"seeded {len(examples) + 3} inputs into {out}")
PY
