"""A ``llama-server`` launched by the replay (standard library only): restarted for a cold cache per run.

llama.cpp's host prompt cache (``--cache-ram``) cannot be cleared over HTTP, so a fair comparison
restarts the server before every (conversation, k, mode) run, as the LoCoMo benchmark does. The
server runs in its own process group and is stopped by that group's id (only what was started here).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Self

logger = logging.getLogger(__name__)

__all__ = ["LaunchedLlamaServer"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LaunchedLlamaServer:
    """``llama-server -m MODEL -np 1 -c CTX --cache-ram MiB -fa on ...`` on a free loopback port."""

    def __init__(
        self,
        binary: str | Path,
        model: str | Path,
        *,
        ctx_size: int = 8192,
        threads: int | None = None,
        cache_ram_mib: int = 2048,
        gpu_layers: int | None = None,
        extra_args: Sequence[str] = (),
        log_path: str | Path | None = None,
        start_timeout: float = 600.0,
    ) -> None:
        self.binary = Path(binary)
        self.model = Path(model)
        for what, p in (("llama-server binary", self.binary), ("model", self.model)):
            if not p.is_file():
                raise FileNotFoundError(f"{what} not found: {p}")
        self.ctx_size = ctx_size
        self.threads = threads or len(os.sched_getaffinity(0))
        self.cache_ram_mib = cache_ram_mib
        self.gpu_layers = gpu_layers
        self.extra_args = list(extra_args)
        self.log_path = Path(log_path) if log_path else None
        self.start_timeout = start_timeout
        self.port = 0
        self.restarts = 0
        self.start_s: list[float] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        flags = (
            f"--host 127.0.0.1 --port {self.port} -np 1 -c {self.ctx_size} -t {self.threads} -tb {self.threads} "
            f"--cache-ram {self.cache_ram_mib} -fa on --no-webui -a replay"
        )
        ngl = ["-ngl", str(self.gpu_layers)] if self.gpu_layers is not None else []
        return [str(self.binary), "-m", str(self.model), *flags.split(), *ngl, *self.extra_args]

    def start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self.port = _free_port()
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - kept open while the server runs
        t0 = time.perf_counter()
        self._proc = subprocess.Popen(
            self.command(),
            stdout=self._log or subprocess.DEVNULL,
            stderr=subprocess.STDOUT if self._log else subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"llama-server exited with {self._proc.returncode} while starting "
                    f"(log: {self.log_path or 'none; pass --server-log'})"
                )
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=2) as r:
                    if r.status == 200:
                        self.start_s.append(time.perf_counter() - t0)
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"llama-server not healthy after {self.start_timeout:.0f} s")

    def restart(self) -> str:
        self.stop()
        self.start()
        self.restarts += 1
        return "restart"

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)
            except ProcessLookupError:
                pass
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
