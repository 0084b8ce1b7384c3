"""De-duplication's records: where a block was sent, what a turn dropped or trimmed, what committing
registers, a turn's result and a conversation's sent-record.

Plain frozen dataclasses (:class:`Conversation` is the one mutable record, owned by
:class:`~cp_memory.core.dedup.Deduplicator` under its lock); :mod:`cp_memory.core.dedup_plan` computes them.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from .annotations import doc_label
from .blocks import ContextBlock

__all__ = ["Conversation", "DedupResult", "DroppedBlock", "Location", "PlanTicket", "Send", "SpanTrim"]


@dataclass(frozen=True)
class Location:
    """Where a block was sent: 1-based ``turn`` and 1-based ``position`` among that turn's kept blocks."""

    block_id: Hashable
    turn: int
    position: int

    @property
    def label(self) -> str:
        """The label the prompt showed for it, e.g. ``[Doc 3]``."""
        return doc_label(self.position)


@dataclass(frozen=True)
class DroppedBlock:
    """An input block left out of the turn because its copy was sent at ``location``; ``annotation`` is
    the location annotation that replaces it in the prompt."""

    block_id: Hashable
    location: Location
    annotation: str


@dataclass(frozen=True)
class SpanTrim:
    """Sentences removed from a kept block because they were sent before (``spans=True``)."""

    block_id: Hashable
    removed: tuple[str, ...]
    locations: tuple[Location, ...]  # parallel to ``removed``: where each was sent first
    annotation: str


@dataclass(frozen=True)
class Send:
    """What committing registers for one kept block."""

    block_id: Hashable
    digest: str | None  # of the block's full text; None for a bare id
    position: int
    content_key: str | None  # digest registered for content dedup (None: not registered)
    spans: tuple[str, ...] = ()  # span digests registered for span dedup


@dataclass(frozen=True)
class PlanTicket:
    """Identifies a pending plan to its Deduplicator and carries what its commit registers."""

    owner: str
    seq: int
    sends: tuple[Send, ...]


@dataclass(frozen=True)
class DedupResult:
    """Outcome of one turn: kept blocks (input order; kept block i is labelled ``[Doc i+1]``) and the
    input blocks dropped as duplicates, in input order.

    ``committed`` is False for a plan (:meth:`~cp_memory.core.dedup.Deduplicator.plan`) until it is committed;
    ``turn`` is final once committed.
    """

    turn: int
    blocks: tuple[ContextBlock, ...]
    dropped: tuple[DroppedBlock, ...] = ()
    trims: tuple[SpanTrim, ...] = ()
    conversation_id: Hashable = None
    committed: bool = True
    _ticket: PlanTicket | None = field(default=None, repr=False, compare=False)

    @property
    def kept_ids(self) -> tuple[Hashable, ...]:
        return tuple(b.id for b in self.blocks)

    @property
    def duplicates(self) -> tuple[Hashable, ...]:
        """Ids of the dropped blocks, input order."""
        return tuple(d.block_id for d in self.dropped)


@dataclass
class Conversation:
    """A conversation's sent-record: committed turns, or (as the overlay of a plan) one turn's sends."""

    turns: int = 0
    by_id: dict[Hashable, tuple[str | None, Location]] = field(default_factory=dict)
    by_digest: dict[str, Location] = field(default_factory=dict)
    by_span: dict[str, Location] = field(default_factory=dict)
