"""The I/O-free, lock-free part of de-duplication: planning a turn against a conversation's sent-record.

:class:`~cp_memory.core.dedup.Deduplicator` holds the state and the lock; this module computes one turn
against a committed :class:`~cp_memory.core.dedup_records.Conversation` (read only) plus the turn's own
sends (same-turn duplicates), and says what committing it registers (a
:class:`~cp_memory.core.dedup_records.Send` per kept block; the records are in
:mod:`cp_memory.core.dedup_records`). Rules (module doc of :mod:`cp_memory.core.dedup`):

* by id: an id sent before with the same text digest (or without digests: bare ids) is a duplicate; the
  same id with another digest is an edited block and is sent again (never pointed to stale text);
* by content (``content=True``): another id whose normalized text was sent before is a duplicate;
* by span (``spans=True``): sentences sent before are cut from a kept block and pointed to.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import replace

from .annotations import SAME_TURN_TEMPLATE, location_annotation
from .blocks import ContextBlock, normalize_text, text_digest
from .dedup_records import Conversation, DedupResult, DroppedBlock, Location, Send, SpanTrim

__all__ = ["SPAN_TEMPLATE", "check_turn", "committed_result", "plan_turn", "register_send", "sent_location"]

_SENTENCE = re.compile(r"(?<=[.!?;])\s+")
SPAN_TEMPLATE = "Parts of {label} repeat {where}."


def _same_text(sent: str | None, now: str | None) -> bool:
    return sent is None or now is None or sent == now


def sent_location(
    conv: Conversation | None, local: Conversation | None, bid: Hashable, digest: str | None, *, content: bool
) -> Location | None:
    """Where ``bid`` (text ``digest``) was sent: in ``local`` (this turn) or ``conv`` (committed), or None.

    By id the latest send counts (this turn's first); by content the earliest (committed first).
    """
    hit = local.by_id.get(bid) if local is not None else None
    if hit is None and conv is not None:
        hit = conv.by_id.get(bid)
    if hit is not None:
        # same id, new text: an edited memory must be sent again, never point to stale text
        return hit[1] if _same_text(hit[0], digest) else None
    if content and digest is not None:
        for rec in (conv, local):
            if rec is not None and digest in rec.by_digest:
                return rec.by_digest[digest]
    return None


def register_send(conv: Conversation, send: Send, loc: Location) -> None:
    """Record that ``send`` went out at ``loc``. An id already recorded with the same text keeps its
    earlier location (a concurrent turn sent it too); content and span keys keep their first send."""
    prev = conv.by_id.get(send.block_id)
    if prev is None or not _same_text(prev[0], send.digest):
        conv.by_id[send.block_id] = (send.digest, loc)
    if send.content_key is not None:
        conv.by_digest.setdefault(send.content_key, loc)
    for span in send.spans:
        conv.by_span.setdefault(span, loc)


def plan_turn(
    conv: Conversation | None,
    items: Sequence[tuple[ContextBlock, str | None]],
    turn: int,
    *,
    content: bool,
    spans: bool,
    min_span_chars: int,
    location_template: str,
) -> tuple[tuple[ContextBlock, ...], tuple[DroppedBlock, ...], tuple[SpanTrim, ...], tuple[Send, ...]]:
    """Plan turn number ``turn`` of ``conv`` (None: a new conversation); ``conv`` is only read.

    ``items`` are (block, digest) pairs, digest None for bare ids. Returns kept blocks, dropped blocks,
    span trims and the sends that committing registers.
    """
    local = Conversation()
    kept: list[ContextBlock] = []
    dropped: list[DroppedBlock] = []
    trims: list[SpanTrim] = []
    sends: list[Send] = []
    for blk, digest in items:
        bid = blk.id
        loc = sent_location(conv, local, bid, digest, content=content)
        if loc is None and spans and blk.text.strip():
            here = Location(bid, turn, len(kept) + 1)
            sentences = _sentences(blk.text, min_span_chars)
            trimmed = _trim(conv, local, blk, sentences, here, turn)
            if isinstance(trimmed, Location):  # every sentence was sent before
                loc = trimmed
            elif trimmed is not None:
                blk, trim = trimmed
                trims.append(trim)
        else:
            sentences = []
        if loc is not None:
            template = SAME_TURN_TEMPLATE if loc.turn == turn else location_template
            note = location_annotation(bid, label=loc.label, turn=loc.turn, template=template)
            dropped.append(DroppedBlock(bid, loc, note))
            continue
        kept.append(blk)
        send = Send(
            bid,
            digest,
            len(kept),
            digest if content and digest is not None and blk.text.strip() else None,
            tuple(span for _, span in sentences if span is not None),
        )
        register_send(local, send, Location(bid, turn, len(kept)))
        sends.append(send)
    return tuple(kept), tuple(dropped), tuple(trims), tuple(sends)


def _sentences(text: str, min_span_chars: int) -> list[tuple[str, str | None]]:
    """Sentences of a block with the digest of those long enough to count as a repeated span."""
    out = []
    for sent in _SENTENCE.split(text.strip()):
        norm = normalize_text(sent)
        out.append((sent, text_digest(norm) if len(norm) >= min_span_chars else None))
    return out


def _span_location(conv: Conversation | None, local: Conversation, span: str) -> Location | None:
    if conv is not None and span in conv.by_span:
        return conv.by_span[span]
    return local.by_span.get(span)


def _trim(
    conv: Conversation | None,
    local: Conversation,
    blk: ContextBlock,
    sentences: list[tuple[str, str | None]],
    here: Location,
    turn: int,
) -> tuple[ContextBlock, SpanTrim] | Location | None:
    keep, removed, where = [], [], []
    for sent, span in sentences:
        loc = _span_location(conv, local, span) if span is not None else None
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


def check_turn(
    conversation_id: Hashable, blocks: Sequence[ContextBlock | Hashable]
) -> list[tuple[ContextBlock, str | None]]:
    """Validate one turn; bare ids become text-less blocks with no digest (id-only dedup)."""
    if conversation_id is None:
        raise TypeError("conversation_id must not be None")
    try:
        hash(conversation_id)
    except TypeError as exc:
        raise TypeError(f"conversation_id must be hashable, got {type(conversation_id).__name__}") from exc
    if blocks is None or isinstance(blocks, (str, bytes)) or not isinstance(blocks, Sequence):
        raise TypeError(f"blocks must be a list or tuple of ContextBlock, got {type(blocks).__name__}")
    items: list[tuple[ContextBlock, str | None]] = []
    for i, b in enumerate(blocks):
        if isinstance(b, ContextBlock):
            items.append((b, b.digest))
            continue
        if b is None:
            raise TypeError(f"blocks[{i}] is None; pass ContextBlock or hashable ids")
        try:
            hash(b)
        except TypeError as exc:
            raise TypeError(f"blocks[{i}] ({b!r:.60}) is unhashable") from exc
        items.append((ContextBlock(id=b, text=""), None))
    return items


def committed_result(result: DedupResult, turn: int) -> DedupResult:
    """The committed form of a plan: ``turn`` (re)assigned, same-turn locations follow it."""
    old = result.turn

    def fix(loc: Location) -> Location:
        return replace(loc, turn=turn) if loc.turn == old and turn != old else loc

    dropped = tuple(replace(d, location=fix(d.location)) for d in result.dropped)
    trims = tuple(replace(t, locations=tuple(fix(loc) for loc in t.locations)) for t in result.trims)
    return replace(result, turn=turn, dropped=dropped, trims=trims, committed=True, _ticket=None)
