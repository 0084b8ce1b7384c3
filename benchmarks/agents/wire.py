"""The scripted model's turns on the wire: the three APIs the gateway speaks, whole and streamed (SSE).

A :class:`Turn` (protocol-neutral: optional thinking, text, an optional :class:`ToolCall`) becomes, by
:func:`encode`, an Anthropic Messages ``message`` with its ``message_start`` ... ``message_stop`` events, an
OpenAI Responses ``response`` with its ``response.created`` ... ``response.completed`` events (each with its
``sequence_number``), or a Chat Completions ``chat.completion`` with its chunks (and a usage chunk when
``stream_options.include_usage``); :func:`sse` writes events as bytes. Replies are deterministic (a fixed
``created`` time, ids and signatures derived from the turn). :mod:`benchmarks.agents.scripted` decides the turn
and serves it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from cp_memory.gateway.protocols import Api, api_of

__all__ = ["CREATED", "Events", "Protocol", "ToolCall", "Turn", "encode", "sse"]

#: the fixed ``created`` time of every reply (replies are deterministic)
CREATED = 1_767_225_600
#: (SSE event name or None, data) of a streamed reply
Events = list[tuple[str | None, Any]]


class Protocol(Enum):
    """The wire protocol of a request, from its path."""

    ANTHROPIC = "anthropic"
    RESPONSES = "responses"
    CHAT = "chat"

    @classmethod
    def of(cls, path: str) -> Protocol | None:
        api = api_of(path.split("?", 1)[0])
        return {Api.MESSAGES: cls.ANTHROPIC, Api.RESPONSES: cls.RESPONSES, Api.CHAT: cls.CHAT}.get(api)


@dataclass(frozen=True)
class ToolCall:
    """A tool call the scripted model makes: the harness's tool ``name``, its ``arguments``, a stable ``id``."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Turn:
    """One scripted model turn, protocol-neutral: optional thinking, text, optional tool call."""

    text: str
    tool: ToolCall | None = None
    thinking: str | None = None
    input_tokens: int = 0
    key: str = field(default="", compare=False)

    @property
    def output_tokens(self) -> int:
        args = json.dumps(self.tool.arguments) if self.tool else ""
        return max(1, (len(self.text) + len(args) + len(self.thinking or "")) // 4)


# --- encoding: one turn in each protocol, whole and streamed ---------------------------------------------


def _pieces(text: str, n: int = 3) -> list[str]:
    """``text`` cut into ``n`` pieces (the deltas of a stream); one empty piece for an empty text."""
    if not text:
        return [""]
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _signature(text: str) -> str:
    return "sig_" + hashlib.sha256(text.encode()).hexdigest()[:48]


def _anthropic(turn: Turn, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if turn.thinking is not None:
        content.append({"type": "thinking", "thinking": turn.thinking, "signature": _signature(turn.thinking)})
    if turn.text:
        content.append({"type": "text", "text": turn.text})
    if turn.tool is not None:
        content.append({"type": "tool_use", "id": turn.tool.id, "name": turn.tool.name, "input": turn.tool.arguments})
    usage = {
        "input_tokens": turn.input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": turn.output_tokens,
    }
    return {
        "id": f"msg_scripted_{turn.key}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if turn.tool else "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }


def _anthropic_block_events(index: int, block: dict[str, Any]) -> Events:
    kind = block["type"]
    start: dict[str, Any]
    if kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(block["thinking"], 2)]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "text":
        start, deltas = (
            {"type": "text", "text": ""},
            [{"type": "text_delta", "text": p} for p in _pieces(block["text"])],
        )
    else:
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        args = json.dumps(block["input"], ensure_ascii=False)
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in ["", *_pieces(args)]]
    return [
        ("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}),
        *[("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas],
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def _anthropic_events(message: dict[str, Any]) -> Events:
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events: Events = [("message_start", {"type": "message_start", "message": start}), ("ping", {"type": "ping"})]
    for i, block in enumerate(message["content"]):
        events += _anthropic_block_events(i, block)
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    events.append(
        ("message_delta", {"type": "message_delta", "delta": delta, "usage": {"output_tokens": usage["output_tokens"]}})
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _responses(turn: Turn, model: str) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if turn.text:
        part = {"type": "output_text", "text": turn.text, "annotations": []}
        output.append(
            {"type": "message", "id": f"msg_{turn.key}", "status": "completed", "role": "assistant", "content": [part]}
        )
    if turn.tool is not None:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{turn.key}",
                "call_id": turn.tool.id,
                "name": turn.tool.name,
                "arguments": json.dumps(turn.tool.arguments, ensure_ascii=False),
                "status": "completed",
            }
        )
    usage = {
        "input_tokens": turn.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": turn.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": turn.input_tokens + turn.output_tokens,
    }
    return {
        "id": f"resp_{turn.key}",
        "object": "response",
        "created_at": CREATED,
        "status": "completed",
        "model": model,
        "output": output,
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }


def _responses_item_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    base = {"output_index": index, "item_id": item["id"]}
    if item["type"] == "message":
        text = item["content"][0]["text"]
        empty_part = {"type": "output_text", "text": "", "annotations": []}
        return [
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**item, "status": "in_progress", "content": []},
            },
            {"type": "response.content_part.added", **base, "content_index": 0, "part": empty_part},
            *[{"type": "response.output_text.delta", **base, "content_index": 0, "delta": p} for p in _pieces(text)],
            {"type": "response.output_text.done", **base, "content_index": 0, "text": text},
            {"type": "response.content_part.done", **base, "content_index": 0, "part": item["content"][0]},
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]
    return [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "status": "in_progress", "arguments": ""},
        },
        *[{"type": "response.function_call_arguments.delta", **base, "delta": p} for p in _pieces(item["arguments"])],
        {"type": "response.function_call_arguments.done", **base, "arguments": item["arguments"]},
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def _responses_events(response: dict[str, Any]) -> Events:
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    raw: list[dict[str, Any]] = [
        {"type": "response.created", "response": pending},
        {"type": "response.in_progress", "response": pending},
    ]
    for i, item in enumerate(response["output"]):
        raw += _responses_item_events(i, item)
    raw.append({"type": "response.completed", "response": response})
    return [(str(e["type"]), {**e, "sequence_number": n}) for n, e in enumerate(raw)]


def _chat(turn: Turn, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
    if turn.tool is not None:
        fn = {"name": turn.tool.name, "arguments": json.dumps(turn.tool.arguments, ensure_ascii=False)}
        message["tool_calls"] = [{"id": turn.tool.id, "type": "function", "function": fn}]
    usage = {
        "prompt_tokens": turn.input_tokens,
        "completion_tokens": turn.output_tokens,
        "total_tokens": turn.input_tokens + turn.output_tokens,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if turn.tool else "stop"}
    return {
        "id": f"chatcmpl-{turn.key}",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [choice],
        "usage": usage,
    }


def _chat_events(completion: dict[str, Any], include_usage: bool) -> Events:
    head = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    message, choice = completion["choices"][0]["message"], completion["choices"][0]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, dict[str, Any]]:
        return None, {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    events: Events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": p}) for p in _pieces(message["content"] or "") if p]
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call["function"]
        events.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": fn["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        events += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]}) for p in _pieces(fn["arguments"])
        ]
    events.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        events.append((None, {**head, "choices": [], "usage": completion["usage"]}))
    return events


def encode(protocol: Protocol, turn: Turn, body: dict[str, Any]) -> tuple[dict[str, Any], Events]:
    """``turn`` as the whole reply to ``body`` in ``protocol`` and as the same reply's SSE events (``data:
    [DONE]`` not included); the model named is the request's."""
    model = str(body.get("model") or "scripted")
    if protocol is Protocol.ANTHROPIC:
        message = _anthropic(turn, model)
        return message, _anthropic_events(message)
    if protocol is Protocol.RESPONSES:
        response = _responses(turn, model)
        return response, _responses_events(response)
    completion = _chat(turn, model)
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    return completion, _chat_events(completion, include_usage)


def sse(events: Events, done: bool = False) -> bytes:
    """``events`` as SSE bytes (``event:`` line when named), then ``data: [DONE]`` when ``done``."""
    out = [
        ((f"event: {name}\n" if name else "") + f"data: {json.dumps(data, ensure_ascii=False)}\n\n")
        for name, data in events
    ]
    if done:
        out.append("data: [DONE]\n\n")
    return "".join(out).encode()
