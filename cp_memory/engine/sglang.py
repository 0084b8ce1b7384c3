"""GPU engine: an SGLang server (RadixAttention prefix cache) as a managed subprocess.

Only usable where the ``sglang`` package and a CUDA/ROCm GPU exist (``pip install 'cp-memory[sglang]'``
on a GPU host). Nothing here imports sglang: :meth:`SGLangServer.start` checks that it is
installed and launches ``python -m sglang.launch_server`` in a child process, with
``--enable-cache-report`` so that ``usage.prompt_tokens_details.cached_tokens`` is filled in, which
:class:`~cp_memory.engine.client.EngineClient` reads. The client sends each request's id as ``rid``
(SGLang's own request id) and :meth:`EngineClient.flush_cache` maps to ``POST /flush_cache``.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Sequence

from ._process import gpu_visible
from ._server import ManagedServer
from .errors import SGLangUnavailable

logger = logging.getLogger(__name__)

__all__ = ["SGLangServer", "SGLangUnavailable", "sglang_available"]


def sglang_available(python: str | None = None) -> bool:
    """Whether ``sglang`` is importable by this interpreter (``python`` other than ours: assumed)."""
    if python is not None and os.path.realpath(python) != os.path.realpath(sys.executable):
        return True
    return importlib.util.find_spec("sglang") is not None


class SGLangServer(ManagedServer):
    """``python -m sglang.launch_server`` on a free loopback port; a context manager.

    ``model_path`` is a Hugging Face id or a local directory. ``mem_fraction_static`` is SGLang's
    share of GPU memory for weights + KV pool; ``context_length`` caps the context;
    ``schedule_policy="lpm"`` (longest prefix match) orders waiting requests by cached prefix, which
    helps when a batch is submitted at once. ``extra_args`` go to ``launch_server`` verbatim.
    Start-up (weights load, CUDA graph capture) takes minutes: ``startup_timeout`` defaults to 600 s.
    """

    engine_name = "sglang"
    health_path = "/health"
    kill_stragglers = True  # launch_server forks scheduler and detokenizer processes

    def __init__(
        self,
        model_path: str,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        tp_size: int = 1,
        mem_fraction_static: float | None = None,
        context_length: int | None = None,
        schedule_policy: str | None = None,
        served_model_name: str | None = None,
        enable_metrics: bool = True,
        log_level: str = "warning",
        python: str | None = None,
        startup_timeout: float = 600.0,
        stop_timeout: float = 30.0,
        log_path: str | os.PathLike[str] | None = None,
        env: dict[str, str] | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        super().__init__(
            host=host, port=port, startup_timeout=startup_timeout, stop_timeout=stop_timeout, log_path=log_path, env=env
        )
        self.model_path = model_path
        self.tp_size = tp_size
        self.mem_fraction_static = mem_fraction_static
        self.context_length = context_length
        self.schedule_policy = schedule_policy
        self.served_model_name = served_model_name
        self.enable_metrics = enable_metrics
        self.log_level = log_level
        self.python = python or sys.executable
        self.extra_args = tuple(str(a) for a in extra_args)

    def command(self, port: int) -> list[str]:
        cmd = [
            self.python,
            "-m",
            "sglang.launch_server",
            "--model-path",
            self.model_path,
            "--host",
            self.host,
            "--port",
            str(port),
            "--tp-size",
            str(self.tp_size),
            "--enable-cache-report",
            "--log-level",
            self.log_level,
        ]
        if self.enable_metrics:
            cmd.append("--enable-metrics")
        if self.mem_fraction_static is not None:
            cmd += ["--mem-fraction-static", str(self.mem_fraction_static)]
        if self.context_length is not None:
            cmd += ["--context-length", str(self.context_length)]
        if self.schedule_policy is not None:
            cmd += ["--schedule-policy", self.schedule_policy]
        if self.served_model_name is not None:
            cmd += ["--served-model-name", self.served_model_name]
        return cmd + list(self.extra_args)

    def start(self) -> SGLangServer:
        if not sglang_available(self.python):
            raise SGLangUnavailable(
                "sglang is not installed in this environment: on a GPU host run "
                "`pip install 'cp-memory[sglang]'` (see docs/engine.md); on CPU use "
                "cp_memory.engine.llamacpp.LlamaServer instead"
            )
        if not gpu_visible() and "--device" not in self.extra_args:
            raise SGLangUnavailable(
                "no GPU visible (/dev/nvidia* or /dev/kfd missing, or CUDA_VISIBLE_DEVICES empty); "
                "SGLangServer needs a GPU. On CPU use cp_memory.engine.llamacpp.LlamaServer"
            )
        super().start()
        return self

    def __enter__(self) -> SGLangServer:
        return self.start()
