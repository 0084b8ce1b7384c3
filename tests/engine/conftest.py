"""Fixtures for engine tests: a real llama-server on a random-weight model, and a tiny loopback
HTTP server that answers whatever a test tells it to (for malformed streams and error codes)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

REQUIRE_ENGINE = os.environ.get("CP_MEMORY_REQUIRE_ENGINE", "") not in ("", "0")


def _missing(reason: str) -> None:
    """Skip — or fail when CP_MEMORY_REQUIRE_ENGINE=1 (CI must not silently skip engine tests)."""
    if REQUIRE_ENGINE:
        pytest.fail(f"CP_MEMORY_REQUIRE_ENGINE=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def llama_binary() -> Path:
    from cp_memory.engine import find_llama_server

    try:
        return find_llama_server()
    except FileNotFoundError as exc:
        _missing(f"llama-server binary absent: {exc}")
        raise AssertionError("unreachable") from exc


@pytest.fixture(scope="session")
def random_model(llama_binary: Path) -> Path:
    from cp_memory.engine import random_model_path

    try:
        return random_model_path()
    except (FileNotFoundError, ImportError) as exc:
        _missing(f"cannot build the random test model: {exc}")
        raise AssertionError("unreachable") from exc


@pytest.fixture(scope="module")
def random_server(random_model: Path) -> Iterator[Any]:
    """One llama-server (1 slot, host prompt cache on) shared by a test module."""
    from cp_memory.engine import LlamaServer

    with LlamaServer(random_model, slots=1, ctx_size=4096, cache_ram_mib=256) as server:
        yield server


# ---------------------------------------------------------------------------------------------
# loopback fake engine
# ---------------------------------------------------------------------------------------------

Responder = Callable[["FakeRequest"], tuple[int, dict[str, str], bytes]]


@dataclass
class FakeRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeEngine:
    url: str
    requests: list[FakeRequest] = field(default_factory=list)
    responder: Responder | None = None


def sse(*events: Any, done: bool = True) -> bytes:
    """Encode events as an SSE body (dicts become JSON)."""
    out = []
    for ev in events:
        out.append("data: " + (ev if isinstance(ev, str) else json.dumps(ev)) + "\n\n")
    if done:
        out.append("data: [DONE]\n\n")
    return "".join(out).encode()


@pytest.fixture()
def fake_engine() -> Iterator[FakeEngine]:
    """An HTTP server on 127.0.0.1 (loopback only); set ``.responder`` to choose the answer."""
    state = FakeEngine(url="")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw
            req = FakeRequest(self.command, self.path, dict(self.headers), body)
            state.requests.append(req)
            if state.responder is None:
                status, headers, payload = 404, {"content-type": "text/plain"}, b"no responder"
            else:
                status, headers, payload = state.responder(req)
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = _serve
        do_POST = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
