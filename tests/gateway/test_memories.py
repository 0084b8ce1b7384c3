"""mem0 memories through the gateway: placed before the newest user message, replayed with their turn, pointers
for memories sent before, scoped by tenant, added to mem0 after the answer, fail open.

The store is real mem0 (the embedded default: local Qdrant + the bundled MiniLM); the upstream of the
end-to-end tests is a loopback server that answers a fixed chat completion and records what the gateway
forwarded (what these tests check); tests/gateway/test_memories_llama.py measures a real llama-server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cp_memory.core.chat_memories import MEMORIES_HEAD, ChatShape, place_memories, query_text
from cp_memory.core.prompt import PromptContract, rendered_context
from cp_memory.gateway import GatewayConfig, UpstreamKind
from cp_memory.gateway.flow import Gateway
from cp_memory.gateway.memories import Memories, MemoryQuery, answer_text, user_of
from cp_memory.gateway.protocols import Api
from tests.loopback import FakeEngine, FakeRequest, loopback_engine

from .conftest import Running, running_gateway

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
ANSWER = {
    "id": "c1",
    "object": "chat.completion",
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Noted."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
}


def _answer(_: FakeRequest) -> tuple[int, dict[str, str], bytes]:
    return 200, {"content-type": "application/json"}, json.dumps(ANSWER).encode()


# ---------------------------------------------------------------------------------------------- I/O-free


def test_the_user_comes_from_the_header_then_the_body() -> None:
    body = {"user": "bob", "metadata": {"user_id": "carol"}}
    assert user_of(Api.CHAT, {"x-cp-user": "alice"}, body) == "alice"
    assert user_of(Api.CHAT, {}, body) == "bob"
    assert user_of(Api.MESSAGES, {}, body) == "carol"
    claude = {"metadata": {"user_id": json.dumps({"device_id": "d", "session_id": "s"})}}
    assert user_of(Api.MESSAGES, {}, claude) is None  # Claude Code's metadata names a session, not a person
    assert user_of(Api.MESSAGES, {}, {"metadata": {"user_id": "user_abc_account__session_42"}}) is None
    assert user_of(Api.CHAT, {}, {}) is None


def test_memories_go_before_the_newest_user_text_and_nothing_else_moves() -> None:
    history = [SYSTEM, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    new = {"role": "user", "content": "Where do I live?"}
    placed = place_memories(ChatShape.OPENAI, [*history, new], "M\n\n")
    assert placed is not None and placed.messages[:3] == history and placed.index == 3
    assert placed.messages[3]["content"] == "M\n\nWhere do I live?"
    blocks = [{"type": "text", "text": "Where?"}]
    assert place_memories(ChatShape.ANTHROPIC, [{"role": "user", "content": blocks}], "M").messages[0][  # type: ignore[union-attr]
        "content"
    ] == [{"type": "text", "text": "M"}, *blocks]
    tool_turn = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]
    assert place_memories(ChatShape.ANTHROPIC, tool_turn, "M") is None  # tool results must come first
    assert place_memories(ChatShape.OPENAI, [*history], "M") is None  # the newest message is not the user's
    assert query_text([*history, new], 2) == "Hi\nWhere do I live?"


def _contract(*facts: str) -> PromptContract:
    return PromptContract(rendered_context(list(facts)))


def test_the_next_turn_replays_the_memories_its_history_was_sent_with() -> None:
    """Turn 2's client history carries no memories (the client never saw them); the gateway sends turn 1 as it
    sent it, so every byte the upstream cached for turn 1 is turn 2's prefix."""
    gateway = Gateway(GatewayConfig(upstream="http://127.0.0.1:9"), UpstreamKind.LLAMACPP)
    headers = {"authorization": "Bearer k", "x-cp-user": "alice", "x-cp-session": "s1"}
    turn1 = {"model": "m", "messages": [SYSTEM, {"role": "user", "content": "Where do I live?"}]}
    query = MemoryQuery("Where do I live?", "t:alice", "s1:0")
    found = Memories(query, None, _contract("Alice lives in Lisbon"))
    plan1 = gateway.plan(Api.CHAT, headers, json.dumps(turn1).encode(), found)
    sent1 = json.loads(plan1.content)["messages"]
    assert sent1[1]["content"] == MEMORIES_HEAD + "[Doc 1] Alice lives in Lisbon\n\nWhere do I live?"
    gateway.commit(plan1)
    turn2 = dict(turn1, messages=[*turn1["messages"], {"role": "assistant", "content": "Lisbon."}])
    turn2["messages"].append({"role": "user", "content": "And my job?"})
    found2 = Memories(query, None, _contract("Alice is a nurse"))
    sent2 = json.loads(gateway.plan(Api.CHAT, headers, json.dumps(turn2).encode(), found2).content)["messages"]
    assert sent2[:2] == sent1  # byte-stable prefix, memories of turn 1 included
    assert sent2[3]["content"].startswith(MEMORIES_HEAD + "[Doc 1] Alice is a nurse")
    assert sent2[3]["content"].endswith("\n\nAnd my job?")
    gateway.commit(gateway.plan(Api.CHAT, headers, json.dumps(turn2).encode(), found2))
    turn3 = dict(turn2, messages=[*turn2["messages"], {"role": "assistant", "content": "A nurse."}])
    turn3["messages"].append({"role": "user", "content": "Thanks!"})
    sent3 = json.loads(gateway.plan(Api.CHAT, headers, json.dumps(turn3).encode(), None).content)["messages"]
    assert sent3[:4] == sent2  # both earlier turns' memories replayed, turn after turn


def test_answer_text_of_every_shape() -> None:
    assert answer_text(Api.CHAT, json.dumps(ANSWER).encode(), False) == "Noted."
    stream = b'data: {"choices":[{"delta":{"content":"No"}}]}\n\ndata: {"choices":[{"delta":{"content":"ted."}}]}\n\n'
    assert answer_text(Api.CHAT, stream + b"data: [DONE]\n\n", True) == "Noted."
    anthropic = {"content": [{"type": "text", "text": "Noted."}]}
    assert answer_text(Api.MESSAGES, json.dumps(anthropic).encode(), False) == "Noted."
    sse = b'data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"Hi"}}\n\n'
    assert answer_text(Api.MESSAGES, sse, True) == "Hi"
    assert answer_text(Api.CHAT, b"not json", False) == ""


# ---------------------------------------------------------------------------------------------- real mem0


@pytest.fixture(scope="module")
def store() -> Iterator[Any]:
    from tests.mem0_fixtures import chat_memory

    with chat_memory() as memory:  # as the gateway and the drop-in open it
        yield memory


@pytest.fixture()
def upstream() -> Iterator[FakeEngine]:
    with loopback_engine(_answer) as engine:
        yield engine


@pytest.fixture()
def gateway(store: Any, upstream: FakeEngine) -> Iterator[Running]:
    with running_gateway(
        upstream.url, "llamacpp", memory=store, mem0="embedded", secret="test-secret-0123456789"
    ) as running:
        yield running


def _scoped(running: Running, key: str, user: str) -> str:
    return f"{running.gateway.identify(Api.CHAT, {'authorization': f'Bearer {key}'}, {}).tenant}:{user}"


def _chat(running: Running, key: str, messages: list[Any], user: str = "alice", session: str = "s") -> Any:
    headers = {"authorization": f"Bearer {key}", "x-cp-session": session}
    body = {"model": "m", "messages": messages, "user": user}
    answer = httpx.post(running.url + "/v1/chat/completions", json=body, headers=headers, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_chat_gets_its_users_memories_and_pointers_for_those_sent_before(
    store: Any, gateway: Running, upstream: FakeEngine
) -> None:
    user = _scoped(gateway, "key-a", "alice")
    for fact in ("Alice lives in Lisbon", "Alice works as a nurse", "Alice has a dog named Rex"):
        store.add(fact, user_id=user, infer=False)
    messages: list[Any] = [SYSTEM, {"role": "user", "content": "Where does Alice live?"}]
    _chat(gateway, "key-a", messages, session="chat-1")
    first = upstream.requests[-1].body["messages"]
    assert first[0] == SYSTEM and first[1]["content"].startswith(MEMORIES_HEAD + "1 ")
    assert "Alice lives in Lisbon" in first[1]["content"]
    assert first[1]["content"].endswith("\n\nWhere does Alice live?")
    messages += [{"role": "assistant", "content": "Noted."}, {"role": "user", "content": "Where does Alice live now?"}]
    _chat(gateway, "key-a", messages, session="chat-1")
    second = upstream.requests[-1].body["messages"]
    assert second[:2] == first  # turn 1 as sent: the cached prefix holds
    assert "shown before: turn 1 items" in second[3]["content"]  # pointers into turn 1, which the history shows
    assert "Alice lives in Lisbon" not in second[3]["content"]  # not sent twice
    assert second[3]["content"].endswith("\n\nWhere does Alice live now?")
    mem0 = gateway.app.state.mem0
    assert mem0.writer.join(120)
    stored = [m["memory"] for m in store.get_all(filters={"user_id": user})["results"]]
    assert "Where does Alice live?" in stored and "Noted." in stored  # the turn, added after the answer


def test_two_tenants_with_the_same_user_and_opening_never_see_each_others_memories(
    store: Any, gateway: Running, upstream: FakeEngine
) -> None:
    store.add("Tenant A's Alice keeps the vault code 4711", user_id=_scoped(gateway, "tenant-a", "alice"), infer=False)
    messages = [SYSTEM, {"role": "user", "content": "What is the vault code?"}]
    _chat(gateway, "tenant-a", messages, session="same")
    assert "4711" in json.dumps(upstream.requests[-1].body)
    _chat(gateway, "tenant-b", messages, session="same")
    forwarded_b = json.dumps(upstream.requests[-1].body)
    assert "4711" not in forwarded_b and "vault code 4711" not in forwarded_b
    assert upstream.requests[-1].body["messages"] == messages  # B has no memories: its own bytes


def test_a_failing_store_forwards_the_request_without_memories(upstream: FakeEngine) -> None:
    class Broken:
        def search(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("mem0 is down")

        def add(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("mem0 is down")

    with running_gateway(upstream.url, "llamacpp", memory=Broken(), mem0="embedded") as running:
        messages = [SYSTEM, {"role": "user", "content": "Hello"}]
        assert _chat(running, "k", messages)["choices"][0]["message"]["content"] == "Noted."
        assert upstream.requests[-1].body["messages"] == messages
        assert running.app.state.mem0.failures == 1
        assert running.app.state.mem0.writer.join(30)  # the add failed in the background, logged


def test_the_mem0_options_are_checked() -> None:
    with pytest.raises(ValueError, match="mem0_config"):
        GatewayConfig(upstream="http://127.0.0.1:9", mem0="config")
    with pytest.raises(ValueError, match="set mem0='config'"):
        GatewayConfig(upstream="http://127.0.0.1:9", mem0_config={"vector_store": {}})
    assert GatewayConfig(upstream="http://127.0.0.1:9").mem0.value == "off"


def test_with_a_shared_store_the_memory_query_reads_the_session_off_the_event_loop(monkeypatch: Any) -> None:
    """The query reads the session's sent log: with Redis behind the store that is a round trip, which must
    not block the event loop (as planning does not)."""
    import asyncio
    import threading

    from cp_memory.gateway.app import _App

    app = _App(GatewayConfig(upstream="http://127.0.0.1:9", mem0="embedded"), UpstreamKind.LLAMACPP, memory=object())
    threads: list[threading.Thread] = []
    monkeypatch.setattr(type(app.gateway.store), "remote", True, raising=False)
    monkeypatch.setattr(app.gateway, "memory_query", lambda *a: threads.append(threading.current_thread()))
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "user": "alice"}).encode()
    assert asyncio.run(app._memories(Api.CHAT, {}, body))[1] is None
    assert threads and threads[0] is not threading.main_thread()


def test_the_query_and_the_plan_read_the_request_once(monkeypatch: Any) -> None:
    """The body is parsed, the request identified and the session's sent log read once (:meth:`Gateway.read`,
    the query); the plan given that reading forwards the same bytes as a plan that reads them itself."""
    import cp_memory.gateway.flow as flow

    gateway = Gateway(GatewayConfig(upstream="http://127.0.0.1:9"), UpstreamKind.LLAMACPP)
    headers = {"authorization": "Bearer k", "x-cp-user": "alice", "x-cp-session": "s1"}
    raw = json.dumps({"model": "m", "messages": [SYSTEM, {"role": "user", "content": "Where do I live?"}]}).encode()
    alone = gateway.plan(Api.CHAT, headers, raw).content
    parsed: list[bytes] = []
    real = flow.decode
    monkeypatch.setattr(flow, "decode", lambda data: parsed.append(data) or real(data))
    incoming = gateway.read(Api.CHAT, headers, raw)
    assert incoming.identity is not None
    state = gateway.store.session(incoming.identity.tenant, incoming.identity.session)
    reads: list[Any] = []

    class CountedLogs(dict):  # type: ignore[type-arg]
        def get(self, key, default=None):  # type: ignore[no-untyped-def]
            reads.append(key)
            return super().get(key, default)

    state.logs = CountedLogs(state.logs)
    query = gateway.memory_query(Api.CHAT, headers, raw, incoming)
    assert query is not None and query.user_id.endswith(":alice")
    found = Memories(query, None, _contract("Alice lives in Lisbon"))
    plan = gateway.plan(Api.CHAT, headers, raw, found, incoming)
    assert parsed == [raw] and reads == [Api.CHAT]  # once, for both: the body and the session's sent log
    assert plan.identity == incoming.identity and b"Alice lives in Lisbon" in plan.content
    assert gateway.plan(Api.CHAT, headers, raw, None, incoming).content == alone


def test_a_session_whose_history_the_gateway_does_not_know_starts_a_dedup_epoch_no_earlier_one_shares() -> None:
    """The epoch is the session's and a fresh token each time it starts: the same session after its state
    expired (here: a gateway that never saw it) or after an edited history never reuses an earlier epoch's
    dedup conversation, whose turns the history may not show."""
    config = GatewayConfig(upstream="http://127.0.0.1:9", secret="one secret for both gateways")
    gateway = Gateway(config, UpstreamKind.LLAMACPP)
    headers = {"authorization": "Bearer k", "x-cp-user": "alice", "x-cp-session": "s1"}
    turn1 = {"model": "m", "messages": [SYSTEM, {"role": "user", "content": "Where do I live?"}]}
    raw1 = json.dumps(turn1).encode()
    first = gateway.memory_query(Api.CHAT, headers, raw1)
    assert first is not None and first.conversation_id is not None
    gateway.commit(gateway.plan(Api.CHAT, headers, raw1))
    turn2 = dict(turn1, messages=[*turn1["messages"], {"role": "assistant", "content": "Lisbon."}])
    turn2["messages"].append({"role": "user", "content": "And my job?"})
    raw2 = json.dumps(turn2).encode()
    extends = gateway.memory_query(Api.CHAT, headers, raw2)
    assert extends is not None and extends.conversation_id == first.conversation_id  # the same conversation
    expired = Gateway(config, UpstreamKind.LLAMACPP).memory_query(Api.CHAT, headers, raw2)
    assert expired is not None and expired.conversation_id not in (None, first.conversation_id)
    edited = dict(turn1, messages=[SYSTEM, {"role": "user", "content": "Start over."}])
    again = gateway.memory_query(Api.CHAT, headers, json.dumps(edited).encode())
    assert again is not None and again.conversation_id not in (None, first.conversation_id, expired.conversation_id)
