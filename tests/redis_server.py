"""A private redis-server for tests: a free loopback port, a temporary folder, stopped at the end.

Nothing depends on a server the tests did not start. Without the binary (``scripts/setup.sh`` installs
``redis-server`` from the Debian archive) the tests skip locally and fail in strict CI mode
(:func:`tests.support.missing`). :class:`StallProxy` sits between a client and the server and can stop
forwarding (a network stall), :meth:`RedisServer.kill` / :meth:`RedisServer.start` stop and restart the
server on the same port (its data is gone: no persistence, as a crashed cache would come back).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support import missing

__all__ = ["RedisServer", "StallProxy", "redis_binary", "running_redis"]


def redis_binary() -> str:
    """The redis-server binary, or skip/fail (strict CI) naming how to install it."""
    path = shutil.which("redis-server")
    if path is None:
        missing("redis-server is not installed (scripts/setup.sh: apt-get install -y redis-server)")
    try:
        import redis  # noqa: F401
    except ImportError:
        missing("the redis extra is not installed: pip install 'cp-memory[redis]'")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One redis-server process on 127.0.0.1:<port>, data in ``folder`` (nothing written to disk)."""

    def __init__(self, folder: Path, *, maxmemory: str | None = None, policy: str = "noeviction") -> None:
        self.binary = redis_binary()
        self.folder = folder
        self.port = free_port()
        self.maxmemory = maxmemory
        self.policy = policy
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.folder)]
        args += ["--save", "", "--appendonly", "no", "--protected-mode", "yes", "--daemonize", "no"]
        if self.maxmemory is not None:
            args += ["--maxmemory", self.maxmemory, "--maxmemory-policy", self.policy]
        log = open(self.folder / "redis.log", "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.folder)
        log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {(self.folder / 'redis.log').read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not answer PING within 10 s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def client(self):  # type: ignore[no-untyped-def]
        import redis

        return redis.Redis.from_url(self.url)


@contextlib.contextmanager
def running_redis(folder: Path, **options: str) -> Iterator[RedisServer]:
    server = RedisServer(folder, **options)
    server.start()
    try:
        yield server
    finally:
        server.kill()


class StallProxy:
    """A TCP proxy 127.0.0.1:<port> -> the server; :meth:`stall` stops forwarding (connections stay open)."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.forwarding = threading.Event()
        self.forwarding.set()
        self._closed = threading.Event()
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stall(self) -> None:
        self.forwarding.clear()

    def resume(self) -> None:
        self.forwarding.set()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self._socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        while not self._closed.is_set():
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                return
            while not self.forwarding.is_set() and not self._closed.is_set():
                time.sleep(0.01)  # stalled: hold the bytes, as a dead link would
            with contextlib.suppress(OSError):
                dst.sendall(data)

    def close(self) -> None:
        self._closed.set()
        self.forwarding.set()
        with contextlib.suppress(OSError):
            self.listener.close()
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.close()
