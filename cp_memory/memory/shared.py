"""The wrapper's side of a shared state store (``state_store=`` in :class:`~.config.ContextPilotConfig`).

With no store (the default) nothing here runs: each wrapper keeps its own indexes and dedup records. With
one, :func:`open_shared` gives the pipeline a :class:`Shared`:

* ``deduplicator`` — a :class:`~.shared_dedup.SharedDeduplicator`: committed dedup turns in the store;
* :meth:`Shared.insert` / :meth:`Shared.rollback` — a scope's context index in the store. The process keeps
  the index it last read (its :class:`~.state.ScopeState`) and the token of that value; a search reads the
  value only when another process changed it (with its conversation's dedup record, in one round trip),
  inserts, and writes the new snapshot by compare-and-set. A
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
from ..core.scope import Scope
from ..state.client import CONFLICT, StateClient
from ..state.health import StoreHealth
from ..state.keys import StateKeys
from ..state.ops import Op, open_async_state_store
from ..state.records import decode_index, encode_index
from ..state.store import StateStore, Versioned, open_state_store
from .config import ContextPilotConfig
from .state import ScopeState, ScopeStore

if TYPE_CHECKING:
    from .shared_dedup import SharedDeduplicator

__all__ = ["CONFLICT", "INSERT_ATTEMPTS", "Shared", "open_shared"]

logger = logging.getLogger(__name__)

#: compare-and-set attempts of one index insert before it stays in this process's index
INSERT_ATTEMPTS = 5


class Shared:
    """The pipeline's shared state: the store-backed deduplicator and the scopes' indexes in the store.

    The index operations never hold a scope's lock while they wait on the store (an async search awaits
    there, and other searches of the loop may take the same scope): they read, then apply the value and
    insert under the lock, then write by compare-and-set; another search of this process that moved the
    index in between makes it read again, as another process would."""

    def __init__(self, shared: StateClient, scopes: ScopeStore, deduplicator: SharedDeduplicator) -> None:
        self.state = shared
        self.scopes = scopes
        self.deduplicator = deduplicator
        self._tokens: weakref.WeakKeyDictionary[ContextIndex, str] = weakref.WeakKeyDictionary()

    # ------------------------------------------------------------------ index
    def _token(self, state: ScopeState) -> str:
        return self._tokens.get(state.index, "")

    def _apply(self, state: ScopeState, key: str, got: Versioned) -> None:
        """Bring ``state`` up to the value read (caller holds ``state.lock``)."""
        if got.absent or got.data is None:  # gone (TTL, eviction, first use) or unchanged: this index stays
            self._tokens[state.index] = got.token
            return
        try:
            snapshot = decode_index(got.data, self.state.keys.owner(key))
            options = self.scopes.index_options()
            index = ContextIndex.restore(snapshot, max_bytes=self.scopes.config.max_snapshot_bytes, **options)
        except ValueError as exc:
            self.state.bad_value(key, exc, "this process's index is used and written over it")
            self._tokens[state.index] = got.token
            return
        self.scopes.engine.detach(state.index)
        self.scopes.engine.attach(index)
        state.index = index
        self._tokens[index] = got.token

    def _insert_local(self, state: ScopeState, keys: Sequence[Hashable], lens: list[int] | None, rid: str) -> Placement:
        placement = state.index.insert(keys, rid, token_lens=lens)
        state.index.trim(self.scopes.config.max_requests_per_scope)  # the feed hears of it (ScopeStore.get)
        self.scopes.note_insert(state)
        return placement

    def _snapshot(self, state: ScopeState, key: str) -> bytes | None:
        """``state``'s index as the store keeps it (caller holds the lock); None when it is too large."""
        data = encode_index(state.index.snapshot(), self.state.keys.owner(key))
        if len(data) > self.scopes.config.max_snapshot_bytes:
            logger.warning("the index of %s is over max_snapshot_bytes: kept in this process only", state.scope)
            return None
        return data

    def _written(self, state: ScopeState, index: ContextIndex, rid: Hashable, result: str | None) -> None:
        """Book a compare-and-set's outcome for ``index`` (conflict: ``rid`` leaves it; it is read again)."""
        with state.lock:
            if result:
                self._tokens[index] = result
            elif result == CONFLICT:
                index.evict(rid)

    def index_read(self, scope: Scope) -> tuple[str, str]:
        """What reading ``scope``'s index asks for: its key and the token this process holds (a search reads it
        with its conversation's record in one round trip and passes the value to :meth:`insert`)."""
        return self.state.keys.index(scope), self._token(self.scopes.get(scope))

    def insert(
        self,
        state: ScopeState,
        keys: Sequence[Hashable],
        lens: list[int] | None,
        read: tuple[str, Versioned] | None = None,
    ) -> Op[Placement]:
        """Insert one request into the scope's index as the store holds it (module doc). ``read``: the
        index's value read earlier in this search, with the token it was read against (:meth:`index_read`);
        used if this process has not moved the index since, else the index is read again."""
        key, rid = self.state.keys.index(state.scope), uuid.uuid4().hex
        for _ in range(INSERT_ATTEMPTS):
            have = self._token(state)
            if read is not None and read[0] == have:
                got: Versioned | None = read[1]
            else:
                got = yield from self.state.read(key, have)
            read = None  # a retry (after a conflict) reads the newer value
            if got is None:
                break
            with state.lock:
                if self._token(state) != have:
                    continue  # another search of this process moved the index meanwhile: read again
                self._apply(state, key, got)
                index, expected = state.index, self._token(state)
                placement = self._insert_local(state, keys, lens, rid)
                data = self._snapshot(state, key)
            if data is None:
                return placement
            result = yield from self.state.write(key, data, expected=expected)
            self._written(state, index, rid, result)
            if result != CONFLICT:
                return placement  # written, or the store stopped answering: kept here
        else:
            logger.warning(
                "index of %s: %d conflicting writers in a row; this insert stays in this process",
                state.scope,
                INSERT_ATTEMPTS,
            )
        with state.lock:
            return self._insert_local(state, keys, lens, rid)

    def rollback(self, scope: Scope, rid: Hashable) -> Op[bool]:
        """Take an unsent request out of the scope's index in the store; False: the store did not take it."""
        state, key = self.scopes.get(scope), self.state.keys.index(scope)
        for _ in range(INSERT_ATTEMPTS):
            have = self._token(state)
            got = yield from self.state.read(key, have)
            if got is None:
                return False
            with state.lock:
                if self._token(state) != have:
                    continue
                self._apply(state, key, got)
                self.scopes.engine.untrack(state.index, rid)
                if not state.index.evict(rid):
                    return True  # not in the store's index (evicted, or never written there)
                index, expected, data = state.index, self._token(state), self._snapshot(state, key)
            if data is None:
                return False
            result = yield from self.state.write(key, data, expected=expected)
            if result != CONFLICT:
                self._written(state, index, rid, result)
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
        astore = open_async_state_store(url, store, timeout_s=config.state_timeout_s)
        name = url.split("@")[-1]  # never the password
    else:
        name, astore = type(store).__name__, None
    shared = StateClient(
        store,
        keys=StateKeys(config.state_tenant),
        ttl_s=config.state_ttl_s,
        health=StoreHealth(name or type(store).__name__, retry_s=config.state_retry_s),
        astore=astore,
    )
    dedup = SharedDeduplicator(shared, max_conversations=config.max_conversations, content=config.content_dedup)
    return Shared(shared, scopes, dedup)
