"""The one shared-state client: a store (its sync and async sides), the tenant's keys, the TTL and the
store's health. Every operation is a generator of store requests (:mod:`cp_memory.state.ops`), run with the
sync store (:meth:`StateClient.run`) or the async one (:meth:`StateClient.arun`); it returns None when the
store cannot say, so its callers (the scopes' indexes and dedup conversations in :mod:`cp_memory.memory`,
a router's pool and homes in :mod:`cp_memory.agents`) fall back to their local state."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, TypeVar

from ..core.lru import LRUMap
from .errors import StoreUnavailable
from .health import StoreHealth
from .keys import StateKeys
from .ops import (
    AsyncStateStore,
    AsyncStoreAdapter,
    Count,
    Delete,
    Op,
    Read,
    ReadCounts,
    ReadMany,
    ReadRecent,
    StoreRequest,
    Write,
    arun,
    run,
)
from .store import StateStore
from .versioned import Versioned

__all__ = ["CONFLICT", "StateClient"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: what :meth:`StateClient.write` returns when the key no longer holds the token the writer read
CONFLICT = ""


class StateClient:
    """Reads, compare-and-set writes and deletes of one store, with its health (a failed call: the store is
    left alone for ``health``'s retry time) and one warning per key for a value it cannot use."""

    def __init__(
        self,
        store: StateStore,
        *,
        keys: StateKeys,
        ttl_s: int,
        health: StoreHealth,
        astore: AsyncStateStore | None = None,
        warn_keys: int = 1024,
    ) -> None:
        self.store = store
        self.astore: AsyncStateStore = astore if astore is not None else AsyncStoreAdapter(store)
        self.keys = keys
        self.ttl_s = ttl_s
        self.health = health
        self._warned: LRUMap[str, bool] = LRUMap(warn_keys)

    def run(self, op: Op[T]) -> T:
        """Drive ``op`` with the sync store (blocks the calling thread up to the store's timeout)."""
        return run(op, self.store)

    async def arun(self, op: Op[T]) -> T:
        """Drive ``op`` with the async store (the event loop keeps running while the store answers)."""
        return await arun(op, self.astore)

    def read(self, key: str, have: str = "") -> Op[Versioned | None]:
        """The key's token and bytes (bytes None when it still holds ``have``); None when the store cannot say."""
        got: Versioned | None = yield from self._asked(Read(key, have, self.ttl_s))
        return got

    def read_many(self, reads: Sequence[tuple[str, str]]) -> Op[tuple[Versioned, ...] | None]:
        """:meth:`read` of several ``(key, have)`` pairs in one round trip; None when the store cannot say."""
        got: tuple[Versioned, ...] | None = yield from self._asked(
            ReadMany(tuple(Read(key, have, self.ttl_s) for key, have in reads))
        )
        return got

    def write(self, key: str, data: bytes, *, expected: str) -> Op[str | None]:
        """The new token; :data:`CONFLICT` ("") when the key no longer holds ``expected``; None when the store
        cannot answer."""
        written, _ = yield from self.write_outcome(key, data, expected=expected)
        return written

    def write_outcome(
        self, key: str, data: bytes, *, expected: str, token: str | None = None
    ) -> Op[tuple[str | None, bool]]:
        """:meth:`write` (the new value's token ``token`` when given) and whether a failed write was *sent*:
        True when the store failed after the request went out (a timeout): it may have been applied, or may
        still be (a compare-and-set on ``expected``)."""
        if not self.health.usable():
            return None, False
        try:
            written: str | None = yield Write(key, data, expected, self.ttl_s, token)
        except StoreUnavailable as exc:
            self.health.failed(exc)
            return None, True
        self.health.succeeded()
        return (CONFLICT if written is None else written), False

    def _asked(self, request: StoreRequest, failed: Any = None) -> Op[Any]:
        """``request``'s answer; ``failed`` when the store cannot say (or is left alone after a failure)."""
        if not self.health.usable():
            return failed
        try:
            got = yield request
        except StoreUnavailable as exc:
            self.health.failed(exc)
            return failed
        self.health.succeeded()
        return got

    def count(
        self, keys: Sequence[str], deltas: Sequence[tuple[str, int | float]], *, recent: str = "", member: str = ""
    ) -> Op[bool]:
        """Add ``deltas`` to the counters under ``keys`` and mark ``member`` used now in ``recent`` (one round
        trip, :class:`~cp_memory.state.ops.Count`); False when the store cannot answer."""
        request = Count(tuple(keys), tuple(deltas), self.ttl_s, recent, member, time.time())
        got = yield from self._asked(request, failed=False)
        return got is not False

    def read_counts(self, keys: Sequence[str]) -> Op[tuple[dict[str, float], ...] | None]:
        """The counters under each key ({} when absent); None when the store cannot say."""
        got: tuple[dict[str, float], ...] | None = yield from self._asked(ReadCounts(tuple(keys)))
        return got

    def read_recent(self, key: str, limit: int) -> Op[tuple[str, ...] | None]:
        """The members of ``key`` used within the TTL, most recent first; None when the store cannot say."""
        got: tuple[str, ...] | None = yield from self._asked(ReadRecent(key, time.time() - self.ttl_s, limit))
        return got

    def delete(self, key: str) -> Op[bool]:
        try:
            yield Delete(key)
        except StoreUnavailable as exc:
            self.health.failed(exc)
            return False
        return True

    def bad_value(self, key: str, exc: Exception, consequence: str) -> None:
        """One warning per key for a value this store cannot use (foreign or malformed)."""
        first = self._warned.peek(key) is None
        self._warned.set(key, True)
        (logger.warning if first else logger.debug)(
            "the state store holds an unusable value under %s (%s: %s): %s", key, type(exc).__name__, exc, consequence
        )

    def close(self) -> None:
        self.store.close()

    async def aclose(self) -> None:
        await self.astore.aclose()
