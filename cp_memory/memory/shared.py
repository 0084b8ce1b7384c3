"""The wrapper's side of a shared state store (``state_store=`` in :class:`~.config.ContextPilotConfig`).

With no store (the default) nothing here runs: each wrapper keeps its own indexes and dedup records. With
one, :func:`open_shared` gives the pipeline a :class:`Shared`:

* ``deduplicator`` — a :class:`~.shared_dedup.SharedDeduplicator`: committed dedup turns in the store;
* :meth:`Shared.insert` / :meth:`Shared.rollback` — a scope's context index in the store. The process keeps
  the index it last read (its :class:`~.state.ScopeState`) and the token of that value; a search reads the
  value only when another process changed it, inserts, and writes the new snapshot by compare-and-set. A
  conflict (another process wrote in between) undoes the insert, reads the newer index and inserts again
  (bounded); past the bound, or when the store cannot answer, the insert stays in this process's index,
  which is what the search aligns with (only cache hits depend on it, never a prompt's correctness). When
  the store answers again, the next search reads its value and continues from there.

The store's health (:class:`~cp_memory.state.health.StoreHealth`) makes one warning per outage; a value
under a key that is not its own (another scope's or tenant's, or garbage) makes one warning per key.
"""

from __future__ import annotations

import logging
import uuid
import weakref
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from ..core.index import ContextIndex, Placement
from ..core.lru import LRUMap
from ..core.scope import Scope
from ..state.health import StoreHealth
from ..state.keys import StateKeys
from ..state.records import decode_index, encode_index
from ..state.store import StateStore, StoreUnavailable, Versioned, open_state_store
from .config import ContextPilotConfig
from .state import ScopeState, ScopeStore

if TYPE_CHECKING:
    from .shared_dedup import SharedDeduplicator

__all__ = ["CONFLICT", "INSERT_ATTEMPTS", "Shared", "SharedState", "open_shared"]

logger = logging.getLogger(__name__)

#: compare-and-set attempts of one index insert before it stays in this process's index
INSERT_ATTEMPTS = 5
#: what :meth:`SharedState.write` returns when the key no longer holds the expected token
CONFLICT = ""


class SharedState:
    """A store, its keys (tenant), TTL and health: every call returns None when the store cannot say."""

    def __init__(self, store: StateStore, config: ContextPilotConfig, name: str = "") -> None:
        self.store = store
        self.keys = StateKeys(config.state_tenant)
        self.ttl_s = config.state_ttl_s
        self.health = StoreHealth(name or type(store).__name__, retry_s=config.state_retry_s)
        self._warned: LRUMap[str, bool] = LRUMap(1024)

    def read(self, key: str, have: str = "") -> Versioned | None:
        if not self.health.usable():
            return None
        try:
            got = self.store.read(key, have=have, ttl_s=self.ttl_s)
        except StoreUnavailable as exc:
            self.health.failed(exc)
            return None
        self.health.succeeded()
        return got

    def write(self, key: str, data: bytes, *, expected: str) -> str | None:
        """The new token; ``CONFLICT`` ("") when the key no longer holds ``expected``; None when the store
        cannot answer."""
        if not self.health.usable():
            return None
        try:
            token = self.store.write(key, data, expected=expected, ttl_s=self.ttl_s)
        except StoreUnavailable as exc:
            self.health.failed(exc)
            return None
        self.health.succeeded()
        return CONFLICT if token is None else token

    def delete(self, key: str) -> bool:
        try:
            self.store.delete(key)
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


class Shared:
    """The pipeline's shared state: the store-backed deduplicator and the scopes' indexes in the store."""

    def __init__(self, shared: SharedState, scopes: ScopeStore, deduplicator: SharedDeduplicator) -> None:
        self.state = shared
        self.scopes = scopes
        self.deduplicator = deduplicator
        self._tokens: weakref.WeakKeyDictionary[ContextIndex, str] = weakref.WeakKeyDictionary()

    # ------------------------------------------------------------------ index
    def _sync(self, state: ScopeState, key: str) -> bool:
        """Bring ``state`` up to the store's value (caller holds ``state.lock``); False: the store cannot say."""
        have = self._tokens.get(state.index, "")
        got = self.state.read(key, have)
        if got is None:
            return False
        if got.absent or got.data is None:  # gone (TTL, eviction, first use): this process's index stays
            self._tokens[state.index] = got.token
            return True
        try:
            snapshot = decode_index(got.data, self.state.keys.owner(key))
            options = self.scopes.index_options()
            index = ContextIndex.restore(snapshot, max_bytes=self.scopes.config.max_snapshot_bytes, **options)
        except ValueError as exc:
            self.state.bad_value(key, exc, "this process's index is used and written over it")
            self._tokens[state.index] = got.token
            return True
        self.scopes.engine.detach(state.index)
        self.scopes.engine.attach(index)
        state.index = index
        self._tokens[index] = got.token
        return True

    def _insert_local(self, state: ScopeState, keys: Sequence[Hashable], lens: list[int] | None, rid: str) -> Placement:
        placement = state.index.insert(keys, rid, token_lens=lens)
        state.index.trim(self.scopes.config.max_requests_per_scope)  # the feed hears of it (ScopeStore.get)
        self.scopes.note_insert(state)
        return placement

    def _publish(self, state: ScopeState, key: str) -> str | None:
        """Write ``state``'s index by compare-and-set (caller holds the lock): the new token, ``CONFLICT``,
        or None (not written: the store cannot answer, or the index is too large)."""
        data = encode_index(state.index.snapshot(), self.state.keys.owner(key))
        if len(data) > self.scopes.config.max_snapshot_bytes:
            logger.warning("the index of %s is over max_snapshot_bytes: kept in this process only", state.scope)
            return None
        result = self.state.write(key, data, expected=self._tokens.get(state.index, ""))
        if result:
            self._tokens[state.index] = result
        return result

    def insert(self, state: ScopeState, keys: Sequence[Hashable], lens: list[int] | None) -> Placement:
        """Insert one request into the scope's index as the store holds it (module doc)."""
        key, rid = self.state.keys.index(state.scope), uuid.uuid4().hex
        with state.lock:
            for _ in range(INSERT_ATTEMPTS):
                if not self._sync(state, key):
                    break
                placement = self._insert_local(state, keys, lens, rid)
                result = self._publish(state, key)
                if result != CONFLICT:
                    return placement  # written, or the store stopped answering: kept here
                state.index.evict(rid)  # another process wrote first: read its index and insert again
            else:
                logger.warning(
                    "index of %s: %d conflicting writers in a row; this insert stays in this process",
                    state.scope,
                    INSERT_ATTEMPTS,
                )
            return self._insert_local(state, keys, lens, rid)

    def rollback(self, scope: Scope, rid: Hashable) -> bool:
        """Take an unsent request out of the scope's index in the store; False: the store did not take it."""
        state, key = self.scopes.get(scope), self.state.keys.index(scope)
        with state.lock:
            for _ in range(INSERT_ATTEMPTS):
                if not self._sync(state, key):
                    return False
                self.scopes.engine.untrack(state.index, rid)
                if not state.index.evict(rid):
                    return True  # not in the store's index (evicted, or never written there)
                result = self._publish(state, key)
                if result != CONFLICT:
                    return bool(result)
        return False


def open_shared(config: ContextPilotConfig, scopes: ScopeStore, store: StateStore | None = None) -> Shared | None:
    """The shared state ``config.state_store`` names (or ``store``); None for the in-process default."""
    from .shared_dedup import SharedDeduplicator

    if store is None:
        if config.state_store is None:
            return None
        url = config.state_store.get_secret_value()
        store = open_state_store(url, timeout_s=config.state_timeout_s)
        name = url.split("@")[-1]  # never the password
    else:
        name = type(store).__name__
    shared = SharedState(store, config, name)
    dedup = SharedDeduplicator(shared, max_conversations=config.max_conversations, content=config.content_dedup)
    return Shared(shared, scopes, dedup)
