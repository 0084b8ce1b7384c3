"""The state-store seam: where the mem0 wrapper's shared state lives when several processes serve one app.

Two implementations of one protocol (:class:`~cp_memory.state.store.StateStore`):

* :class:`~cp_memory.state.store.MemoryStateStore` — in one process (a dict, versioned like the others);
  several wrappers of one process may share it. The wrapper's default (``state_store=None``) is today's
  behaviour and uses no store at all: each wrapper keeps its own indexes and dedup records;
* :class:`~cp_memory.state.redis_store.RedisStateStore` — Redis (``state_store="redis://host:6379/0"``, the
  ``redis`` extra): N worker processes or gateway replicas behind any load balancer share each scope's
  context index and each conversation's committed dedup turns.

What is stored (keys in :mod:`cp_memory.state.keys`, namespaced by tenant and the full mem0 scope): a
versioned value per key, written only by compare-and-set on its version (so concurrent writers never lose an
update: the loser reads again and retries, a bounded number of times), with a sliding TTL. The store never
decides what a prompt shows: :mod:`cp_memory.memory.shared` does, and sends full memories whenever the store
cannot say (:class:`~cp_memory.state.errors.StoreUnavailable`).
"""

from __future__ import annotations

from .errors import ForeignRecord, LostRecord, StateError, StoreUnavailable
from .keys import StateKeys
from .store import (
    MemoryStateStore,
    StateStore,
    Versioned,
    open_state_store,
)

__all__ = [
    "ForeignRecord",
    "LostRecord",
    "MemoryStateStore",
    "StateError",
    "StateKeys",
    "StateStore",
    "StoreUnavailable",
    "Versioned",
    "open_state_store",
]
