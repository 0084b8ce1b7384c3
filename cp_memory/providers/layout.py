"""The newest user message of cp_memory's layout, cut where a provider's cache can use a boundary.

The text is :func:`cp_memory.integrations.chat.user_content`'s (``Context:`` + one ``[Doc i]`` line per
memory + annotations + the question), byte for byte. :func:`context_pieces` cuts it into pieces whose
concatenation is that text: the first memory line with the ``Context:`` head, then each further memory line
(``"\\n[Doc i] ..."``), then the tail (annotations and the question). Labels are positional and the order
is the scope's aligned order, so the first ``prefix_len`` pieces of a question are the same bytes as the
first pieces of the earlier prompt they were aligned with: a provider that caches at block boundaries
(Anthropic) can read them back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..integrations.chat import user_content

__all__ = ["ContextPieces", "context_pieces", "info_of"]


def info_of(response: Any) -> Mapping[str, Any] | None:
    """``response["context_pilot"]`` (or the attribute of a list-shaped response), None for plain mem0."""
    info = response.get("context_pilot") if isinstance(response, Mapping) else getattr(response, "context_pilot", None)
    return info if isinstance(info, Mapping) else None


@dataclass(frozen=True)
class ContextPieces:
    """The user message as pieces: ``pieces[:docs]`` hold one memory line each (``docs`` may be 0: one
    piece, not cut), the last piece is the tail; ``shared`` leading memory pieces are the aligned prefix
    the scope's index already held (``context_pilot["prefix_len"]``)."""

    pieces: tuple[str, ...]
    docs: int
    shared: int

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def context_pieces(query: str, response: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> ContextPieces:
    """Cut :func:`user_content` (``query``, ``response``) at memory-line boundaries (see the module doc).

    A response without rendered blocks (a plain mem0 response, a fallback whose lines do not match) is one
    piece, uncut."""
    text = user_content(query, response)
    info = info_of(response)
    blocks = list(info.get("blocks") or ()) if info is not None else []
    context = info.get("context") if info is not None else None
    lines = []
    for b in blocks:
        if not isinstance(b, Mapping) or not isinstance(b.get("label"), str) or not isinstance(b.get("text"), str):
            return ContextPieces((text,), 0, 0)
        lines.append(f"{b['label']} {b['text']}")
    section = "\n".join(lines)
    head = "Context:\n"
    if (
        not lines
        or not isinstance(context, str)
        or not context.startswith(section)
        or not text.startswith(head + section)
    ):
        return ContextPieces((text,), 0, 0)
    pieces = [head + lines[0]] + ["\n" + line for line in lines[1:]]
    tail = text[len(head) + len(section) :]
    pieces.append(tail)
    if "".join(pieces) != text:  # never send other bytes than the layout's
        return ContextPieces((text,), 0, 0)
    raw = info.get("prefix_len") if info is not None else 0
    shared = raw if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw <= len(lines) else 0
    return ContextPieces(tuple(pieces), len(lines), shared)
