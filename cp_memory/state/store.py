"""The store protocol: versioned values, compare-and-set writes, a sliding TTL; and the in-process store.

Every value carries a *token*: a fresh random string per write (so a key deleted and written again never
looks unchanged to a reader that cached the old one). A writer passes the token it read; the write happens
only if the key still holds it (:meth:`StateStore.write` returns None otherwise: read again, redo, retry).
Any failure to reach the store (down, timeout, out of memory) raises :class:`StoreUnavailable`; callers
treat it as "the store cannot say" and fall back (:mod:`cp_memory.memory.shared`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from .counters import Count, ReadCounts, ReadRecent
from .errors import StoreUnavailable
from .versioned import MALFORMED, Versioned, new_token

__all__ = [
    "MALFORMED",
    "STATE_RETRY_S",
    "STATE_TIMEOUT_S",
    "MemoryStateStore",
    "StateStore",
    "StoreUnavailable",
    "Versioned",
    "new_token",
    "open_state_store",
]

#: the default bound on one store call (seconds); past it the caller falls back to its local state
STATE_TIMEOUT_S = 0.25
#: after a failed call, how long callers use their fallback before asking the store again (seconds)
STATE_RETRY_S = 2.0


@runtime_checkable
class StateStore(Protocol):
    """Versioned values by key; every method raises :class:`StoreUnavailable` when the store cannot answer."""

    def read(self, key: str, *, have: str = "", ttl_s: int) -> Versioned:
        """The key's token and bytes (bytes None if the token equals ``have``); refreshes the key's TTL."""
        ...

    def write(self, key: str, data: bytes, *, expected: str, ttl_s: int, token: str | None = None) -> str | None:
        """Store ``data`` if the key holds token ``expected`` ("" = absent); the new token (``token`` when given:
        a writer that may not learn the outcome knows what to look for), or None on conflict."""
        ...

    def delete(self, key: str) -> None: ...

    def close(self) -> None: ...

    # A store may also offer ``read_many(reads: Sequence[tuple[key, have, ttl_s]]) -> tuple[Versioned, ...]``:
    # several reads in one round trip (MemoryStateStore and the Redis stores do); one without it is read
    # key by key (:func:`cp_memory.state.ops.answer`). And it may offer counters (what the gateway's savings
    # ledgers need): ``count(Count)``, ``read_counts(ReadCounts)``, ``read_recent(ReadRecent)``
    # (:mod:`cp_memory.state.ops`); the in-process and Redis stores do.


@dataclass
class _Entry:
    token: str
    data: bytes
    expires: float


@dataclass
class _Counters:
    """Counters or a recency set (name -> value), with their key's expiry."""

    values: dict[str, float] = field(default_factory=dict)
    expires: float = 0.0


class MemoryStateStore:
    """The in-process :class:`StateStore`: a dict with the same tokens, compare-and-set and TTLs. Wrappers
    of one process may share one (tests use it as the reference the Redis store must match)."""

    def __init__(self) -> None:
        self._items: dict[str, _Entry] = {}
        self._counters: dict[str, _Counters] = {}  # counters and recency sets (their keys never name a value)
        self._lock = threading.Lock()

    def _live(self, key: str) -> _Entry | None:
        entry = self._items.get(key)
        if entry is not None and entry.expires <= time.monotonic():
            del self._items[key]
            return None
        return entry

    def read(self, key: str, *, have: str = "", ttl_s: int) -> Versioned:
        with self._lock:
            entry = self._live(key)
            if entry is None:
                return Versioned("", None)
            entry.expires = time.monotonic() + ttl_s
            return Versioned(entry.token, None if have and entry.token == have else entry.data)

    def write(self, key: str, data: bytes, *, expected: str, ttl_s: int, token: str | None = None) -> str | None:
        with self._lock:
            entry = self._live(key)
            if (entry.token if entry is not None else "") != expected:
                return None
            token = token or new_token()
            self._items[key] = _Entry(token, bytes(data), time.monotonic() + ttl_s)
            return token

    def delete(self, key: str) -> None:
        with self._lock:
            self._items.pop(key, None)

    def read_many(self, reads: Sequence[tuple[str, str, int]]) -> tuple[Versioned, ...]:
        """Several :meth:`read` calls ``(key, have, ttl_s)`` in one go (one round trip on Redis)."""
        return tuple(self.read(key, have=have, ttl_s=ttl_s) for key, have, ttl_s in reads)

    def _counted(self, key: str, now: float, ttl_s: int | None = None) -> _Counters:
        found = self._counters.get(key)
        if found is None or found.expires <= now:
            found = self._counters[key] = _Counters()
        if ttl_s is not None:
            found.expires = now + ttl_s
        return found

    def count(self, request: Count) -> None:
        """:class:`~cp_memory.state.ops.Count`: the increments, the TTLs and the recency set, under one lock."""
        with self._lock:
            now = time.monotonic()
            for key in request.keys:
                values = self._counted(key, now, request.ttl_s).values
                for name, delta in request.deltas:
                    values[name] = values.get(name, 0) + delta
            if request.recent:
                recent = self._counted(request.recent, now, request.ttl_s).values
                recent[request.member] = request.score
                for member in [m for m, score in recent.items() if score < request.score - request.ttl_s]:
                    del recent[member]

    def _peek_counted(self, key: str) -> dict[str, float]:
        found = self._counters.get(key)
        return dict(found.values) if found is not None and found.expires > time.monotonic() else {}

    def read_counts(self, request: ReadCounts) -> tuple[dict[str, float], ...]:
        with self._lock:
            return tuple(self._peek_counted(key) for key in request.keys)

    def read_recent(self, request: ReadRecent) -> tuple[str, ...]:
        with self._lock:
            members = self._peek_counted(request.key).items()
            recent = sorted(((s, m) for m, s in members if s >= request.since), reverse=True)
            return tuple(m for _, m in recent[: request.limit])

    def put_raw(self, key: str, data: bytes) -> None:
        """Test helper: plant ``data`` under ``key`` as another writer would (a fresh token, a long TTL)."""
        with self._lock:
            self._items[key] = _Entry(new_token(), bytes(data), time.monotonic() + 86_400)

    def close(self) -> None:
        return None


def open_state_store(url: str, *, timeout_s: float) -> StateStore:
    """The store a ``state_store`` URL names: ``memory://`` (in-process, this process only) or
    ``redis://`` / ``rediss://`` / ``unix://`` (Redis; the ``redis`` extra)."""
    if url.startswith("memory://"):
        return MemoryStateStore()
    if url.startswith(("redis://", "rediss://", "unix://")):
        from .redis_store import RedisStateStore

        return RedisStateStore(url, timeout_s=timeout_s)
    raise ValueError(f"state_store must be a redis://, rediss://, unix:// or memory:// URL, got {url.split(':')[0]!r}")
