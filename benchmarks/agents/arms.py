"""The arms of the replay: what stands between the recorded client and the engine.

Each arm is started in front of ``upstream`` (the recording :class:`~benchmarks.agents.tap.Tap`, so every
arm's upstream bytes and the engine's usage are read at the same place) and stopped afterwards:

- ``passthrough``: nothing (the client talks to the engine directly);
- ``gateway``: the cp_memory gateway, by its own CLI (``python -m cp_memory.gateway --upstream URL --port 0``);
- ``contextpilot``: upstream ContextPilot's proxy (``contextpilot==0.5.0``, its own virtualenv from
  scripts/setup_harnesses.sh; ``python -m contextpilot.server.http_server --infer-api-url URL``);
- ``litellm``: LiteLLM's proxy (its own virtualenv) with Anthropic ``cache_control`` auto-injection on
  (``cache_control_injection_points``: the system message), every model passed through to the upstream
  (Anthropic Messages as ``anthropic/*``, the Responses API as ``openai/*``);
- ``headroom``: Headroom's proxy (``headroom-ai``, its own virtualenv), where it installs.

An arm whose software is missing raises :class:`ArmUnavailable` with the reason (the replay records it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.agents.processes import ServerProcess, gateway_process, litellm_process
from cp_memory.engine import free_port

__all__ = ["ARMS", "Arm", "ArmUnavailable", "start_arm", "venv_binary"]

ARMS = ("passthrough", "gateway", "contextpilot", "litellm", "headroom")


class ArmUnavailable(RuntimeError):
    """The arm's software is not installed or does not start; the message says why."""


@dataclass(frozen=True)
class Arm:
    """A running arm: where the client sends (``url``, no ``/v1``), the headers it adds, its process."""

    name: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    process: ServerProcess | None = None


def venv_binary(venv: str, name: str) -> Path | None:
    """``<cache>/<venv>/bin/<name>`` as scripts/setup_harnesses.sh makes it (None when absent)."""
    cache = Path(os.environ.get("CP_MEMORY_CACHE") or Path.home() / ".cache" / "cp_memory")
    binary = cache / venv / "bin" / name
    return binary if binary.exists() else None


def _contextpilot(upstream: str, workdir: Path) -> ServerProcess:
    python = venv_binary("contextpilot-venv", "python")
    if python is None:
        raise ArmUnavailable("contextpilot not installed: run scripts/setup_harnesses.sh (contextpilot-venv)")
    port = free_port()
    args = [str(python), "-m", "contextpilot.server.http_server", "--host", "127.0.0.1", "--port", str(port)]
    args += ["--infer-api-url", upstream]
    workdir.mkdir(parents=True, exist_ok=True)
    # its /health answers 503 until a /reorder built an index: "/" says it runs
    return ServerProcess(args, port=port, ready_path="/", timeout=180, cwd=workdir)


def litellm_injecting_config(upstream: str, anthropic: bool) -> str:
    """LiteLLM's proxy config: every model to ``upstream``, Anthropic ``cache_control`` injected on the system
    message (LiteLLM's ``cache_control_injection_points``)."""
    model, base = ("anthropic/*", upstream.rstrip("/")) if anthropic else ("openai/*", upstream.rstrip("/") + "/v1")
    return "\n".join(
        [
            "model_list:",
            '  - model_name: "*"',
            "    litellm_params:",
            f'      model: "{model}"',
            f'      api_base: "{base}"',
            '      api_key: "sk-upstream-placeholder"',
            "      cache_control_injection_points:",
            "        - location: message",
            "          role: system",
            "litellm_settings:",
            "  drop_params: false",
            "  telemetry: false",
            "",
        ]
    )


def _headroom(upstream: str, workdir: Path, anthropic: bool) -> ServerProcess:
    binary = venv_binary("headroom-venv", "headroom")
    if binary is None:
        raise ArmUnavailable("headroom-ai not installed: run scripts/setup_harnesses.sh (headroom-venv)")
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["HOME"] = str(workdir)  # its own state and logs, not the user's
    env["HEADROOM_ALLOWED_BASE_URLS"] = upstream
    args = [str(binary), "proxy", "--host", "127.0.0.1", "--port", str(port), "--no-rate-limit"]
    args += ["--anthropic-api-url" if anthropic else "--openai-api-url", upstream]  # it adds /v1/...
    return ServerProcess(args, env=env, port=port, ready_path="/health", timeout=240, cwd=workdir)


@contextmanager
def start_arm(
    name: str,
    upstream: str,
    *,
    kind: str,
    workdir: Path,
    anthropic: bool,
    gateway_args: Sequence[str] = (),
    gateway_env: Mapping[str, str] | None = None,
) -> Iterator[Arm]:
    """Run arm ``name`` in front of ``upstream`` (``kind``: the gateway's ``--upstream-kind``; ``gateway_args``
    and ``gateway_env``: more CLI options and environment for the gateway, e.g. its mem0 store); yields it.
    Raises :class:`ArmUnavailable` when the arm's software is missing or does not start."""
    if name == "passthrough":
        yield Arm(name, upstream)
        return
    process: ServerProcess
    if name == "gateway":
        process = gateway_process(upstream, "--upstream-kind", kind, *gateway_args, env_extra=gateway_env)
    elif name == "contextpilot":
        process = _contextpilot(upstream, workdir / "contextpilot")
    elif name == "litellm":
        try:
            process = litellm_process(
                upstream, free_port(), workdir / "litellm", config=litellm_injecting_config(upstream, anthropic)
            )
        except FileNotFoundError as exc:
            raise ArmUnavailable(str(exc)) from exc
    elif name == "headroom":
        process = _headroom(upstream, workdir / "headroom", anthropic)
    else:
        raise ValueError(f"unknown arm {name!r}: choose from {', '.join(ARMS)}")
    try:
        process.start()
    except (RuntimeError, TimeoutError, OSError) as exc:
        raise ArmUnavailable(f"{name} did not start: {str(exc)[-600:]}") from exc
    try:
        yield Arm(name, process.url, dict(process.headers), process)
    finally:
        process.stop()
