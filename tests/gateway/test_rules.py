"""The provider rules the gateway applies after replay (``cp_memory.gateway.rules``), on hand-built requests."""

from __future__ import annotations

from typing import Any

import pytest

from cp_memory.gateway.config import UpstreamKind
from cp_memory.gateway.protocols import Api
from cp_memory.gateway.rules import apply_rules
from cp_memory.providers import Counting
from cp_memory.providers.marks import count_marks, find_marks

WORDS = Counting("words", lambda text: len(text.split()))
CC = {"type": "ephemeral"}
SYSTEM = [{"type": "text", "text": "word " * 1100}]  # above claude-sonnet-4-5's 1,024-token minimum


def rules(body: dict[str, Any], previous_end: int | None = None, kind: UpstreamKind = UpstreamKind.ANTHROPIC) -> Any:
    return apply_rules(
        kind, Api.MESSAGES, body, secret=b"s" * 32, tenant="t", session="s", previous_end=previous_end, counting=WORDS
    )


def tool_turns(n: int) -> list[dict[str, Any]]:
    """A user question, then ``n`` tool calls and results (2 blocks a round trip)."""
    out: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in range(n):
        out.append({"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "f", "input": {}}]})
        out.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "x"}]})
    return out


def test_the_moving_mark_goes_on_the_last_block_and_the_clients_stay() -> None:
    body = {"model": "claude-sonnet-4-5", "system": [{**SYSTEM[0], "cache_control": CC}], "messages": tool_turns(2)}
    out = rules(body)
    assert [m.where for m in out.marks] == ["turn"]
    assert [m.block for m in find_marks(None, out.body["system"], out.body["messages"])] == [0, 5]
    assert body["messages"][-1]["content"][0].get("cache_control") is None  # the client's body is not mutated


def test_a_bridge_mark_keeps_the_previous_request_within_the_20_block_lookback() -> None:
    body = {"model": "claude-sonnet-4-5", "system": SYSTEM, "messages": tool_turns(12)}  # 1 + 1 + 24 blocks
    out = rules(body, previous_end=3)
    assert [(m.where, m.block) for m in out.marks] == [("turn", 25), ("bridge", 3)]
    assert count_marks(out.body) == 2


def test_never_past_four_marks_counting_nested_ones_and_never_below_the_minimum() -> None:
    nested = {
        "type": "tool_result",
        "tool_use_id": "t",
        "content": [{"type": "text", "text": "r", "cache_control": CC}],
    }
    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": f"m{i}", "cache_control": CC} for i in range(3)] + [nested],
        }
    ]
    assert rules({"model": "claude-sonnet-4-5", "system": SYSTEM, "messages": messages}).marks == ()  # 4 already
    short = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "short prompt"}]}
    assert rules(short).marks == ()  # below the 1,024-token minimum: a mark would cache nothing
    automatic = {"model": "claude-sonnet-4-5", "cache_control": CC, "system": SYSTEM, "messages": tool_turns(1)}
    assert rules(automatic).marks == ()  # the API's automatic mark is on the last block already


def test_no_five_minute_mark_before_a_clients_one_hour_mark() -> None:
    messages = tool_turns(12)
    messages[-1]["content"][0]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    out = rules({"model": "claude-sonnet-4-5", "system": SYSTEM, "messages": messages}, previous_end=3)
    assert out.marks == ()  # turn: the client's mark is there; bridge: it would precede the 1h mark


def test_engines_get_a_salt_per_tenant_and_other_upstreams_nothing() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    salted = rules(body, kind=UpstreamKind.VLLM)
    assert salted.added == ("cache_salt",) and salted.body["cache_salt"].startswith("cp-")
    assert rules({**body, "cache_salt": "mine"}, kind=UpstreamKind.VLLM).body["cache_salt"] == "mine"
    for kind in (UpstreamKind.LLAMACPP, UpstreamKind.SGLANG, UpstreamKind.COMPATIBLE):
        assert rules(body, kind=kind).body is body


def _openai_key(tenant: str, session: str, shards: int = 1, body: dict[str, Any] | None = None) -> Any:
    out = apply_rules(
        UpstreamKind.OPENAI,
        Api.CHAT,
        body or {"model": "gpt-5-mini", "messages": [{"role": "user", "content": "hi"}]},
        secret=b"s" * 32,
        tenant=tenant,
        session=session,
        previous_end=None,
        counting=WORDS,
        key_shards=shards,
    )
    return out.body.get("prompt_cache_key")


def test_the_sessions_of_one_tenant_share_a_prompt_cache_key_and_tenants_do_not() -> None:
    """OpenAI routes by the first ~256 tokens and the key: an agent's sessions, which share their system prompt,
    land where it is cached when they share a key; a key per session would make each new one prefill it."""
    assert _openai_key("acme", "s1") == _openai_key("acme", "s2") != _openai_key("globex", "s1")
    assert _openai_key("acme", "s1").startswith("cp-")
    mine = {"model": "m", "messages": [], "prompt_cache_key": "mine"}
    assert _openai_key("acme", "s1", body=mine) == "mine"  # the client's own key is never replaced


def test_a_busy_tenants_sessions_spread_over_its_shards_and_each_keeps_one() -> None:
    keys = {s: _openai_key("acme", s, shards=4) for s in (f"session-{i}" for i in range(40))}
    assert len(set(keys.values())) == 4  # every shard used
    assert all(_openai_key("acme", s, shards=4) == k for s, k in keys.items())  # a session keeps its shard
    assert not set(keys.values()) & {_openai_key("globex", s, shards=4) for s in keys}


def test_key_shards_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="key_shards"):
        _openai_key("acme", "s1", shards=0)
