"""Every Anthropic ``cache_control`` mark is counted wherever the API counts it (issue 28 item 4).

A fuzzer builds 2,400 requests with marks in every place the API accepts one — the top level, tools, system
blocks, message blocks, blocks nested in ``tool_result`` content, ``search_result`` text blocks, content
documents — plus ``cache_control`` keys that are *not* marks (inside a ``tool_use`` input, a tool's schema).
It knows how many marks it put; :func:`count_marks` must agree, and :func:`anthropic_request` must either build
a request with at most 4 marks in total or refuse the caller's history with a ``ValueError``.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from cp_memory.providers import Counting, anthropic_request
from cp_memory.providers.marks import count_marks, find_marks

WORDS = Counting("words", lambda text: len(text.split()))
CC = {"type": "ephemeral"}


class Fuzz:
    """Random Messages requests; ``marks`` counts the real marks placed."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.marks = 0

    def mark(self, block: dict[str, Any], p: float = 0.15) -> dict[str, Any]:
        if "cache_control" not in block and self.rng.random() < p:
            self.marks += 1
            block["cache_control"] = dict(CC) if self.rng.random() < 0.8 else {"type": "ephemeral", "ttl": "1h"}
        return block

    def text(self) -> dict[str, Any]:
        return self.mark({"type": "text", "text": "word " * self.rng.randint(1, 40)})

    def nested(self) -> list[dict[str, Any]]:
        kind = self.rng.choice(["text", "search", "document", "image"])
        if kind == "search":
            block = {"type": "search_result", "source": "s", "title": "t", "content": [self.text() for _ in range(2)]}
        elif kind == "document":
            block = {"type": "document", "source": {"type": "content", "content": [self.text(), self.text()]}}
        elif kind == "image":
            block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}}
        else:
            block = self.text()
        return [self.mark(block)]

    def message_blocks(self, role: str) -> list[dict[str, Any]]:
        if role == "assistant":
            use = {"type": "tool_use", "id": "t1", "name": "f", "input": {"cache_control": {"type": "ephemeral"}}}
            return [self.text(), self.mark(use)]  # the input's cache_control is the caller's data, not a mark
        result = {"type": "tool_result", "tool_use_id": "t1", "content": self.nested() + self.nested()}
        return [self.mark(result), self.text()]

    def request(self) -> dict[str, Any]:
        tool = {"name": "f", "input_schema": {"type": "object", "properties": {"cache_control": {"type": "string"}}}}
        tools = [self.mark(dict(tool)) for _ in range(self.rng.randint(0, 2))]
        system = [self.text() for _ in range(self.rng.randint(0, 2))]
        roles = ["user", "assistant"] * self.rng.randint(1, 3)
        messages = [{"role": r, "content": self.message_blocks(r)} for r in roles]
        body: dict[str, Any] = {"model": "claude-sonnet-4-5", "tools": tools, "system": system, "messages": messages}
        if self.rng.random() < 0.1:
            body["cache_control"] = dict(CC)
            self.marks += 1
        return body


@pytest.mark.parametrize("seed", range(4))
def test_every_mark_is_counted_wherever_the_api_counts_it(seed: int) -> None:
    for i in range(600):
        fuzz = Fuzz(seed * 10_000 + i)
        body = fuzz.request()
        assert count_marks(body) == fuzz.marks, body


@pytest.mark.parametrize("seed", range(4))
def test_our_builder_never_sends_more_than_four_marks(seed: int) -> None:
    built = refused = 0
    for i in range(600):
        fuzz = Fuzz(seed * 10_000 + i)
        body = fuzz.request()
        history = body["messages"][:-1] if body["messages"][-1]["role"] == "user" else body["messages"]
        caller = count_marks({"tools": body["tools"], "system": body["system"], "messages": history})
        try:
            req = anthropic_request(
                "Why?",
                [],
                model="claude-sonnet-4-5",
                system=body["system"] or "word " * 1100,
                history=history,
                tools=body["tools"],
                counting=WORDS,
                min_tokens=1,
            )
        except ValueError as exc:
            assert caller > 4 or "1h" in str(exc), exc  # too many caller marks, or a 1h mark after a 5m one
            refused += 1
            continue
        built += 1
        total = len(find_marks(req.tools, req.system, req.messages))
        assert total <= 4
        assert total >= caller  # the caller's marks are never removed
    assert built > 100 and refused > 10


def test_a_caller_with_nested_marks_over_the_limit_gets_a_clear_error() -> None:
    result = {
        "type": "tool_result",
        "tool_use_id": "t",
        "content": [{"type": "text", "text": f"r{i}", "cache_control": CC} for i in range(5)],
    }
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
        {"role": "user", "content": [result]},
        {"role": "assistant", "content": "done"},
    ]
    with pytest.raises(ValueError, match="already carries 5 cache_control breakpoints"):
        anthropic_request("Why?", [], model="claude-sonnet-4-5", history=history, counting=WORDS)


def test_the_marks_are_listed_in_prompt_order_with_their_ttl() -> None:
    body = {
        "cache_control": CC,
        "tools": [{"name": "f", "input_schema": {}, "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "system": "a string system holds no mark",
        "messages": [
            {"role": "user", "content": "plain"},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": [{"type": "text", "text": "x", "cache_control": CC}],
                    }
                ],
            },
        ],
    }
    marks = find_marks(body["tools"], body["system"], body["messages"], top_level=body["cache_control"])
    assert [(m.where, m.block, m.ttl) for m in marks] == [("top", -1, "5m"), ("tools", 0, "1h"), ("messages", 2, "5m")]
    assert marks[2].path == ("messages", 1, "content", 0, "content", 0, "cache_control")
    assert (
        count_marks({"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": None}]}]})
        == 0
    )
