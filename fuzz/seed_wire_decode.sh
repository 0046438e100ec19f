#!/usr/bin/env bash
# Seeds fuzz/corpus/wire_decode (git-ignored) from the example payloads and ZMQ frames in
# ../shared/data/kv_events (engine_examples.json, examples.json), read in place: the data
# is never copied into the repository.
set -euo pipefail
cd "$(dirname "$0")"
data="${KVROUTE_DATA_DIR:-../../shared/data}/kv_events"
out=corpus/wire_decode
mkdir -p "$out"
python3 - "$data" "$out" <<'PY'
import json, sys, pathlib
data, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
n = 0
for name in ("engine_examples.json", "examples.json"):
    for key, ex in json.loads((data / name).read_text()).items():
        payload = bytes.fromhex(ex["payload_hex"])
        (out / f"{key}.payload").write_bytes(payload)
        frames = ex.get("zmq_frames_hex")
        if frames:  # seq + payload: the shape the target splits for decode_message
            (out / f"{key}.frames").write_bytes(bytes.fromhex(frames[1]) + payload)
        n += 1
print(f"seeded {n} examples into {out}")
PY
