"""The one shared-state client: a store (its sync and async sides), the tenant's keys, the TTL and the
store's health. Every operation is a generator of store requests (:mod:`cp_memory.state.ops`), run with the
sync store (:meth:`StateClient.run`) or the async one (:meth:`StateClient.arun`); it returns None when the
store cannot say, so its callers (the scopes' indexes and dedup conversations in :mod:`cp_memory.memory`,
a router's pool and homes in :mod:`cp_memory.agents`) fall back to their local state."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TypeVar

from ..core.lru import LRUMap
from .errors import StoreUnavailable
from .health import StoreHealth
from .keys import StateKeys
from .ops import AsyncStateStore, AsyncStoreAdapter, Delete, Op, Read, ReadMany, Write, arun, run
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
        if not self.health.usable():
            return None
        try:
            got: Versioned = yield Read(key, have, self.ttl_s)
        except StoreUnavailable as exc:
            self.health.failed(exc)
            return None
        self.health.succeeded()
        return got

    def read_many(self, reads: Sequence[tuple[str, str]]) -> Op[tuple[Versioned, ...] | None]:
        """:meth:`read` of several ``(key, have)`` pairs in one round trip; None when the store cannot say."""
        if not self.health.usable():
            return None
        try:
            got: tuple[Versioned, ...] = yield ReadMany(tuple(Read(key, have, self.ttl_s) for key, have in reads))
        except StoreUnavailable as exc:
            self.health.failed(exc)
            return None
        self.health.succeeded()
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
