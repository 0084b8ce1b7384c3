"""Usage read exactly from every answer shape, streamed or not: golden SSE streams of each protocol's
terminal events, fed to the gateway's tap in arbitrary byte pieces (an event split anywhere)."""

from __future__ import annotations

import json
import random

import pytest

from cp_memory.gateway.usage_tap import SSETap, body_usage
from cp_memory.providers.usage import CacheUsage


def sse(*events: tuple[str | None, object], newline: str = "\n") -> bytes:
    out = ""
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        out += (f"event: {name}{newline}" if name else "") + f"data: {text}{newline}{newline}"
    return out.encode()


#: OpenAI Chat Completions with ``include_usage``, vLLM style: the last chunk still carries a choice
CHAT = sse(
    (None, {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "Hi"}}]}),
    (
        None,
        {
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1200, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 1024}},
        },
    ),
    (None, "[DONE]"),
)
#: OpenAI Responses: the usage arrives in ``response.completed``
RESPONSES = sse(
    ("response.created", {"type": "response.created", "response": {"id": "r", "status": "in_progress", "usage": None}}),
    ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "Hi"}),
    (
        "response.completed",
        {
            "type": "response.completed",
            "response": {
                "id": "r",
                "model": "m",
                "usage": {"input_tokens": 3000, "output_tokens": 7, "input_tokens_details": {"cached_tokens": 2944}},
            },
        },
    ),
)
#: Anthropic Messages: prompt usage in message_start, cumulative counts in message_delta
MESSAGES = sse(
    (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg",
                "model": "claude-sonnet-4-5",
                "usage": {
                    "input_tokens": 12,
                    "cache_read_input_tokens": 4000,
                    "cache_creation_input_tokens": 300,
                    "cache_creation": {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 0},
                    "output_tokens": 1,
                },
            },
        },
    ),
    ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ("ping", {"type": "ping"}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
    (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {
                "input_tokens": 12,
                "cache_read_input_tokens": 4000,
                "cache_creation_input_tokens": 300,
                "output_tokens": 42,
            },
        },
    ),
    ("message_stop", {"type": "message_stop"}),
)
EXPECTED = {
    "chat": CacheUsage("openai", 1200, 1024, 0, 5, 0, "m"),
    "responses": CacheUsage("openai", 3000, 2944, 0, 7, 0, "m"),
    "messages": CacheUsage("anthropic", 4312, 4000, 300, 42, 0, "claude-sonnet-4-5"),
}
STREAMS = {"chat": CHAT, "responses": RESPONSES, "messages": MESSAGES}


@pytest.mark.parametrize("name", list(STREAMS))
@pytest.mark.parametrize("seed", range(25))
def test_a_stream_cut_anywhere_gives_the_exact_usage(name: str, seed: int) -> None:
    data = STREAMS[name]
    if seed % 2:
        data = data.replace(b"\n", b"\r\n")  # CRLF servers
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(data)), 12))
    tap = SSETap(1 << 20)
    for a, b in zip([0, *cuts], [*cuts, len(data)]):
        tap.feed(data[a:b])
    tap.close()
    assert tap.usage == EXPECTED[name]


def test_the_anthropic_split_start_then_delta_only_output() -> None:
    """Anthropic's classic split: the prompt's counts in message_start, message_delta with output only."""
    data = sse(
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "usage": {
                        "input_tokens": 5,
                        "cache_read_input_tokens": 2048,
                        "cache_creation_input_tokens": 0,
                        "output_tokens": 1,
                    }
                },
            },
        ),
        ("message_delta", {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 9}}),
    )
    tap = SSETap(1 << 20)
    tap.feed(data)
    assert (tap.usage.input_tokens, tap.usage.cache_read_tokens, tap.usage.output_tokens) == (2053, 2048, 9)


def test_whole_answers() -> None:
    chat = {
        "choices": [],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 8}},
    }
    assert body_usage(json.dumps(chat).encode()).cache_read_tokens == 8
    assert body_usage(b"<html>bad gateway</html>") == CacheUsage()


def test_an_oversized_event_stops_the_tap_not_the_stream() -> None:
    tap = SSETap(1024)
    tap.feed(b"data: " + b"x" * 5000)
    tap.feed(CHAT)
    assert tap.stopped and tap.usage == CacheUsage()
