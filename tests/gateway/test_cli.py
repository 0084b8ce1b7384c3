"""The command line: ``python -m cp_memory.gateway --upstream URL --port 0`` says where it listens and serves;
bad settings are a clear message and exit code 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx

from cp_memory.gateway.cli import config_from, parser
from cp_memory.gateway.config import GatewayConfig
from cp_memory.gateway.protocols import Api
from tests.loopback import loopback_engine

ROOT = Path(__file__).resolve().parents[2]


def test_port_zero_picks_a_free_port_and_says_which() -> None:
    models = b'{"object": "list", "data": [{"id": "m", "owned_by": "vllm"}]}'
    with loopback_engine(lambda req: (200, {"content-type": "application/json"}, models)) as upstream:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        cmd = [sys.executable, "-m", "cp_memory.gateway", "--upstream", upstream.url, "--port", "0"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        try:
            line = proc.stdout.readline() if proc.stdout else ""
            found = re.match(r"listening on (http://127\.0\.0\.1:(\d+)) \(upstream (\S+), (\w+)\)", line)
            assert found, line
            assert found.group(4) == "vllm"  # auto-detected from the engine's /v1/models
            assert httpx.get(found.group(1) + "/v1/models").json()["data"][0]["id"] == "m"
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def test_bad_settings_are_a_clear_message() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "cp_memory.gateway", "--upstream", "http://127.0.0.1:1", "--host", "0.0.0.0"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert out.returncode == 2 and "allow_remote" in out.stderr


def test_every_cli_default_is_the_configs() -> None:
    config = config_from(parser().parse_args(["--upstream", "http://127.0.0.1:8000/v1"]))
    defaults = GatewayConfig(upstream="http://127.0.0.1:8000/v1")
    assert config == defaults.model_copy(update={"gateway_key": config.gateway_key, "secret": config.secret})
    assert config.upstream_base == "http://127.0.0.1:8000"


def test_content_on_off_or_steps() -> None:
    """``--content`` sets the content rules' steps (``GatewayConfig.content_steps``); a bad word is exit 2."""
    from cp_memory.gateway.content.switches import DEFAULT_STEPS, ContentStep

    def steps(*extra: str) -> frozenset[ContentStep]:
        return config_from(parser().parse_args(["--upstream", "http://127.0.0.1:8000", *extra])).content_steps

    assert steps() == steps("--content", "on") == DEFAULT_STEPS
    assert steps("--content", "off") == frozenset()
    assert steps("--content", "find, dedup") == {ContentStep.FIND, ContentStep.DEDUP}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for bad, says in (("find,everything", "order-note"), ("dedup", "needs 'find'")):
        cmd = [sys.executable, "-m", "cp_memory.gateway", "--upstream", "http://127.0.0.1:1", "--content", bad]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
        assert out.returncode == 2 and says in out.stderr, out.stderr


def test_tool_schema_on_or_off() -> None:
    """``--tool-schema`` sets ``GatewayConfig.tool_schema`` (on by default: ``$schema`` leaves tool schemas)."""

    def on(*extra: str) -> bool:
        return config_from(parser().parse_args(["--upstream", "http://127.0.0.1:8000", *extra])).tool_schema

    assert on() is on("--tool-schema", "on") is True
    assert on("--tool-schema", "off") is False


def test_the_content_flag_reaches_the_rules_and_metrics_count_their_rewrites() -> None:
    """A tool result read twice: with ``--content on`` the third request's copy becomes a pointer and
    ``/metrics`` counts the rewrite; with ``--content off`` the client's bytes go out and nothing is counted."""
    from tests.gateway.content_sessions import tool_session
    from tests.gateway.test_content import A, B
    from tests.gateway.test_content_app import KEY, ok

    from .conftest import running_gateway

    bodies = tool_session(Api.CHAT, [A, B, A])
    counted = {}
    for flag in ("on", "off"):
        steps = config_from(parser().parse_args(["--upstream", "http://127.0.0.1:1", "--content", flag])).content_steps
        with loopback_engine(ok) as upstream, running_gateway(upstream.url, content_steps=steps) as gw:
            for body in bodies:
                answer = httpx.post(gw.url + "/v1/chat/completions", json=body, headers=KEY, timeout=30)
                assert answer.status_code == 200
            metrics = httpx.get(gw.url + "/metrics", timeout=30).text
            counted[flag] = (
                _counter(metrics, "cp_gateway_content_rewritten_segments_total"),
                _counter(metrics, "cp_gateway_content_pointers_total"),
            )
            sent_last = upstream.requests[-1].body
        assert (sent_last == bodies[2]) is (flag == "off")
    assert counted["on"][0] >= 1 and counted["on"][1] >= 1
    assert counted["off"] == (0.0, 0.0)


def _counter(page: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", page, re.MULTILINE)
    assert found, name
    return float(found.group(1))


def test_a_short_secret_is_refused_at_start() -> None:
    """A secret under 16 bytes would make every OpenAI request fail open (its prompt_cache_key hash refuses it):
    the configuration says so instead."""
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="at least 16 bytes"):
        GatewayConfig(upstream="http://127.0.0.1:9", secret="bench")
    assert GatewayConfig(upstream="http://127.0.0.1:9", secret="").secret is not None  # empty: random per process
