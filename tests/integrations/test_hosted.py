"""The framework adapters: ChatAnthropic messages with breakpoints, OpenAI cache kwargs, Agents SDK settings."""

from __future__ import annotations

import pytest

from cp_memory.integrations.chat import user_content
from cp_memory.providers import Counting, PromptCacheKeys
from tests.providers.test_requests import SYSTEM, response

KEYS = PromptCacheKeys("application-secret-0001")


def test_langchain_messages_get_anthropic_breakpoints():
    lc = pytest.importorskip("langchain_core.messages")
    from cp_memory.integrations.hosted import anthropic_messages

    r = response(["fact one " * 5, "fact two " * 5], conversation="thread-1", turn=2)
    history = [lc.HumanMessage("earlier " * 200, id="h1"), lc.AIMessage("answer " * 200, id="a1")]
    messages = [lc.SystemMessage(SYSTEM), *history, lc.HumanMessage(user_content("Next?", r), id="q2")]
    out = anthropic_messages(messages, r, model="claude-sonnet-4-5")
    assert [type(m).__name__ for m in out] == ["SystemMessage", "HumanMessage", "AIMessage", "HumanMessage"]
    assert out[0].content[0]["cache_control"] == {"type": "ephemeral"}  # the stable system
    assert out[-1].content[-1]["cache_control"] == {"type": "ephemeral"}  # the moving turn breakpoint
    assert out[-1].id == "q2" and out[1].content == history[0].content  # unmarked history unchanged
    with pytest.raises(ValueError, match="layout's text"):
        anthropic_messages([lc.HumanMessage("something else")], r, model="claude-sonnet-4-5")


def test_openai_cache_kwargs_for_chatopenai_and_llamaindex():
    from cp_memory.integrations.hosted import openai_cache_kwargs

    r = response(["fact"])
    assert openai_cache_kwargs(KEYS, r, retention="24h") == {
        "prompt_cache_key": KEYS.key("user_id=alice"),
        "prompt_cache_retention": "24h",
    }
    assert openai_cache_kwargs(None, r) == {}
    assert openai_cache_kwargs(KEYS, filters={"user_id": "bob"}) == {"prompt_cache_key": KEYS.key({"user_id": "bob"})}
    with pytest.raises(ValueError):
        openai_cache_kwargs(KEYS, r, retention="7d")


def test_agents_sdk_model_settings():
    agents = pytest.importorskip("agents")
    from cp_memory.integrations.hosted import agents_model_settings

    s = agents_model_settings(KEYS, response(["fact"]), retention="24h", base=agents.ModelSettings(temperature=0.2))
    assert s.prompt_cache_retention == "24h" and s.temperature == 0.2
    assert s.extra_args == {"prompt_cache_key": KEYS.key("user_id=alice")}


def test_counting_is_used_only_for_minimums():
    assert Counting("x", len).reaches(10, 10)
