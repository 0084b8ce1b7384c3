"""Records and vocabularies of agent-aware routing: the policy, route reasons, placement modes, one route,
per-worker and pool statistics, a worker's counters and the check of worker names.

The vocabularies are str-valued enums: a member *is* its string (``RouteReason.AFFINITY == "affinity"``,
``str()``/``format()``/JSON give ``"affinity"``), so results and benchmark outputs read as before and a
caller may still pass the plain string.
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "BalanceScope",
    "PlacementPolicy",
    "Route",
    "RouteReason",
    "RouterStats",
    "RoutingPolicy",
    "WorkerCounters",
    "WorkerStats",
    "worker_names",
]


class _StrEnum(str, enum.Enum):
    """``enum.StrEnum`` for Python 3.10: ``str()`` and ``format()`` give the value, not ``Class.MEMBER``."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return str.__format__(str(self.value), format_spec)


def worker_names(clients: Sequence[object], names: Sequence[str] | None) -> list[str]:
    """Worker names (default ``worker-0`` ...), one per client and distinct; ValueError otherwise."""
    if not clients:
        raise ValueError("an AgentRouter needs at least one worker client")
    out = [f"worker-{i}" for i in range(len(clients))] if names is None else [str(n) for n in names]
    if len(out) != len(clients):
        raise ValueError(f"got {len(out)} names for {len(clients)} workers")
    if len(set(out)) != len(out):
        raise ValueError("worker names must be distinct")
    return out


class RoutingPolicy(_StrEnum):
    """``affinity``: ContextPilot's agent-aware routing; ``round_robin``: the cache-blind baseline."""

    AFFINITY = "affinity"
    ROUND_ROBIN = "round_robin"


class RouteReason(_StrEnum):
    """Why a request went where it went (:attr:`Route.reason`, :attr:`~cp_memory.agents.CallStats.route`)."""

    #: the worker's cache model holds the longest prefix of the segment
    AFFINITY = "affinity"
    #: no worker's model holds it any more: back to the worker that held it last
    HOME = "home"
    #: new content (placed by :class:`PlacementPolicy`) or a request with nothing reusable
    LEAST_LOADED = "least_loaded"
    #: the load safeguard overrode affinity
    BALANCE = "balance"
    #: the cache-blind baseline
    ROUND_ROBIN = "round_robin"
    #: not routed: the chain's dedicated manager client (:class:`~cp_memory.agents.CallStats` only)
    DEDICATED = "dedicated"


class PlacementPolicy(_StrEnum):
    """Where new content goes: ``cache`` (room in a cache model, else the cache that took in the fewest
    tokens) or ``load`` (the least-loaded worker)."""

    CACHE = "cache"
    LOAD = "load"


class BalanceScope(_StrEnum):
    """What the load safeguard tests: ``target`` (the worker affinity picked) or ``global`` (the pool's max
    load, as SGLang's router does)."""

    TARGET = "target"
    GLOBAL = "global"


@dataclass(frozen=True, kw_only=True)
class Route:
    """Where one request goes, and why (:class:`RouteReason`).

    ``matched_tokens`` is the prefix the chosen worker's cache model holds (the prediction to compare with
    the engine's ``cached_tokens``); ``segment_tokens`` the segment's size as estimated by the caller.
    """

    worker: int
    worker_name: str
    reason: RouteReason
    request_id: str
    matched_blocks: int
    matched_tokens: int
    segment_tokens: int


@dataclass(frozen=True, kw_only=True)
class WorkerStats:
    """One worker's counters: requests routed there by reason, failed, in flight, and its cache model."""

    name: str
    routed: int
    affinity: int
    least_loaded: int
    balance: int
    round_robin: int
    failed: int
    in_flight: int
    live_requests: int
    modelled_cache_tokens: int
    home: int = 0

    @property
    def reasons(self) -> Mapping[RouteReason, int]:
        """Requests routed here, by reason."""
        return {
            RouteReason.AFFINITY: self.affinity,
            RouteReason.HOME: self.home,
            RouteReason.LEAST_LOADED: self.least_loaded,
            RouteReason.BALANCE: self.balance,
            RouteReason.ROUND_ROBIN: self.round_robin,
        }


@dataclass(frozen=True, kw_only=True)
class RouterStats:
    policy: RoutingPolicy
    workers: tuple[WorkerStats, ...]

    @property
    def routed(self) -> int:
        return sum(w.routed for w in self.workers)


@dataclass(slots=True)
class WorkerCounters:
    """A worker's mutable counters (guarded by the router's lock)."""

    reasons: collections.Counter[RouteReason] = field(default_factory=collections.Counter)
    failed: int = 0

    @property
    def routed(self) -> int:
        return sum(self.reasons.values())

    def count(self, reason: RouteReason) -> None:
        self.reasons[reason] += 1

    def snapshot(self, *, name: str, in_flight: int, live_requests: int, modelled_cache_tokens: int) -> WorkerStats:
        r = self.reasons
        return WorkerStats(
            name=name,
            routed=self.routed,
            affinity=r[RouteReason.AFFINITY],
            least_loaded=r[RouteReason.LEAST_LOADED],
            balance=r[RouteReason.BALANCE],
            round_robin=r[RouteReason.ROUND_ROBIN],
            failed=self.failed,
            in_flight=in_flight,
            live_requests=live_requests,
            modelled_cache_tokens=modelled_cache_tokens,
            home=r[RouteReason.HOME],
        )
