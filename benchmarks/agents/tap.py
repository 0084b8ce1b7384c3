"""The recording tap: a small HTTP proxy between an arm of the replay and the engine, so every arm is measured
at the same place: the bytes it sent upstream, and the engine's own usage answer.

``with Tap(upstream, headers=engine.headers) as tap: ... tap.url ...``: every request is forwarded to
``upstream`` (its ``headers`` replace the arm's credentials: the engine's key never passes through an arm), the
answer streamed back as it comes (the connection closed at its end). Each request is kept as a
:class:`Tapped` record (path, the raw body the arm sent, the upstream's status and usage as read from its JSON or
SSE answer by the gateway's own reader, when it arrived and the headers the arm sent). :meth:`Tap.take` hands
over what was answered since the last call; :meth:`Tap.wait_idle` waits until no request is being forwarded.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from cp_memory.gateway.usage_tap import SSETap, body_usage
from cp_memory.providers.usage import CacheUsage

__all__ = ["Tap", "Tapped"]

log = logging.getLogger(__name__)

#: request headers not forwarded (hop-by-hop, recomputed, or credentials the tap replaces)
_DROP_REQUEST = frozenset(
    {"host", "content-length", "connection", "transfer-encoding", "accept-encoding", "authorization", "x-api-key"}
)
#: answer headers not passed back (the tap closes the connection at the end of the body instead)
_DROP_ANSWER = frozenset({"content-length", "connection", "transfer-encoding", "content-encoding", "keep-alive"})
_MAX_EVENT_BYTES = 4 << 20


@dataclass(frozen=True)
class Tapped:
    """One request an arm sent upstream: its ``method``, ``path``, raw ``body``, the upstream's ``status`` and
    ``usage`` (zeros when the answer carried none), when it reached the tap (``arrived``, ``time.monotonic()``)
    and the ``headers`` the arm sent (lower-cased, as forwarded before the tap's own replaced the credentials)."""

    method: str
    path: str
    body: bytes
    status: int
    usage: CacheUsage
    arrived: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        """The body parsed (None when it is not JSON)."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
        log.debug("tap %s", format % args)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self._forward("GET", b"")

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self._forward("POST", self.rfile.read(int(self.headers.get("content-length") or 0)))

    def _forward(self, method: str, body: bytes) -> None:
        tap = self.server.owner
        with tap.forwarding():
            self._forward_counted(tap, method, body)

    def _forward_counted(self, tap: Tap, method: str, body: bytes) -> None:
        arrived = time.monotonic()
        sent_headers = {k.lower(): v for k, v in self.headers.items()}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _DROP_REQUEST}
        headers |= dict(tap.headers) | {"accept-encoding": "identity"}
        reader = SSETap(_MAX_EVENT_BYTES)
        status, whole = 502, b""
        try:
            with self._open(tap, method, body, headers) as answer:
                status = answer.status_code
                self.send_response(status)
                for name, value in answer.headers.items():
                    if name.lower() not in _DROP_ANSWER:
                        self.send_header(name, value)
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                streamed = "text/event-stream" in answer.headers.get("content-type", "")
                for chunk in answer.iter_raw():
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    reader.feed(chunk) if streamed else None
                    whole += b"" if streamed else chunk
        except (httpx.HTTPError, OSError) as exc:
            log.warning("tap: %s %s failed: %s", method, self.path, exc)
            if status == 502:
                self.send_error(502, str(exc)[:200])
        reader.close()
        usage = reader.usage if reader.events else body_usage(whole)
        tap.keep(Tapped(method, self.path, body, status, usage, arrived, sent_headers))

    def _open(self, tap: Tap, method: str, body: bytes, headers: dict[str, str]) -> Any:
        """The upstream's answer, opened; a pooled connection the engine closed while idle (it answers nothing:
        ``RemoteProtocolError`` before any byte) is dropped and the request sent once more on a fresh one."""
        for attempt in (1, 2):
            request = tap.client.build_request(method, tap.upstream + self.path, content=body, headers=headers)
            try:
                return _Opened(tap.client.send(request, stream=True))
            except httpx.RemoteProtocolError:
                if attempt == 2:
                    raise
                log.debug("tap: %s %s: the upstream closed an idle connection; sending again", method, self.path)
        raise AssertionError("unreachable")


class _Opened:
    """An opened streamed answer as a context manager (closed on exit)."""

    def __init__(self, answer: httpx.Response) -> None:
        self.answer = answer

    def __enter__(self) -> httpx.Response:
        return self.answer

    def __exit__(self, *exc: object) -> None:
        self.answer.close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: Tap


class Tap:
    """The recording proxy in front of ``upstream`` (see the module docstring); binds 127.0.0.1, a free port."""

    def __init__(self, upstream: str, *, headers: Mapping[str, str] | None = None, timeout: float = 900) -> None:
        self.upstream = upstream.rstrip("/")
        self.headers = dict(headers or {})
        self.client = httpx.Client(timeout=timeout)
        self._kept: list[Tapped] = []
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._busy = 0
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the tap is not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def keep(self, record: Tapped) -> None:
        with self._lock:
            self._kept.append(record)

    @contextmanager
    def forwarding(self) -> Iterator[None]:
        """Counts a request being forwarded (see :meth:`wait_idle`)."""
        with self._lock:
            self._busy += 1
        try:
            yield
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Wait until no request is being forwarded (False: still busy after ``timeout`` seconds)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout=timeout)

    def take(self) -> list[Tapped]:
        """Every request answered since the last call, in the order their answers ended."""
        with self._lock:
            out, self._kept = self._kept, []
        return out

    def __enter__(self) -> Tap:
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="replay-tap", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.client.close()
