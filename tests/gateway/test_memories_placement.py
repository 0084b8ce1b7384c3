"""Where the gateway puts mem0 memories depends on whether the upstream will cache the request.

A self-hosted engine caches any prefix: the memories are replayed with their turn (``cached``), so the cached
prefix grows with them. A hosted provider caches nothing below its documented minimum (OpenAI 1,024 tokens;
Anthropic per model): there the memories go into the newest message only, mem0's own pattern (``fresh``),
and the next request carries the client's copy without them — a shorter prompt, and no cached byte is
rewritten because none was cached. The first request that reaches the minimum switches the session to
``cached`` for good, with a clean dedup epoch (no pointer to memories its history does not show).

The I/O-free tests drive :class:`~cp_memory.gateway.flow.Gateway` with fixed contracts; the end-to-end
tests run real mem0 (the embedded default) and the local server that applies the providers' documented
cache rules (:class:`benchmarks.hosted.server.ProviderServer`, **modelled**).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cp_memory.core.chat_memories import MEMORIES_HEAD
from cp_memory.core.prompt import PromptContract, rendered_context
from cp_memory.gateway import GatewayConfig, UpstreamKind
from cp_memory.gateway.flow import Gateway, Plan
from cp_memory.gateway.memories import Memories, MemoryQuery, PlacementMode, cache_minimum, request_tokens
from cp_memory.gateway.protocols import Api
from cp_memory.providers.rules import OPENAI_MIN_TOKENS
from cp_memory.providers.tokens import default_counting

from .conftest import Running, running_gateway

HEADERS = {"authorization": "Bearer k", "x-cp-user": "alice", "x-cp-session": "s1"}
SYSTEM = {"role": "system", "content": "You answer from the memories you are given. " + "Be brief. " * 150}
ANSWER = "Lisbon is where she lives, " * 50  # ~300 tokens: the third request crosses 1,024


def _found(*facts: str) -> Memories:
    return Memories(MemoryQuery("q", "t:alice", "s1:0"), None, PromptContract(rendered_context(list(facts))))


def _turn(gateway: Gateway, messages: list[Any], *facts: str, api: Api = Api.CHAT, **extra: Any) -> Plan:
    body = {"model": "gpt-5", "messages": messages, **extra}
    plan = gateway.plan(api, HEADERS, json.dumps(body).encode(), _found(*facts))
    gateway.commit(plan)  # the upstream answered 2xx
    return plan


def _sent(plan: Plan) -> list[Any]:
    return list(json.loads(plan.content)["messages"])


def test_the_minimum_comes_from_the_provider_rules() -> None:
    assert cache_minimum(UpstreamKind.OPENAI, Api.CHAT, {}) == OPENAI_MIN_TOKENS == 1024
    assert cache_minimum(UpstreamKind.ANTHROPIC, Api.MESSAGES, {"model": "claude-sonnet-4-5"}) == 1024
    assert cache_minimum(UpstreamKind.ANTHROPIC, Api.MESSAGES, {"model": "claude-haiku-4-5"}) == 4096
    assert cache_minimum(UpstreamKind.ANTHROPIC, Api.MESSAGES, {"model": "claude-next"}) == 4096  # unknown: largest
    for engine in (UpstreamKind.VLLM, UpstreamKind.LLAMACPP, UpstreamKind.SGLANG, UpstreamKind.COMPATIBLE):
        assert cache_minimum(engine, Api.CHAT, {}) is None  # any prefix is cached there


def test_below_openais_minimum_memories_go_in_the_newest_message_only_then_switch_once_and_stay() -> None:
    """Requests 1 and 2 are below 1,024 tokens: nothing is cached, so request 2 carries the client's copy of
    turn 1 (no memories: a shorter prompt). Request 3 reaches the minimum: its memories are kept (cached), and
    from then on every request starts with every byte the previous one sent."""
    gateway = Gateway(GatewayConfig(upstream="http://127.0.0.1:9"), UpstreamKind.OPENAI)
    counting = default_counting()
    history: list[Any] = [SYSTEM, {"role": "user", "content": "Where do I live?"}]
    one = _turn(gateway, history, "Alice lives in Lisbon")
    assert one.placement is PlacementMode.FRESH and one.memories is not None
    assert _sent(one)[1]["content"].startswith(MEMORIES_HEAD) and _sent(one)[1]["content"].endswith("Where do I live?")
    assert request_tokens(Api.CHAT, json.loads(one.content), counting) < OPENAI_MIN_TOKENS

    history += [{"role": "assistant", "content": ANSWER}, {"role": "user", "content": "And my job?"}]
    two = _turn(gateway, history, "Alice is a nurse")
    assert two.placement is PlacementMode.FRESH
    assert _sent(two)[:3] == history[:3]  # turn 1 as the client holds it: its memories are not replayed
    assert _sent(two)[3]["content"].startswith(MEMORIES_HEAD + "[Doc 1] Alice is a nurse")

    history += [{"role": "assistant", "content": ANSWER}, {"role": "user", "content": "My dog?"}]
    three = _turn(gateway, history, "Alice has a dog named Rex")
    assert three.placement is PlacementMode.CACHED  # the first request that reaches 1,024 tokens
    assert request_tokens(Api.CHAT, json.loads(three.content), counting) >= OPENAI_MIN_TOKENS
    assert _sent(three)[:5] == history[:5]  # a clean start: no earlier memories in its history

    history += [{"role": "assistant", "content": "Rex."}, {"role": "user", "content": "Thanks"}]
    four = _turn(gateway, history, "Alice likes tea")
    assert four.placement is PlacementMode.CACHED
    assert _sent(four)[:6] == _sent(three)  # byte-stable from the switch on, turn 3's memories included
    history += [{"role": "assistant", "content": "Tea."}, {"role": "user", "content": "Bye"}]
    five = _turn(gateway, history, "Alice likes tea")
    assert five.placement is PlacementMode.CACHED and _sent(five)[:8] == _sent(four)  # stays switched


def test_anthropic_uses_the_models_own_minimum_and_adds_no_mark_while_fresh() -> None:
    gateway = Gateway(GatewayConfig(upstream="http://127.0.0.1:9"), UpstreamKind.ANTHROPIC)
    system = SYSTEM["content"]
    history: list[Any] = [{"role": "user", "content": "Where do I live?"}]
    for model, expected in (("claude-sonnet-4-5", PlacementMode.FRESH), ("claude-haiku-4-5", PlacementMode.FRESH)):
        plan = _turn(gateway, history, "Alice lives in Lisbon", api=Api.MESSAGES, system=system, model=model)
        assert plan.placement is expected and plan.marks == ()  # below the minimum: no breakpoint either
    long_system = system + "Be kind. " * 600  # ~1,900 tokens: sonnet-4-5 caches it, haiku-4-5 (4,096) not
    headers = dict(HEADERS, **{"x-cp-session": "s2"})
    body = {"model": "claude-sonnet-4-5", "system": long_system, "messages": history, "max_tokens": 8}
    plan = gateway.plan(Api.MESSAGES, headers, json.dumps(body).encode(), _found("Alice lives in Lisbon"))
    assert plan.placement is PlacementMode.CACHED and plan.marks == ("turn",)
    body = dict(body, model="claude-haiku-4-5")
    headers = dict(HEADERS, **{"x-cp-session": "s3"})
    plan = gateway.plan(Api.MESSAGES, headers, json.dumps(body).encode(), _found("Alice lives in Lisbon"))
    assert plan.placement is PlacementMode.FRESH and plan.marks == ()


def test_an_engine_keeps_the_cache_stable_placement_for_the_shortest_request() -> None:
    gateway = Gateway(GatewayConfig(upstream="http://127.0.0.1:9"), UpstreamKind.VLLM)
    history: list[Any] = [{"role": "user", "content": "Hi"}]
    one = _turn(gateway, history, "Alice lives in Lisbon")
    assert one.placement is PlacementMode.CACHED
    history += [{"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}]
    assert _sent(_turn(gateway, history, "Alice is a nurse"))[:1] == _sent(one)  # replayed with its memories


def test_a_fresh_request_that_failed_does_not_switch_its_session() -> None:
    gateway = Gateway(GatewayConfig(upstream="http://127.0.0.1:9"), UpstreamKind.OPENAI)
    long_system = {"role": "system", "content": "Be brief. " * 1200}
    body = {"model": "gpt-5", "messages": [long_system, {"role": "user", "content": "Hi"}]}
    plan = gateway.plan(Api.CHAT, HEADERS, json.dumps(body).encode(), _found("Alice lives in Lisbon"))
    assert plan.placement is PlacementMode.CACHED  # not committed: the upstream failed
    short = {"model": "gpt-5", "messages": [{"role": "user", "content": "Hi"}]}
    again = gateway.plan(Api.CHAT, HEADERS, json.dumps(short).encode(), _found("Alice lives in Lisbon"))
    assert again.placement is PlacementMode.FRESH


# ---------------------------------------------------------------------------------------------- real mem0, modelled


@pytest.fixture(scope="module")
def store() -> Iterator[Any]:
    from tests.mem0_fixtures import chat_memory

    with chat_memory() as memory:
        yield memory


@pytest.fixture()
def provider() -> Iterator[Any]:
    from benchmarks.hosted.server import ProviderServer

    class Recording(ProviderServer):
        """The modelled server, keeping every chat body it was sent."""

        def __init__(self) -> None:
            super().__init__()
            self.bodies: list[dict[str, Any]] = []

        def chat(self, body: dict[str, Any], run: str) -> Any:
            self.bodies.append(body)
            return super().chat(body, run)

    server = Recording()
    with server:
        yield server


FACTS = ("Alice lives in Lisbon", "Alice works as a nurse", "Alice has a dog named Rex", "Alice drinks green tea")


def _chat(running: Running, messages: list[Any]) -> dict[str, Any]:
    headers = {"authorization": "Bearer key-p", "x-cp-session": "chat-p", "x-bench-run": "p"}
    body = {"model": "gpt-5", "messages": messages, "user": "alice"}
    answer = httpx.post(running.url + "/v1/chat/completions", json=body, headers=headers, timeout=120)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_a_session_crossing_openais_minimum_on_the_modelled_rules(store: Any, provider: Any) -> None:
    """Real mem0 and the modelled OpenAI rules: while below 1,024 tokens nothing is cached and every turn shows
    its memories in full (no pointer: the history shows none); the request that reaches the minimum switches
    the session; the next one reads all of it from the cache and points at the memories it replays."""
    with running_gateway(
        provider.url, "openai", memory=store, mem0="embedded", secret="test-secret-0123456789"
    ) as running:
        tenant = running.gateway.identify(Api.CHAT, {"authorization": "Bearer key-p"}, {}).tenant
        for fact in FACTS:
            store.add(fact, user_id=f"{tenant}:alice", infer=False)
        history: list[Any] = [SYSTEM]
        usages = []
        for question in ("Where does Alice live?", "What is her job?", "Does Alice have a dog?", "And tea?"):
            history.append({"role": "user", "content": question})
            usages.append(_chat(running, history)["usage"])
            history.append({"role": "assistant", "content": ANSWER})
        sent = [b["messages"] for b in provider.bodies]
        metrics = httpx.get(running.url + "/metrics", timeout=30).text
    cached = [u["prompt_tokens_details"]["cached_tokens"] for u in usages]
    assert cached[:3] == [0, 0, 0]  # below the minimum (turns 1-2), then the switch request writes
    assert all("turn " not in m["content"] for s in sent[:3] for m in s[1:] if m["role"] == "user")  # no pointer
    assert "Alice lives in Lisbon" in sent[2][-1]["content"]  # the switch request shows its memories in full
    assert "turn 1" in sent[3][-1]["content"]  # the next points at them: its history shows them
    assert sent[1][:3] == history[:3] and sent[3][: len(sent[2])] == sent[2]  # fresh, then byte-stable
    assert cached[3] >= OPENAI_MIN_TOKENS and cached[3] > usages[2]["prompt_tokens"] - 128  # all of turn 3
    assert 'cp_gateway_mem0_placements_total{placement="fresh"} 2.0' in metrics
    assert 'cp_gateway_mem0_placements_total{placement="cached"} 2.0' in metrics


def test_a_session_crossing_anthropics_minimum_on_the_modelled_rules(store: Any, provider: Any) -> None:
    """The same on the modelled Anthropic rules (claude-sonnet-4-5, 1,024 tokens): no breakpoint and no write
    while below it; the switch request is written, and the next one reads all of it back."""
    headers = {"authorization": "Bearer key-q", "x-cp-session": "chat-q", "x-bench-run": "q"}
    with running_gateway(
        provider.url, "anthropic", memory=store, mem0="embedded", secret="test-secret-0123456789"
    ) as gw:
        tenant = gw.gateway.identify(Api.MESSAGES, {"authorization": "Bearer key-q"}, {}).tenant
        for fact in FACTS:
            store.add(fact, user_id=f"{tenant}:alice", infer=False)
        messages: list[Any] = []
        usages = []
        for question in ("Where does Alice live?", "What is her job?", "Does Alice have a dog?", "And tea?"):
            messages.append({"role": "user", "content": question})
            body = {"model": "claude-sonnet-4-5", "system": SYSTEM["content"], "messages": messages, "max_tokens": 8}
            body["metadata"] = {"user_id": "alice"}
            answer = httpx.post(gw.url + "/v1/messages", json=body, headers=headers, timeout=120)
            assert answer.status_code == 200, answer.text
            usages.append(answer.json()["usage"])
            messages.append({"role": "assistant", "content": ANSWER})
    written = [u["cache_creation_input_tokens"] for u in usages]
    read = [u["cache_read_input_tokens"] for u in usages]
    assert written[:2] == [0, 0] and read[:3] == [0, 0, 0]  # fresh below the minimum: nothing written or read
    assert written[2] > 1024  # the switch request: its breakpoint writes the whole prompt
    assert read[3] == written[2]  # the next request reads all of it back (its memories replayed)
