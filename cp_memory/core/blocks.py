"""Context blocks: the unit that cp_memory aligns, de-duplicates and renders.

A context block is anything injected into a prompt as one piece: a mem0 memory, a retrieved document or
chunk. The index only sees block ids; the text matters for rendering and for content-level dedup.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .checks import non_negative_int

__all__ = [
    "ContextBlock",
    "Mem0Blocks",
    "blocks_from_mem0",
    "check_block_ids",
    "estimate_tokens",
    "normalize_text",
    "text_digest",
]

logger = logging.getLogger(__name__)

_SPACE = re.compile(r"\s+")


def estimate_tokens(text: str) -> int:
    """THE rough token count of cp_memory: about 4 characters per token, rounded up, at least 1.

    The default wherever a token length is needed and no tokenizer is given (the index's cache model via
    the wrapper, the agents' segmenter). Pass a real tokenizer's count (``token_len``/``token_lens``)
    when you have one.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    return max(1, (len(text) + 3) // 4)


def normalize_text(text: str) -> str:
    """Collapse runs of whitespace and strip: the form used for digests and content-level dedup.

    Whitespace only: the renderer folds line breaks anyway and a reader sees no difference in spacing.
    Case is kept: ``"Bob likes Apple"`` (the company) and ``"Bob likes apple"`` are different facts, so
    neither is hidden as a copy of the other, and a memory edited only in case is sent again.
    """
    if not isinstance(text, str):
        raise TypeError(f"block text must be str, got {type(text).__name__}")
    return _SPACE.sub(" ", text).strip()


def text_digest(text: str) -> str:
    """16 hex characters of SHA-1 over the normalized text (stable across processes and restarts)."""
    return hashlib.sha1(normalize_text(text).encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class ContextBlock:
    """One context block: an id (any hashable) and its text.

    ``tokens`` is the block's length in engine tokens when known (used by the index's cache model).
    """

    id: Hashable
    text: str
    tokens: int | None = None
    _digest: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            hash(self.id)
        except TypeError as exc:
            raise TypeError(f"block id must be hashable, got {type(self.id).__name__}") from exc
        if self.id is None:
            raise TypeError("block id must not be None")
        object.__setattr__(self, "_digest", text_digest(self.text))
        if self.tokens is not None:
            non_negative_int(self.tokens, "block tokens")

    @property
    def digest(self) -> str:
        """Digest of the normalized text (see :func:`text_digest`)."""
        return self._digest

    @property
    def key(self) -> tuple[Hashable, str]:
        """``(id, digest)``: use as the index block id so an edited block never matches a stale prefix."""
        return (self.id, self._digest)


def check_block_ids(blocks: Any, what: str = "blocks") -> list[Hashable]:
    """Validate a request: an ordered sequence (list/tuple) of hashable, non-None ids.

    Raises ``TypeError`` naming the problem (None, a str, a set or mapping, unhashable ids).
    """
    if blocks is None:
        raise TypeError(f"{what} must be a list or tuple of hashable block ids, got None")
    if isinstance(blocks, (str, bytes, Mapping, set, frozenset)) or not isinstance(blocks, (Sequence, Iterable)):
        raise TypeError(f"{what} must be an ordered list or tuple of hashable block ids, got {type(blocks).__name__}")
    out = list(blocks)
    for i, b in enumerate(out):
        if b is None:
            raise TypeError(f"{what}[{i}] is None; block ids must be hashable values such as str or int")
        try:
            hash(b)
        except TypeError as exc:
            raise TypeError(f"{what}[{i}] is unhashable ({type(b).__name__}); block ids must be hashable") from exc
    return out


@dataclass(frozen=True)
class Mem0Blocks:
    """mem0 search results as blocks (:func:`blocks_from_mem0`).

    ``blocks[i]`` is made from ``results[i]``, which sat at ``indices[i]`` in mem0's response; ``collapsed``
    are the response positions dropped because their id repeats an earlier result's (the first is kept).
    """

    blocks: tuple[ContextBlock, ...]
    results: tuple[Mapping[str, Any], ...]
    indices: tuple[int, ...]
    collapsed: tuple[int, ...] = ()

    @property
    def ids(self) -> tuple[Hashable, ...]:
        return tuple(b.id for b in self.blocks)


def blocks_from_mem0(results: Any) -> Mem0Blocks:
    """THE converter from mem0 search results (``{"results": [...]}`` or the list) to blocks.

    Rules: each result is a mapping with an ``id`` that is a ``str`` or an ``int`` (else ``ValueError``
    naming the result's position); the block text is ``str(memory)``, or ``""`` when ``memory`` is None or
    absent; a repeated id keeps its first result and the repeats are collapsed with a logged warning
    (reported in ``collapsed``). Anything that is not a result list raises ``TypeError``.
    """
    if isinstance(results, Mapping):
        results = results.get("results")
    if results is None or isinstance(results, (str, bytes)) or not isinstance(results, Sequence):
        raise TypeError(f"mem0 results must be a list of dicts (or {{'results': [...]}}), got {type(results).__name__}")
    blocks: list[ContextBlock] = []
    kept: list[Mapping[str, Any]] = []
    indices: list[int] = []
    collapsed: list[int] = []
    seen: set[Hashable] = set()
    for i, r in enumerate(results):
        if not isinstance(r, Mapping) or "id" not in r:
            raise ValueError(f"mem0 result {i} has no 'id' field: {r!r:.200}")
        rid = r["id"]
        if not isinstance(rid, (str, int)) or isinstance(rid, bool):
            raise ValueError(
                f"mem0 result {i} has an id of type {type(rid).__name__} ({rid!r:.100}); "  # noqa: TRY004 - a bad mem0 response, not a bad argument
                "expected str or int"
            )
        if rid in seen:
            logger.warning(
                "mem0 returned memory id %r more than once in one response (result %d); kept its first copy", rid, i
            )
            collapsed.append(i)
            continue
        seen.add(rid)
        memory = r.get("memory")
        blocks.append(ContextBlock(id=rid, text="" if memory is None else str(memory)))
        kept.append(r)
        indices.append(i)
    return Mem0Blocks(tuple(blocks), tuple(kept), tuple(indices), tuple(collapsed))
