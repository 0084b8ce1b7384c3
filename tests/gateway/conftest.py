"""Fixtures of the gateway tests: the gateway served by uvicorn in a thread, in front of an upstream.

``running_gateway(config)`` yields the gateway's base URL and its :class:`~cp_memory.gateway.flow.Gateway`
(sessions, savings) and stops the server afterwards. Upstreams: the local provider rules server
(``benchmarks.hosted.server.ProviderServer``, modelled), llama-server, vLLM (tests that need them say so).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the gateway extra is not installed")
pytest.importorskip("prometheus_client", reason="the gateway extra is not installed")

import uvicorn

from cp_memory.gateway import GatewayConfig, UpstreamKind, build_app
from cp_memory.gateway.flow import Gateway
from cp_memory.gateway.runner import bind


@dataclass
class Running:
    url: str
    gateway: Gateway
    app: Any


@contextmanager
def running_gateway(
    upstream: str, kind: UpstreamKind | str = UpstreamKind.COMPATIBLE, *, memory: Any = None, **settings: Any
) -> Iterator[Running]:
    config = GatewayConfig(upstream=upstream, upstream_kind=UpstreamKind(kind), port=0, **settings)
    app = build_app(config, config.upstream_kind, memory=memory)
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the gateway did not start"
        time.sleep(0.02)
    try:
        yield Running(f"http://127.0.0.1:{sock.getsockname()[1]}", app.state.gateway, app)
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


@pytest.fixture()
def provider_server() -> Iterator[Any]:
    """The local OpenAI/Anthropic stand-in applying the documented cache rules (modelled)."""
    from benchmarks.hosted.server import ProviderServer

    with ProviderServer() as server:
        yield server


# the engine tests' session fixtures: the llama-server binary and the random-weight test model
from tests.engine.conftest import llama_binary, random_model  # noqa: E402,F401
