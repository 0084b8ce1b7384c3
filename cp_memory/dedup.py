"""Multi-turn context de-duplication (paper §6, Algorithm 3).

Per conversation, the deduplicator remembers which blocks were sent in earlier turns and where (turn and
position, hence the label the prompt showed). A block sent before is replaced by a *location annotation*
pointing to that earlier copy, so only new blocks are prefilled:

    turn 1 retrieves (1, 2, 4)  -> sends 1, 2, 4
    turn 2 retrieves (1, 5, 2)  -> sends 5; 1 and 2 become "Please refer to [Doc 1] ... (turn 1)" etc.

Beyond the paper's id match:
* a block counts as sent only when its id **and** its text digest match, so an edited memory (same id,
  new text) is sent again rather than pointing to stale text;
* with ``content=True`` (default) a block whose normalized text (case and whitespace folded) equals a block
  already sent — earlier in the conversation or earlier in this very turn — is a duplicate too, even under
  another id (near-identical mem0 memories filling the prompt).

Repeated spans *inside* longer blocks (shared templates, standard clauses, repeated facts) are removed
only with ``spans=True`` (off by default): a block keeps its new sentences and says where the repeated
ones were sent (:class:`SpanTrim`). It is off by default because cutting text out of a block changes its
tokens, so the trimmed block can no longer hit a prefix cached with its full text; on LoCoMo's one-fact
memories it saves nothing, on templated documents it saves most of the repeated text
(``python -m benchmarks.index_bench spans``).
"""
from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from .annotations import LOCATION_TEMPLATE, SAME_TURN_TEMPLATE, doc_label, location_annotation
from .blocks import ContextBlock, normalize_text, text_digest

__all__ = ["Location", "SpanTrim", "DedupResult", "Deduplicator"]

_SENTENCE = re.compile(r"(?<=[.!?;])\s+")
SPAN_TEMPLATE = "Parts of {label} repeat {where}."

logger = logging.getLogger(__name__)


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
class SpanTrim:
    """Sentences removed from a kept block because they were sent before (``spans=True``)."""

    block_id: Hashable
    removed: tuple[str, ...]
    locations: tuple[Location, ...]     # parallel to ``removed``: where each was sent first
    annotation: str


@dataclass(frozen=True)
class DedupResult:
    """Outcome of one turn: kept blocks (input order) and the duplicates replaced by annotations."""

    turn: int
    blocks: tuple[ContextBlock, ...]
    duplicates: tuple[Hashable, ...] = ()
    locations: tuple[Location, ...] = ()
    annotations: tuple[str, ...] = ()
    trims: tuple[SpanTrim, ...] = ()

    @property
    def kept_ids(self) -> tuple[Hashable, ...]:
        return tuple(b.id for b in self.blocks)


@dataclass
class _Conversation:
    turns: int = 0
    by_id: dict[Hashable, tuple[str | None, Location]] = field(default_factory=dict)
    by_digest: dict[str, Location] = field(default_factory=dict)
    by_span: dict[str, Location] = field(default_factory=dict)


class Deduplicator:
    """Per-conversation record of sent blocks; bounded by an LRU over conversations. Thread-safe."""

    def __init__(self, *, max_conversations: int = 10_000, content: bool = True,
                 location_template: str = LOCATION_TEMPLATE, spans: bool = False,
                 min_span_chars: int = 40) -> None:
        if not isinstance(max_conversations, int) or max_conversations < 1:
            raise ValueError(f"max_conversations must be a positive int, got {max_conversations!r}")
        if not isinstance(min_span_chars, int) or min_span_chars < 1:
            raise ValueError(f"min_span_chars must be a positive int, got {min_span_chars!r}")
        self.spans = spans
        self.min_span_chars = min_span_chars
        self.max_conversations = max_conversations
        self.content = content
        self.location_template = location_template
        self._convs: OrderedDict[Hashable, _Conversation] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._convs)

    def __contains__(self, conversation_id: Hashable) -> bool:
        return conversation_id in self._convs

    def _conversation(self, conversation_id: Hashable) -> _Conversation:
        conv = self._convs.get(conversation_id)
        if conv is None:
            conv = self._convs[conversation_id] = _Conversation()
            while len(self._convs) > self.max_conversations:
                old, _ = self._convs.popitem(last=False)
                logger.debug("dedup: forgot least recently used conversation %r", old)
        else:
            self._convs.move_to_end(conversation_id)
        return conv

    def dedup(self, conversation_id: Hashable, blocks: Sequence[ContextBlock | Hashable]) -> DedupResult:
        """De-duplicate one turn's blocks against the conversation's earlier turns (Algorithm 3).

        ``blocks`` are :class:`ContextBlock` (id + text) or bare ids (id-only dedup). Returns the kept
        blocks in input order and, for each duplicate, where its first copy was sent and the location
        annotation that replaces it. The kept blocks are registered as sent in this turn.
        """
        if conversation_id is None:
            raise TypeError("conversation_id must not be None")
        hash(conversation_id)
        if blocks is None or isinstance(blocks, (str, bytes)) or not isinstance(blocks, Sequence):
            raise TypeError(f"blocks must be a list or tuple of ContextBlock, got {type(blocks).__name__}")
        items = [b if isinstance(b, ContextBlock) else None for b in blocks]
        with self._lock:
            conv = self._conversation(conversation_id)
            conv.turns += 1
            turn = conv.turns
            kept: list[ContextBlock] = []
            dups: list[Hashable] = []
            locs: list[Location] = []
            notes: list[str] = []
            trims: list[SpanTrim] = []
            for raw, blk in zip(blocks, items):
                bid = blk.id if blk is not None else raw
                digest = blk.digest if blk is not None else None
                if blk is None:
                    try:
                        hash(bid)
                    except TypeError as exc:
                        raise TypeError(f"block id {bid!r} is unhashable") from exc
                    blk = ContextBlock(id=bid, text="")
                loc = self._sent_location(conv, bid, digest)
                if loc is not None:
                    dups.append(bid)
                    locs.append(loc)
                    template = SAME_TURN_TEMPLATE if loc.turn == turn else self.location_template
                    notes.append(location_annotation(bid, label=loc.label, turn=loc.turn, template=template))
                    continue
                here = Location(block_id=bid, turn=turn, position=len(kept) + 1)
                sentences: list[tuple[str, str | None]] = []
                if self.spans and blk.text.strip():
                    sentences = self._sentences(blk.text)
                    trimmed = self._trim(conv, blk, sentences, here, turn)
                    if isinstance(trimmed, Location):        # every sentence was sent before
                        dups.append(bid)
                        locs.append(trimmed)
                        template = SAME_TURN_TEMPLATE if trimmed.turn == turn else self.location_template
                        notes.append(location_annotation(bid, label=trimmed.label, turn=trimmed.turn,
                                                         template=template))
                        continue
                    if trimmed is not None:
                        blk, trim = trimmed
                        trims.append(trim)
                kept.append(blk)
                conv.by_id[bid] = (digest, here)      # the original digest: the block counts as sent
                if self.content and digest is not None and blk.text.strip():
                    conv.by_digest.setdefault(digest, here)
                for _, span in sentences:
                    if span is not None:
                        conv.by_span.setdefault(span, here)
            return DedupResult(turn=turn, blocks=tuple(kept), duplicates=tuple(dups),
                               locations=tuple(locs), annotations=tuple(notes), trims=tuple(trims))

    def _sentences(self, text: str) -> list[tuple[str, str | None]]:
        """Sentences of a block with the digest of those long enough to count as a repeated span."""
        out = []
        for sent in _SENTENCE.split(text.strip()):
            norm = normalize_text(sent)
            out.append((sent, text_digest(norm) if len(norm) >= self.min_span_chars else None))
        return out

    def _trim(self, conv: _Conversation, blk: ContextBlock, sentences: list[tuple[str, str | None]],
              here: Location, turn: int) -> tuple[ContextBlock, SpanTrim] | Location | None:
        keep, removed, where = [], [], []
        for sent, span in sentences:
            loc = conv.by_span.get(span) if span is not None else None
            if loc is not None:
                removed.append(sent)
                where.append(loc)
            else:
                keep.append(sent)
        if not removed:
            return None
        if not keep:
            return where[0]
        seen: list[str] = []
        for loc in where:
            text = f"{loc.label} of turn {loc.turn}" if loc.turn != turn else f"{loc.label} above"
            if text not in seen:
                seen.append(text)
        note = SPAN_TEMPLATE.format(label=here.label, where=", ".join(seen))
        trimmed = ContextBlock(id=blk.id, text=" ".join(keep))
        return trimmed, SpanTrim(blk.id, tuple(removed), tuple(where), note)

    def _sent_location(self, conv: _Conversation, bid: Hashable, digest: str | None) -> Location | None:
        hit = conv.by_id.get(bid)
        if hit is not None:
            sent_digest, loc = hit
            if sent_digest is None or digest is None or sent_digest == digest:
                return loc
            # same id, new text: an edited memory must be sent again, never point to stale text
            return None
        if self.content and digest is not None:
            return conv.by_digest.get(digest)
        return None

    def peek(self, conversation_id: Hashable, blocks: Sequence[ContextBlock | Hashable]) -> tuple[Location | None, ...]:
        """Where each block was already sent in earlier turns (None: not sent), changing nothing.

        Lets a caller pick which retrieved blocks to keep before the turn is registered with :meth:`dedup`.
        Same rules as :meth:`dedup` against earlier turns (same-turn duplicates are not reported).
        """
        with self._lock:
            conv = self._convs.get(conversation_id)
            if conv is None:
                return tuple(None for _ in blocks)
            out = []
            for b in blocks:
                if isinstance(b, ContextBlock):
                    out.append(self._sent_location(conv, b.id, b.digest))
                else:
                    out.append(self._sent_location(conv, b, None))
            return tuple(out)

    def sent_count(self, conversation_id: Hashable) -> int:
        """How many distinct blocks a conversation has sent so far."""
        with self._lock:
            conv = self._convs.get(conversation_id)
            return 0 if conv is None else len(conv.by_id)

    def sent(self, conversation_id: Hashable) -> dict[Hashable, Location]:
        """Blocks sent so far in a conversation and where (a copy)."""
        with self._lock:
            conv = self._convs.get(conversation_id)
            return {} if conv is None else {b: loc for b, (_, loc) in conv.by_id.items()}

    def forget(self, conversation_id: Hashable) -> bool:
        """Drop a conversation's record; False if it was unknown."""
        with self._lock:
            return self._convs.pop(conversation_id, None) is not None
