"""The official ``openai`` and ``anthropic`` SDKs through the gateway, in front of the local provider rules
server (``benchmarks.hosted.server.ProviderServer``: the documented cache rules, **modelled**, not the real
APIs), streamed and not, with tools. The SDKs' own request building, streaming and usage types are the real
ones; the cache counts are the model's.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from cp_memory.gateway.protocols import Api
from cp_memory.providers.marks import count_marks

from .conftest import running_gateway
from .recordings import SYSTEM, TOOL, anthropic_session

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

TOOLS_OPENAI = [{"type": "function", "function": TOOL}]
TOOLS_ANTHROPIC = [{"name": TOOL["name"], "description": TOOL["description"], "input_schema": TOOL["parameters"]}]
LONG_SYSTEM = SYSTEM * 8  # ~1,800 tokens: above the 1,024-token minimum of the modelled models


def test_anthropic_sdk_streamed_and_not_with_tools(provider_server: Any) -> None:
    """Claude Code's kind of traffic: a client that marks only its system prompt. The gateway adds the moving
    breakpoint, so turn 2 reads turn 1's whole prompt from the (modelled) cache."""
    with running_gateway(provider_server.url, "anthropic") as gw:
        client = anthropic.Anthropic(base_url=gw.url, api_key="sk-ant-tenant-a", max_retries=0)
        system = [{"type": "text", "text": LONG_SYSTEM}]
        history: list[dict[str, Any]] = [{"role": "user", "content": "Read notes.md please."}]
        first = client.messages.create(
            model="claude-sonnet-4-5", max_tokens=32, system=system, tools=TOOLS_ANTHROPIC, messages=history
        )
        assert first.usage.cache_creation_input_tokens > 1000  # the gateway's mark wrote the prefix
        history += [
            {"role": "assistant", "content": [{"type": "text", "text": first.content[0].text}]},
            {"role": "user", "content": "And plan.md?"},
        ]
        with client.messages.stream(
            model="claude-sonnet-4-5", max_tokens=32, system=system, tools=TOOLS_ANTHROPIC, messages=history
        ) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        assert text and final.usage.cache_read_input_tokens >= first.usage.cache_creation_input_tokens
        savings = httpx.get(gw.url + "/cp/savings", headers={"x-api-key": "sk-ant-tenant-a"}).json()
        totals = savings["totals"]
        assert totals["calls"] == 2 and totals["cache_read_tokens"] == final.usage.cache_read_input_tokens
        # passthrough: the client marked nothing, so Anthropic would have cached nothing: all reads are the gateway's
        assert totals["cached_by_gateway_tokens"] == totals["cache_read_tokens"]


def test_openai_sdk_streamed_and_not_with_tools(provider_server: Any) -> None:
    with running_gateway(provider_server.url, "openai") as gw:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-openai-tenant", max_retries=0)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": LONG_SYSTEM},
            {"role": "user", "content": "Read notes.md"},
        ]
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-5-mini", messages=messages, tools=TOOLS_OPENAI
        )
        first = raw.parse()
        assert raw.headers["x-cp-input-tokens"] == str(first.usage.prompt_tokens)
        messages += [
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "More"},
        ]
        stream = client.chat.completions.create(
            model="gpt-5-mini",
            messages=messages,
            tools=TOOLS_OPENAI,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        usage = chunks[-1].usage
        assert usage is not None and usage.prompt_tokens_details.cached_tokens >= 1024
        totals = httpx.get(gw.url + "/cp/savings", headers={"authorization": "Bearer sk-openai-tenant"}).json()[
            "totals"
        ]
        assert totals["calls"] == 2 and totals["cache_read_tokens"] == usage.prompt_tokens_details.cached_tokens


def _spy(provider_server: Any, endpoint: str) -> list[dict[str, Any]]:
    """Every body the modelled provider's ``endpoint`` (``chat`` or ``messages``) receives, in order."""
    seen: list[dict[str, Any]] = []
    original = getattr(provider_server, endpoint)

    def spy(body: dict[str, Any], run: str) -> Any:
        seen.append(body)
        return original(body, run)

    setattr(provider_server, endpoint, spy)
    return seen


def test_openai_gets_a_prompt_cache_key_per_tenant_never_a_retention(provider_server: Any) -> None:
    seen = _spy(provider_server, "chat")
    with running_gateway(provider_server.url, "openai") as gw:
        for key in ("sk-one", "sk-two", "sk-one"):
            client = openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0)
            client.chat.completions.create(model="gpt-5-mini", messages=[{"role": "user", "content": "hi"}])
        client.chat.completions.create(
            model="gpt-5-mini", messages=[{"role": "user", "content": "hi"}], extra_body={"prompt_cache_key": "mine"}
        )
    keys = [b.get("prompt_cache_key") for b in seen]
    assert keys[0] == keys[2] != keys[1] and keys[0].startswith("cp-") and keys[3] == "mine"
    assert not any("prompt_cache_retention" in b or "prompt_cache_options" in b for b in seen)


def test_a_claude_code_like_session_keeps_every_mark_within_four(provider_server: Any) -> None:
    seen = _spy(provider_server, "messages")
    bodies = anthropic_session(rerender=True)
    with running_gateway(provider_server.url, "anthropic") as gw:
        reads = []
        for body in bodies:
            answer = httpx.post(gw.url + "/v1/messages?beta=true", json=body, headers={"x-api-key": "sk-cc"})
            assert answer.status_code == 200, answer.text
            usage = answer.json()["usage"]
            reads.append((usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]))
    assert all(count_marks(b) <= 4 for b in seen)
    first_write = next(i for i, (_, written) in enumerate(reads) if written)  # the prompt reached the 1,024 minimum
    assert all(read > 0 for read, _ in reads[first_write + 1 :])  # then every request reads what the last wrote


def test_a_request_with_five_marks_is_forwarded_unchanged(provider_server: Any) -> None:
    """More than 4 marks: the client's own bytes go out (the API answers such a request itself)."""
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 8,
        "system": [{"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}} for i in range(5)],
        "messages": [{"role": "user", "content": "hi"}],
    }
    raw = json.dumps(body, indent=1).encode()
    with running_gateway(provider_server.url, "anthropic") as gw:
        assert gw.gateway.plan(Api.MESSAGES, {}, raw).content == raw
        answer = httpx.post(gw.url + "/v1/messages", content=raw, headers={"content-type": "application/json"})
    # the modelled server, like the API, refuses it: its status and body reach the client
    assert answer.status_code == 400 and "invalid_request_error" in answer.text
