"""Where a request's text may change: the *holders* (one string each) of a segment of the new part.

Only text the client sends as input is a holder: a user message's text (a string content or its text
parts) and a tool's result (Anthropic ``tool_result`` blocks inside a user message, an OpenAI Chat ``tool``
message, a Responses ``function_call_output`` item). Assistant messages, system messages (also a ``system``
role inside ``messages``), tool calls, images and every header segment (tools, system, instructions) are
never holders. A holder is addressed by its segment's index and a *path* of keys and list indexes inside
that segment (``()`` is a segment that is itself a string: a Responses ``input`` string); :func:`text_at`
reads it, :func:`with_text` returns a copy of the segment with the string replaced (nothing else copied).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..protocols import Api

__all__ = ["Holder", "HolderKind", "Path", "holders", "text_at", "with_text"]

Path = tuple[str | int, ...]


class HolderKind(str, Enum):
    """What a holder is: a tool's result or a user's own text."""

    TOOL_RESULT = "tool_result"
    USER_TEXT = "user_text"


@dataclass(frozen=True)
class Holder:
    """One string of the new part: ``segment`` index, ``path`` inside it, its ``text``, and the ``label``
    a pointer names it by (``the result of tool call toolu_01``, ``message 3``)."""

    segment: int
    path: Path
    kind: HolderKind
    text: str
    label: str


def _tool_label(call_id: Any, item: int) -> str:
    if isinstance(call_id, str) and call_id:
        return f"the result of tool call {call_id}"
    return f"the tool result in message {item}"


def _parts(content: Any, base: Path, text_types: frozenset[str]) -> list[tuple[Path, str]]:
    """A string content, or the text parts of a list content: (path, text)."""
    if isinstance(content, str):
        return [(base, content)]
    found: list[tuple[Path, str]] = []
    for j, part in enumerate(content if isinstance(content, list) else []):
        if isinstance(part, Mapping) and part.get("type") in text_types and isinstance(part.get("text"), str):
            found.append(((*base, j, "text"), part["text"]))
    return found


_TEXT = frozenset({"text"})
_INPUT_TEXT = frozenset({"input_text", "text"})


def _messages_holders(seg: Mapping[str, Any], item: int) -> list[tuple[Path, HolderKind, str, str]]:
    """Anthropic: a user message's text blocks and its tool results (string or text-block content)."""
    content = seg.get("content")
    if isinstance(content, str):
        return [(("content",), HolderKind.USER_TEXT, content, f"message {item}")]
    out: list[tuple[Path, HolderKind, str, str]] = []
    for i, block in enumerate(content if isinstance(content, list) else []):
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            out.append((("content", i, "text"), HolderKind.USER_TEXT, block["text"], f"message {item}"))
        elif block.get("type") == "tool_result":
            label = _tool_label(block.get("tool_use_id"), item)
            for path, text in _parts(block.get("content"), ("content", i, "content"), _TEXT):
                out.append((path, HolderKind.TOOL_RESULT, text, label))
    return out


def _segment_holders(api: Api, seg: Any, item: int) -> list[tuple[Path, HolderKind, str, str]]:
    if isinstance(seg, str):  # a Responses ``input`` string
        return [((), HolderKind.USER_TEXT, seg, f"message {item}")] if api is Api.RESPONSES else []
    if not isinstance(seg, Mapping):
        return []
    role, kind = seg.get("role"), seg.get("type")
    if api is Api.MESSAGES:
        return _messages_holders(seg, item) if role == "user" else []
    if api is Api.CHAT and role in ("user", "tool"):
        hk = HolderKind.TOOL_RESULT if role == "tool" else HolderKind.USER_TEXT
        label = _tool_label(seg.get("tool_call_id"), item) if role == "tool" else f"message {item}"
        return [(p, hk, t, label) for p, t in _parts(seg.get("content"), ("content",), _TEXT)]
    if api is Api.RESPONSES and kind == "function_call_output" and isinstance(seg.get("output"), str):
        return [(("output",), HolderKind.TOOL_RESULT, seg["output"], _tool_label(seg.get("call_id"), item))]
    if api is Api.RESPONSES and role == "user" and kind in (None, "message"):
        return [
            (p, HolderKind.USER_TEXT, t, f"message {item}")
            for p, t in _parts(seg.get("content"), ("content",), _INPUT_TEXT)
        ]
    return []


def holders(api: Api, segs: list[Any], n_head: int, start: int) -> list[Holder]:
    """The holders of segments ``start..`` (never a header segment), in prompt order."""
    out: list[Holder] = []
    for i in range(max(start, n_head), len(segs)):
        item = i - n_head + 1  # 1-based position among the messages / input items
        for path, kind, text, label in _segment_holders(api, segs[i], item):
            out.append(Holder(i, path, kind, text, label))
    return out


def text_at(segment: Any, path: Path) -> str | None:
    """The string at ``path`` inside ``segment``, or None when the path no longer leads to a string."""
    node = segment
    for key in path:
        if isinstance(key, int) and isinstance(node, list) and 0 <= key < len(node):
            node = node[key]
        elif isinstance(key, str) and isinstance(node, Mapping) and key in node:
            node = node[key]
        else:
            return None
    return node if isinstance(node, str) else None


def with_text(segment: Any, path: Path, text: str) -> Any:
    """A copy of ``segment`` with the string at ``path`` replaced; only the containers on the path are copied."""
    if not path:
        return text
    key, rest = path[0], path[1:]
    if isinstance(segment, list) and isinstance(key, int):
        copied = list(segment)
        copied[key] = with_text(segment[key], rest, text)
        return copied
    if isinstance(segment, Mapping) and isinstance(key, str):
        return {**segment, key: with_text(segment[key], rest, text)}
    raise ValueError(f"path {path!r} does not lead into the segment")
