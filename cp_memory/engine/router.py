"""SGLang's router (``sglang-router``, PyPI) in front of engine replicas, as a managed subprocess.

``sglang-router`` is SGLang's own gateway: a Rust HTTP proxy with a Python launcher that spreads
OpenAI-compatible requests over worker URLs. Its ``cache_aware`` policy keeps an approximate radix tree
of the request *text* each worker has served and sends a request to the worker with the longest
matching prefix when that match covers at least ``cache_threshold`` of the text; otherwise to the
worker with the smallest tree. A load safeguard overrides both when the pool is imbalanced: if
``max_load - min_load > balance_abs_threshold`` and ``max_load > balance_rel_threshold * min_load``
(load = requests in flight), the request goes to the least-loaded worker. Every
``eviction_interval_secs`` the trees are pruned to ``max_tree_size`` characters per worker.

It fronts any OpenAI-compatible worker — SGLang replicas, or llama-server instances on CPU (tested here).
Requests through it must carry a ``model`` field (``EngineClient(url, model=...)``).

    with SGLangRouter([w.base_url for w in workers]) as router:          # cache_aware, its defaults
        EngineClient(router.base_url, model="m").complete(prompt)

Workers behind an API key — a managed :class:`~cp_memory.engine.vllm.VLLMServer` requires its key on every
route but ``/health`` — need ``api_key=`` (one key for all the workers: start each ``VLLMServer`` with the same
``api_key=``). The router is started with it (its own calls to the workers) and forwards each request's
``Authorization`` header to the worker it picks, so clients send the key too: :meth:`SGLangRouter.client` and
:attr:`SGLangRouter.headers` carry it. The key reaches the launcher through its environment, never its argv
(which every local user can read). A router started without the key its workers require fails to start with
an error that says so, rather than answering 401 to every request.

    vllms = [VLLMServer(model, api_key=key) for _ in range(2)]
    with running(vllms) as ws, SGLangRouter([w.base_url for w in ws], api_key=key) as router:
        router.client(model=ws[0].served_model_name).complete(prompt)

Needs the ``router`` extra (``pip install 'cp-memory[router]'``). The launcher runs
``python -m sglang_router.launch_router`` on a free loopback port (its Prometheus exporter on another
one) and has :class:`~cp_memory.engine._server.ManagedServer`'s lifecycle: health wait, stop by PID,
dies with its owner, log tail on a failed start.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import httpx

from ..core.checks import non_negative_int
from ._server import ManagedServer, free_port
from .errors import ServerStartError, SGLangRouterUnavailable

if TYPE_CHECKING:
    from .client import EngineClient

logger = logging.getLogger(__name__)

__all__ = [
    "KEY_ENV",
    "ROUTER_POLICIES",
    "RouterPolicy",
    "SGLangRouter",
    "SGLangRouterUnavailable",
    "sglang_router_available",
]

RouterPolicy = Literal["cache_aware", "round_robin", "random", "power_of_two"]
#: the router's policies that need no extra setup
ROUTER_POLICIES: tuple[RouterPolicy, ...] = ("cache_aware", "round_robin", "random", "power_of_two")


#: the environment variable that carries the workers' API key to the launcher (kept off its argv)
KEY_ENV = "CP_SGLANG_ROUTER_WORKER_KEY"
#: runs ``sglang_router.launch_router`` with ``--api-key`` from :data:`KEY_ENV` added to its own ``sys.argv``
_KEYED_LAUNCH = (
    "import os, runpy, sys; "
    f"sys.argv = ['launch_router', *sys.argv[1:], '--api-key', os.environ.pop({KEY_ENV!r})]; "
    "runpy.run_module('sglang_router.launch_router', run_name='__main__', alter_sys=True)"
)


def sglang_router_available(python: str | None = None) -> bool:
    """Whether ``sglang_router`` is importable by this interpreter (``python`` other than ours: assumed)."""
    if python is not None and os.path.realpath(python) != os.path.realpath(sys.executable):
        return True
    return importlib.util.find_spec("sglang_router") is not None


def _check_key(api_key: str) -> str:
    if not isinstance(api_key, str) or not api_key or not api_key.isprintable():
        raise ValueError("api_key must be a non-empty printable str (the workers' key) or None")
    return api_key


def _check_url(url: str) -> str:
    if not isinstance(url, str):
        raise TypeError(f"worker URL must be a str, got {type(url).__name__}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"worker URL must look like http://host:port, got {url!r}")
    return url.rstrip("/")


class SGLangRouter(ManagedServer):
    """``sglang-router`` over ``worker_urls`` on a free loopback port; a context manager.

    Args:
        worker_urls: base URLs of the workers (``http://host:port``), e.g. ``LlamaServer.base_url``.
        policy: ``"cache_aware"`` (default), ``"round_robin"``, ``"random"`` or ``"power_of_two"``.
        cache_threshold: minimum matched share of the request text (0-1) to follow the cache
            (router default 0.3).
        balance_abs_threshold, balance_rel_threshold: the load safeguard (router defaults 64 and 1.5).
        eviction_interval_s, max_tree_size: tree pruning period (s) and size (characters per worker;
            router defaults 60 and 2**26).
        api_key: the workers' API key (a managed ``VLLMServer``'s ``api_key``; module doc), None when they
            need none. Clients of the router send it too (:meth:`client`, :attr:`headers`).
        None leaves a setting at the router's default. ``extra_args`` go to the launcher verbatim.
    """

    engine_name = "sglang-router"
    health_path = "/health"
    kill_stragglers = True

    def __init__(
        self,
        worker_urls: Sequence[str],
        *,
        policy: RouterPolicy = "cache_aware",
        cache_threshold: float | None = None,
        balance_abs_threshold: int | None = None,
        balance_rel_threshold: float | None = None,
        eviction_interval_s: int | None = None,
        max_tree_size: int | None = None,
        request_timeout_s: int | None = None,
        log_level: Literal["debug", "info", "warn", "error"] = "warn",
        python: str | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout: float = 60.0,
        stop_timeout: float = 10.0,
        log_path: str | os.PathLike[str] | None = None,
        extra_args: Sequence[str] = (),
        api_key: str | None = None,
    ) -> None:
        super().__init__(
            host=host,
            port=port,
            startup_timeout=startup_timeout,
            stop_timeout=stop_timeout,
            log_path=log_path,
            env=None if api_key is None else {KEY_ENV: _check_key(api_key)},
        )
        self.api_key = api_key
        if isinstance(worker_urls, str) or not isinstance(worker_urls, Sequence):
            raise TypeError("worker_urls must be a list of URLs")
        if not worker_urls:
            raise ValueError("SGLangRouter needs at least one worker URL")
        self.worker_urls = tuple(_check_url(u) for u in worker_urls)
        if policy not in ROUTER_POLICIES:
            raise ValueError(f"policy must be one of {ROUTER_POLICIES}, got {policy!r}")
        if cache_threshold is not None and not 0.0 <= cache_threshold <= 1.0:
            raise ValueError(f"cache_threshold must be in [0, 1], got {cache_threshold!r}")
        for name, value in (
            ("balance_abs_threshold", balance_abs_threshold),
            ("eviction_interval_s", eviction_interval_s),
            ("max_tree_size", max_tree_size),
            ("request_timeout_s", request_timeout_s),
        ):
            if value is not None:
                non_negative_int(value, name)
        if balance_rel_threshold is not None and balance_rel_threshold < 1.0:
            raise ValueError(f"balance_rel_threshold must be >= 1, got {balance_rel_threshold!r}")
        self.policy: RouterPolicy = policy
        self.cache_threshold = cache_threshold
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = balance_rel_threshold
        self.eviction_interval_s = eviction_interval_s
        self.max_tree_size = max_tree_size
        self.request_timeout_s = request_timeout_s
        self.log_level = log_level
        self.python = python or sys.executable
        self.extra_args = tuple(str(a) for a in extra_args)
        self.prometheus_port: int | None = None

    @property
    def metrics_url(self) -> str:
        """The router's Prometheus exporter (per-worker request counters and latencies)."""
        if self.prometheus_port is None:
            raise RuntimeError("sglang-router is not started")
        return f"http://{self.host}:{self.prometheus_port}/metrics"

    def command(self, port: int) -> list[str]:
        self.prometheus_port = free_port(self.host)
        launcher = ["-c", _KEYED_LAUNCH] if self.api_key is not None else ["-m", "sglang_router.launch_router"]
        cmd = [
            self.python,
            *launcher,
            "--worker-urls",
            *self.worker_urls,
            "--policy",
            self.policy,
            "--host",
            self.host,
            "--port",
            str(port),
            # its Prometheus exporter binds 29000 by default: two routers would collide
            "--prometheus-host",
            self.host,
            "--prometheus-port",
            str(self.prometheus_port),
            "--worker-startup-timeout-secs",
            str(max(1, int(self.startup_timeout))),
            "--worker-startup-check-interval",
            "1",
            "--log-level",
            self.log_level,
        ]
        optional: tuple[tuple[str, object], ...] = (
            ("--cache-threshold", self.cache_threshold),
            ("--balance-abs-threshold", self.balance_abs_threshold),
            ("--balance-rel-threshold", self.balance_rel_threshold),
            ("--eviction-interval-secs", self.eviction_interval_s),
            ("--max-tree-size", self.max_tree_size),
            ("--request-timeout-secs", self.request_timeout_s),
        )
        for flag, value in optional:
            if value is not None:
                cmd += [flag, str(value)]
        return cmd + list(self.extra_args)

    def settings(self) -> dict[str, object]:
        """The policy and thresholds given (None: the router's default), for reports."""
        return {
            "policy": self.policy,
            "cache_threshold": self.cache_threshold,
            "balance_abs_threshold": self.balance_abs_threshold,
            "balance_rel_threshold": self.balance_rel_threshold,
            "eviction_interval_s": self.eviction_interval_s,
            "max_tree_size": self.max_tree_size,
        }

    @staticmethod
    def version() -> str:
        """The installed ``sglang-router`` version ("unknown" when absent)."""
        try:
            from importlib.metadata import version

            return version("sglang-router")
        except Exception:  # noqa: BLE001 - any metadata failure means "unknown"
            return "unknown"

    @property
    def headers(self) -> dict[str, str]:
        """What each request to the router carries for its workers: ``{"Authorization": "Bearer <api_key>"}``
        (empty without ``api_key``)."""
        return {} if self.api_key is None else {"Authorization": f"Bearer {self.api_key}"}

    def client(self, **options: Any) -> EngineClient:
        """An :class:`~cp_memory.engine.client.EngineClient` for this running router, sending the workers' key
        (``options`` go to the client: ``model=`` — the router needs it —, ``timeout=``, ...)."""
        from .client import EngineClient

        return EngineClient(self.base_url, api_key=self.api_key, **options)

    def start(self) -> SGLangRouter:
        """Launch the router; raises :class:`ServerStartError` when a worker refuses the router's key (or
        its lack of one: a managed ``VLLMServer`` requires its own)."""
        if not sglang_router_available(self.python):
            raise SGLangRouterUnavailable(
                "sglang-router is not installed in this environment: pip install 'cp-memory[router]'"
            )
        super().start()
        refused = [url for url in self.worker_urls if self._refuses_key(url)]
        if refused:
            self.stop()
            need = "requires an API key: pass api_key= (a managed VLLMServer's api_key)"
            wrong = "refuses the api_key given: every worker must share that one key"
            raise ServerStartError(
                f"sglang-router: worker(s) {', '.join(refused)} {need if self.api_key is None else wrong}"
            )
        return self

    def _refuses_key(self, url: str) -> bool:
        """Whether ``url`` answers 401/403 to a (deliberately empty) completion carrying :attr:`headers`: an
        auth check runs before the body is read, so nothing is generated."""
        try:
            answer = httpx.post(f"{url}/v1/completions", json={}, headers=self.headers, timeout=10.0)
        except httpx.HTTPError:
            return False  # unreachable now: the router reports it on the requests that reach it
        return answer.status_code in (401, 403)

    def __enter__(self) -> SGLangRouter:  # noqa: PYI034 - as the other engine launchers
        return self.start()
