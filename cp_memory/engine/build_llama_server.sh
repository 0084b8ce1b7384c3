#!/usr/bin/env bash
# Build llama.cpp's `llama-server` (CPU only) from the llama.cpp source vendored in the
# llama-cpp-python sdist on PyPI, into a versioned cache directory. Ships inside the package: run it as
# `python -m cp_memory.engine.build` (installed), or `scripts/build_llama_server.sh` (a checkout):
#
#     ${CP_MEMORY_CACHE:-$HOME/.cache/cp_memory}/llama.cpp-<version>/bin/llama-server
#
# Why from the sdist: no prebuilt llama.cpp binary on PyPI runs on every x86-64 CPU we target
# (one crashed with "illegal instruction") and Debian bookworm ships no llama.cpp package; PyPI
# is reachable from CI, GitHub releases are not.
#
# Idempotent: when the binary is already there and runs, it prints its path and exits at once.
# Only the `llama-server` target is built (about 5-10 minutes on 2 cores). The web UI is neither
# built (needs npm) nor downloaded (needs Hugging Face); the server runs with --no-webui anyway.
#
# Environment:
#   LLAMA_CPP_PYTHON_VERSION  sdist version to build from (default below)
#   LLAMA_CPP_SDIST           path to an already downloaded llama_cpp_python-<v>.tar.gz (skips pip)
#   CP_MEMORY_CACHE           cache root (default $HOME/.cache/cp_memory)
#   PYTHON                    python whose pip downloads the sdist (python -m cp_memory.engine.build:
#                             that python; scripts/build_llama_server.sh: .venv/bin/python; else python3)
#   JOBS                      parallel compile jobs (default: nproc)
#   GGML_NATIVE               ON (default: tune for this CPU) or OFF (portable x86-64 build)
#   GGML_AMX                  OFF (default) or ON: compile ggml's Intel AMX kernels into a native
#                             build. Off because they died with SIGILL (Q4 models) in a VM whose
#                             CPU advertises AMX; BUILD_INFO records "amx=off" and LlamaServer
#                             then keeps llama.cpp's weight repacking on.
#
# Prints the binary's path as the last line of stdout.
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE_ROOT="${CP_MEMORY_CACHE:-$HOME/.cache/cp_memory}"
DEST="$CACHE_ROOT/llama.cpp-$VERSION"
BIN="$DEST/bin/llama-server"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
NATIVE="${GGML_NATIVE:-ON}"
AMX="${GGML_AMX:-OFF}"

log() { echo "[build_llama_server] $*" >&2; }

if [[ -x "$BIN" ]] && "$BIN" --version >/dev/null 2>&1; then
    log "already built: $BIN"
    echo "$BIN"
    exit 0
fi

for tool in cmake c++ tar; do
    command -v "$tool" >/dev/null 2>&1 || { log "missing build tool: $tool (apt-get install cmake g++)"; exit 1; }
done

mkdir -p "$CACHE_ROOT"
# one build at a time per cache dir (two CI jobs or two shells must not race)
exec 9>"$CACHE_ROOT/.llama.cpp-$VERSION.lock"
if command -v flock >/dev/null 2>&1; then
    flock 9
    if [[ -x "$BIN" ]] && "$BIN" --version >/dev/null 2>&1; then
        log "built by a concurrent run: $BIN"
        echo "$BIN"
        exit 0
    fi
fi

PYTHON="${PYTHON:-python3}"

WORK="$CACHE_ROOT/.build-llama.cpp-$VERSION"
mkdir -p "$WORK"
start=$(date +%s)

SDIST="${LLAMA_CPP_SDIST:-}"
if [[ -z "$SDIST" ]]; then
    SDIST="$(ls "$WORK"/llama_cpp_python-"$VERSION".tar.gz 2>/dev/null || true)"
fi
if [[ -z "$SDIST" ]]; then
    log "downloading llama-cpp-python==$VERSION sdist with $PYTHON -m pip"
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: \
        "llama-cpp-python==$VERSION" -d "$WORK" >&2
    SDIST="$WORK/llama_cpp_python-$VERSION.tar.gz"
fi
[[ -f "$SDIST" ]] || { log "sdist not found: $SDIST"; exit 1; }

SRC="$WORK/src"
if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
    log "extracting vendor/llama.cpp from $(basename "$SDIST")"
    rm -rf "$WORK/extract" "$SRC"
    mkdir -p "$WORK/extract"
    tar -xzf "$SDIST" -C "$WORK/extract" --wildcards "*/vendor/llama.cpp/*"
    mv "$WORK"/extract/*/vendor/llama.cpp "$SRC"
    rm -rf "$WORK/extract"
fi

GEN=()
if command -v ninja >/dev/null 2>&1; then GEN=(-G Ninja); fi

# -march=native turns on every ISA extension the CPU reports, AMX included; an explicit -mno-*
# wins over -march whatever the order (GCC and Clang), so these keep AMX out of a native build.
# (A portable build, GGML_NATIVE=OFF, has ggml's GGML_AMX_* options off by default anyway.)
NO_AMX=""
if [[ "$NATIVE" == "ON" && "$AMX" != "ON" ]] \
        && echo 'int main(void){return 0;}' | c++ -x c++ -mno-amx-tile -mno-amx-int8 -mno-amx-bf16 \
            -fsyntax-only - >/dev/null 2>&1; then
    NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
fi

log "configuring (GGML_NATIVE=$NATIVE, AMX ${NO_AMX:+left out}${NO_AMX:-as the CPU has it}, jobs=$JOBS)"
cmake -S "$SRC" -B "$WORK/build" "${GEN[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_FLAGS="${CFLAGS:-} $NO_AMX" \
    -DCMAKE_CXX_FLAGS="${CXXFLAGS:-} $NO_AMX" \
    -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE="$NATIVE" \
    -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF \
    -DGGML_BACKEND_DL=OFF >&2

log "building target llama-server"
cmake --build "$WORK/build" --config Release --target llama-server -j "$JOBS" >&2

built="$(find "$WORK/build" -type f -name llama-server -perm -u+x | head -n 1)"
[[ -n "$built" ]] || { log "build finished but no llama-server binary found"; exit 1; }
"$built" --version >/dev/null 2>&1 || { log "built binary does not run: $built"; exit 1; }

mkdir -p "$DEST/bin"
cp "$built" "$BIN.tmp.$$"
mv -f "$BIN.tmp.$$" "$BIN"
secs=$(( $(date +%s) - start ))
{
    echo "llama-cpp-python sdist: $VERSION"
    "$BIN" --version 2>&1 | head -n 2
    echo "GGML_NATIVE=$NATIVE amx=$([[ -n "$NO_AMX" || "$NATIVE" != "ON" ]] && echo off || echo on) jobs=$JOBS build_seconds=$secs"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //')"
} > "$DEST/BUILD_INFO"
log "built in ${secs}s: $BIN"
if [[ -z "${KEEP_BUILD_DIR:-}" ]]; then rm -rf "$WORK"; fi
echo "$BIN"
