"""LlamaIndex SimpleChatEngine + OpenAILike against a real llama-server, with ContextPilotMem0Memory."""

from __future__ import annotations

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
    assert "Please refer to [Doc" in user_messages(sent[1].messages)[-1]
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
    assert "Please refer to" not in (again[-1].content or "")
    assert memory.get_all()[0].content == QUESTIONS[0]  # history untouched


def test_write_back_adds_the_chat_to_mem0_like_mem0memory(store: Any) -> None:
    memory = ContextPilotMem0Memory.from_memory(store, context={"user_id": "dora"}, add_kwargs={"infer": False})
    memory.put(ChatMessage(role=MessageRole.USER, content="Dora collects stamps."))
    found = store.get_all(filters={"user_id": "dora"})["results"]
    assert [r["memory"] for r in found] == ["Dora collects stamps."]
    store.delete_all(user_id="dora")
