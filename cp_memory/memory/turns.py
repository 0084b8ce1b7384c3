"""Two-phase turns: a search plans a conversation turn; it counts as sent only once committed.

A failed model call must not poison dedup: if a turn were registered at search time and its prompt never
reached the model, a retry would send location annotations pointing at memories the model never saw. So
``search`` returns a *pending* turn (``context_pilot["turn_id"]``); the caller commits it once the prompt
was sent (:meth:`Turns.commit`) or rolls it back (:meth:`Turns.rollback`: the dedup record is untouched
and the request leaves the scope's index, which must only model prompts the engine really prefilled).
Pending turns are bounded (LRU, ``max_pending_turns``): an abandoned turn simply expires. A pending turn
holds its scope's *key*, never its index: the scopes in memory stay bounded by ``max_scopes`` however
many turns are pending. A rollback finds the scope's index where it is now — in memory, or restored from
its snapshot when it was evicted meanwhile — so the request leaves the index that holds it.

With an engine's KV-cache feed (:mod:`.engine_feed`) a commit is when the turn's block section is tracked
(the engine has its blocks now), and a rollback untracks the request.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.dedup import Deduplicator, DedupResult
from ..core.lru import LRUMap
from ..core.prompt import contract_of
from ..core.scope import Scope
from ..state.ops import Op, run
from .state import ScopeState, ScopeStore

if TYPE_CHECKING:
    from .shared import Shared

__all__ = ["PendingTurn", "Turns"]


@dataclass(frozen=True)
class PendingTurn:
    dedup: DedupResult
    scope: Scope | None  # whose index holds request_id (the key only: the index itself may be evicted)
    request_id: Hashable | None
    section: str | None = None  # the block lines to track once sent (an engine's KV-cache feed is followed)


def _turn_id_of(response_or_turn: Any) -> str | None:
    if isinstance(response_or_turn, str):
        return response_or_turn
    contract = contract_of(response_or_turn)
    if contract is None:
        raise TypeError(
            "commit/rollback take a search response of this wrapper (or its turn_id), "
            f"got {type(response_or_turn).__name__}"
        )
    return contract.turn_id


class Turns:
    """Pending turns by id. Thread-safe (the LRU map and the deduplicator lock themselves)."""

    def __init__(
        self,
        deduplicator: Deduplicator,
        max_pending: int,
        scopes: ScopeStore | None = None,
        shared: Shared | None = None,
    ) -> None:
        self.deduplicator = deduplicator
        self.shared = shared  # a shared state store (None: in-process): rollback leaves its index there
        self.max_pending = max_pending
        self.scopes = scopes
        self._pending: LRUMap[str, PendingTurn] = LRUMap(max_pending)

    def __len__(self) -> int:
        return len(self._pending)

    def open(
        self, plan: DedupResult, state: ScopeState | None, request_id: Hashable | None, section: str | None = None
    ) -> str:
        """Keep a planned turn until it is committed or rolled back; returns its id."""
        turn_id = uuid.uuid4().hex
        self._pending.set(turn_id, PendingTurn(plan, None if state is None else state.scope, request_id, section))
        return turn_id

    def commit(self, response_or_turn: Any, *, preamble: str | None = None) -> int | None:
        """Register a turn as sent; returns its turn number (None: the search had nothing to commit, or a
        shared state store could not record it: no later pointer names it). ``preamble``: the prompt's text
        before the turn's section, for the engine feed (:meth:`~cp_memory.core.engine_cache.EngineCache.track_text`)."""
        store = None if self.shared is None else self.shared.state.store
        return run(self.commit_op(response_or_turn, preamble=preamble), store)

    def commit_op(self, response_or_turn: Any, *, preamble: str | None = None) -> Op[int | None]:
        """:meth:`commit` as a store operation (:mod:`cp_memory.state.ops`; the async wrappers' ``acommit``)."""
        turn_id = _turn_id_of(response_or_turn)
        if turn_id is None:
            return None
        pending = self._pending.pop(turn_id)
        if pending is None:
            raise ValueError(
                f"turn {turn_id} is unknown: already committed or rolled back, or expired "
                f"(more than max_pending_turns={self.max_pending} pending)"
            )
        if self.shared is not None:
            turn = (yield from self.shared.deduplicator.commit_op(pending.dedup)).turn
        else:
            turn = self.deduplicator.commit(pending.dedup).turn
        if pending.section is not None and pending.scope is not None and self.scopes is not None:
            state = self.scopes.peek(pending.scope)  # evicted meanwhile: its new index never saw the request
            if state is not None:
                self.scopes.engine.track(state.index, pending.request_id, pending.section, preamble)
        return turn or None

    def rollback(self, response_or_turn: Any) -> None:
        """Forget a turn that was never sent. Idempotent."""
        run(self.rollback_op(response_or_turn), None if self.shared is None else self.shared.state.store)

    def rollback_op(self, response_or_turn: Any) -> Op[None]:
        """:meth:`rollback` as a store operation (the async wrappers' ``arollback``)."""
        turn_id = _turn_id_of(response_or_turn)
        pending = self._pending.pop(turn_id) if turn_id is not None else None
        if pending is None:
            return
        self.deduplicator.rollback(pending.dedup)
        scope, rid = pending.scope, pending.request_id
        if scope is None or rid is None or self.scopes is None:
            return
        if self.shared is not None and (yield from self.shared.rollback(scope, rid)):
            return
        state = self.scopes.peek(scope)
        if state is None and self.scopes.index_dir is not None:
            state = self.scopes.get(scope)  # evicted meanwhile: its snapshot holds the request
        if state is None:
            return  # evicted without a snapshot: that index is gone, and the request with it
        self.scopes.engine.untrack(state.index, rid)
        with state.lock:
            if state.index.evict(rid):
                self.scopes.note_insert(state)  # the index changed: count it towards the next snapshot
