"""Fixtures for engine tests: a real llama-server on a random-weight model, and a tiny loopback
HTTP server that answers whatever a test tells it to (for malformed streams and error codes)."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
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

Payload = bytes | Iterable[bytes]
Responder = Callable[["FakeRequest"], tuple[int, dict[str, str], Payload]]


@dataclass
class FakeRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    t: float = 0.0  #: time.monotonic() on arrival
    sent: int = 0  #: body bytes the server managed to write
    complete: bool = False  #: the whole body was written (the client did not hang up first)


@dataclass
class FakeEngine:
    url: str
    requests: list[FakeRequest] = field(default_factory=list)
    responder: Responder | None = None
    #: set at teardown: streaming responders should end when it is set
    closing: threading.Event = field(default_factory=threading.Event)


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
            req = FakeRequest(self.command, self.path, dict(self.headers), body, time.monotonic())
            state.requests.append(req)
            if state.responder is None:
                status, headers, payload = 404, {"content-type": "text/plain"}, b"no responder"
            else:
                status, headers, payload = state.responder(req)
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            if isinstance(payload, bytes):
                self.send_header("content-length", str(len(payload)))
                payload = [payload]
            self.end_headers()  # without a length (HTTP/1.0), the body ends when we close
            try:
                for chunk in payload:
                    if state.closing.is_set():
                        return
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    req.sent += len(chunk)
                req.complete = True
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading: what the bounds are for

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
        state.closing.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


# ---------------------------------------------------------------------------------------------
# both clients behind one face
# ---------------------------------------------------------------------------------------------


class AsyncAsSync:
    """An :class:`AsyncEngineClient` behind a blocking facade: each call runs in a fresh event
    loop with a fresh client, so a test written once checks that both clients behave the same."""

    def __init__(self, url: str, **kw: Any) -> None:
        self.url, self.kw = url, kw

    def __getattr__(self, name: str) -> Callable[..., Any]:
        from cp_memory.engine import AsyncEngineClient

        async def call(*args: Any, **kwargs: Any) -> Any:
            async with AsyncEngineClient(self.url, **self.kw) as client:
                return await getattr(client, name)(*args, **kwargs)

        return lambda *args, **kwargs: asyncio.run(call(*args, **kwargs))

    def __enter__(self) -> AsyncAsSync:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


MakeClient = Callable[..., Any]


@pytest.fixture(params=["sync", "async"])
def make_client(request: pytest.FixtureRequest) -> MakeClient:
    """``make_client(url, **kw)``: an EngineClient, or an AsyncEngineClient driven through
    :class:`AsyncAsSync`, with fast retries (2 extra attempts, 10-50 ms apart)."""
    from cp_memory.engine import EngineClient

    def make(url: str, **kw: Any) -> Any:
        kw = {"max_retries": 2, "retry_wait_s": 0.01, "retry_wait_max_s": 0.05, **kw}
        return EngineClient(url, **kw) if request.param == "sync" else AsyncAsSync(url, **kw)

    return make
