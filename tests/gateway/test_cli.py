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
