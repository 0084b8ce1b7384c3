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
* a process remembers the last turn number it saw of each conversation (bounded). A record found missing
  (a restart without persistence, eviction) or gone back below that number, or missing at commit after the
  plan saw turns, was lost: its numbering cannot be rebuilt, so the process writes a *tombstone* in its place
  and the conversation sends full memories from then on (until the key expires or ``forget_conversation``).
  A process that never saw the conversation cannot tell a lost record from a new conversation: it starts at
  turn 1 (docs/scale.md: run Redis with persistence and without eviction of these keys).
  ``forget_conversation`` starts a new *generation* of the record (an empty one, numbered from turn 1 again,
  as the local record is), which no process mistakes for a loss;
* a foreign record (another conversation's or tenant's value under this key) is never trusted nor
  overwritten: the conversation sends full memories until it expires or ``forget_conversation`` deletes it;
* a commit whose write went out but whose answer never came (a timeout) gave the caller no turn number,
  yet may have been applied — then, or later: Redis runs a stalled compare-and-set once it resumes, if the
  key still holds the token it expects. The process remembers it (the token it asked the write to set,
  the turn, its blocks' places) until the key moves on; if the record then turned out to hold it (that
  token, or its blocks at that turn), a later pointer could name a turn the caller's history lacks: the
  process buries the record (full memories from then on, the safe direction).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Hashable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

from ..core.blocks import ContextBlock
from ..core.dedup import Deduplicator
from ..core.dedup_plan import check_turn, committed_result, plan_turn, register_send, sent_location
from ..core.dedup_records import Conversation, DedupResult, Location, PlanTicket
from ..core.lru import LRUMap
from ..core.scope import Scope
from ..state.client import CONFLICT, StateClient
from ..state.errors import LostRecord
from ..state.ops import Op
from ..state.records import decode_conversation, encode_conversation, encode_tombstone
from ..state.store import Versioned, new_token

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
    generation: str  # of the record the plan saw
    read: Versioned | None = None  # the value it was read from: the commit's first compare-and-set starts there


@dataclass(frozen=True)
class _Unsure:
    """A commit sent to the store without an answer: what would show it was applied."""

    expected: str  # the token the write replaces (while the key holds it, the write may still apply)
    token: str  # the token the write sets
    turn: int
    places: frozenset[tuple[Hashable, int]]  # (block id, position) of its sends


class _Unknown:
    """The store cannot say what the conversation sent."""


UNKNOWN = _Unknown()

#: the search in progress's one read of its conversation record: (deduplicator id, key, record, the value
#: read). A context variable: each thread, and each asyncio task, sees only its own search's read
_SEARCH_READ: ContextVar[tuple[int, str, Conversation | _Unknown, Versioned | None] | None] = ContextVar(
    "cp_dedup_read", default=None
)


class SharedDeduplicator(Deduplicator):
    """A :class:`~cp_memory.core.dedup.Deduplicator` whose committed state lives in a shared store."""

    def __init__(self, shared: StateClient, *, max_conversations: int, content: bool) -> None:
        super().__init__(max_conversations=max_conversations, content=content)
        self.shared = shared
        # key -> (generation, last turn number) this process saw
        self._seen: LRUMap[str, tuple[str, int]] = LRUMap(max_conversations)
        self._planned: LRUMap[int, _Planned] = LRUMap(self._plans.capacity)
        self._unsure: LRUMap[str, _Unsure] = LRUMap(max_conversations)

    def _key(self, conversation_id: Hashable) -> str:
        if not (isinstance(conversation_id, tuple) and len(conversation_id) == 2):
            raise TypeError(f"a shared dedup record is keyed by (Scope, conversation), got {conversation_id!r:.60}")
        scope, conversation = conversation_id
        if not isinstance(scope, Scope):
            raise TypeError(f"a shared dedup record is keyed by (Scope, conversation), got {conversation_id!r:.60}")
        return self.shared.keys.conversation(scope, str(conversation))

    def _seen_turns(self, key: str, generation: str | None) -> int:
        """The last turn this process saw of the record's ``generation`` (None: the record is absent)."""
        seen = self._seen.peek(key)
        if seen is None or (generation is not None and seen[0] != generation):
            return 0
        return seen[1]

    def _read(self, key: str) -> Op[Conversation | _Unknown]:
        """The committed record (an empty one when there is none), or UNKNOWN."""
        got = yield from self.shared.read(key)
        return (yield from self._interpret(key, got))

    def _interpret(self, key: str, got: Versioned | None) -> Op[Conversation | _Unknown]:
        """What the value read under ``key`` says (None: the store could not say); a lost record is buried."""
        if got is None:
            return UNKNOWN
        if got.absent:
            seen = self._seen_turns(key, None)
            if seen:
                yield from self._bury(key, "", seen)
                return UNKNOWN
            return Conversation()
        decoded = self._decode(key, got.data or b"")
        if decoded is None:
            return UNKNOWN
        conv, generation = decoded
        seen = self._seen_turns(key, generation)
        if conv.turns < seen or self._landed(key, got.token, conv):
            yield from self._bury(key, got.token, max(seen, conv.turns))
            return UNKNOWN
        self._seen.set(key, (generation, conv.turns))
        return conv

    def _landed(self, key: str, token: str, conv: Conversation) -> bool:
        """Does the record (``token``, ``conv``) hold a commit of this process whose outcome it never learned?"""
        unsure = self._unsure.peek(key)
        if unsure is None or token == unsure.expected:
            return False  # not applied (yet); a compare-and-set from this token makes sure it never is
        self._unsure.pop(key)  # the key moved on: the write was applied, or never will be
        if token == unsure.token:
            return True
        at_turn = {(b, loc.position) for b, (_, loc) in conv.by_id.items() if loc.turn == unsure.turn}
        return bool(unsure.places) and unsure.places <= at_turn

    def _decode(self, key: str, data: bytes) -> tuple[Conversation, str] | None:
        try:
            return decode_conversation(data, self.shared.keys.owner(key), max_bytes=MAX_RECORD_BYTES)
        except LostRecord:
            return None
        except ValueError as exc:
            self.shared.bad_value(key, exc, "the conversation sends full memories until the key expires")
            return None

    def _bury(self, key: str, token: str, seen: int) -> Op[None]:
        """The record was lost after turn ``seen``: a tombstone in its place (module doc)."""
        self.shared.bad_value(
            key,
            LostRecord(f"this process saw turn {seen}, the store no longer has it"),
            "its turn numbering cannot be rebuilt: the conversation sends full memories from now on",
        )
        yield from self.shared.write(key, encode_tombstone(self.shared.keys.owner(key), seen), expected=token)

    # ------------------------------------------------------------------ committed state
    def load(self, conversation_id: Hashable) -> Op[int]:
        """The search's one read of the conversation's record (the flow runs it first); :meth:`peek` and
        :meth:`plan` of the same search reuse it. Returns the memories the record holds (0 when the store
        cannot say). A reused record can only lack turns committed since: fewer pointers, never a wrong one
        (committed turns never change)."""
        key = self._key(conversation_id)
        got = yield from self.shared.read(key)
        return (yield from self.loaded(conversation_id, got))

    def load_key(self, conversation_id: Hashable) -> str:
        """The store key :meth:`load` reads (a search that reads it with other keys in one round trip passes
        the value to :meth:`loaded`)."""
        return self._key(conversation_id)

    def loaded(self, conversation_id: Hashable, got: Versioned | None) -> Op[int]:
        """:meth:`load` with the value already read (None: the store could not say). A commit of this
        search's turn starts its compare-and-set from this value, without reading it again."""
        key = self._key(conversation_id)
        conv = yield from self._interpret(key, got)
        _SEARCH_READ.set((id(self), key, conv, None if isinstance(conv, _Unknown) else got))
        return 0 if isinstance(conv, _Unknown) else len(conv.by_id)

    @staticmethod
    def done() -> None:
        """The search ended: its read is not reused by anything after it."""
        _SEARCH_READ.set(None)

    def _current(self, key: str) -> tuple[Conversation | _Unknown, Versioned | None]:
        """The search's read (:meth:`load`) and the value it came from, else a read now (sync: outside a
        search's flow; no value kept)."""
        memo = _SEARCH_READ.get()
        if memo is not None and memo[0] == id(self) and memo[1] == key:
            return memo[2], memo[3]
        return self.shared.run(self._read(key)), None

    def peek(self, conversation_id: Hashable, blocks: Sequence[ContextBlock | Hashable]) -> tuple[Location | None, ...]:
        conv, _ = self._current(self._key(conversation_id))
        if isinstance(conv, _Unknown):
            return tuple(None for _ in blocks)
        out = []
        for b in blocks:
            bid, digest = (b.id, b.digest) if isinstance(b, ContextBlock) else (b, None)
            out.append(sent_location(conv, None, bid, digest, content=self.content))
        return tuple(out)

    def sent_count(self, conversation_id: Hashable) -> int:
        """Memories the record holds (a sync read; a search's flow runs :meth:`load` instead)."""
        conv = self.shared.run(self._read(self._key(conversation_id)))
        return 0 if isinstance(conv, _Unknown) else len(conv.by_id)

    def sent(self, conversation_id: Hashable) -> dict[Hashable, Location]:
        conv = self.shared.run(self._read(self._key(conversation_id)))
        return {} if isinstance(conv, _Unknown) else {b: loc for b, (_, loc) in conv.by_id.items()}

    def forget(self, conversation_id: Hashable) -> bool:
        """Start the conversation's record over (a new generation, from turn 1); False: the store did not."""
        return self.shared.run(self.forget_op(conversation_id))

    def forget_op(self, conversation_id: Hashable) -> Op[bool]:
        key = self._key(conversation_id)
        self._seen.pop(key)
        got = yield from self.shared.read(key)
        if got is None:
            return False
        fresh = encode_conversation(Conversation(), self.shared.keys.owner(key), uuid.uuid4().hex)
        written = yield from self.shared.write(key, fresh, expected=got.token)
        return bool(written) and not got.absent

    def __len__(self) -> int:
        return len(self._seen)

    def __contains__(self, conversation_id: Hashable) -> bool:
        return self._key(conversation_id) in self._seen

    # ------------------------------------------------------------------ the two phases
    def plan(self, conversation_id: Hashable, blocks: Sequence[ContextBlock | Hashable]) -> DedupResult:
        """Plan against the store's committed record; when it cannot say, keep every block (no pointer)."""
        items = check_turn(conversation_id, blocks)
        key = self._key(conversation_id)
        conv, got = self._current(key)
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
            generation = (self._seen.peek(key) or ("", 0))[0]
            self._planned.set(seq, _Planned(key, base if known else None, generation, got if known else None))
        ticket = PlanTicket(self._token, seq, sends)
        return DedupResult(base + 1, kept, dropped, trims, conversation_id, committed=False, _ticket=ticket)

    def commit(self, result: DedupResult) -> DedupResult:
        """Append the turn to the store's record (compare-and-set); turn 0 when it could not be recorded."""
        return self.shared.run(self.commit_op(result))

    def commit_op(self, result: DedupResult) -> Op[DedupResult]:
        """:meth:`commit` as a store operation (:mod:`cp_memory.state.ops`)."""
        ticket = self._ticket_of(result, "commit")
        with self._lock:
            state = self._plans.peek(ticket.seq)
            if state != "pending":
                raise ValueError(f"cannot commit this plan: it is {state or 'expired (or unknown)'}")
            self._plans.set(ticket.seq, "committed")
            planned = self._planned.pop(ticket.seq)
        turn = 0 if planned is None else (yield from self._append(planned, ticket))
        if turn and turn != result.turn:
            logger.debug("dedup: conversation %r committed another turn meanwhile; now turn %d", planned, turn)
        return committed_result(result, turn)

    def _commit_view(self, key: str, got: Versioned, planned: _Planned) -> tuple[Conversation, str, int] | None:
        """The record a commit appends to (a fresh copy), its generation and the last turn known to exist."""
        decoded = (Conversation(), "") if got.absent else self._decode(key, got.data or b"")
        if decoded is None:
            return None
        conv, generation = decoded
        base = (planned.base or 0) if got.absent or planned.generation == generation else 0
        return conv, generation, max(base, self._seen_turns(key, None if got.absent else generation))

    def _append(self, planned: _Planned, ticket: PlanTicket) -> Op[int]:
        """Register the turn's sends in the store; its number, or 0 when the store did not take it."""
        shared, key = self.shared, planned.key
        # the plan's read starts the first compare-and-set (it fails if the record moved since): one round trip
        # where nothing else wrote. It is only a start: anything it cannot vouch for (a turn this process saw
        # after it, an unanswered commit) is decided on a fresh read, as before
        first = planned.read
        for _ in range(COMMIT_ATTEMPTS):
            got = first if first is not None else (yield from shared.read(key))
            view = None if got is None else self._commit_view(key, got, planned)
            stale = view is not None and (view[0].turns < view[2] or self._unsure.peek(key) is not None)
            if first is not None and stale:
                got = yield from shared.read(key)  # stale, or an open question: decided on a fresh read
                view = None if got is None else self._commit_view(key, got, planned)
            first = None  # a retry (after a conflict) reads the newer record
            if got is None or view is None:
                return 0
            conv, generation, seen = view
            if conv.turns < seen or self._landed(key, got.token, conv):  # lost, or holds an unanswered commit
                yield from self._bury(key, got.token, max(seen, conv.turns))
                return 0
            conv.turns += 1
            for send in ticket.sends:
                register_send(conv, send, Location(send.block_id, conv.turns, send.position))
            try:
                data = encode_conversation(conv, shared.keys.owner(key), generation)
            except ValueError as exc:
                logger.warning("dedup record %s cannot be stored (%s): the turn is not recorded", key, exc)
                return 0
            token = new_token()
            written, sent = yield from shared.write_outcome(key, data, expected=got.token, token=token)
            if written is None:
                if sent:
                    places = frozenset((s.block_id, s.position) for s in ticket.sends)
                    self._unsure.set(key, _Unsure(got.token, token, conv.turns, places))
                return 0
            if written != CONFLICT:
                self._unsure.pop(key)  # written from the token it expected: that one can never apply now
                self._seen.set(key, (generation, conv.turns))
                return conv.turns
        logger.warning(
            "dedup record %s: %d concurrent commits in a row; this turn is not recorded", key, COMMIT_ATTEMPTS
        )
        return 0
