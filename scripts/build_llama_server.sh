#!/usr/bin/env bash
# Build llama.cpp's `llama-server` (CPU) from a checkout. The build script ships inside the package, so an
# installed cp-memory runs the same one with `python -m cp_memory.engine.build`; see its header for the
# environment variables. Here PYTHON defaults to the checkout's .venv/bin/python when there is one.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${PYTHON:-}" && -x "$REPO_ROOT/.venv/bin/python" ]]; then
    export PYTHON="$REPO_ROOT/.venv/bin/python"
fi
exec bash "$REPO_ROOT/cp_memory/engine/build_llama_server.sh" "$@"
