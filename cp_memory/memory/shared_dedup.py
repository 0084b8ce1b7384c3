"""Dedup records in a shared store: every process plans against the conversation's committed turns as the
store holds them, and a commit appends the turn there by compare-and-set (bounded retries).

Correctness rules (a pointer names ``[Doc p]`` of turn ``t``; it must be what the caller's turn ``t`` showed):

* a plan reads the record once and plans against it: every pointer names a turn already committed in the
  store, whose blocks never change afterwards;
* a commit numbers the turn at the store (its committed turns + 1, as the local record does); when the plan's
  turn was taken meanwhile by a concurrent turn of the same conversation, the turn is renumbered like the
  local :class:`~cp_memory.core.dedup.Deduplicator` does;
* when the store cannot say (down, timeout, out of memory, a foreign or malformed record) the plan keeps
  every block: no pointer, no same-turn pointer (content dedup is off for that turn);
* when a commit cannot be recorded, :meth:`SharedDeduplicator.commit` gives the turn number 0 (the wrapper's
  ``commit`` returns None): the turn was sent but has no number, so no later pointer can name it;
* a record that vanished (TTL, eviction) while a turn was pending is written again from the turn count the
  plan saw, and a process remembers the last turn number it saw of each conversation (bounded), so a lost
  record continues the numbering instead of restarting it where this process knows better;
* a foreign record (another conversation's or tenant's value under this key) is never trusted nor
  overwritten: the conversation sends full memories until it expires or ``forget_conversation`` deletes it.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from ..core.blocks import ContextBlock
from ..core.dedup import Deduplicator, _check_turn, _renumbered
from ..core.dedup_plan import plan_turn, register_send, sent_location
from ..core.dedup_records import Conversation, DedupResult, Location, PlanTicket
from ..core.lru import LRUMap
from ..core.scope import Scope
from ..state.records import decode_conversation, encode_conversation
from .shared import CONFLICT, SharedState

__all__ = ["SharedDeduplicator"]

logger = logging.getLogger(__name__)

#: compare-and-set attempts of one commit before it gives up (a conflict means another turn of the same
#: conversation committed in between: rare, each retry reads the newer record)
COMMIT_ATTEMPTS = 5
#: a conversation record larger than this is not read (a planted one cannot cost more)
MAX_RECORD_BYTES = 4 << 20


@dataclass(frozen=True)
class _Planned:
    key: str
    base: int | None  # committed turns the plan saw (None: the store could not say)


class _Unknown:
    """The store cannot say what the conversation sent."""


UNKNOWN = _Unknown()


class SharedDeduplicator(Deduplicator):
    """A :class:`~cp_memory.core.dedup.Deduplicator` whose committed state lives in a shared store."""

    def __init__(self, shared: SharedState, *, max_conversations: int, content: bool) -> None:
        super().__init__(max_conversations=max_conversations, content=content)
        self.shared = shared
        self._seen: LRUMap[str, int] = LRUMap(max_conversations)  # key -> last turn number seen here
        self._planned: LRUMap[int, _Planned] = LRUMap(self._plans.capacity)

    def _key(self, conversation_id: Hashable) -> str:
        if not (isinstance(conversation_id, tuple) and len(conversation_id) == 2):
            raise TypeError(f"a shared dedup record is keyed by (Scope, conversation), got {conversation_id!r:.60}")
        scope, conversation = conversation_id
        if not isinstance(scope, Scope):
            raise TypeError(f"a shared dedup record is keyed by (Scope, conversation), got {conversation_id!r:.60}")
        return self.shared.keys.conversation(scope, str(conversation))

    def _read(self, key: str) -> Conversation | _Unknown:
        """The committed record (an empty one when there is none), or UNKNOWN."""
        got = self.shared.read(key)
        if got is None:
            return UNKNOWN
        seen = self._seen.peek(key) or 0
        if got.absent:
            return Conversation(turns=seen)  # lost record: continue the numbering this process knows
        try:
            conv = decode_conversation(got.data or b"", self.shared.keys.owner(key), max_bytes=MAX_RECORD_BYTES)
        except ValueError as exc:
            self.shared.bad_value(key, exc, "the conversation sends full memories until the key expires")
            return UNKNOWN
        if conv.turns < seen:
            logger.warning(
                "dedup record %s went back from turn %d to %d: not trusted for this turn", key, seen, conv.turns
            )
            return UNKNOWN
        self._seen.set(key, conv.turns)
        return conv

    # ------------------------------------------------------------------ committed state
    def peek(self, conversation_id: Hashable, blocks: Sequence[ContextBlock | Hashable]) -> tuple[Location | None, ...]:
        conv = self._read(self._key(conversation_id))
        if isinstance(conv, _Unknown):
            return tuple(None for _ in blocks)
        out = []
        for b in blocks:
            bid, digest = (b.id, b.digest) if isinstance(b, ContextBlock) else (b, None)
            out.append(sent_location(conv, None, bid, digest, content=self.content))
        return tuple(out)

    def sent_count(self, conversation_id: Hashable) -> int:
        conv = self._read(self._key(conversation_id))
        return 0 if isinstance(conv, _Unknown) else len(conv.by_id)

    def sent(self, conversation_id: Hashable) -> dict[Hashable, Location]:
        conv = self._read(self._key(conversation_id))
        return {} if isinstance(conv, _Unknown) else {b: loc for b, (_, loc) in conv.by_id.items()}

    def forget(self, conversation_id: Hashable) -> bool:
        key = self._key(conversation_id)
        self._seen.pop(key)
        return self.shared.delete(key)

    def __len__(self) -> int:
        return len(self._seen)

    def __contains__(self, conversation_id: Hashable) -> bool:
        return self._key(conversation_id) in self._seen

    # ------------------------------------------------------------------ the two phases
    def plan(self, conversation_id: Hashable, blocks: Sequence[ContextBlock | Hashable]) -> DedupResult:
        """Plan against the store's committed record; when it cannot say, keep every block (no pointer)."""
        items = _check_turn(conversation_id, blocks)
        key = self._key(conversation_id)
        conv = self._read(key)
        known = not isinstance(conv, _Unknown)
        base = conv.turns if isinstance(conv, Conversation) else 0
        kept, dropped, trims, sends = plan_turn(
            conv if isinstance(conv, Conversation) else None,
            items,
            base + 1,
            content=self.content and known,
            spans=self.spans and known,
            min_span_chars=self.min_span_chars,
            location_template=self.location_template,
        )
        with self._lock:
            seq = next(self._seq)
            self._plans.set(seq, "pending")
            self._planned.set(seq, _Planned(key, base if known else None))
        ticket = PlanTicket(self._token, seq, sends)
        return DedupResult(base + 1, kept, dropped, trims, conversation_id, committed=False, _ticket=ticket)

    def commit(self, result: DedupResult) -> DedupResult:
        """Append the turn to the store's record (compare-and-set); turn 0 when it could not be recorded."""
        ticket = self._ticket_of(result, "commit")
        with self._lock:
            state = self._plans.peek(ticket.seq)
            if state != "pending":
                raise ValueError(f"cannot commit this plan: it is {state or 'expired (or unknown)'}")
            self._plans.set(ticket.seq, "committed")
            planned = self._planned.pop(ticket.seq)
        turn = 0 if planned is None else self._append(planned, ticket)
        if turn and turn != result.turn:
            logger.debug("dedup: conversation %r committed another turn meanwhile; now turn %d", planned, turn)
        return _renumbered(result, turn)

    def _append(self, planned: _Planned, ticket: PlanTicket) -> int:
        """Register the turn's sends in the store; its number, or 0 when the store did not take it."""
        shared, key = self.shared, planned.key
        for _ in range(COMMIT_ATTEMPTS):
            got = shared.read(key)
            if got is None:
                return 0
            if got.absent:
                conv = Conversation(turns=max(planned.base or 0, self._seen.peek(key) or 0))
            else:
                try:
                    conv = decode_conversation(got.data or b"", shared.keys.owner(key), max_bytes=MAX_RECORD_BYTES)
                except ValueError as exc:
                    shared.bad_value(key, exc, "the turn is not recorded")
                    return 0
                seen = self._seen.peek(key) or 0
                if conv.turns < seen:  # recreated by a process that knew less: its numbering is not the caller's
                    conv = Conversation(turns=seen)
            conv.turns += 1
            for send in ticket.sends:
                register_send(conv, send, Location(send.block_id, conv.turns, send.position))
            try:
                data = encode_conversation(conv, shared.keys.owner(key))
            except ValueError as exc:
                logger.warning("dedup record %s cannot be stored (%s): the turn is not recorded", key, exc)
                return 0
            written = shared.write(key, data, expected=got.token)
            if written is None:
                return 0
            if written != CONFLICT:
                self._seen.set(key, conv.turns)
                return conv.turns
        logger.warning(
            "dedup record %s: %d concurrent commits in a row; this turn is not recorded", key, COMMIT_ATTEMPTS
        )
        return 0
