"""Embedded CPU engine: llama.cpp's ``llama-server`` as a managed subprocess.

``llama-server`` keeps the KV cache of each slot's last prompt and reuses its longest common prefix
with the next prompt routed to that slot; with ``--cache-ram`` it also keeps evicted slot states in
a host-memory prompt cache and restores them when a later prompt shares their prefix. That makes
it a real prefix-caching engine on a laptop or a CPU-only CI runner.

The binary is built from source by ``python -m cp_memory.engine.build`` (the packaged
``build_llama_server.sh``; ``scripts/build_llama_server.sh`` in a checkout): no prebuilt PyPI binary runs
on every x86-64 CPU, Debian has no package. :func:`find_llama_server` locates it.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from ._server import ManagedServer, available_cpus, free_port
from .errors import LlamaServerNotFound, ServerStartError
from .random_model import (
    RandomModelSpec,
    cache_dir,
    random_model_path,
    smollm2_model_path,
)

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_LLAMA_CPP_PYTHON_VERSION",
    "LlamaServer",
    "LlamaServerNotFound",
    "RandomModelSpec",
    "ServerStartError",
    "find_llama_server",
    "free_port",
    "random_model_path",
    "smollm2_model_path",
]

#: llama-cpp-python sdist whose vendored llama.cpp ``python -m cp_memory.engine.build`` builds by default
DEFAULT_LLAMA_CPP_PYTHON_VERSION = "0.3.36"

_BUILD_HINT = (
    f"build it with `{sys.executable} -m cp_memory.engine.build` (in a checkout: scripts/build_llama_server.sh; "
    "about 5-10 minutes on 2 cores; needs cmake and a C++ compiler) or point CP_MEMORY_LLAMA_SERVER at an "
    "existing llama-server binary"
)


def _version_key(path: Path) -> tuple[int, ...]:
    m = re.search(r"llama\.cpp-([0-9.]+)", str(path))
    return tuple(int(x) for x in m.group(1).split(".") if x) if m else ()


def find_llama_server() -> Path:
    """The ``llama-server`` binary: ``$CP_MEMORY_LLAMA_SERVER``, else the newest build in
    ``${CP_MEMORY_CACHE:-~/.cache/cp_memory}/llama.cpp-<version>/bin/``.

    Raises :class:`LlamaServerNotFound` (a ``FileNotFoundError``) telling how to build it.
    """
    override = os.environ.get("CP_MEMORY_LLAMA_SERVER")
    if override:
        path = Path(override).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise LlamaServerNotFound(
            f"CP_MEMORY_LLAMA_SERVER={override!r} is not an executable file; unset it or {_BUILD_HINT}"
        )
    root = cache_dir()
    preferred = root / f"llama.cpp-{DEFAULT_LLAMA_CPP_PYTHON_VERSION}" / "bin" / "llama-server"
    candidates = [preferred] + sorted(root.glob("llama.cpp-*/bin/llama-server"), key=_version_key, reverse=True)
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise LlamaServerNotFound(f"llama-server not found under {root}; {_BUILD_HINT}")


def _amx_kernels_possible(binary: Path) -> bool:
    """The CPU advertises AMX and the build did not record that AMX was left out
    (``amx=off`` in ``BUILD_INFO``, written by scripts/build_llama_server.sh)."""
    try:
        if "amx_int8" not in Path("/proc/cpuinfo").read_text(errors="replace"):
            return False
    except OSError:
        return False
    try:
        return "amx=off" not in (binary.parent.parent / "BUILD_INFO").read_text(errors="replace")
    except OSError:
        return True


class LlamaServer(ManagedServer):
    """``llama-server`` on a free loopback port; a context manager.

    ``slots`` parallel slots (``-np``), each with ``ctx_size`` tokens of context (``-c`` is set to
    ``ctx_size * slots``); ``threads`` defaults to the CPUs this process may use; ``cache_ram_mib``
    sizes the host prompt cache (``--cache-ram``; 0 disables it, -1 = unlimited). Flash attention,
    ``/metrics`` and a private ``--slot-save-path`` (which enables ``POST /slots/{id}?action=erase``)
    are on; the web UI is off. Flags the binary does not know are dropped with a warning.
    ``repack`` (llama.cpp's weight repacking, ``--no-repack`` when off) defaults to off where
    ggml's AMX kernels could run — the CPU advertises AMX and the binary's ``BUILD_INFO`` does not
    say it was built without them: those kernels died with SIGILL in a VM here (Q4 models).

    >>> with LlamaServer(random_model_path()) as server:      # doctest: +SKIP
    ...     EngineClient(server.base_url).complete("Hello")
    """

    engine_name = "llama-server"
    health_path = "/health"

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        slots: int = 1,
        ctx_size: int = 8192,
        threads: int | None = None,
        cache_ram_mib: int = 2048,
        flash_attn: bool = True,
        metrics: bool = True,
        slot_save: bool = True,
        repack: bool | None = None,
        alias: str | None = None,
        binary: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout: float = 120.0,
        stop_timeout: float = 10.0,
        log_path: str | os.PathLike[str] | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        super().__init__(
            host=host, port=port, startup_timeout=startup_timeout, stop_timeout=stop_timeout, log_path=log_path
        )
        if slots < 1:
            raise ValueError("slots must be >= 1")
        if ctx_size < 1:
            raise ValueError("ctx_size must be >= 1")
        self.model_path = Path(model_path)
        self.slots = slots
        self.ctx_size = ctx_size
        self.threads = threads if threads is not None else available_cpus()
        self.cache_ram_mib = cache_ram_mib
        self.flash_attn = flash_attn
        self.metrics = metrics
        self.slot_save = slot_save
        self.repack = repack
        self.alias = alias or self.model_path.stem
        self._binary_arg = Path(binary) if binary is not None else None
        self.extra_args = tuple(str(a) for a in extra_args)
        self._help: str | None = None

    @property
    def binary(self) -> Path:
        return self._binary_arg if self._binary_arg is not None else find_llama_server()

    def help_text(self) -> str:
        """``llama-server --help`` (cached per instance), used to check which flags exist."""
        if self._help is None:
            try:
                out = subprocess.run([str(self.binary), "--help"], capture_output=True, timeout=30, check=False)
                self._help = (out.stdout + out.stderr).decode(errors="replace")
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise ServerStartError(f"cannot run {self.binary} --help: {exc}") from exc
        return self._help

    def version(self) -> str:
        """First line of ``llama-server --version`` (e.g. ``version: 1 (0c1e570)``)."""
        out = subprocess.run([str(self.binary), "--version"], capture_output=True, timeout=30, check=False)
        text = (out.stdout + out.stderr).decode(errors="replace").strip()
        for line in text.splitlines():
            if line.startswith("version"):
                return line
        return text.splitlines()[0] if text else "unknown"

    def _supports(self, flag: str) -> bool:
        return re.search(rf"(^|[\s,]){re.escape(flag)}([\s,=]|$)", self.help_text(), re.MULTILINE) is not None

    def _optional(self, flag: str, *values: str) -> list[str]:
        if self._supports(flag):
            return [flag, *values]
        logger.warning("%s does not support %s; running without it", self.binary, flag)
        return []

    def command(self, port: int) -> list[str]:
        if not self.model_path.is_file():
            raise ServerStartError(f"model file not found: {self.model_path}")
        cmd = [
            str(self.binary),
            "-m",
            str(self.model_path),
            "--host",
            self.host,
            "--port",
            str(port),
            "-np",
            str(self.slots),
            "-c",
            str(self.ctx_size * self.slots),
            "-t",
            str(self.threads),
            "-tb",
            str(self.threads),
            "-a",
            self.alias,
        ]
        cmd += self._optional("--cache-ram", str(self.cache_ram_mib))
        if self.flash_attn:
            if "[on|off|auto]" in self.help_text():
                cmd += ["-fa", "on"]
            else:  # older builds: a boolean switch
                cmd += self._optional("-fa")
        if self.metrics:
            cmd += self._optional("--metrics")
        cmd += self._optional("--no-webui")
        repack = self.repack if self.repack is not None else not _amx_kernels_possible(self.binary)
        if not repack:
            cmd += self._optional("--no-repack")
        if self.slot_save:
            save_dir = self.workdir() / "slots"
            save_dir.mkdir(parents=True, exist_ok=True)
            cmd += self._optional("--slot-save-path", str(save_dir) + os.sep)
        return cmd + list(self.extra_args)

    def start(self) -> LlamaServer:
        super().start()
        return self

    def __enter__(self) -> LlamaServer:
        return self.start()

    def flush_cache(self) -> bool:
        """Restart the server: llama.cpp has no HTTP endpoint that also clears ``--cache-ram``."""
        self.restart()
        return True
