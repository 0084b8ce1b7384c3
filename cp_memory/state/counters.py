"""Counters in a shared store, as requests: :class:`Count` (increments and a recency set, one round trip),
:class:`ReadCounts` and :class:`ReadRecent`. What the gateway's savings ledgers are kept in (concurrent
bookings from several replicas never lose one); a store offers them as ``count`` / ``read_counts`` /
``read_recent`` (the in-process and Redis stores do), and :mod:`cp_memory.state.ops` yields and answers them as
it does the versioned reads and writes."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Count", "ReadCounts", "ReadRecent"]


@dataclass(frozen=True)
class Count:
    """Counters: add ``deltas`` (name, int or float) to the counters under each of ``keys`` (an atomic
    increment per counter: concurrent counts never lose one), refresh each key's TTL, and note ``member`` as
    used at ``score`` in the recency set ``recent`` (members older than ``score - ttl_s`` dropped). One round
    trip; answered with None."""

    keys: tuple[str, ...]
    deltas: tuple[tuple[str, int | float], ...]
    ttl_s: int
    recent: str = ""
    member: str = ""
    score: float = 0.0


@dataclass(frozen=True)
class ReadCounts:
    """The counters under each of ``keys`` (one round trip): one ``dict[name, float]`` per key, {} when absent."""

    keys: tuple[str, ...]


@dataclass(frozen=True)
class ReadRecent:
    """The members of the recency set ``key`` used at ``since`` or later, most recent first, at most ``limit``."""

    key: str
    since: float
    limit: int
