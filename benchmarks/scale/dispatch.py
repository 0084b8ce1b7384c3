"""How a request reaches one of N engine replicas: the three routers of the scale-out benchmark.

``round_robin``   the cache-blind baseline: request i goes to replica i mod N.
``sglang-router`` SGLang's gateway (``sglang-router --policy cache_aware``, its defaults) in front of the
                  replicas: it routes by the longest cached text prefix per replica, with a load safeguard.
``affinity``      a user's requests go to the replica that holds that user's cache:
                  :class:`~cp_memory.agents.AgentRouter` routes on one key per user (a user seen before
                  returns to its replica; a new user goes to the replica with the least modelled cache
                  among those not overloaded), with SGLang's load safeguard. The user's ContextIndex (inside
                  ContextPilotMemory) then models exactly the replica that serves the user.

Every dispatcher hands out an :class:`~cp_memory.engine.EngineClient` per request and learns when the
request ended (``done``), so load is counted the same way for all.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from benchmarks import workers as engines
from cp_memory.agents import AgentRouter, Route
from cp_memory.engine import EngineClient, running
from cp_memory.engine._server import ManagedServer
from cp_memory.engine.router import SGLangRouter

__all__ = ["ROUTERS", "Affinity", "Dispatch", "Dispatcher", "RoundRobin", "SGLangDispatch", "make_dispatcher"]

ROUTERS = ("round_robin", "sglang-router", "affinity")


@dataclass(frozen=True)
class Dispatch:
    """Where one request went: the client to send it with and the replica (-1: the router decides)."""

    client: EngineClient
    replica: int
    reason: str


class Dispatcher(Protocol):
    name: str

    def dispatch(self, user: str, prompt_tokens: int) -> Dispatch: ...

    def done(self, d: Dispatch, ok: bool) -> None: ...

    def close(self) -> None: ...


class RoundRobin:
    name = "round_robin"

    def __init__(self, replicas: Sequence[ManagedServer]) -> None:
        self.clients = [EngineClient(r.base_url, timeout=600, max_retries=2) for r in replicas]
        self._next = itertools.count()
        self._lock = threading.Lock()

    def dispatch(self, user: str, prompt_tokens: int) -> Dispatch:
        with self._lock:
            i = next(self._next) % len(self.clients)
        return Dispatch(self.clients[i], i, "round_robin")

    def done(self, d: Dispatch, ok: bool) -> None:
        pass

    def close(self) -> None:
        for c in self.clients:
            c.close()


class SGLangDispatch:
    name = "sglang-router"

    def __init__(self, replicas: Sequence[ManagedServer], **router_args: object) -> None:
        self.router = SGLangRouter([r.base_url for r in replicas], request_timeout_s=600, **router_args).start()  # type: ignore[arg-type]
        self.client = EngineClient(
            self.router.base_url, model=engines.served_name(replicas[0]), timeout=600, max_retries=2
        )

    def dispatch(self, user: str, prompt_tokens: int) -> Dispatch:
        return Dispatch(self.client, -1, "cache_aware")

    def done(self, d: Dispatch, ok: bool) -> None:
        pass

    def close(self) -> None:
        self.client.close()
        self.router.stop()


class Affinity:
    """User -> replica pinning through AgentRouter (one routing key per user, see module doc)."""

    name = "affinity"

    def __init__(
        self,
        replicas: Sequence[ManagedServer],
        *,
        capacity_tokens: int | None,
        balance_abs_threshold: int = 8,
        balance_rel_threshold: float = 1.5,
    ) -> None:
        self.clients = [EngineClient(r.base_url, timeout=600, max_retries=2) for r in replicas]
        self.router = AgentRouter(
            self.clients,
            capacity_tokens=capacity_tokens,
            balance_abs_threshold=balance_abs_threshold,
            balance_rel_threshold=balance_rel_threshold,
        )
        self._routes: dict[int, Route] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count()

    def dispatch(self, user: str, prompt_tokens: int) -> Dispatch:
        route = self.router.route((("user", user),), (max(1, prompt_tokens),))
        d = Dispatch(self.router.client(route.worker), route.worker, route.reason.value)
        with self._lock:
            self._routes[id(d)] = route
        return d

    def done(self, d: Dispatch, ok: bool) -> None:
        with self._lock:
            route = self._routes.pop(id(d))
        self.router.release(route, ok=ok)

    def close(self) -> None:
        for c in self.clients:
            c.close()


def make_dispatcher(
    name: str, replicas: Sequence[ManagedServer], *, capacity_tokens: int | None, balance_abs_threshold: int
) -> Dispatcher:
    if name == "round_robin":
        return RoundRobin(replicas)
    if name == "sglang-router":
        return SGLangDispatch(replicas)
    if name == "affinity":
        return Affinity(replicas, capacity_tokens=capacity_tokens, balance_abs_threshold=balance_abs_threshold)
    raise ValueError(f"unknown router {name!r}; choose from {', '.join(ROUTERS)}")


@contextlib.contextmanager
def replicas(
    n: int,
    *,
    model: Path,
    threads: int,
    cache_mib: int,
    ctx_size: int,
    engine: str = "llama",
    kv_bytes_per_token: int = 0,
    vllm_args: Sequence[str] = (),
) -> Iterator[list[ManagedServer]]:
    """``n`` cold replicas (llama-server with 1 slot, or vLLM: :mod:`benchmarks.workers`), stopped afterwards."""
    servers = [
        engines.make_worker(
            engine,
            model,
            threads=threads,
            cache_mib=cache_mib,
            ctx_size=ctx_size,
            kv_bytes_per_token=kv_bytes_per_token,
        )
        for _ in range(n)
    ]
    with running(servers) as started:
        yield started
