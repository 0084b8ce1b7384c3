"""LRUMap: the one bounded, thread-safe least-recently-used map of cp_memory.

Used for per-conversation dedup records (:class:`~cp_memory.core.dedup.Deduplicator`) and meant for every other
bounded per-key state (per-scope indexes in the mem0 wrapper, per-conversation state of the agents):

    users = LRUMap(1000, on_evict=save_snapshot)      # keep at most 1000, save the ones that fall out
    state = users.get_or_create("alice", make_state)  # created on first use, most recent afterwards

* every method takes the map's lock for its own duration only; ``on_evict(key, value)`` runs **after**
  the lock is released (it may do I/O or call back into the map), once per entry pushed out by capacity;
* ``get``/``get_or_create``/``set`` make the key the most recently used; ``peek`` and ``in`` do not;
* ``get_or_create`` calls ``factory`` outside the lock, so a slow factory (a snapshot read from disk)
  does not stall other keys; if two threads race on one missing key, the first stored value wins and is
  returned to both (the other is discarded without ``on_evict``: keep factories free of side effects).

Entries removed by ``pop`` or ``clear`` are returned to the caller and never passed to ``on_evict``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar, overload

from .checks import positive_int

__all__ = ["LRUMap"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")


class LRUMap(Generic[K, V]):
    """A thread-safe map holding at most ``capacity`` entries, dropping the least recently used."""

    def __init__(self, capacity: int, *, on_evict: Callable[[K, V], None] | None = None) -> None:
        positive_int(capacity, "capacity")
        if on_evict is not None and not callable(on_evict):
            raise TypeError("on_evict must be callable (key, value) -> None")
        self._capacity = capacity
        self._on_evict = on_evict
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return self._capacity

    # ------------------------------------------------------------------ reads
    @overload
    def get(self, key: K) -> V | None: ...
    @overload
    def get(self, key: K, default: D) -> V | D: ...

    def get(self, key: K, default: object = None) -> object:
        """The value for ``key`` (now the most recently used), else ``default``."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            return default

    @overload
    def peek(self, key: K) -> V | None: ...
    @overload
    def peek(self, key: K, default: D) -> V | D: ...

    def peek(self, key: K, default: object = None) -> object:
        """The value for ``key`` without changing its recency, else ``default``."""
        with self._lock:
            return self._items.get(key, default)

    def items(self) -> list[tuple[K, V]]:
        """A snapshot of the entries, least recently used first."""
        with self._lock:
            return list(self._items.items())

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    # ------------------------------------------------------------------ writes
    def set(self, key: K, value: V) -> None:
        """Store ``value`` as the most recently used entry (replacing any value for ``key``)."""
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            evicted = self._trim()
        self._notify(evicted)

    def get_or_create(self, key: K, factory: Callable[[], V]) -> V:
        """The value for ``key``; when missing, ``factory()`` (called outside the lock) is stored first."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        made = factory()
        with self._lock:
            if key in self._items:  # another thread stored one meanwhile: it wins
                self._items.move_to_end(key)
                return self._items[key]
            self._items[key] = made
            evicted = self._trim()
        self._notify(evicted)
        return made

    @overload
    def pop(self, key: K) -> V | None: ...
    @overload
    def pop(self, key: K, default: D) -> V | D: ...

    def pop(self, key: K, default: object = None) -> object:
        """Remove and return the value for ``key`` (``default`` when absent); no ``on_evict``."""
        with self._lock:
            return self._items.pop(key, default)

    def clear(self) -> list[tuple[K, V]]:
        """Remove every entry and return them (least recently used first); no ``on_evict``."""
        with self._lock:
            out = list(self._items.items())
            self._items.clear()
            return out

    # ------------------------------------------------------------------ internals
    def _trim(self) -> list[tuple[K, V]]:
        evicted = []
        while len(self._items) > self._capacity:
            evicted.append(self._items.popitem(last=False))
        return evicted

    def _notify(self, evicted: list[tuple[K, V]]) -> None:
        if self._on_evict is not None:
            for key, value in evicted:
                self._on_evict(key, value)
