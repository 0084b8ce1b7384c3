"""The gateway's mem0 stage, without I/O: who the memories are for, what to search, where they go.

* **The user**, first of: the ``X-CP-User`` header, OpenAI's ``user`` field (Chat Completions, Responses),
  Anthropic's ``metadata.user_id`` when it is a plain id (not Claude Code's JSON string or
  ``..._session_<id>`` form, which name a session, not a person). No user: no memories.
* **The mem0 scope** is ``user_id = "<tenant>:<user>"``: the tenant (the keyed hash of the client's key and
  tenant header) is part of the id mem0 stores and searches under, so a tenant reaches only its own users,
  whatever user string it sends.
* **The dedup conversation** is the session, with an epoch (a random token the session keeps): when the
  session's previous request is no longer the prefix of this one (edited history, another conversation under
  the same session id), or the gateway does not know it (the session's first request, or one whose state
  expired or was evicted), a new epoch starts and nothing earlier is pointed at (a pointer only ever names a
  turn the history shows).
* **The placement** (:func:`cp_memory.core.chat_memories.place_memories`, shared with the mem0 proxy
  drop-in): the rendered memories at the start of the newest user message, after every cached byte. Then
  one of two (:class:`PlacementMode`), per session:

  - ``cached`` (engines, and a provider once the request reaches its cache minimum): the sent log records
    the client's digest for that message, so the next request's copy (without memories) is replayed as
    sent, memories included; the cached prefix grows with them, and memories sent before become pointers.
  - ``fresh`` (a hosted provider while the request is below its documented minimum cacheable prefix,
    :func:`cache_minimum`: nothing of it is cached, so there is no cached byte to keep): the memories go
    into the newest message only, mem0's own pattern; the next request carries the client's copy without
    them (a shorter prompt), and the search's dedup turn is rolled back, so no later pointer names
    memories the history does not show. The first request that reaches the minimum switches the session
    to ``cached`` for good: its history shows no memories and its dedup conversation has no committed
    turn, so it starts a clean epoch (everything shown in full, pointers only from then on).

The search itself (mem0 through :class:`~cp_memory.memory.wrappers.ContextPilotMemory`) is I/O: the app's
driver runs it (:mod:`cp_memory.gateway.mem0_store`) and hands the found :class:`Memories` to
:meth:`~cp_memory.gateway.flow.Gateway.plan`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..core.chat_memories import ChatShape, MemoryPlacement, memories_text, place_memories, query_text, text_of
from ..core.prompt import PromptContract
from ..providers.anthropic import block_texts
from ..providers.rules import OPENAI_MIN_TOKENS, anthropic_min_tokens
from ..providers.tokens import Counting
from .config import UpstreamKind
from .protocols import Api, segments
from .replay import SentLog, digest
from .sessions import SessionMemories
from .tenancy import Identity

__all__ = [
    "USER_HEADER",
    "Memories",
    "MemoryQuery",
    "MemoryStage",
    "PlacementMode",
    "answer_text",
    "cache_minimum",
    "leaf_text",
    "request_tokens",
    "user_of",
]

USER_HEADER = "x-cp-user"
_SHAPES = {Api.CHAT: ChatShape.OPENAI, Api.RESPONSES: ChatShape.RESPONSES, Api.MESSAGES: ChatShape.ANTHROPIC}


def _plain_id(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip() or len(value) > 256:
        return None
    text = value.strip()
    if text.startswith(("{", "[")) or "_session_" in text:
        return None
    return text


def user_of(api: Api, headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """The user a request names (see the module's precedence), or None."""
    found = _plain_id(headers.get(USER_HEADER))
    if found is not None:
        return found
    if api in (Api.CHAT, Api.RESPONSES):
        return _plain_id(body.get("user"))
    meta = body.get("metadata")
    return _plain_id(meta.get("user_id")) if api is Api.MESSAGES and isinstance(meta, Mapping) else None


@dataclass(frozen=True)
class MemoryQuery:
    """A search to run: ``query`` text, mem0's ``user_id`` (tenant-scoped) and the dedup ``conversation_id``."""

    query: str
    user_id: str
    conversation_id: str | None
    messages_tail: tuple[Any, ...] = ()  # the newest user message, for the turn added after the answer

    @property
    def filters(self) -> dict[str, str]:
        return {"user_id": self.user_id}


@dataclass(frozen=True)
class Memories:
    """What a search found: its query, mem0's response (the commit/rollback handle) and its contract."""

    query: MemoryQuery
    response: Any
    contract: PromptContract


class PlacementMode(str, Enum):
    """How a request's memories were placed (the module's docstring): ``cached`` replayed with their turn,
    ``fresh`` in the newest message only (below the provider's cache minimum)."""

    CACHED = "cached"
    FRESH = "fresh"


def cache_minimum(kind: UpstreamKind, api: Api, body: Mapping[str, Any]) -> int | None:
    """The provider's documented minimum cacheable prefix for this request (:mod:`cp_memory.providers.rules`):
    OpenAI's 1,024 tokens, the Anthropic model's own (Messages API); None where any prefix can be cached (a
    self-hosted engine) or no rule is known."""
    if kind is UpstreamKind.OPENAI and api in (Api.CHAT, Api.RESPONSES):
        return OPENAI_MIN_TOKENS
    if kind is UpstreamKind.ANTHROPIC and api is Api.MESSAGES:
        model = body.get("model")
        return anthropic_min_tokens(model if isinstance(model, str) else None)[0]
    return None


def leaf_text(value: Any) -> str:
    """The strings of a segment (its tokens' source, roughly), ``cache_control`` aside."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return "".join(leaf_text(v) for k, v in value.items() if k != "cache_control")
    if isinstance(value, list):
        return "".join(leaf_text(v) for v in value)
    return ""


def request_tokens(api: Api, body: Mapping[str, Any], counting: Counting) -> int:
    """The request's prompt tokens as the provider rules count them: Anthropic's blocks (tools, system,
    messages; what the gateway's breakpoints are measured on), else every string of every segment."""
    if api is Api.MESSAGES:
        system = body.get("system")
        system_blocks = [{"type": "text", "text": system}] if isinstance(system, str) and system else _seq(system)
        texts = block_texts(_seq(body.get("tools")), system_blocks, _seq(body.get("messages")))
        return sum(counting.tokens(text) for text, _ in texts)
    try:
        segs = segments(api, body)[0]
    except TypeError:
        return 0
    return counting.tokens(leaf_text(segs))


def _messages(api: Api, body: Mapping[str, Any]) -> list[Any]:
    items = body.get("input" if api is Api.RESPONSES else "messages")
    return list(items) if isinstance(items, list) else []


class MemoryStage:
    """The stage's steps (:meth:`query`, :meth:`place`, :meth:`settles_cached`) over a session's epoch and placement,
    which the session owns (:class:`~.sessions.SessionMemories`, in its record, shared by replicas with a
    state store). ``kind`` and ``counting``: the upstream and the token counter its cache minimum is checked
    with (the provider rules' own)."""

    def __init__(self, *, query_turns: int, dedup: bool, kind: UpstreamKind, counting: Counting) -> None:
        self.query_turns = query_turns
        self.dedup = dedup
        self.kind = kind
        self.counting = counting

    def query(
        self,
        api: Api,
        headers: Mapping[str, str],
        body: Mapping[str, Any],
        who: Identity,
        log: SentLog | None,
        session: SessionMemories,
    ) -> MemoryQuery | None:
        """The search for this request, or None (no user, no new user message, nothing to search on)."""
        user = user_of(api, headers, body) if api in _SHAPES else None
        messages = _messages(api, body)
        if user is None or not messages or not isinstance(messages[-1], Mapping):
            return None
        if messages[-1].get("role") != "user":
            return None
        text = query_text(messages, self.query_turns)
        if not text:
            return None
        conversation = self._conversation(api, body, who, log, session)
        # a copy: the plan reads the same parsed body, and the turn added to mem0 later is the client's message
        return MemoryQuery(text, f"{who.tenant}:{user}", conversation, (copy.deepcopy(messages[-1]),))

    def _conversation(
        self, api: Api, body: Mapping[str, Any], who: Identity, log: SentLog | None, session: SessionMemories
    ) -> str | None:
        if not self.dedup:
            return None
        epoch = session.epoch()
        if not epoch or log is None or not _extends(api, body, log):  # unknown or edited history: a fresh epoch
            epoch = session.new_epoch()
        return f"{who.session}:{epoch}"

    def place(
        self, api: Api, body: dict[str, Any], memories: Memories, session: SessionMemories
    ) -> tuple[dict[str, Any], int | None, PlacementMode | None]:
        """``body`` with the memories in its newest user message, that message's segment index and the
        placement (None, None: nothing placed)."""
        text = memories_text(memories.contract)
        shape = _SHAPES.get(api)
        if text is None or shape is None:
            return body, None, None
        placed: MemoryPlacement | None = place_memories(shape, _messages(api, body), text)
        if placed is None:
            return body, None, None
        out = dict(body)
        out["input" if api is Api.RESPONSES else "messages"] = placed.messages
        n_head = segments(api, body)[1]
        return out, n_head + placed.index, self._placement(api, out, session)

    def _placement(self, api: Api, body: Mapping[str, Any], session: SessionMemories) -> PlacementMode:
        """``cached`` when the session switched already, the upstream caches any prefix, or this request
        (memories placed) reaches the provider's minimum; else ``fresh``."""
        if session.cached():
            return PlacementMode.CACHED
        minimum = cache_minimum(self.kind, api, body)
        if minimum is None or self.counting.reaches(request_tokens(api, body, self.counting), minimum):
            return PlacementMode.CACHED
        return PlacementMode.FRESH

    def settles_cached(self, placement: PlacementMode) -> bool:
        """Whether a request with memories placed so, once it went out, switches its session to ``cached`` for
        good (a hosted provider's cache; :meth:`~.sessions.SessionMemories.set_cached`)."""
        return placement is PlacementMode.CACHED and self.kind in (UpstreamKind.OPENAI, UpstreamKind.ANTHROPIC)


def _extends(api: Api, body: Mapping[str, Any], log: SentLog) -> bool:
    """Whether every segment of the session's previous request is still this request's prefix."""
    try:
        segs = segments(api, body)[0]
    except TypeError:
        return False
    n = len(log.digests)
    return len(segs) >= n and all(digest(api, s) == d for s, d in zip(segs[:n], log.digests))


def _seq(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _sse_texts(data: bytes) -> list[str]:
    out: list[str] = []
    for line in data.decode("utf-8", "replace").splitlines():
        if not line.startswith("data:"):
            continue
        try:
            event = json.loads(line[5:].strip())
        except ValueError:
            continue
        out.append(_event_text(event))
    return out


def _event_text(event: Any) -> str:
    if not isinstance(event, Mapping):
        return ""
    choices = event.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        delta = choices[0].get("delta")
        if isinstance(delta, Mapping) and isinstance(delta.get("content"), str):
            return str(delta["content"])
    delta = event.get("delta")
    if event.get("type") == "content_block_delta" and isinstance(delta, Mapping):
        return delta.get("text", "") if isinstance(delta.get("text"), str) else ""
    if event.get("type") == "response.output_text.delta" and isinstance(event.get("delta"), str):
        return str(event["delta"])
    return ""


def answer_text(api: Api, data: bytes, streamed: bool) -> str:
    """The answer's text (Chat Completions, Responses, Messages; streamed or not); empty when unreadable."""
    if streamed:
        return "".join(_sse_texts(data))
    try:
        body = json.loads(data)
    except ValueError:
        return ""
    if not isinstance(body, Mapping):
        return ""
    choices = body.get("choices")
    if api is Api.CHAT and isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        message = choices[0].get("message")
        return text_of(message.get("content")) if isinstance(message, Mapping) else ""
    if api is Api.MESSAGES:
        return text_of(body.get("content"))
    output = body.get("output")
    if api is Api.RESPONSES and isinstance(output, list):
        blocks = [b for item in output if isinstance(item, Mapping) for b in _seq(item.get("content"))]
        return "".join(str(b["text"]) for b in blocks if isinstance(b, Mapping) and isinstance(b.get("text"), str))
    return ""
