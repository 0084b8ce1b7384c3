"""Store operations as generators: the I/O-free logic yields the store calls it needs, two thin drivers answer.

Everything that reads or writes a shared store (:mod:`cp_memory.memory.shared`,
:mod:`cp_memory.memory.shared_dedup`) is written once as a generator of :data:`StoreRequest` values
(:class:`Read`, :class:`Write`, :class:`Delete`, :class:`ReadMany`; the counters :class:`Count`,
:class:`ReadCounts`, :class:`ReadRecent`) that receives each answer, or has
:class:`~cp_memory.state.errors.StoreUnavailable` thrown in at the point of the call. :func:`run` answers them
with a sync :class:`~cp_memory.state.store.StateStore`; :func:`arun` with an :class:`AsyncStateStore` (the
event loop is never blocked on the store: ``AsyncContextPilotMemory`` uses this one). The search flow of the
mem0 wrappers yields the same requests to its own drivers (:mod:`cp_memory.memory.flow`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..core.drive import adrive_flow, drive_flow
from .counters import Count, ReadCounts, ReadRecent
from .errors import StoreUnavailable
from .store import StateStore, Versioned

__all__ = [
    "AsyncStateStore",
    "AsyncStoreAdapter",
    "Count",
    "Delete",
    "Op",
    "Read",
    "ReadCounts",
    "ReadMany",
    "ReadRecent",
    "StoreRequest",
    "Write",
    "aanswer",
    "answer",
    "arun",
    "open_async_state_store",
    "run",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Read:
    key: str
    have: str
    ttl_s: int


@dataclass(frozen=True)
class Write:
    key: str
    data: bytes
    expected: str
    ttl_s: int
    token: str | None = None  # the new value's token, chosen by the writer (None: the store picks one)


@dataclass(frozen=True)
class Delete:
    key: str


@dataclass(frozen=True)
class ReadMany:
    """Several reads in one round trip (a pipeline on Redis; each read atomic on its own, not together):
    answered with one :class:`Versioned` per read, in order."""

    reads: tuple[Read, ...]


StoreRequest = Read | Write | Delete | ReadMany | Count | ReadCounts | ReadRecent
#: the requests a store answers only if it offers counters (``count`` / ``read_counts`` / ``read_recent``)
_COUNTERS = {Count: "count", ReadCounts: "read_counts", ReadRecent: "read_recent"}
#: a store operation: yields requests, receives their answers, returns its result
Op = Generator[StoreRequest, Any, T]


@runtime_checkable
class AsyncStateStore(Protocol):
    """:class:`~cp_memory.state.store.StateStore` with ``await``: same tokens, compare-and-set and TTLs."""

    async def read(self, key: str, *, have: str = "", ttl_s: int) -> Versioned: ...

    async def write(
        self, key: str, data: bytes, *, expected: str, ttl_s: int, token: str | None = None
    ) -> str | None: ...

    async def delete(self, key: str) -> None: ...

    async def aclose(self) -> None: ...

    # As the sync store, it may also offer ``read_many`` and the counters (``count``, ``read_counts``,
    # ``read_recent``: :class:`Count`, :class:`ReadCounts`, :class:`ReadRecent`).


class AsyncStoreAdapter:
    """An in-process store (never waits on I/O) seen through the async protocol; the same instance serves the
    sync side, so sync and async wrappers of one process share it."""

    def __init__(self, store: StateStore) -> None:
        self.store = store

    async def read(self, key: str, *, have: str = "", ttl_s: int) -> Versioned:
        return self.store.read(key, have=have, ttl_s=ttl_s)

    async def write(self, key: str, data: bytes, *, expected: str, ttl_s: int, token: str | None = None) -> str | None:
        return self.store.write(key, data, expected=expected, ttl_s=ttl_s, token=token)

    async def delete(self, key: str) -> None:
        self.store.delete(key)

    async def read_many(self, reads: Sequence[tuple[str, str, int]]) -> tuple[Versioned, ...]:
        return tuple(self.store.read(key, have=have, ttl_s=ttl_s) for key, have, ttl_s in reads)

    async def count(self, request: Count) -> None:
        self.store.count(request)  # type: ignore[attr-defined]

    async def read_counts(self, request: ReadCounts) -> tuple[dict[str, float], ...]:
        return self.store.read_counts(request)  # type: ignore[attr-defined,no-any-return]

    async def read_recent(self, request: ReadRecent) -> tuple[str, ...]:
        return self.store.read_recent(request)  # type: ignore[attr-defined,no-any-return]

    async def aclose(self) -> None:
        self.store.close()


def _counters(store: object, request: StoreRequest) -> Any:
    """The store's method for a counters request; a clear error for a store without counters."""
    name = _COUNTERS[type(request)]
    method = getattr(store, name, None)
    if method is None:
        raise TypeError(f"{type(store).__name__} offers no counters ({name}): the gateway's savings need them")
    return method


def answer(store: StateStore, request: StoreRequest) -> Any:
    """One request against a sync store (raises :class:`StoreUnavailable` as the store does)."""
    if type(request) in _COUNTERS:
        return _counters(store, request)(request)
    if isinstance(request, ReadMany):
        many = getattr(store, "read_many", None)  # a store without it answers read by read
        if many is not None:
            return many([(r.key, r.have, r.ttl_s) for r in request.reads])
        return tuple(store.read(r.key, have=r.have, ttl_s=r.ttl_s) for r in request.reads)
    if isinstance(request, Read):
        return store.read(request.key, have=request.have, ttl_s=request.ttl_s)
    if isinstance(request, Write):
        r = request
        return store.write(r.key, r.data, expected=r.expected, ttl_s=r.ttl_s, token=r.token)
    assert isinstance(request, Delete)
    return store.delete(request.key)


async def aanswer(store: AsyncStateStore, request: StoreRequest) -> Any:
    """One request against an async store; a timeout or cancellation of the call itself is re-raised."""
    if type(request) in _COUNTERS:
        return await _counters(store, request)(request)
    if isinstance(request, ReadMany):
        many = getattr(store, "read_many", None)
        if many is not None:
            return await many([(r.key, r.have, r.ttl_s) for r in request.reads])
        return tuple([await store.read(r.key, have=r.have, ttl_s=r.ttl_s) for r in request.reads])
    if isinstance(request, Read):
        return await store.read(request.key, have=request.have, ttl_s=request.ttl_s)
    if isinstance(request, Write):
        r = request
        return await store.write(r.key, r.data, expected=r.expected, ttl_s=r.ttl_s, token=r.token)
    assert isinstance(request, Delete)
    return await store.delete(request.key)


def run(op: Op[T], store: StateStore | None) -> T:
    """Drive ``op`` with a sync store; :class:`StoreUnavailable` goes back into the op where it asked."""

    def answer_one(request: StoreRequest) -> Any:
        if store is None:
            raise TypeError(f"a store operation asked for {type(request).__name__} but no store is set")
        return answer(store, request)

    return drive_flow(op, answer_one, throws=StoreUnavailable)


async def arun(op: Op[T], store: AsyncStateStore | None) -> T:
    """:func:`run` with ``await``: other tasks run while the store answers (or times out: a timeout goes
    into the op as :class:`StoreUnavailable`)."""

    async def answer_one(request: StoreRequest) -> Any:
        if store is None:
            raise TypeError(f"a store operation asked for {type(request).__name__} but no store is set")
        try:
            return await aanswer(store, request)
        except asyncio.TimeoutError as exc:
            raise StoreUnavailable(str(exc)) from exc

    return await adrive_flow(op, answer_one, throws=StoreUnavailable)


def open_async_state_store(url: str, store: StateStore, *, timeout_s: float) -> AsyncStateStore:
    """The async side of the store ``url`` names: redis.asyncio for Redis; for the in-process store, ``store``
    itself (it never waits)."""
    if url.startswith(("redis://", "rediss://", "unix://")):
        from .redis_store import AsyncRedisStateStore

        return AsyncRedisStateStore(url, timeout_s=timeout_s)
    return AsyncStoreAdapter(store)
