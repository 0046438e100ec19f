"""Drives SGLang's own ZmqEventPublisher for kvroute-connect's real-publisher test.

Loads `sglang.srt.disaggregation.kv_events` from the installed sglang package without
running the package's `__init__` modules (they import torch and the model stack; the
publisher module needs only msgspec, pyzmq, pydantic and two small sglang modules).

Reads one JSON command a line on stdin, answers one JSON line on stdout:
  {"op": "start", "rank": r}            -> {"events": endpoint, "replay": endpoint}
  {"op": "publish", "rank": r, "events": [...]}   -> {"ok": true}
      events: {"store": [h, ...], "parent": h | null} | {"remove": [h, ...]} | {"clear": true}
  {"op": "flush"}                       -> {"ok": true} once every queued batch is sent
  {"op": "restart", "rank": r}          -> {"ok": true}: shutdown, then a new publisher on
                                           the same ports (sequence from 0)
  {"op": "residency", "rank": r}        -> {"blocks": [[hash, copies], ...]}: what the
                                           published events leave in the engine's cache
  {"op": "stop"}                        -> {"ok": true}, then exit
"""

import importlib
import importlib.util
import json
import socket
import sys
import time
import types

BLOCK = 4


def load_kv_events():
    spec = importlib.util.find_spec("sglang")
    root = spec.submodule_search_locations[0]
    for name, sub in (("sglang", ""), ("sglang.srt", "/srt"), ("sglang.srt.utils", "/srt/utils")):
        m = types.ModuleType(name)
        m.__path__ = [root + sub]
        sys.modules[name] = m
    return importlib.import_module("sglang.srt.disaggregation.kv_events")


kv = load_kv_events()


def free_base(span):
    """A loopback port p with p .. p + span - 1 free (the publisher adds the DP rank)."""
    while True:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        base = s.getsockname()[1]
        s.close()
        if base + span >= 65535:
            continue
        ok = True
        for p in range(base, base + span):
            t = socket.socket()
            try:
                t.bind(("127.0.0.1", p))
            except OSError:
                ok = False
            finally:
                t.close()
        if ok:
            return base


RANKS = 2
PUB_BASE = free_base(RANKS)
REPLAY_BASE = free_base(RANKS)
publishers = {}
models = {}


def make(rank):
    for _ in range(300):
        try:
            return kv.ZmqEventPublisher(
                rank,
                endpoint=f"tcp://127.0.0.1:{PUB_BASE}",
                replay_endpoint=f"tcp://127.0.0.1:{REPLAY_BASE}",
                buffer_steps=10_000,
                bind=True,
            )
        except Exception:  # the port of a closed publisher is not free yet
            time.sleep(0.05)
    raise RuntimeError("could not bind")


def tokens(hashes):
    return [((h & 0xFFFFFFFF) * 7 + t) & 0xFFFFFFFF for h in hashes for t in range(BLOCK)]


def to_event(e, model):
    if "store" in e:
        hs, parent = e["store"], e.get("parent")
        if parent is None or parent in model:
            for h in hs:
                model[h] = model.get(h, 0) + 1
        return kv.BlockStored(
            block_hashes=hs, parent_block_hash=parent, token_ids=tokens(hs),
            block_size=BLOCK, lora_id=None, medium="GPU",
        )
    if "remove" in e:
        for h in e["remove"]:
            if h in model:
                model[h] -= 1
                if model[h] == 0:
                    del model[h]
        return kv.BlockRemoved(block_hashes=e["remove"], medium="GPU")
    model.clear()
    return kv.AllBlocksCleared()


def answer(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def flush():
    for p in publishers.values():
        while not p._event_queue.empty():
            time.sleep(0.005)
        p._event_queue.join()


for line in sys.stdin:
    cmd = json.loads(line)
    op = cmd["op"]
    if op == "start":
        r = cmd["rank"]
        publishers[r] = make(r)
        models[r] = {}
        src = publishers[r].describe_local_source(BLOCK)
        answer({"events": src["endpoint"], "replay": src["replay_endpoint"]})
    elif op == "publish":
        r = cmd["rank"]
        events = [to_event(e, models[r]) for e in cmd["events"]]
        publishers[r].publish(kv.KVEventBatch(ts=time.time(), events=events))
        answer({"ok": True})
    elif op == "flush":
        flush()
        answer({"ok": True})
    elif op == "restart":
        r = cmd["rank"]
        publishers[r].shutdown()
        publishers[r] = make(r)
        answer({"ok": True})
    elif op == "residency":
        answer({"blocks": sorted([h, c] for h, c in models[cmd["rank"]].items())})
    elif op == "stop":
        for p in publishers.values():
            p.shutdown()
        answer({"ok": True})
        break
