"""The content stage: one request's new part, holder by holder — align, de-duplicate, chunk — I/O-free.

Runs after prefix replay and before the provider rules (:meth:`cp_memory.gateway.flow.Gateway._shape`) on
the segments replay produced, from :func:`new_part_start` on; every segment before it goes out exactly as
replay made it, and no segment is added, dropped or moved (a holder's string is replaced, nothing else).
For each holder (:mod:`cp_memory.gateway.content.holders`) in prompt order:

1. a whole tool result the history already shows becomes one pointer (``dedup``);
2. otherwise the blocks one rule finds (``find``, :mod:`cp_memory.gateway.content.finders`): a reorderable
   context is aligned (``align``, :mod:`cp_memory.gateway.content.align`), then each block body the history
   shows becomes a pointer (``dedup``);
3. a long text nothing else changed becomes pointers to its unchanged chunks plus its new lines, when that
   saves enough (``chunks``); a shell run's output is chunked after its header (which changes every run).

A holder left without pointers is registered (whole, its blocks' bodies, its chunks) for later requests and
for later holders of this one; the registration is committed with the request (:class:`PendingContent`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..protocols import Api
from .align import anchor_of, permuted
from .chunks import chunk_spans
from .dedup import (
    MIN_BLOCK_CHARS,
    MIN_CHUNKED_CHARS,
    Found,
    block_pointer,
    chunk_rewrite,
    long_lines,
    shown_text,
)
from .finders import BlockRule, FoundContext, find_context
from .holders import Holder, HolderKind, holders, text_at, with_text
from .records import ContentState, PendingContent, Where, text_key
from .switches import ContentStep

__all__ = ["MAX_HOLDER_CHARS", "ContentResult", "new_part_start", "run_content"]

#: a longer text is neither changed nor registered (bounds the stage's work on one request)
MAX_HOLDER_CHARS = 1 << 20


@dataclass(frozen=True)
class ContentResult:
    """The segments to send (same count and order as given), which ones changed, what to commit, counts."""

    segments: list[Any]
    changed: tuple[int, ...]
    pending: PendingContent
    pointers: int = 0
    chunk_pointers: int = 0
    aligned: int = 0
    saved_chars: int = 0


def _marked(value: Any) -> bool:
    if isinstance(value, Mapping):
        return value.get("cache_control") is not None or any(_marked(v) for v in value.values())
    if isinstance(value, list):
        return any(_marked(v) for v in value)
    return False


def new_part_start(client_segs: list[Any], n_head: int, replayed: int, *, known: bool) -> int:
    """Where the new part begins: after the header segments, after every segment prefix replay kept, and
    after every segment up to the client's last ``cache_control`` mark on a segment before the newest one (a
    mark there reads a prefix that may be cached; a mark on the newest segment writes a new entry). A session
    the gateway has no sent log of (``known`` False: its first request, or one forgotten) has only its newest
    segment as new part: the upstream may hold the rest from before."""
    if not known:
        return max(n_head, len(client_segs) - 1)
    start = max(n_head, replayed)
    for i in range(len(client_segs) - 2, start - 1, -1):
        if _marked(client_segs[i]):
            return i + 1
    return start


@dataclass
class _Run:
    """One request's pass: the output segments (updated holder by holder), lookups and registrations."""

    api: Api
    steps: frozenset[ContentStep]
    state: ContentState
    start: int
    segs: list[Any]
    mine: dict[str, Where] = field(default_factory=dict)
    my_chunks: dict[str, Where] = field(default_factory=dict)
    blocks: list[tuple[str, Where]] = field(default_factory=list)
    chunks: list[tuple[str, Where]] = field(default_factory=list)
    orders: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    changed: set[int] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=lambda: {"pointers": 0, "chunks": 0, "aligned": 0, "saved": 0})

    def _verified(self, where: Where | None, text: str, same: bool) -> Found | None:
        if where is None or (not same and where.segment >= self.start):
            return None
        return Found(where, same) if shown_text(self.segs, where) == text else None

    def block_lookup(self, key: str, text: str) -> Found | None:
        mine = self._verified(self.mine.get(key), text, True)
        return mine or self._verified(self.state.block(self.api, key), text, False)

    def chunk_lookup(self, key: str, text: str) -> Found | None:
        mine = self._verified(self.my_chunks.get(key), text, True)
        return mine or self._verified(self.state.chunk(self.api, key), text, False)

    def source(self, where: Where) -> str | None:
        return text_at(self.segs[where.segment], where.path) if 0 <= where.segment < len(self.segs) else None


def _chunked_span(text: str, context: FoundContext | None) -> tuple[int, int]:
    """The part of a holder that is cut into chunks: a shell run's output, else the whole text."""
    if context is not None and context.rule is BlockRule.EXEC_OUTPUT:
        return context.blocks[0].body_start, context.blocks[0].body_end
    return 0, len(text)


def _register(run: _Run, holder: Holder, text: str) -> None:
    """A holder forwarded without pointers: its whole text, its blocks' bodies and its chunks."""
    seg, path = holder.segment, holder.path
    blocks: list[tuple[str, Where]] = []
    if len(text) >= MIN_BLOCK_CHARS:
        blocks.append((text_key(text), Where(seg, path, 0, len(text), holder.label)))
    context = find_context(text)
    for block in context.blocks if context is not None else ():
        body = block.body(text)
        if len(body) >= MIN_BLOCK_CHARS:
            label = f"{block.label} in {holder.label}" if block.label else holder.label
            blocks.append((text_key(body), Where(seg, path, block.body_start, block.body_end, label)))
    chunks: list[tuple[str, Where]] = []
    first, last = _chunked_span(text, context)
    if last - first >= MIN_CHUNKED_CHARS:
        spans = [(first + s, first + e) for s, e in chunk_spans(text[first:last])]
        chunks = [(text_key(text[s:e]), Where(seg, path, s, e, holder.label)) for s, e in spans]
    run.blocks += blocks
    for key, where in blocks:
        run.mine.setdefault(key, where)
    lines = _line_entries(holder, text, first, last) if last - first >= MIN_CHUNKED_CHARS else []
    _register_chunks(run, chunks + lines)


def _line_entries(holder: Holder, text: str, first: int, last: int) -> list[tuple[str, Where]]:
    """The long lines of ``text[first:last]``, each a location of its own (see :mod:`.dedup`)."""
    where = partial(Where, holder.segment, holder.path)
    return [(text_key(text[s:e]), where(s, e, holder.label)) for s, e in long_lines(text, first, last)]


def _register_chunks(run: _Run, chunks: list[tuple[str, Where]]) -> None:
    run.chunks += chunks
    for key, where in chunks:
        run.my_chunks.setdefault(key, where)


def _register_lines(run: _Run, holder: Holder, text: str) -> None:
    """A holder forwarded with pointers: the long lines it still shows (its new paragraphs), so a later
    document that repeats them can point here."""
    first, last = _chunked_span(text, find_context(text))
    _register_chunks(run, _line_entries(holder, text, first, last))


def _align(run: _Run, holder: Holder, text: str, context: FoundContext) -> str:
    if ContentStep.ALIGN not in run.steps or not context.orderable:
        return text
    first = context.blocks[0]
    anchor = anchor_of(run.api, run.segs, holder.segment, holder.path, text[: first.start])
    ids = [text_key(text[b.start : b.end]) for b in context.blocks]
    order = run.state.aligned(run.api, anchor, ids) if len(set(ids)) == len(ids) else tuple(ids)
    aligned = permuted(text, context, order, note=ContentStep.ORDER_NOTE in run.steps)
    if aligned is None:
        return text
    run.orders.append((anchor, aligned.ids))
    run.counts["aligned"] += aligned.moved
    return aligned.text


def _dedup_blocks(run: _Run, text: str, context: FoundContext) -> str:
    if ContentStep.DEDUP not in run.steps:
        return text
    pieces, last = [], 0
    for block in context.blocks:
        pointer = block_pointer(block, block.body(text), run.block_lookup)
        if pointer is None:
            continue
        pieces += [text[last : block.body_start], pointer]
        last = block.body_end
        run.counts["pointers"] += 1
    return "".join(pieces) + text[last:] if pieces else text


def _holder_text(run: _Run, holder: Holder) -> tuple[str, bool]:
    """The holder's new text and whether it holds pointers."""
    text = holder.text
    if holder.kind is HolderKind.TOOL_RESULT and ContentStep.DEDUP in run.steps:
        whole = block_pointer(None, text, run.block_lookup)
        if whole is not None:
            run.counts["pointers"] += 1
            return whole, True
    context = find_context(text)
    if context is not None:
        text = _align(run, holder, text, context)
        context = find_context(text) if text != holder.text else context
    pointed = False
    if context is not None:
        deduped = _dedup_blocks(run, text, context)
        if deduped != text:  # the blocks shown before are pointers; what is left may still quote known lines
            text, pointed = deduped, True
            context = find_context(text)
    if ContentStep.CHUNKS in run.steps and (text == holder.text or pointed):
        first, last = _chunked_span(text, context)
        chunked = chunk_rewrite(text[first:last], run.chunk_lookup, run.source)
        if chunked is not None:
            run.counts["chunks"] += 1
            return text[:first] + chunked + text[last:], True
    return text, pointed


def run_content(
    api: Api,
    segs: list[Any],
    n_head: int,
    start: int,
    state: ContentState,
    steps: frozenset[ContentStep],
    *,
    seed: bool = False,
) -> ContentResult:
    """The content stage on ``segs`` (replay's output) from ``start`` on; ``state`` is only read. ``seed``: the
    gateway knows nothing of the session yet, so the holders before ``start`` are registered (unchanged) as
    well: the history the model sees can be pointed to at once."""
    run = _Run(api, steps, state, start, list(segs))
    for holder in holders(api, run.segs, n_head, n_head if seed else start):
        if len(holder.text) > MAX_HOLDER_CHARS:
            continue
        if holder.segment < start:
            _register(run, holder, holder.text)
            continue
        text, pointed = _holder_text(run, holder)
        if text != holder.text:
            run.segs[holder.segment] = with_text(run.segs[holder.segment], holder.path, text)
            run.changed.add(holder.segment)
            run.counts["saved"] += len(holder.text) - len(text)
        if not pointed:
            _register(run, holder, text)
        elif ContentStep.CHUNKS in run.steps:
            _register_lines(run, holder, text)
    pending = PendingContent(tuple(run.blocks), tuple(run.chunks), tuple(run.orders))
    c = run.counts
    return ContentResult(
        run.segs, tuple(sorted(run.changed)), pending, c["pointers"], c["chunks"], c["aligned"], c["saved"]
    )
