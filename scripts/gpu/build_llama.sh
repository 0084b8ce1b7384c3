#!/usr/bin/env bash
# Build llama-server from the packed sources (scripts/gpu/pack_sources.sh), as fast as possible:
#
#     bash scripts/gpu/build_llama.sh SRC.tar.gz BUILD_DIR cuda   # CUDA, one architecture (CUDA_ARCH, default 90)
#     bash scripts/gpu/build_llama.sh SRC.tar.gz BUILD_DIR cpu    # the same script on CPU (the rehearsal)
#
# Ninja on all cores (JOBS), only the llama-server target, static, no tests/examples/UI, no extra
# FlashAttention quant variants (GGML_CUDA_FA_ALL_QUANTS=OFF), one CUDA architecture. cuBLAS is looked up
# in the CUDA toolkit and, where a pip-installed CUDA keeps it apart (nvidia-cublas wheel next to torch),
# in Python's site-packages; a merged toolkit root of links is made then. Prints the binary's path last.
# CONFIGURE_ONLY=1: stop after CMake's configure (checks the packed sources and the toolkit quickly).
set -euo pipefail

TGZ="$1"; BUILD="$2"; KIND="${3:-cuda}"
JOBS="${JOBS:-$(nproc)}"
ARCH="${CUDA_ARCH:-90}"
log() { echo "[build_llama] $(date +%T) $*" >&2; }

mkdir -p "$BUILD"
SRC="$BUILD/llama.cpp"
if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
    tar -xzf "$TGZ" -C "$BUILD"
fi
GEN=(-G Ninja)
command -v ninja >/dev/null 2>&1 || { log "ninja not found: using make"; GEN=(); }
FLAGS=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
       -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF
       -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_BACKEND_DL=OFF -DGGML_RPC=OFF)

if [[ "$KIND" == cuda ]]; then
    NVCC="$(command -v nvcc || true)"
    [[ -n "$NVCC" ]] || { log "nvcc not found"; exit 1; }
    NVCC="$(readlink -f "$NVCC")"
    # a wrapper script (exec /usr/local/cuda-X/bin/nvcc "$@") hides the real toolkit
    if head -c 2 "$NVCC" | grep -q '#!'; then
        real="$(grep -o '/[^" ]*/bin/nvcc' "$NVCC" | head -n 1 || true)"
        [[ -n "$real" ]] && NVCC="$(readlink -f "$real")"
    fi
    CUDA_ROOT="$(dirname "$(dirname "$NVCC")")"
    find_one() { find "$@" 2>/dev/null | head -n 1 || true; }
    hdr="$(find_one "$CUDA_ROOT/include" "$CUDA_ROOT/targets" -name cublas_v2.h)"
    lib="$(find_one "$CUDA_ROOT/lib64" "$CUDA_ROOT/lib" "$CUDA_ROOT/targets" -name 'libcublas.so*')"
    drv="$(find_one "$CUDA_ROOT/lib64/stubs" "$CUDA_ROOT/lib/stubs" "$CUDA_ROOT/targets" -name 'libcuda.so*')"
    if [[ -z "$drv" ]]; then   # the driver's own library (GPU machines mount it), else none: no VMM
        drv="$(find_one /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 \
               -maxdepth 1 -name 'libcuda.so*')"
    fi
    if [[ -z "$hdr" || -z "$lib" || -z "$drv" ]]; then
        PY="${PYTHON:-python3}"
        site="$("$PY" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)"
        # shellcheck disable=SC2086
        [[ -n "$hdr" ]] || hdr="$(find_one $site -path '*nvidia*' -name cublas_v2.h)"
        # shellcheck disable=SC2086
        [[ -n "$lib" ]] || lib="$(find_one $site -path '*nvidia*' -name 'libcublas.so*')"
        [[ -n "$hdr" && -n "$lib" ]] || { log "cuBLAS not found (cublas_v2.h: ${hdr:-none}, libcublas: ${lib:-none})"; exit 1; }
        MERGED="$BUILD/cuda-root"
        rm -rf "$MERGED"; mkdir -p "$MERGED/include" "$MERGED/lib64/stubs"
        ln -s "$CUDA_ROOT/bin" "$MERGED/bin"
        [[ -d "$CUDA_ROOT/nvvm" ]] && ln -s "$CUDA_ROOT/nvvm" "$MERGED/nvvm"
        for d in "$CUDA_ROOT/include" "$(dirname "$hdr")"; do for f in "$d"/*; do ln -sf "$f" "$MERGED/include/"; done; done
        for d in "$CUDA_ROOT/lib64" "$CUDA_ROOT/lib" "$(dirname "$lib")"; do
            [[ -d "$d" ]] && for f in "$d"/*; do [[ -f "$f" ]] && ln -sf "$f" "$MERGED/lib64/"; done
        done
        for f in "$MERGED"/lib64/lib*.so.*; do   # pip wheels ship libX.so.N only: add the libX.so link
            base="${f%%.so.*}.so"; [[ -e "$base" ]] || ln -s "$f" "$base"
        done
        [[ -n "$drv" ]] && ln -sf "$drv" "$MERGED/lib64/stubs/libcuda.so"
        log "cuBLAS from $(dirname "$lib"), driver library ${drv:-none}: merged toolkit root $MERGED"
        CUDA_ROOT="$MERGED"
    fi
    # at run time llama-server must find the same libraries (cuBLAS from a wheel is on no loader path)
    echo "$CUDA_ROOT/lib64" > "$BUILD/ld_library_path"
    [[ -n "$drv" ]] || { log "no libcuda.so found: building with GGML_CUDA_NO_VMM=ON"; FLAGS+=(-DGGML_CUDA_NO_VMM=ON); }
    FLAGS+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DGGML_CUDA_FA_ALL_QUANTS=OFF -DGGML_NATIVE=OFF
            -DCUDAToolkit_ROOT="$CUDA_ROOT" -DCMAKE_CUDA_COMPILER="$NVCC")
else
    FLAGS+=(-DGGML_NATIVE=ON)
fi

t0=$(date +%s)
log "configure ($KIND, jobs $JOBS)"
cmake -S "$SRC" -B "$BUILD/build" "${GEN[@]}" "${FLAGS[@]}" >"$BUILD/configure.log" 2>&1 \
    || { tail -n 40 "$BUILD/configure.log" >&2; exit 1; }
t1=$(date +%s)
if [[ -n "${CONFIGURE_ONLY:-}" ]]; then log "configured in $((t1 - t0)) s (CONFIGURE_ONLY)"; exit 0; fi
log "build llama-server"
TIMEFORMAT='%U %S'   # CPU seconds of the build (user, system): comparable across machines and loads
{ time cmake --build "$BUILD/build" --target llama-server -j "$JOBS" >"$BUILD/build.log" 2>&1 \
    || { tail -n 60 "$BUILD/build.log" >&2; exit 1; } ; } 2> "$BUILD/build_cpu_s.txt"
read -r cpu_user cpu_sys < "$BUILD/build_cpu_s.txt" || true
t2=$(date +%s)
BIN="$(find "$BUILD/build" -type f -name llama-server -perm -u+x | head -n 1)"
"$BIN" --version >/dev/null 2>&1 || { log "built binary does not run: $BIN"; exit 1; }
steps="$(grep -c '^\[' "$BUILD/build.log" || true)"
echo "{\"kind\": \"$KIND\", \"arch\": \"$ARCH\", \"jobs\": $JOBS, \"configure_s\": $((t1 - t0)), \"build_s\": $((t2 - t1)), \"build_cpu_user_s\": ${cpu_user:-null}, \"build_cpu_sys_s\": ${cpu_sys:-null}, \"ninja_steps\": ${steps:-0}}" \
    > "$BUILD/build_times.json"
log "configure $((t1 - t0)) s, build $((t2 - t1)) s: $BIN"
echo "$BIN"
