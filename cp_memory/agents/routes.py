"""Records of agent-aware routing: the policy, one route, per-worker and pool statistics."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Route", "RouterStats", "RoutingPolicy", "WorkerStats"]


class RoutingPolicy(str, enum.Enum):
    AFFINITY = "affinity"
    ROUND_ROBIN = "round_robin"


@dataclass(frozen=True)
class Route:
    """Where one request goes, and why.

    ``reason`` is ``"affinity"`` (cache hit in the model), ``"home"`` (no worker's model holds it any
    more: back to the worker that held it last), ``"least_loaded"`` (new content),
    ``"balance"`` (load safeguard overrode affinity) or ``"round_robin"``. ``matched_tokens`` is the
    prefix the chosen worker's cache model holds (the prediction to compare with the engine's
    ``cached_tokens``); ``segment_tokens`` the segment's size as estimated by the caller.
    """

    worker: int
    worker_name: str
    reason: str
    request_id: str
    matched_blocks: int
    matched_tokens: int
    segment_tokens: int


@dataclass(frozen=True)
class WorkerStats:
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


@dataclass(frozen=True)
class RouterStats:
    policy: str
    workers: tuple[WorkerStats, ...]

    @property
    def routed(self) -> int:
        return sum(w.routed for w in self.workers)


@dataclass(slots=True)
class _Counters:
    routed: int = 0
    affinity: int = 0
    home: int = 0
    least_loaded: int = 0
    balance: int = 0
    round_robin: int = 0
    failed: int = 0
