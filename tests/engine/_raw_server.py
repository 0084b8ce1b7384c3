"""A loopback TCP server for answers an HTTP server library cannot send: a status line or headers
written one byte at a time. Failure injection only; every loop is bounded."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["RawEngine", "raw_engine", "trickle"]


@dataclass
class RawEngine:
    url: str
    #: set at teardown: answers should end when it is set
    closing: threading.Event = field(default_factory=threading.Event)
    requests: int = 0


#: ``answer(sock, n, engine)`` writes the answer to the n-th request (from 1) on ``sock``
Answer = Callable[[socket.socket, int, RawEngine], None]


def trickle(sock: socket.socket, data: bytes, engine: RawEngine, every_s: float = 1.0, for_s: float = 30.0) -> None:
    """Write ``data`` one byte every ``every_s`` seconds, for at most ``for_s`` seconds."""
    end = time.monotonic() + for_s
    for byte in data:
        if time.monotonic() > end or engine.closing.wait(every_s):
            return
        sock.sendall(bytes([byte]))


def _read_request(sock: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 1 << 20:
        chunk = sock.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return
        body += chunk


@contextmanager
def raw_engine(answer: Answer) -> Iterator[RawEngine]:
    """Serve on 127.0.0.1: read each request, then let ``answer`` write to the socket."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.05)
    engine = RawEngine(url=f"http://127.0.0.1:{listener.getsockname()[1]}")

    def handle(sock: socket.socket, n: int) -> None:
        with sock, contextlib.suppress(OSError):
            _read_request(sock)
            answer(sock, n, engine)

    def serve() -> None:
        while not engine.closing.is_set():
            try:
                sock, _ = listener.accept()
            except OSError:  # a timeout (TimeoutError is an OSError) or a closed listener
                continue
            engine.requests += 1
            threading.Thread(target=handle, args=(sock, engine.requests), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield engine
    finally:
        engine.closing.set()
        thread.join(timeout=5)
        listener.close()
