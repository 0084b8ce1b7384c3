"""Lifecycle of an engine server subprocess: free loopback port, /health wait, stop by PID, and an
owner-death watchdog so that no engine outlives the process that started it."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import httpx

from ._process import Watchdog, die_with_parent_prefix, shutdown
from ._workdir import make_workdir, sweep_stale_workdirs
from .errors import ServerStartError
from .redact import redact_args, scrub, secret_values

logger = logging.getLogger(__name__)

__all__ = ["ManagedServer", "ServerStartError", "available_cpus", "free_port", "running"]


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free on ``host`` a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def available_cpus() -> int:
    """CPUs this process may run on (affinity-aware), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class ManagedServer:
    """Base class: runs ``self.command()`` on a free loopback port and waits for ``/health``.

    The process is stopped by PID (never by name) on :meth:`stop`, on context-manager exit, when
    the object is garbage collected, and at interpreter exit (``weakref.finalize``): SIGTERM to its
    process group (it runs in its own session: the server and what it spawned), SIGKILL after
    ``stop_timeout``. With ``die_with_parent`` (the default) it also never outlives this process:

    * a watchdog process (``_watchdog.py``, in its own session) holds a pipe from this process;
      when this process dies by any means (``kill -9`` included, from whichever thread the server
      was started) the pipe closes and the watchdog sends SIGTERM to the server's process group,
      SIGKILL after ``stop_timeout``, and removes the private work directory;
    * when started from the main thread on Linux, the server also runs under
      ``setpriv --pdeathsig KILL``: the kernel kills it the moment this process dies (a signal no
      handler can catch or deadlock on), should the watchdog itself have been killed.

    Work directories of dead owners (``cp_memory-*`` in the temp dir) are removed on start. The
    server's output goes to a log file (``log_path``) whose tail is quoted when start-up fails.
    Secret command-line values (``--api-key``, ``--hf-token``, ...: :mod:`.redact`) never reach a
    log line, a ``repr`` or an error message.
    """

    #: shown in messages
    engine_name = "engine"
    #: path polled until it answers 200
    health_path = "/health"
    #: after the server exits, SIGKILL whatever is left of its process group (multi-process engines)
    kill_stragglers = False

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout: float = 120.0,
        stop_timeout: float = 10.0,
        log_path: str | os.PathLike[str] | None = None,
        env: dict[str, str] | None = None,
        die_with_parent: bool = True,
    ) -> None:
        self.host = host
        self.die_with_parent = die_with_parent
        self._requested_port = port
        self.port: int | None = None
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self._log_path_arg = Path(log_path) if log_path is not None else None
        self.log_path: Path | None = None
        self._env = env
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[..., ManagedServer] | None = None
        self._workdir: Path | None = None
        self._watchdog: Watchdog | None = None
        self._secrets: list[str] = []  # secret values of the command line, masked in messages
        #: the key clients must send (``Authorization: Bearer``), None when the server takes none
        self.api_key: str | None = None
        self._started: float | None = None  # when the running process was launched (epoch seconds)

    # -- to implement ----------------------------------------------------------------------
    def command(self, port: int) -> list[str]:
        raise NotImplementedError

    # -- public ----------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError(f"{self.engine_name} server is not started")
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def workdir(self) -> Path:
        """A private temporary directory (0700), removed on :meth:`stop`, or by the watchdog or
        the next start-up sweep when this process dies without stopping the server."""
        if self._workdir is None:
            self._workdir = make_workdir(self.engine_name)
        return self._workdir

    def start(self) -> ManagedServer:
        """Launch the server and block until it is healthy (or raise :class:`ServerStartError`)."""
        if self.is_running:
            return self
        sweep_stale_workdirs()
        attempts = 1 if self._requested_port is not None else 3
        last: ServerStartError | None = None
        for _ in range(attempts):
            port = self._requested_port if self._requested_port is not None else free_port(self.host)
            try:
                self._launch(port)
                return self
            except ServerStartError as exc:
                last = exc
                # someone grabbed the free port between bind() and the server's bind(): retry
                if "bind" not in str(exc).lower() and "address" not in str(exc).lower():
                    break
        assert last is not None
        raise last

    def stop(self) -> None:
        """Stop the process by PID (SIGTERM, then SIGKILL) and wait for it to exit."""
        self._stop_process()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def restart(self) -> ManagedServer:
        """Stop and start again on the same port: the only complete cache flush for llama.cpp."""
        keep = self._requested_port
        if self.port is not None:
            self._requested_port = self.port
        self.stop()
        try:
            return self.start()
        finally:
            self._requested_port = keep

    def log_tail(self, n_bytes: int = 4000) -> str:
        """The end of the server's log, secret command-line values masked."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - n_bytes))
            return scrub(fh.read().decode(errors="replace"), self._secrets)

    def __repr__(self) -> str:
        where = self.base_url if self.port is not None else "not started"
        return f"<{type(self).__name__} {self.engine_name} {where} pid={self.pid}>"

    def __enter__(self) -> ManagedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- internals -------------------------------------------------------------------------
    def _launch(self, port: int) -> None:
        cmd = self.command(port)
        launch = (die_with_parent_prefix() if self.die_with_parent else []) + cmd
        self.log_path = self._log_path_arg or (self.workdir() / "server.log")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._secrets = secret_values(cmd) + ([self.api_key] if self.api_key else [])
        logger.info("starting %s: %s", self.engine_name, " ".join(redact_args(cmd)))
        env = None if self._env is None else {**os.environ, **self._env}
        self._started = time.time() - 1.0  # semaphores the group leaks are newer than this
        with open(self.log_path, "ab") as log:
            proc = subprocess.Popen(
                launch,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # a terminal Ctrl-C is ours to handle, not the child's
            )
            watchdog = Watchdog.start(proc.pid, self.stop_timeout, self._workdir, log) if self.die_with_parent else None
        self._proc = proc
        self._watchdog = watchdog
        self.port = port
        self._finalizer = weakref.finalize(
            self, shutdown, proc, watchdog, self.stop_timeout, self.kill_stragglers, self._started
        )
        try:
            self._wait_healthy(proc)
        except BaseException:
            self._stop_process()
            raise
        logger.info("%s server pid %d healthy at %s", self.engine_name, proc.pid, self.base_url)

    def _stop_process(self) -> None:
        proc, self._proc = self._proc, None
        watchdog, self._watchdog = self._watchdog, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if proc is not None:
            shutdown(proc, watchdog, self.stop_timeout, self.kill_stragglers, self._started)
            logger.info("%s server pid %d stopped", self.engine_name, proc.pid)
        self.port = None

    def _wait_healthy(self, proc: subprocess.Popen[bytes]) -> None:
        url = f"http://{self.host}:{self.port}{self.health_path}"
        deadline = time.monotonic() + self.startup_timeout
        delay = 0.05
        last = "no answer"
        with httpx.Client(timeout=httpx.Timeout(5.0, connect=1.0)) as http:
            while True:
                code = proc.poll()
                if code is not None:
                    raise ServerStartError(
                        f"{self.engine_name} server exited with code {code} during start-up "
                        f"(log {self.log_path}):\n{self.log_tail()}"
                    )
                try:
                    resp = http.get(url)
                    if resp.status_code == 200:
                        return
                    last = f"HTTP {resp.status_code}: {scrub(resp.text[:200], self._secrets)}"
                except httpx.HTTPError as exc:
                    last = f"{type(exc).__name__}: {exc}"
                if time.monotonic() > deadline:
                    raise ServerStartError(
                        f"{self.engine_name} server not healthy after {self.startup_timeout:.0f}s "
                        f"at {url} (last: {last}; log {self.log_path}):\n{self.log_tail()}"
                    )
                time.sleep(delay)
                delay = min(delay * 1.5, 1.0)


S = TypeVar("S", bound=ManagedServer)


@contextmanager
def running(servers: Sequence[S]) -> Iterator[list[S]]:
    """Start every server (e.g. engine replicas), yield them, stop them all — also when a start fails.

    with running([LlamaServer(model, slots=1) for _ in range(3)]) as replicas:
        urls = [r.base_url for r in replicas]
    """
    started = list(servers)
    try:
        for server in started:
            server.start()
        yield started
    finally:
        for server in started:
            server.stop()
