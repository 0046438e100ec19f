#!/usr/bin/env bash
# The real-publisher test: kvroute-connect against SGLang 0.5.23's own ZmqEventPublisher.
# Installs sglang without its dependencies (its defaults pull torch and the GPU stack) and
# only what the publisher module imports (msgspec, pyzmq, pydantic, psutil) into a venv
# under target/, then runs crates/kvroute-connect/tests/real_publisher.rs with it.
# vLLM 0.33's publisher (vllm.distributed.kv_events) is not run: it imports vllm.config,
# which imports torch, so it cannot be loaded without the GPU stack.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/real-publisher-venv
if ! "$venv/bin/python" -c "import msgspec, zmq, pydantic, psutil" 2>/dev/null \
   || [ "$("$venv/bin/pip" show sglang 2>/dev/null | sed -n 's/^Version: //p')" != 0.5.23 ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps sglang==0.5.23
  "$venv/bin/pip" install -q --disable-pip-version-check \
    msgspec==0.23.0 pyzmq==27.3.0 pydantic==2.14.4 psutil==7.2.2
fi
# The driver fails here, not later, if the publisher module does not load.
"$venv/bin/python" -c "
import importlib.util, sys, types
root = importlib.util.find_spec('sglang').submodule_search_locations[0]
for n, s in (('sglang', ''), ('sglang.srt', '/srt'), ('sglang.srt.utils', '/srt/utils')):
    m = types.ModuleType(n); m.__path__ = [root + s]; sys.modules[n] = m
import importlib; importlib.import_module('sglang.srt.disaggregation.kv_events').ZmqEventPublisher
"
KVROUTE_PUBLISHER_PYTHON="$PWD/$venv/bin/python" \
  cargo test --release -p kvroute-connect --test real_publisher -- --nocapture
