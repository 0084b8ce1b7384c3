"""Running the real agent harnesses against a base URL: Claude Code (``claude -p``) and Codex (``codex exec``).

Both come from npm (``scripts/setup_harnesses.sh`` installs them into ``~/.cache/cp_memory/npm``). Each run gets
a scratch ``HOME`` (no user settings, no credentials, no history) and talks only to ``base_url``: Claude Code
through ``ANTHROPIC_BASE_URL`` with its non-essential traffic, telemetry and auto-updater off; Codex through a
``config.toml`` model provider (``base_url``, ``wire_api = "responses"``) in its scratch ``CODEX_HOME``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CLAUDE_CODE_VERSION",
    "CODEX_VERSION",
    "HarnessRun",
    "harness_binary",
    "harness_version",
    "run_claude",
    "run_codex",
]

#: the versions scripts/setup_harnesses.sh installs (and the committed traces were recorded with)
CLAUDE_CODE_VERSION = "2.1.328"
CODEX_VERSION = "0.169.0"
#: Claude Code's tools the scripted tasks use, allowed without a prompt in ``-p`` mode
CLAUDE_ALLOWED_TOOLS = "Read,Grep,Glob,Bash"


def _npm_bin() -> Path:
    cache = Path(os.environ.get("CP_MEMORY_CACHE") or Path.home() / ".cache" / "cp_memory")
    return cache / "npm" / "bin"


def harness_binary(name: str) -> Path | None:
    """``claude`` or ``codex`` as scripts/setup_harnesses.sh installed it, else on ``PATH``, else None."""
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
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False)
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


def _clean_env(home: Path) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "TERM", "TMPDIR", "SSL_CERT_FILE")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["HOME"] = str(home)
    return env


def run_claude(prompt: str, folder: Path, base_url: str, home: Path, *, timeout: float = 300) -> HarnessRun:
    """``claude -p PROMPT --output-format json`` in ``folder`` against ``base_url`` (Anthropic-shaped), with a
    scratch ``home``. Raises FileNotFoundError when Claude Code is not installed."""
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


def run_codex(prompt: str, folder: Path, base_url: str, home: Path, *, timeout: float = 300) -> HarnessRun:
    """``codex exec PROMPT`` in ``folder`` against ``base_url`` (OpenAI Responses), with a scratch ``home`` and
    ``CODEX_HOME``. Raises FileNotFoundError when Codex is not installed."""
    binary = harness_binary("codex")
    if binary is None:
        raise FileNotFoundError("codex not installed: run scripts/setup_harnesses.sh")
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(codex_config(base_url), encoding="utf-8")
    env = _clean_env(home) | {"CODEX_HOME": str(codex_home), "SCRIPTED_API_KEY": "sk-scripted-placeholder"}
    args = [
        str(binary),
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "-C",
        str(folder),
        prompt,
    ]
    done = subprocess.run(args, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return HarnessRun("codex", done.returncode, done.stdout, done.stderr)
