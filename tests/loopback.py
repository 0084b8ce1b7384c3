"""A loopback HTTP server that answers whatever a test tells it to: malformed streams, error codes,
trickles, huge bodies. Shared by the engine, agents and replay tests (failure injection only)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeEngine", "FakeRequest", "Payload", "Responder", "loopback_engine", "sse", "json_error"]


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


@contextmanager
def loopback_engine(responder: Responder | None = None) -> Iterator[FakeEngine]:
    """An HTTP server on 127.0.0.1 (loopback only); set ``.responder`` to choose the answer."""
    state = FakeEngine(url="", responder=responder)

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
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield state
    finally:
        state.closing.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def json_error(status: int, message: str) -> Responder:
    """A responder answering every request with ``status`` and an OpenAI-style JSON error."""
    body = json.dumps({"error": {"message": message}}).encode()
    return lambda req: (status, {"content-type": "application/json"}, body)
