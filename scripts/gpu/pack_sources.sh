#!/usr/bin/env bash
# Pack the llama.cpp sources this project builds from (the copy vendored in the llama-cpp-python sdist,
# as scripts/build_llama_server.sh uses) down to what a CUDA (or CPU) `llama-server` build needs:
#
#     bash scripts/gpu/pack_sources.sh [OUT.tar.gz]        # default: results/gpu/llama-src.tar.gz
#
# Kept: the top-level CMake files, cmake/, include/, src/, common/, vendor/, licenses, ggml/ with only
# its CPU and CUDA backends, tools/server (no tests), tools/mtmd (the server links it), tools/ui's
# CMakeLists and ui.*.in templates (an empty UI is generated: no web UI is built or downloaded) and scripts/ui-assets.cmake.
# tools/CMakeLists.txt is replaced by one that adds only ui, mtmd and server. Left out: models/
# (tokenizer test vocabularies, 75 MB), docs, tests, examples, other ggml backends, other tools.
#
# Environment: LLAMA_CPP_SDIST (a llama_cpp_python-<v>.tar.gz; default: downloaded with pip like
# scripts/build_llama_server.sh), LLAMA_CPP_PYTHON_VERSION (default 0.3.36).
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:-$REPO/results/gpu/llama-src.tar.gz}"
PY="${PYTHON:-$REPO/.venv/bin/python}"
[[ -x "$PY" ]] || PY=python3
log() { echo "[pack_sources] $*" >&2; }

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
SDIST="${LLAMA_CPP_SDIST:-}"
if [[ -z "$SDIST" ]]; then
    log "downloading llama-cpp-python==$VERSION sdist with pip"
    "$PY" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$WORK" >&2
    SDIST="$WORK/llama_cpp_python-$VERSION.tar.gz"
fi
[[ -f "$SDIST" ]] || { log "sdist not found: $SDIST"; exit 1; }

log "extracting vendor/llama.cpp from $(basename "$SDIST")"
tar -xzf "$SDIST" -C "$WORK" --wildcards "*/vendor/llama.cpp/*"
SRC="$(echo "$WORK"/*/vendor/llama.cpp)"
DST="$WORK/llama.cpp"
mkdir -p "$DST/tools" "$DST/scripts" "$DST/ggml/src"

# top level and whole folders
for f in CMakeLists.txt CMakePresets.json LICENSE AUTHORS; do [[ -e "$SRC/$f" ]] && cp "$SRC/$f" "$DST/"; done
for d in cmake include src common vendor licenses; do [[ -d "$SRC/$d" ]] && cp -r "$SRC/$d" "$DST/"; done
cp "$SRC/scripts/ui-assets.cmake" "$DST/scripts/"

# ggml: everything but the other backends
cp -r "$SRC/ggml/CMakeLists.txt" "$SRC/ggml/cmake" "$SRC/ggml/include" "$DST/ggml/"
for p in "$SRC"/ggml/src/*; do
    name="$(basename "$p")"
    case "$name" in
        ggml-*) [[ -d "$p" ]] && [[ "$name" != ggml-cpu && "$name" != ggml-cuda ]] && continue ;;
    esac
    cp -r "$p" "$DST/ggml/src/"
done

# tools: server (no tests), mtmd, ui's CMakeLists only
mkdir -p "$DST/tools/server" "$DST/tools/ui"
(cd "$SRC/tools/server" && tar -cf - --exclude=./tests --exclude=./README*.md --exclude=./bench . ) | tar -xf - -C "$DST/tools/server"
cp -r "$SRC/tools/mtmd" "$DST/tools/"
rm -rf "$DST/tools/mtmd/tests" "$DST/tools/mtmd/legacy-models"
cp "$SRC/tools/ui/CMakeLists.txt" "$SRC"/tools/ui/*.in "$DST/tools/ui/"   # templates of the (empty) UI
cat > "$DST/tools/CMakeLists.txt" <<'EOF'
# packed by cp_memory scripts/gpu/pack_sources.sh: only what llama-server needs
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(ui)
add_subdirectory(mtmd)
add_subdirectory(server)
EOF
echo "llama.cpp from llama-cpp-python $VERSION sdist, packed for a llama-server build" > "$DST/PACKED_BY_CP_MEMORY"

mkdir -p "$(dirname "$OUT")"
tar -C "$WORK" -czf "$OUT" llama.cpp
log "packed $(du -sh "$DST" | cut -f1) of sources into $OUT ($(du -h "$OUT" | cut -f1))"
echo "$OUT"
