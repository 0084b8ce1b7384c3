"""Multi-turn Chain-of-Agents: which documents a turn still sends, and what it says about the others.

In a conversation (``conversation_id``), documents a committed earlier turn already processed are not
sent again (:class:`cp_memory.core.dedup.Deduplicator`, two-phase). In their place the first worker's
"previous summary" carries the CU each referenced earlier turn ended with and the location annotations:

    Summary of the previous conversation (turn 1): <final CU of turn 1>
    Please refer to [Doc s3] in the previous conversation (turn 1).

A turn is planned first (nothing recorded), then committed once its chain succeeded — its kept documents
count as sent and its final CU is remembered — or rolled back when the chain failed, so a failed question
asked again sends its documents again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from cp_memory.core.annotations import (
    LOCATION_TEMPLATE,
    SAME_TURN_TEMPLATE,
    location_annotation,
)
from cp_memory.core.blocks import ContextBlock
from cp_memory.core.dedup import Deduplicator, DedupResult
from cp_memory.core.lru import LRUMap

from .prompts import PRIOR_TURN_TEMPLATE
from .segment import id_label

__all__ = ["Conversations", "PlannedTurn"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class PlannedTurn:
    """A pending turn: the blocks still to send, the duplicates, and the first worker's previous summary."""

    pending: DedupResult
    first_cu: str
    duplicates: tuple[Hashable, ...]
    annotations: tuple[str, ...]

    @property
    def turn(self) -> int:
        return self.pending.turn

    @property
    def blocks(self) -> tuple[ContextBlock, ...]:
        return self.pending.blocks


class Conversations:
    """The dedup record of every conversation and the CU each committed turn ended with. Thread-safe."""

    def __init__(self, dedup: Deduplicator | None = None, *, max_conversations: int) -> None:
        self.dedup = dedup if dedup is not None else Deduplicator(max_conversations=max_conversations)
        # per conversation: turn -> the CU it ended with (the dicts are guarded by _lock)
        self._cus: LRUMap[Hashable, dict[int, str]] = LRUMap(max_conversations)
        self._lock = threading.Lock()

    def plan(self, conversation_id: Hashable, blocks: Sequence[ContextBlock], *, label_template: str) -> PlannedTurn:
        """Plan one turn against the committed ones; records nothing."""
        pending = self.dedup.plan(conversation_id, blocks)
        turn = pending.turn
        notes = []
        for d in pending.dropped:
            template = SAME_TURN_TEMPLATE if d.location.turn == turn else LOCATION_TEMPLATE
            notes.append(
                location_annotation(
                    d.block_id, label=id_label(d.block_id, label_template), turn=d.location.turn, template=template
                )
            )
        annotations = tuple(dict.fromkeys(notes))
        earlier = sorted({d.location.turn for d in pending.dropped if d.location.turn != turn})
        cus = self._cus.get(conversation_id, {})
        with self._lock:
            prior = [PRIOR_TURN_TEMPLATE.format(turn=t, cu=cus[t]) for t in earlier if cus.get(t)]
        return PlannedTurn(
            pending=pending,
            first_cu="\n".join([*prior, *annotations]),
            duplicates=tuple(d.block_id for d in pending.dropped),
            annotations=annotations,
        )

    def commit(self, pending: DedupResult, final_cu: str) -> int:
        """The turn's chain succeeded: its blocks count as sent, its final CU is kept. Returns its number."""
        try:
            turn = self.dedup.commit(pending).turn
        except ValueError as exc:  # expired (max_pending plans since): later turns send the blocks again
            logger.warning(
                "conversation %r: turn not recorded (%s); its documents will be sent again",
                pending.conversation_id,
                exc,
            )
            return pending.turn
        cus = self._cus.get_or_create(pending.conversation_id, dict)
        with self._lock:
            cus[turn] = final_cu
        return turn

    def rollback(self, pending: DedupResult) -> None:
        """The turn's chain failed or was cancelled: nothing counts as sent, no CU is kept."""
        self.dedup.rollback(pending)

    def forget(self, conversation_id: Hashable) -> bool:
        """Drop a conversation's dedup record and CUs."""
        had = self._cus.pop(conversation_id) is not None
        return self.dedup.forget(conversation_id) or had
