#!/usr/bin/env bash
# The GPU run of the LoCoMo comparison, from carried files only (no registry, no download):
#
#     bash scripts/gpu/run.sh gpu     # on the GPU machine: CUDA build, Qwen3-4B-shaped random model, -ngl 99
#     bash scripts/gpu/run.sh cpu     # the rehearsal here: the same steps, CPU build, tiny model, fewer requests
#
# Needs results/gpu/ made by scripts/gpu/prepare.sh (carried to the GPU machine): llama-src.tar.gz,
# tokenizer.json, the gguf wheel, prompts.json.gz. Steps, each timed into $OUT/steps.json:
#   1. write the random-weight model (scripts/gpu/random_gguf.py), in the background, while
#   2. llama-server builds (scripts/gpu/build_llama.sh)
#   3. replay the exported prompts at k=100, then k=20, for baseline, aligned, aligned+superset
#      (python -m benchmarks.replay, llama-server restarted per (k, mode) group)
# Environment: OUT (results folder, default results/gpu-run; the device tool sets it), TOTAL_BUDGET_S (gpu: 540:
# the replay starts no new group after it, counting the build; run again to finish), DEADLINE_S (the
# replay's own limit instead), MODES, CONVERSATIONS / REQUESTS_PER_RUN (replay subset), MAX_TOKENS (2),
# CACHE_RAM_MIB (16384), JOBS, CUDA_ARCH (default 90).
set -euo pipefail
KIND="${1:-gpu}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
IN="$REPO/results/gpu"
OUT="${OUT:-$REPO/results/gpu-run}"
WORK="${WORK:-/tmp/cp_gpu_run}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT" "$WORK"
STEPS="$OUT/steps.json"
echo "{" > "$STEPS"
step_done() { echo "\"$1\": $((SECONDS - $2))," >> "$STEPS"; }
log() { echo "[gpu-run] $(date +%T) $*" >&2; }

for f in llama-src.tar.gz tokenizer.json prompts.json.gz; do
    [[ -f "$IN/$f" ]] || { log "missing $IN/$f: run scripts/gpu/prepare.sh first"; exit 1; }
done
WHEEL="$(ls "$IN"/gguf-*.whl 2>/dev/null | head -n 1 || true)"
if ! "$PY" -c "import gguf" 2>/dev/null; then
    [[ -n "$WHEEL" ]] || { log "no gguf package and no carried wheel in $IN"; exit 1; }
    export PYTHONPATH="$WHEEL${PYTHONPATH:+:$PYTHONPATH}"
fi
if [[ "$KIND" == gpu ]]; then
    BUILD_KIND=cuda; SHAPE=qwen3-4b; NGL=(-ngl 99); CTX=16384
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1 || true
else
    BUILD_KIND=cpu; SHAPE=tiny; NGL=(); CTX=8192
fi

# the model is written while llama-server builds: one is disk-bound, the other CPU-bound
MODEL="$WORK/random-qwen3-$SHAPE.gguf"
log "1/3 random-weight model ($SHAPE) in the background"
t_model=$SECONDS
if [[ -f "$MODEL" ]]; then echo '{"reused": true}' > "$OUT/model.json"; MODEL_PID=""
else "$PY" scripts/gpu/random_gguf.py model "$IN/tokenizer.json" "$MODEL" --shape "$SHAPE" > "$OUT/model.json" 2>"$WORK/model.log" &
     MODEL_PID=$!
fi
log "2/3 build llama-server ($BUILD_KIND)"
t=$SECONDS
BIN="$(bash scripts/gpu/build_llama.sh "$IN/llama-src.tar.gz" "$WORK/build-$BUILD_KIND" "$BUILD_KIND" | tail -n 1)"
step_done build_s "$t"
cp "$WORK/build-$BUILD_KIND/build_times.json" "$OUT/" 2>/dev/null || true
if [[ -f "$WORK/build-$BUILD_KIND/ld_library_path" ]]; then   # cuBLAS/cudart where the build found them
    export LD_LIBRARY_PATH="$(cat "$WORK/build-$BUILD_KIND/ld_library_path")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [[ -n "$MODEL_PID" ]]; then
    wait "$MODEL_PID" || { log "writing the model failed"; cat "$WORK/model.log" >&2; exit 1; }
fi
step_done model_done_s "$t_model"

log "3/3 replay"
t=$SECONDS
ARGS=(--llama-server "$BIN" --model "$MODEL" "${NGL[@]}" --ctx-size "$CTX" --cache-ram-mib "${CACHE_RAM_MIB:-16384}"
      --top-k 100,20 --modes "${MODES:-baseline,aligned,aligned+superset}" --flush per-mode --max-tokens "${MAX_TOKENS:-2}"
      --out "$OUT" --label "$KIND" --server-log "$OUT/llama-server.log")
[[ -n "${CONVERSATIONS:-}" ]] && ARGS+=(--conversations "$CONVERSATIONS")
[[ -n "${REQUESTS_PER_RUN:-}" ]] && ARGS+=(--requests-per-run "$REQUESTS_PER_RUN")
# one device command may run 600 s: no new (k, mode) group starts after TOTAL_BUDGET_S (default 540) minus
# what the build took and a margin for the group in flight; run the script again on the warm machine
# to finish (the build is then a no-op and the model is reused)
[[ "$KIND" == gpu ]] && TOTAL_BUDGET_S="${TOTAL_BUDGET_S:-540}"
if [[ -z "${DEADLINE_S:-}" && -n "${TOTAL_BUDGET_S:-}" ]]; then
    DEADLINE_S=$(( TOTAL_BUDGET_S - SECONDS - 60 )); (( DEADLINE_S < 30 )) && DEADLINE_S=30
fi
[[ -n "${DEADLINE_S:-}" ]] && ARGS+=(--deadline-s "$DEADLINE_S")
PYTHONUNBUFFERED=1 "$PY" -m benchmarks.replay "$IN/prompts.json.gz" "${ARGS[@]}"
step_done replay_s "$t"
echo "\"total_s\": $SECONDS, \"kind\": \"$KIND\"}" >> "$STEPS"
cat "$STEPS"
