"""Every Anthropic ``cache_control`` mark of a request, wherever the Messages API counts one.

Anthropic accepts at most 4 breakpoints per request (:data:`~cp_memory.providers.rules.ANTHROPIC_MAX_BREAKPOINTS`)
and counts each of them, wherever it sits (the ``anthropic`` SDK's request types, checked on 2.x):

* the top-level ``cache_control`` (automatic caching: the API places it on the last cacheable block, and it
  takes one of the 4 slots);
* a tool definition (every tool type: custom, bash, text editor, web search, ...);
* a ``system`` text block;
* a content block of any message (text, image, document, search result, tool use, tool result, server tool
  use and its results, ...), whatever the message's role;
* a block nested in another block's ``content`` list: the content of a ``tool_result`` (text, image,
  document, search result), the text blocks of a ``search_result``;
* a block of a ``document`` whose ``source`` is ``{"type": "content", "content": [...]}``.

Only the structure is walked: a ``cache_control`` key inside a ``tool_use`` block's ``input`` or a tool's
``input_schema`` is the caller's data, not a mark. A mark whose value is ``null`` is no mark (the SDK types
allow ``None``). Standard library only; never raises for odd shapes (they hold no marks).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Mark", "count_marks", "find_marks", "mark_ttl"]

#: keys under which a block holds nested blocks that may carry marks of their own
_NESTED = ("content",)


@dataclass(frozen=True)
class Mark:
    """One ``cache_control`` mark: ``where`` (``"top"``, ``"tools"``, ``"system"``, ``"messages"``), ``block``
    the index of the enclosing top-level block in the API's prefix order (tools, system, then every message's
    content blocks; -1 for the top-level mark), ``path`` the keys and indexes from the request's top level to
    the marked object, and its ``ttl`` (``"5m"`` unless ``"1h"`` is set)."""

    where: str
    block: int
    path: tuple[str | int, ...]
    ttl: str


def mark_ttl(value: Any) -> str:
    """The TTL a ``cache_control`` value asks for: ``"1h"`` when it says so, else the default ``"5m"``."""
    return "1h" if isinstance(value, Mapping) and value.get("ttl") == "1h" else "5m"


def _block_marks(block: Any, path: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Marks of one block and of the blocks nested in it (its ``content`` list, a document's source content),
    innermost first: a nested block precedes the end of its holder in the prompt."""
    if not isinstance(block, Mapping):
        return
    for key in _NESTED:
        inner = block.get(key)
        if isinstance(inner, list):
            for i, child in enumerate(inner):
                yield from _block_marks(child, (*path, key, i))
    source = block.get("source")
    if isinstance(source, Mapping) and source.get("type") == "content" and isinstance(source.get("content"), list):
        for i, child in enumerate(source["content"]):
            yield from _block_marks(child, (*path, "source", "content", i))
    if block.get("cache_control") is not None:
        yield (*path, "cache_control"), mark_ttl(block.get("cache_control"))


def _blocks_of(content: Any) -> list[Any]:
    return content if isinstance(content, list) else []


def find_marks(
    tools: Sequence[Any] | None = None,
    system: Any = None,
    messages: Sequence[Any] | None = None,
    *,
    top_level: Any = None,
) -> list[Mark]:
    """Every mark of a request in prompt order; ``top_level`` is the request's own ``cache_control`` field
    (listed first, ``block=-1``). ``system`` may be a string (no marks) or a list of blocks; a message's
    ``content`` a string (no marks) or a list of blocks."""
    marks: list[Mark] = []
    if top_level is not None:
        marks.append(Mark("top", -1, ("cache_control",), mark_ttl(top_level)))
    flat = 0
    for where, blocks in (("tools", tools), ("system", system)):
        for i, block in enumerate(blocks if isinstance(blocks, (list, tuple)) else []):
            marks += [Mark(where, flat, p, t) for p, t in _block_marks(block, (where, i))]
            flat += 1
    for j, message in enumerate(messages if isinstance(messages, (list, tuple)) else []):
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            flat += 1  # a string content is one text block, without a mark
            continue
        for k, block in enumerate(_blocks_of(content)):
            marks += [Mark("messages", flat, p, t) for p, t in _block_marks(block, ("messages", j, "content", k))]
            flat += 1
    return marks


def count_marks(body: Mapping[str, Any]) -> int:
    """How many breakpoints the API counts in a Messages request body (a dict as sent)."""
    if not isinstance(body, Mapping):
        return 0
    return len(
        find_marks(body.get("tools"), body.get("system"), body.get("messages"), top_level=body.get("cache_control"))
    )
