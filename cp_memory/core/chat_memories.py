"""mem0 memories placed into a chat request without moving a byte of its cached prefix. I/O-free.

The one placement rule of the gateway (:mod:`cp_memory.gateway.memories`) and of the mem0 proxy drop-in
(:mod:`cp_memory.mem0_proxy`): the rendered memories (the search's :class:`~cp_memory.core.prompt.
PromptContract`: aligned order, location annotations for memories sent in earlier turns) go **into the newest
user message, before the user's own text** — a string content gains them as a prefix, a list content as a
first text block of its own. Nothing before that message changes, so the cached prefix (system prompt, tools,
every earlier turn as it was sent) stays byte for byte; the earlier turns keep the memories they were sent
with (the gateway's prefix replay, the drop-in's :class:`MemoryLog`), which is what the location annotations
point at. mem0's own proxy instead rewrites the newest user message into "- Relevant Memories/Facts: ...
- User Question: ..." and never sends it again, so every turn's history differs from what was cached.

The text searched: the user text of the last ``turns`` user messages, oldest first.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any

from .lru import LRUMap
from .prompt import PromptContract

__all__ = [
    "CHAT_MEMORY_OPTIONS",
    "DEFAULT_QUERY_TURNS",
    "MEMORIES_HEAD",
    "ChatShape",
    "MemoryLog",
    "MemoryPlacement",
    "memories_text",
    "opening",
    "place_memories",
    "query_text",
    "text_of",
]

#: the first line of the memories block; then the rendered context (``[Doc i]`` lines, annotations), a blank line
MEMORIES_HEAD = "Memories about the user:\n"
#: the mem0 wrapper's options for memories in a chat (the gateway's and the drop-in's default): numbered lines
#: (``3 text``, two tokens a label, where ``[Doc 3]`` costs five); no order annotation (the memories come in the
#: user's aligned order; the annotation, ~50 tokens, would be prefilled every turn); no over-fetch (the earlier
#: turns stay in the history with their memories, so mem0's top k are shown once each — fresh ones as lines,
#: those sent before as pointers — instead of k fresh ones plus pointers)
CHAT_MEMORY_OPTIONS: Mapping[str, Any] = MappingProxyType({"labels": "number", "annotate": False, "max_overfetch": 0})
#: user messages searched on by default (the gateway's ``memories_query_turns``, the drop-in's ``query_turns``)
DEFAULT_QUERY_TURNS = 3
_TEXT_TYPES = frozenset({"text", "input_text"})


class ChatShape(str, Enum):
    """How a request spells its messages: OpenAI Chat Completions (``messages``), OpenAI Responses
    (``input`` items, ``input_text`` blocks) or Anthropic Messages (``messages``, ``tool_result`` blocks)."""

    OPENAI = "openai"
    RESPONSES = "responses"
    ANTHROPIC = "anthropic"


def text_of(content: Any) -> str:
    """A message content's text: a string, or its text blocks joined by newlines (images, tool blocks: none)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text") for b in content if isinstance(b, Mapping) and b.get("type") in _TEXT_TYPES]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def _is_user(message: Any) -> bool:
    return isinstance(message, Mapping) and message.get("role") == "user"


def query_text(messages: Sequence[Any], turns: int) -> str:
    """The text of the last ``turns`` user messages (oldest first, one per line; empty ones skipped)."""
    if turns < 1:
        raise ValueError(f"turns must be >= 1, got {turns}")
    texts = [text_of(m.get("content")).strip() for m in messages if _is_user(m)]
    return "\n".join(t for t in texts[-turns:] if t)


def memories_text(contract: PromptContract) -> str | None:
    """The memories block: :data:`MEMORIES_HEAD`, the rendered context, a blank line; None when the search
    put nothing into the prompt (no block, no pointer)."""
    if not contract.context.text:
        return None
    return MEMORIES_HEAD + contract.context.text + "\n\n"


@dataclass(frozen=True)
class MemoryPlacement:
    """The messages with the memories placed; ``index``: the message that carries them."""

    messages: list[Any]
    index: int


def _has_tool_result(content: list[Any]) -> bool:
    return any(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content)


def place_memories(shape: ChatShape, messages: Sequence[Any], text: str) -> MemoryPlacement | None:
    """``messages`` (a copy) with ``text`` at the start of the newest message when it is the user's (else
    None: an assistant prefill, a tool result turn — Anthropic's ``tool_result`` blocks must come first —
    or no messages). The given messages are not changed."""
    if not messages or not _is_user(messages[-1]):
        return None
    last = dict(messages[-1])
    content = last.get("content")
    if isinstance(content, str):
        last["content"] = text + content
    elif isinstance(content, list) and not (shape is ChatShape.ANTHROPIC and _has_tool_result(content)):
        kind = "input_text" if shape is ChatShape.RESPONSES else "text"
        last["content"] = [{"type": kind, "text": text}, *content]
    else:
        return None
    out = list(messages)
    out[-1] = last
    return MemoryPlacement(out, len(out) - 1)


def _digest(message: Any) -> str:
    text = json.dumps(message, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class _Sent:
    """One conversation's last request: its length, the client's digests, the memory-carrying messages as sent."""

    length: int
    digests: tuple[str, ...]
    carried: tuple[tuple[int, Any], ...]


class MemoryLog:
    """For callers without prefix replay (the mem0 proxy drop-in): each conversation's messages that carried
    memories, as sent, so the next call sends them again instead of the client's copy without them; and the
    dedup conversation id, whose epoch changes when the history no longer starts with what was sent (edited,
    cut): no pointer then names a turn the model cannot see. Bounded (LRU)."""

    def __init__(self, capacity: int) -> None:
        self._sent: LRUMap[str, _Sent] = LRUMap(capacity)
        self._epochs: LRUMap[str, int] = LRUMap(capacity)

    def restore(self, base: str, messages: Sequence[Any]) -> tuple[list[Any], str]:
        """``(messages with the earlier memories put back, the dedup conversation id)`` for the conversation
        ``base`` (e.g. its scope and opening)."""
        sent = self._sent.get(base)
        out = list(messages)
        epoch = self._epochs.get(base, 0)
        if sent is None:
            return out, f"{base}:{epoch}"
        if len(out) < sent.length or tuple(_digest(m) for m in out[: sent.length]) != sent.digests:
            self._sent.pop(base)
            self._epochs.set(base, epoch + 1)
            return out, f"{base}:{epoch + 1}"
        for index, message in sent.carried:
            out[index] = message
        return out, f"{base}:{epoch}"

    def record(self, base: str, client: Sequence[Any], sent: Sequence[Any], placed: int | None) -> None:
        """A request went out: ``client`` as the caller gave it, ``sent`` as sent (earlier memories restored,
        new ones placed), ``placed`` the message that carried the new ones (None: none)."""
        before = self._sent.get(base)
        carried = list(before.carried) if before is not None else []
        if placed is not None:
            carried.append((placed, sent[placed]))
        self._sent.set(base, _Sent(len(client), tuple(_digest(m) for m in client), tuple(carried)))


def opening(messages: Sequence[Any]) -> str:
    """A digest of a conversation's first message (its system prompt, or its first user message)."""
    return _digest(messages[0])[:24] if messages else "empty"
