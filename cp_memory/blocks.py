"""Context blocks: the unit that cp_memory aligns, de-duplicates and renders.

A context block is anything injected into a prompt as one piece: a mem0 memory, a retrieved document or
chunk. The index only sees block ids; the text matters for rendering and for content-level dedup.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ContextBlock", "normalize_text", "text_digest", "check_block_ids", "blocks_from_mem0"]

_SPACE = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """Case-fold, collapse runs of whitespace and strip: the form used for content-level dedup."""
    if not isinstance(text, str):
        raise TypeError(f"block text must be str, got {type(text).__name__}")
    return _SPACE.sub(" ", text).strip().casefold()


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
        if self.tokens is not None and (not isinstance(self.tokens, int) or self.tokens < 0):
            raise ValueError(f"block tokens must be a non-negative int, got {self.tokens!r}")

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
    if isinstance(blocks, (str, bytes)) or isinstance(blocks, (Mapping, set, frozenset)) \
            or not isinstance(blocks, (Sequence, Iterable)):
        raise TypeError(
            f"{what} must be an ordered list or tuple of hashable block ids, got {type(blocks).__name__}")
    out = list(blocks)
    for i, b in enumerate(out):
        if b is None:
            raise TypeError(f"{what}[{i}] is None; block ids must be hashable values such as str or int")
        try:
            hash(b)
        except TypeError as exc:
            raise TypeError(f"{what}[{i}] is unhashable ({type(b).__name__}); block ids must be hashable") from exc
    return out


def blocks_from_mem0(results: Any) -> list[ContextBlock]:
    """Turn mem0 search results (``{"results": [...]}`` or a list of dicts) into blocks.

    Block id = the memory ``id``; text = ``memory``. Raises ``ValueError`` for a result without them.
    """
    if isinstance(results, Mapping):
        results = results.get("results", [])
    if not isinstance(results, Sequence):
        raise TypeError(f"mem0 results must be a list of dicts, got {type(results).__name__}")
    out = []
    for i, r in enumerate(results):
        if not isinstance(r, Mapping) or "id" not in r or "memory" not in r:
            raise ValueError(f"mem0 result {i} has no 'id'/'memory' fields: {r!r:.200}")
        out.append(ContextBlock(id=r["id"], text=str(r["memory"])))
    return out
