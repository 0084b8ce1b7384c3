"""How a request reaches one of N engine replicas: the three routers of the scale-out benchmark.

``round_robin``   the cache-blind baseline: request i goes to replica i mod N (AgentRouter's
                  ``round_robin`` policy).
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

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from benchmarks.workers import served_name
from cp_memory.agents import AgentRouter, Route
from cp_memory.engine import EngineClient, ManagedServer
from cp_memory.engine.router import SGLangRouter

__all__ = ["ROUTERS", "Affinity", "Dispatch", "Dispatcher", "RoundRobin", "Routed", "SGLangDispatch", "make_dispatcher"]

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


class Routed:
    """An in-process :class:`~cp_memory.agents.AgentRouter` over the replicas, routing on one key per user
    (``router_args`` are AgentRouter's: its policy, cache model and load safeguard)."""

    name = "routed"

    def __init__(self, replicas: Sequence[ManagedServer], **router_args: Any) -> None:
        self.clients = [
            EngineClient(r.base_url, api_key=getattr(r, "api_key", None), timeout=600, max_retries=2) for r in replicas
        ]
        self.router = AgentRouter(self.clients, **router_args)
        self._routes: dict[int, Route] = {}
        self._lock = threading.Lock()

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


class RoundRobin(Routed):
    """Request i to replica i mod N, whoever asks (AgentRouter's cache-blind policy)."""

    name = "round_robin"

    def __init__(self, replicas: Sequence[ManagedServer]) -> None:
        super().__init__(replicas, policy="round_robin")


class Affinity(Routed):
    """User -> replica pinning (see the module doc)."""

    name = "affinity"

    def __init__(
        self, replicas: Sequence[ManagedServer], *, capacity_tokens: int | None, balance_abs_threshold: int = 8
    ) -> None:
        super().__init__(replicas, capacity_tokens=capacity_tokens, balance_abs_threshold=balance_abs_threshold)


class SGLangDispatch:
    name = "sglang-router"

    def __init__(self, replicas: Sequence[ManagedServer], **router_args: object) -> None:
        key = getattr(replicas[0], "api_key", None)  # vLLM replicas share one key (benchmarks.workers.pool_key)
        self.router = SGLangRouter(
            [r.base_url for r in replicas],
            api_key=key,
            request_timeout_s=600,
            **router_args,  # type: ignore[arg-type]
        ).start()
        self.client = self.router.client(model=served_name(replicas[0]), timeout=600, max_retries=2)

    def dispatch(self, user: str, prompt_tokens: int) -> Dispatch:
        return Dispatch(self.client, -1, "cache_aware")

    def done(self, d: Dispatch, ok: bool) -> None:
        pass

    def close(self) -> None:
        self.client.close()
        self.router.stop()


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
