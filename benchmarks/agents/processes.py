"""Servers the agent benchmarks start as processes: the cp_memory gateway (its own CLI,
``python -m cp_memory.gateway --upstream URL --port 0``) and LiteLLM's proxy (from its own virtualenv).

:class:`ServerProcess` starts a command, reads its merged output on a thread, and waits until a line names the
URL it listens on (or its port); it stops the process (terminate, then kill) on exit.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx

__all__ = ["ServerProcess", "gateway_process", "litellm_binary", "litellm_process", "tree_cpu_seconds"]

#: the line a server prints once bound: ``listening on http://127.0.0.1:PORT`` (the gateway's CLI, the
#: latency benchmark's upstream, the scripted server's CLI)
_LISTENING = re.compile(r"listening on https?://[^\s/]+:(?P<port>\d{2,5})", re.IGNORECASE)


class ServerProcess:
    """``with ServerProcess(args) as p: ... p.url ...``: a server process, ready once it printed its
    ``listening on URL`` line (or, given a fixed ``port``, once ``ready_path`` answers)."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        ready_path: str | None = None,
        timeout: float = 120.0,
        cwd: str | Path | None = None,
    ) -> None:
        self.args = list(args)
        self.env = dict(env) if env is not None else None
        self.port = port
        self.ready_path = ready_path
        self.timeout = timeout
        self.cwd = cwd
        self.lines: list[str] = []
        #: headers a client must send (e.g. LiteLLM's master key)
        self.headers: dict[str, str] = {}
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError(f"{self.args[0]} did not say which port it listens on")
        return f"http://127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system) the process and its live descendants used so far (Linux ``/proc``; None
        elsewhere or before the start)."""
        return None if self._proc is None else tree_cpu_seconds(self._proc.pid)

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if self.port is None:
                m = _LISTENING.search(line)
                if m:
                    self.port = int(m.group("port"))

    def _ready(self) -> bool:
        if self.port is None:
            return False
        if self.ready_path is None:
            return True
        try:
            return httpx.get(self.url + self.ready_path, timeout=2).status_code < 500
        except httpx.HTTPError:
            return False

    def start(self) -> ServerProcess:
        self._proc = subprocess.Popen(
            self.args,
            env=self.env,
            cwd=self.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"{self.args[0]} exited ({self._proc.returncode}):\n" + "\n".join(self.lines[-30:]))
            if self._ready():
                return self
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"{self.args[0]} not ready in {self.timeout:.0f} s:\n" + "\n".join(self.lines[-30:]))

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        if self._reader is not None:
            self._reader.join(timeout=5)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system seconds) of ``pid`` from ``/proc/PID/stat``."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds used by ``pid`` and every live descendant (None without ``/proc``)."""
    if not Path("/proc").is_dir():
        return None
    stats = {int(p.name): _stat(int(p.name)) for p in Path("/proc").iterdir() if p.name.isdigit()}
    children: dict[int, list[int]] = {}
    for child, stat in stats.items():
        if stat is not None:
            children.setdefault(stat[0], []).append(child)
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        stat = stats.get(current)
        if stat is not None:
            total += stat[1]
        todo += children.get(current, [])
    return total


def gateway_process(
    upstream: str, *extra: str, python: str | None = None, env_extra: Mapping[str, str] | None = None
) -> ServerProcess:
    """The cp_memory gateway in front of ``upstream``, on a free port, started by its own CLI with this
    checkout first on ``PYTHONPATH`` (``env_extra``: more environment, e.g. ``CP_GATEWAY_SECRET``)."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ) | dict(env_extra or {})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    args = [python or sys.executable, "-m", "cp_memory.gateway", "--upstream", upstream, "--port", "0", *extra]
    return ServerProcess(args, env=env, cwd=root)


def litellm_binary() -> Path | None:
    """LiteLLM's ``litellm`` CLI from the virtualenv scripts/setup_harnesses.sh makes (None when absent)."""
    cache = Path(os.environ.get("CP_MEMORY_CACHE") or Path.home() / ".cache" / "cp_memory")
    binary = cache / "litellm-venv" / "bin" / "litellm"
    return binary if binary.exists() else None


def litellm_config(upstream: str) -> str:
    """A LiteLLM proxy config that passes every model through to an OpenAI-compatible ``upstream``."""
    return "\n".join(
        [
            "model_list:",
            '  - model_name: "*"',
            "    litellm_params:",
            '      model: "openai/*"',
            f'      api_base: "{upstream.rstrip("/")}/v1"',
            '      api_key: "sk-upstream-placeholder"',
            "litellm_settings:",
            "  drop_params: false",
            "  telemetry: false",
            "",
        ]
    )


def litellm_process(upstream: str, port: int, workdir: Path, *, config: str | None = None) -> ServerProcess:
    """LiteLLM's proxy on ``port`` passing through to ``upstream`` (offline: the local model-cost map);
    ``config``: its YAML config (default :func:`litellm_config`)."""
    binary = litellm_binary()
    if binary is None:
        raise FileNotFoundError("LiteLLM's proxy not installed: run scripts/setup_harnesses.sh")
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "litellm.yaml"
    path.write_text(config or litellm_config(upstream), encoding="utf-8")
    key = "sk-" + secrets.token_hex(16)  # LiteLLM refuses to start without a master key
    env = dict(os.environ)
    env.update(
        {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_TELEMETRY": "False",
            "LITELLM_LOG": "ERROR",
            "LITELLM_MASTER_KEY": key,
        }
    )
    args = [str(binary), "--config", str(path), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
    proc = ServerProcess(args, env=env, port=port, ready_path="/health/liveliness", timeout=180, cwd=workdir)
    proc.headers = {"authorization": f"Bearer {key}"}
    return proc
