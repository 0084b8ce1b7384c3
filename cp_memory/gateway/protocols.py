"""The three protocols the gateway understands, as data: which path, where the prompt's ordered pieces are.

A request's *segments* are the pieces of its prompt in the order the upstream renders them, each a JSON
value the gateway may replace by the version it sent before (prefix replay):

==========================  =====================================================  ============================
protocol                    segments                                                header count (not messages)
==========================  =====================================================  ============================
OpenAI Chat Completions     ``tools``, then every ``messages`` item                 1
OpenAI Responses            ``instructions``, ``tools``, then every ``input`` item  2 (a string ``input``: one)
Anthropic Messages          ``tools``, ``system``, then every ``messages`` item     2
==========================  =====================================================  ============================

A field the client did not send is a ``None`` segment and is never added. Any other path (``/v1/models``,
``/v1/messages/count_tokens``, ...) is :attr:`Api.OTHER`: forwarded untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

__all__ = ["Api", "api_of", "segments", "with_segments"]

_MISSING = object()


class Api(str, Enum):
    """The protocol of a request, from its path."""

    CHAT = "chat"
    RESPONSES = "responses"
    MESSAGES = "messages"
    OTHER = "other"


def api_of(path: str) -> Api:
    """``/v1/chat/completions`` (also without ``/v1``), ``/v1/responses``, ``/v1/messages``; else OTHER."""
    trimmed = path.rstrip("/")
    if trimmed.endswith("/chat/completions"):
        return Api.CHAT
    if trimmed.endswith("/responses"):
        return Api.RESPONSES
    if trimmed.endswith("/messages"):
        return Api.MESSAGES
    return Api.OTHER


def _header_fields(api: Api) -> tuple[str, ...]:
    if api is Api.CHAT:
        return ("tools",)
    if api is Api.RESPONSES:
        return ("instructions", "tools")
    if api is Api.MESSAGES:
        return ("tools", "system")
    return ()


def _items_field(api: Api) -> str:
    return "input" if api is Api.RESPONSES else "messages"


def segments(api: Api, body: Mapping[str, Any]) -> tuple[list[Any], int]:
    """``(segments, header count)``; raises ``TypeError`` when the items field is not a list (a string
    ``input`` of the Responses API is one segment)."""
    head = [body.get(name) for name in _header_fields(api)]
    items = body.get(_items_field(api))
    if items is None:
        return head, len(head)
    if isinstance(items, str) and api is Api.RESPONSES:
        return [*head, items], len(head)
    if not isinstance(items, list):
        raise TypeError(f"{_items_field(api)} must be a list, got {type(items).__name__}")
    return [*head, *items], len(head)


def with_segments(api: Api, body: Mapping[str, Any], segs: list[Any], n_head: int) -> dict[str, Any]:
    """A copy of ``body`` with the segments put back (fields the client did not send stay absent)."""
    out = dict(body)
    for name, value in zip(_header_fields(api), segs[:n_head]):
        if name in body:
            out[name] = value
    field = _items_field(api)
    original = body.get(field, _MISSING)
    if original is _MISSING or original is None:
        return out
    rest = segs[n_head:]
    out[field] = rest[0] if isinstance(original, str) and len(rest) == 1 else list(rest)
    return out
