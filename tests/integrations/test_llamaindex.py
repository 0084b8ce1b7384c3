"""LlamaIndex SimpleChatEngine + OpenAILike against a real llama-server, with ContextPilotMem0Memory."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integrations.conftest import require_extra

require_extra("llama_index.memory.mem0", "llamaindex")
require_extra("llama_index.llms.openai_like", "llamaindex")

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.llms.openai_like import OpenAILike
from llama_index.memory.mem0 import Mem0Memory

from cp_memory.integrations.llamaindex import ContextPilotMem0Memory
from tests.integrations.conftest import SYSTEM, assert_no_foreign_memory, user_messages
from tests.loopback import FakeEngine, FakeRequest, loopback_engine

QUESTIONS = ["Where does Alice live?", "Where does Alice live and what is her job?", "Does Alice have a pet?"]


def _llm(server: Any, probe: Any) -> OpenAILike:
    return OpenAILike(
        api_base=f"{server.base_url}/v1",
        api_key="none",
        model="random",
        is_chat_model=True,
        max_tokens=4,
        temperature=0,
        http_client=probe.client(),
    )


def _chat(engine: SimpleChatEngine, questions: list[str]) -> None:
    for q in questions:
        "".join(engine.stream_chat(q).response_gen)


def test_is_a_mem0memory_and_validates(store: Any) -> None:
    memory = ContextPilotMem0Memory.from_memory(store, context={"user_id": "alice"}, write_back=False)
    assert isinstance(memory, Mem0Memory)
    with pytest.raises(ValueError, match="layout"):
        ContextPilotMem0Memory.from_memory(store, context={"user_id": "alice"}, layout="middle")
    with pytest.raises(TypeError, match="client"):
        ContextPilotMem0Memory(context={"user_id": "alice"})


def test_chat_engine_gets_memories_late_and_an_append_only_history(store: Any, server: Any, probe: Any) -> None:
    memory = ContextPilotMem0Memory.from_memory(store, context={"user_id": "alice"}, top_k=3, write_back=False)
    engine = SimpleChatEngine.from_defaults(llm=_llm(server, probe), memory=memory, system_prompt=SYSTEM)
    _chat(engine, QUESTIONS)
    sent = probe.exchanges
    assert len(sent) == 3
    for i, ex in enumerate(sent):
        assert ex.messages[0] == {"role": "system", "content": SYSTEM}  # no memories in it
        assert [m["role"] for m in ex.messages].count("system") == 1
        assert_no_foreign_memory(ex.messages)
        assert user_messages(ex.messages)[-1].startswith("Context:\n")
        assert user_messages(ex.messages)[-1].endswith(f"Question: {QUESTIONS[i]}")
        if i:
            assert ex.messages[: len(sent[i - 1].messages)] == sent[i - 1].messages
            assert ex.cached_tokens is not None and ex.cached_tokens >= sent[i - 1].prompt_tokens - 8
    assert "Also relevant, shown before: turn 1 item" in user_messages(sent[1].messages)[-1]
    history = [m.content for m in memory.get_all() if m.role == MessageRole.USER]
    assert history == user_messages(sent[-1].messages)  # kept as sent


def test_mem0memory_puts_memories_in_the_system_message(store: Any, server: Any, probe: Any) -> None:
    """The baseline this replaces: llama-index-memory-mem0's own Mem0Memory."""
    from llama_index.core.memory import Memory as LlamaIndexMemory

    class ReadOnly:
        def __init__(self, memory: Any) -> None:
            self.memory = memory

        def search(self, *args: Any, **kwargs: Any) -> Any:
            return self.memory.search(*args, **kwargs)

        def add(self, *args: Any, **kwargs: Any) -> None:
            return None

    baseline = Mem0Memory(
        context={"user_id": "alice"}, client=ReadOnly(store), primary_memory=LlamaIndexMemory.from_defaults()
    )
    engine = SimpleChatEngine.from_defaults(llm=_llm(server, probe), memory=baseline, system_prompt=SYSTEM)
    _chat(engine, QUESTIONS[:2])
    second = probe.last
    systems = [m["content"] for m in second.messages if m["role"] == "system"]
    assert systems[0] == SYSTEM and "Below are a set of relevant preferences" in systems[1]
    assert [m["role"] for m in second.messages][:2] == ["system", "system"]  # memories before the history
    assert second.cached_tokens is not None and second.prompt_tokens is not None
    assert second.cached_tokens < second.prompt_tokens / 2


def test_unanswered_turn_is_rolled_back(store: Any) -> None:
    memory = ContextPilotMem0Memory.from_memory(store, context={"user_id": "alice"}, top_k=3, write_back=False)
    memory.put(ChatMessage(role=MessageRole.USER, content=QUESTIONS[0]))
    first = memory.get()
    assert user_messages([{"role": m.role.value, "content": m.content} for m in first])[-1].startswith("Context:")
    # the model call failed: the engine put no answer; the user asks again
    memory.put(ChatMessage(role=MessageRole.USER, content=QUESTIONS[0]))
    again = memory.get()
    assert "shown before" not in (again[-1].content or "")
    assert memory.get_all()[0].content == QUESTIONS[0]  # history untouched


def test_write_back_adds_the_chat_to_mem0_like_mem0memory(store: Any) -> None:
    memory = ContextPilotMem0Memory.from_memory(store, context={"user_id": "dora"}, add_kwargs={"infer": False})
    memory.put(ChatMessage(role=MessageRole.USER, content="Dora collects stamps."))
    found = store.get_all(filters={"user_id": "dora"})["results"]
    assert [r["memory"] for r in found] == ["Dora collects stamps."]
    store.delete_all(user_id="dora")


def _texts(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    return [{"role": m.role.value, "content": m.content} for m in messages]


def test_a_second_get_before_the_answer_returns_the_turn_the_model_saw(store: Any) -> None:
    """Regression: each get() searched again and replaced the pending turn, so the answer committed (and the
    history kept) another turn than the prompt the model had answered."""
    memory = ContextPilotMem0Memory.from_memory(store, context={"user_id": "alice"}, top_k=3, write_back=False)
    memory.put(ChatMessage(role=MessageRole.USER, content=QUESTIONS[0]))
    sent = memory.get()[-1].content  # the prompt the model answers
    again = memory.get(input="Does Alice play the cello in an orchestra?")[-1].content  # e.g. an agent's next step
    assert again == sent, "one user message, one turn"
    memory.put(ChatMessage(role=MessageRole.ASSISTANT, content="Lisbon."))
    assert memory.get_all()[0].content == sent  # kept as the model saw it
    assert memory.get()[-2].content == sent  # and shown unchanged after the answer, with no new search
    memory.put(ChatMessage(role=MessageRole.USER, content=QUESTIONS[2]))
    second = memory.get()[-1].content or ""
    assert "Question: " + QUESTIONS[2] in second and "trimmed" not in second


def test_write_back_of_repeated_answers_keeps_dedup_on(store: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Regression: write-back stores the raw chat, so a question asked twice and its repeated answer become
    same-text memories; in the next chat one search found both copies, the copy's in-turn pointer was taken
    for a trimmed history and dedup went off for that chat."""

    def chat(questions: int) -> ContextPilotMem0Memory:
        memory = ContextPilotMem0Memory.from_memory(
            store, context={"user_id": "erin"}, top_k=4, add_kwargs={"infer": False}
        )
        for _ in range(questions):
            memory.put(ChatMessage(role=MessageRole.USER, content="Where does Erin live?"))
            memory.get()
            memory.put(ChatMessage(role=MessageRole.ASSISTANT, content="Erin lives in Porto."))
        return memory

    try:
        chat(2)  # yesterday's chat, written back to mem0
        texts = [r["memory"] for r in store.get_all(filters={"user_id": "erin"})["results"]]
        assert texts.count("Erin lives in Porto.") == 2  # the same-text memories
        caplog.set_level(logging.WARNING, logger="cp_memory")
        today = chat(1)
        assert "trimmed or restored" not in caplog.text
        sent = today.get_all()[0].content or ""
        assert sent.count("Erin lives in Porto.") == 1 and "item 1 above" in sent
        assert today._chat._conversation({"user_id": "erin"}, today.conversation_id) is not None  # dedup on
    finally:
        store.delete_all(user_id="erin")


def test_model_dump_keeps_this_classs_fields(store: Any) -> None:
    """Regression: Mem0Memory's serializer dropped layout, top_k, conversation_id, write_back, add_kwargs."""
    memory = ContextPilotMem0Memory.from_memory(
        store, context={"user_id": "alice"}, layout="late", top_k=4, conversation_id="c-9", add_kwargs={"infer": False}
    )
    dumped = memory.model_dump()
    assert {k: dumped[k] for k in ("layout", "top_k", "conversation_id", "write_back", "add_kwargs")} == {
        "layout": "late",
        "top_k": 4,
        "conversation_id": "c-9",
        "write_back": True,
        "add_kwargs": {"infer": False},
    }
    assert dumped["context"] == {"user_id": "alice"} and dumped["search_msg_limit"] == 5  # Mem0Memory's own


# ------------------------------------------------------------------ agents (a scripted OpenAI-compatible LLM)
def _completion(message: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    return 200, {"content-type": "application/json"}, json.dumps(body).encode()


def _scripted_llm(req: FakeRequest) -> tuple[int, dict[str, str], bytes]:
    """Each run: first a call of the ``lookup`` tool, then an answer (function calling and ReAct text)."""
    messages = req.body["messages"]
    last = messages[-1]
    if "tools" in req.body:  # FunctionAgent
        if last["role"] == "tool":
            return _completion({"role": "assistant", "content": "Alice lives in Lisbon."})
        call = {"id": f"call_{len(messages)}", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        return _completion({"role": "assistant", "content": None, "tool_calls": [call]})
    if str(last.get("content", "")).startswith("Observation:"):  # ReActAgent
        return _completion({"role": "assistant", "content": "Thought: I can answer.\nAnswer: Lisbon."})
    action = "Thought: I need a tool.\nAction: lookup\nAction Input: {}"
    return _completion({"role": "assistant", "content": action})


@pytest.fixture()
def scripted() -> Iterator[FakeEngine]:
    with loopback_engine(_scripted_llm) as engine:
        yield engine


def lookup() -> str:
    """Look up today's date."""
    return "Today is Monday."


@pytest.mark.parametrize("kind", ["FunctionAgent", "ReActAgent"])
async def test_agents_commit_their_turns_and_dedup_holds_on_turn_two(
    store: Any, scripted: FakeEngine, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: agents call aget before every model step and once after the answer; each call searched
    again, so the turn the model answered was rolled back, a new one planned after the answer, and dedup
    turned itself off on turn 2 ("trimmed or restored history?")."""
    from llama_index.core.agent.workflow import FunctionAgent, ReActAgent

    llm = OpenAILike(
        api_base=f"{scripted.url}/v1",
        api_key="none",
        model="scripted",
        is_chat_model=True,
        is_function_calling_model=kind == "FunctionAgent",
        max_retries=0,
    )
    cls = FunctionAgent if kind == "FunctionAgent" else ReActAgent
    agent = cls(tools=[lookup], llm=llm, system_prompt=SYSTEM, streaming=False)
    memory = ContextPilotMem0Memory.from_memory(store, context={"user_id": "alice"}, top_k=3, write_back=False)
    caplog.set_level(logging.WARNING, logger="cp_memory")
    for q in QUESTIONS[:2]:
        await agent.run(user_msg=q, memory=memory)

    calls = [r.body["messages"] for r in scripted.requests if r.path.endswith("/chat/completions")]
    assert len(calls) == 4, "two model steps per run (the tool call, the answer)"
    turns = []  # per call: the messages up to the user message of its turn
    for i, messages in enumerate(calls):
        at = max(j for j, m in enumerate(messages) if m["role"] == "user" and "Question: " in str(m["content"]))
        assert messages[at]["content"].startswith("Context:\n") and messages[at]["content"].endswith(QUESTIONS[i // 2])
        turns.append(messages[: at + 1])
    assert "trimmed or restored" not in caplog.text
    assert "Also relevant, shown before: turn 1 item" in turns[2][-1]["content"], "turn 2 points at turn 1's memories"
    assert turns[0] == turns[1] and turns[2] == turns[3], "a run's steps see one turn"
    assert turns[2][: len(turns[0])] == turns[0], "turn 1 is kept in the history as the model saw it"
    history = [m.content for m in memory.get_all() if m.role == MessageRole.USER]
    assert history == [turns[0][-1]["content"], turns[2][-1]["content"]]
