"""Multi-turn context de-duplication (paper §6, Algorithm 3), in two phases.

Per conversation, the deduplicator remembers which blocks were sent in earlier turns and where (turn and
position, hence the label the prompt showed). A block sent before is replaced by a *location annotation*
pointing to that earlier copy, so only new blocks are prefilled:

    turn 1 retrieves (1, 2, 4)  -> sends 1, 2, 4
    turn 2 retrieves (1, 5, 2)  -> sends 5; 1 and 2 become "Please refer to [Doc 1] ... (turn 1)" etc.

**Two phases**, so a turn that never reached the model does not poison the record:

    plan = dedup.plan(conv, blocks)      # against committed turns only; changes no conversation state
    ...send the prompt built from plan.blocks and plan.dropped...
    done = dedup.commit(plan)            # now its kept blocks count as sent   (or: dedup.rollback(plan))

    with dedup.turn(conv, blocks) as plan:   # the same; commits on normal exit, not on an exception
        send(plan)

``dedup(conv, blocks)`` is plan + commit in one atomic step. ``peek``, ``sent_count`` and ``sent`` read
committed state only. A turn's number is assigned at commit: the conversation's committed turns + 1. A
plan carries the number it gets if nothing else commits first; if another turn of the same conversation
commits in between, the plan's positions and labels stay (the prompt was built from them) and only
``turn`` is renumbered (in the result and in locations pointing into the same turn). A block that such a
concurrent turn sent as well stays recorded at its earliest send.

Beyond the paper's id match:

* a block counts as sent only when its id **and** its text digest match, so an edited memory (same id,
  new text) is sent again rather than pointing to stale text;
* with ``content=True`` (default) a block whose normalized text (whitespace folded, case kept: see
  :func:`~cp_memory.core.blocks.normalize_text`) equals a block already sent — earlier in the conversation or
  earlier in this very turn — is a duplicate too, even under another id (identical mem0 memories filling
  the prompt);
* with ``spans=True`` (off by default) repeated sentences inside longer blocks are cut and pointed to
  (:class:`~cp_memory.core.dedup_records.SpanTrim`). Off by default because a trimmed block's tokens change, so it
  can no longer hit a prefix cached with its full text; on LoCoMo's one-fact memories it saves nothing, on
  templated documents most of the repeated text (``python -m benchmarks.index_bench spans``).
"""

from __future__ import annotations

import itertools
import logging
import threading
import uuid
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Literal

from .annotations import LOCATION_TEMPLATE
from .blocks import ContextBlock
from .checks import positive_int
from .dedup_plan import check_turn, committed_result, plan_turn, register_send, sent_location
from .dedup_records import Conversation, DedupResult, DroppedBlock, Location, PlanTicket, SpanTrim
from .lru import LRUMap

__all__ = ["DedupResult", "Deduplicator", "DroppedBlock", "Location", "SpanTrim"]

logger = logging.getLogger(__name__)

_PlanState = Literal["pending", "committed", "rolled back"]


class Deduplicator:
    """Per-conversation record of sent blocks, two-phase (plan, then commit); thread-safe.

    Args:
        max_conversations: conversations remembered (least recently used forgotten first).
        content: also treat another id with the same normalized text as a duplicate.
        location_template: wording of location annotations (``{label}``, ``{turn}``, ``{id}``).
        spans: sentence-level dedup inside blocks (see module doc).
        min_span_chars: shortest normalized sentence that counts as a repeated span.
        max_pending: plans remembered for commit/rollback; a plan neither committed nor rolled back
            within the next ``max_pending`` plans expires (committing it raises ``ValueError``).
    """

    def __init__(
        self,
        *,
        max_conversations: int = 10_000,
        content: bool = True,
        location_template: str = LOCATION_TEMPLATE,
        spans: bool = False,
        min_span_chars: int = 40,
        max_pending: int = 10_000,
    ) -> None:
        for name, value in (
            ("max_conversations", max_conversations),
            ("min_span_chars", min_span_chars),
            ("max_pending", max_pending),
        ):
            positive_int(value, name)
        if not isinstance(location_template, str):
            raise TypeError(f"location_template must be str, got {type(location_template).__name__}")
        self.spans = bool(spans)
        self.min_span_chars = min_span_chars
        self.max_conversations = max_conversations
        self.content = bool(content)
        self.location_template = location_template
        self._convs: LRUMap[Hashable, Conversation] = LRUMap(max_conversations, on_evict=_forgotten)
        self._plans: LRUMap[int, _PlanState] = LRUMap(max_pending)
        self._lock = threading.RLock()
        self._token = uuid.uuid4().hex  # tells this deduplicator's plans from another's
        self._seq = itertools.count(1)

    def __len__(self) -> int:
        return len(self._convs)

    def __contains__(self, conversation_id: Hashable) -> bool:
        return conversation_id in self._convs

    # ------------------------------------------------------------------ the two phases
    def plan(self, conversation_id: Hashable, blocks: Sequence[ContextBlock | Hashable]) -> DedupResult:
        """De-duplicate one turn against the conversation's **committed** turns; changes nothing.

        ``blocks`` are :class:`ContextBlock` (id + text) or bare ids (id-only dedup). Returns the kept
        blocks in input order and, for each duplicate (sent in a committed turn, or the same content earlier
        in this turn), a :class:`DroppedBlock` with where its copy was sent and the annotation replacing it.
        The result is pending (``committed is False``): pass it to :meth:`commit` once the prompt was sent,
        or to :meth:`rollback`.
        """
        items = check_turn(conversation_id, blocks)
        with self._lock:
            conv = self._convs.peek(conversation_id)
            turn = (conv.turns if conv is not None else 0) + 1
            kept, dropped, trims, sends = plan_turn(
                conv,
                items,
                turn,
                content=self.content,
                spans=self.spans,
                min_span_chars=self.min_span_chars,
                location_template=self.location_template,
            )
            seq = next(self._seq)
            self._plans.set(seq, "pending")
        return DedupResult(
            turn=turn,
            blocks=kept,
            dropped=dropped,
            trims=trims,
            conversation_id=conversation_id,
            committed=False,
            _ticket=PlanTicket(self._token, seq, sends),
        )

    def commit(self, result: DedupResult) -> DedupResult:
        """Register a pending plan's kept blocks as sent; returns the committed result.

        Raises ``ValueError`` for a result that is already committed, rolled back, expired, or not a plan
        of this deduplicator.
        """
        ticket = self._ticket_of(result, "commit")
        with self._lock:
            state = self._plans.peek(ticket.seq)
            if state != "pending":
                raise ValueError(f"cannot commit this plan: it is {state or 'expired (or unknown)'}")
            conv = self._convs.get_or_create(result.conversation_id, Conversation)
            conv.turns += 1
            turn = conv.turns
            for send in ticket.sends:
                register_send(conv, send, Location(send.block_id, turn, send.position))
            self._plans.set(ticket.seq, "committed")
        if turn != result.turn:
            logger.debug(
                "dedup: conversation %r committed another turn meanwhile; plan turn %d is turn %d",
                result.conversation_id,
                result.turn,
                turn,
            )
        return committed_result(result, turn)

    def rollback(self, result: DedupResult) -> None:
        """Forget a pending plan (the prompt was not sent). Committed state is untouched either way.

        Rolling back twice or an expired plan is a no-op; a committed result raises ``ValueError``.
        """
        ticket = self._ticket_of(result, "roll back")
        with self._lock:
            state = self._plans.peek(ticket.seq)
            if state == "committed":
                raise ValueError("cannot roll back a committed turn")
            if state == "pending":
                self._plans.set(ticket.seq, "rolled back")

    @contextmanager
    def turn(self, conversation_id: Hashable, blocks: Sequence[ContextBlock | Hashable]) -> Iterator[DedupResult]:
        """``with dedup.turn(conv, blocks) as plan:`` yields :meth:`plan`'s result; commits it when the block
        exits normally, rolls it back when it raises. (Use plan/commit to get the committed result.)"""
        pending = self.plan(conversation_id, blocks)
        try:
            yield pending
        except BaseException:
            self.rollback(pending)
            raise
        self.commit(pending)

    def dedup(self, conversation_id: Hashable, blocks: Sequence[ContextBlock | Hashable]) -> DedupResult:
        """Plan and commit one turn atomically (Algorithm 3): the one-phase form."""
        with self._lock:
            return self.commit(self.plan(conversation_id, blocks))

    def _ticket_of(self, result: DedupResult, verb: str) -> PlanTicket:
        if not isinstance(result, DedupResult):
            raise TypeError(f"can only {verb} a DedupResult from plan(), got {type(result).__name__}")
        if result.committed:
            raise ValueError(f"cannot {verb} a committed result")
        ticket = result._ticket
        if ticket is None or ticket.owner != self._token:
            raise ValueError(f"cannot {verb} a result that is not a plan of this Deduplicator")
        return ticket

    # ------------------------------------------------------------------ committed state
    def peek(self, conversation_id: Hashable, blocks: Sequence[ContextBlock | Hashable]) -> tuple[Location | None, ...]:
        """Where each block was sent in a committed turn (None: not sent), changing nothing.

        Same rules as :meth:`plan` against earlier turns (same-turn duplicates are not reported).
        """
        with self._lock:
            conv = self._convs.peek(conversation_id)
            if conv is None:
                return tuple(None for _ in blocks)
            out = []
            for b in blocks:
                if isinstance(b, ContextBlock):
                    out.append(sent_location(conv, None, b.id, b.digest, content=self.content))
                else:
                    out.append(sent_location(conv, None, b, None, content=self.content))
            return tuple(out)

    def sent_count(self, conversation_id: Hashable) -> int:
        """How many distinct blocks a conversation has sent in committed turns."""
        with self._lock:
            conv = self._convs.peek(conversation_id)
            return 0 if conv is None else len(conv.by_id)

    def sent(self, conversation_id: Hashable) -> dict[Hashable, Location]:
        """Blocks sent in a conversation's committed turns and where (a copy)."""
        with self._lock:
            conv = self._convs.peek(conversation_id)
            return {} if conv is None else {b: loc for b, (_, loc) in conv.by_id.items()}

    def forget(self, conversation_id: Hashable) -> bool:
        """Drop a conversation's record; False if it was unknown."""
        with self._lock:
            return self._convs.pop(conversation_id) is not None


def _forgotten(conversation_id: Hashable, _conv: Conversation) -> None:
    logger.debug("dedup: forgot least recently used conversation %r", conversation_id)
