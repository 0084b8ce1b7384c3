"""Alignment of a multi-block context with the session's context index: a permutation, nothing else.

A prefix cache reuses a context only after the same prompt, so each *anchor* (the exact prompt before the
context: the digests of the forwarded segments before its holder, the holder's path and its text before
the first block) has its own :class:`~cp_memory.core.index.ContextIndex` in the session
(:class:`~cp_memory.gateway.content.records.ContentState`). Blocks are keyed by their exact text; the
index's exact alignment (never superset or swap: no block is added or dropped) gives the order of the
longest prefix it already holds, then the rest in the client's order. Only contexts whose rule allows it
are reordered (:mod:`cp_memory.gateway.content.finders`: unnumbered XML elements separated by white space,
JSON result arrays); the separators stay where they were. With the ``order-note`` step the core's order
annotation follows the context (off by default).
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from ...core.annotations import order_annotation
from ..protocols import Api
from ..replay import digest
from .finders import BlockRule, FoundContext
from .holders import Path
from .records import text_key

__all__ = ["AlignedBlocks", "anchor_of", "permuted"]


@dataclass(frozen=True)
class AlignedBlocks:
    """A context's new ``text`` (unchanged when ``moved`` is False) and the ``ids`` order to index."""

    text: str
    ids: tuple[str, ...]
    moved: bool


def anchor_of(api: Api, segs: Sequence[Any], segment: int, path: Path, preamble: str) -> str:
    """The key of the prompt before a context (module doc)."""
    h = hashlib.sha256()
    for seg in segs[:segment]:
        h.update(digest(api, seg).encode())
    h.update(repr(path).encode())
    h.update(preamble.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def _note(context: FoundContext, ids: Sequence[str], order: Sequence[Hashable]) -> str:
    unit = "result" if context.rule is BlockRule.JSON_RESULTS else "document"
    labels = {b: f"{unit} {k}" for k, b in enumerate(order, 1)}
    return order_annotation(list(ids), list(order), label=labels)


def permuted(text: str, context: FoundContext, order: Sequence[Hashable], *, note: bool) -> AlignedBlocks | None:
    """``text`` with the context's blocks in ``order`` (ids: :func:`text_key` of each block), or None when
    the context may not be reordered or ``order`` is not a permutation of its blocks."""
    blocks = context.blocks
    ids = tuple(text_key(text[b.start : b.end]) for b in blocks)
    if not context.orderable or len(set(ids)) != len(ids) or sorted(map(str, order)) != sorted(ids):
        return None
    if tuple(order) == ids:
        return AlignedBlocks(text, ids, False)
    element = {i: text[b.start : b.end] for i, b in zip(ids, blocks)}
    pieces = [text[: blocks[0].start]]
    for k, block_id in enumerate(order):
        pieces.append(element[str(block_id)])
        if k + 1 < len(blocks):
            pieces.append(text[blocks[k].end : blocks[k + 1].start])
    tail = text[blocks[-1].end :]
    if note and context.rule is BlockRule.JSON_RESULTS:  # after the array: the JSON stays whole
        tail += "\n\n" + _note(context, ids, order)
    elif note:
        tail = "\n\n" + _note(context, ids, order) + tail
    pieces.append(tail)
    return AlignedBlocks("".join(pieces), tuple(str(b) for b in order), True)
