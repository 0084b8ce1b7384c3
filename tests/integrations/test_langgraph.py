"""LangGraph + LangChain's ChatOpenAI against a real llama-server: what the engine receives and reuses."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest

from tests.integrations.conftest import require_extra

require_extra("langgraph", "langgraph")
require_extra("langchain_openai", "langgraph")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from cp_memory.integrations.langgraph import (
    SENT_KEY,
    MemoryPrompt,
    cache_stable_messages,
    memory_node,
    model_messages,
)
from tests.integrations.conftest import SYSTEM, assert_no_foreign_memory, user_messages

QUESTIONS = ["Where does Alice live?", "Where does Alice live and what is her job?", "Does Alice have a pet?"]


class State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]
    mem0_user_id: str


def _llm(server: Any, probe: Any) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=f"{server.base_url}/v1",
        api_key="none",
        model="random",
        temperature=0,
        max_tokens=4,
        streaming=True,
        stream_usage=True,
        http_client=probe.client(),
    )


def _graph(node: Any) -> Any:
    graph = StateGraph(State)
    graph.add_node("chatbot", node)
    graph.add_edge(START, "chatbot")
    return graph.compile(checkpointer=InMemorySaver())


def test_cache_stable_messages_keep_memories_out_of_the_system_message() -> None:
    found = {"results": [{"id": "m1", "memory": "Alice has a cat named Miso."}]}
    history = [HumanMessage("Hi"), AIMessage("Hello!")]
    out = cache_stable_messages("Does Alice have pets?", found, system=SYSTEM, history=history)
    assert [type(m) for m in out] == [SystemMessage, HumanMessage, AIMessage, HumanMessage]
    assert out[0].content == SYSTEM and out[1:3] == history
    assert out[-1].content == "Context:\n[Doc 1] Alice has a cat named Miso.\n\nQuestion: Does Alice have pets?"
    with pytest.raises(TypeError, match="history"):
        cache_stable_messages("q", found, system=None, history=[{"role": "user", "content": "x"}])  # type: ignore[list-item]


def test_graph_sends_a_fixed_system_message_and_an_append_only_history(store: Any, server: Any, probe: Any) -> None:
    prompt = MemoryPrompt(store, system=SYSTEM, layout="append", top_k=3)
    app = _graph(memory_node(prompt, _llm(server, probe)))
    config = {"configurable": {"thread_id": "lg-append"}}
    for q in QUESTIONS:
        app.invoke({"messages": [HumanMessage(q)], "mem0_user_id": "alice"}, config)
    sent = probe.exchanges
    assert len(sent) == 3
    for i, ex in enumerate(sent):
        assert ex.messages[0] == {"role": "system", "content": SYSTEM}
        assert_no_foreign_memory(ex.messages)
        users = user_messages(ex.messages)
        assert users[-1].startswith("Context:\n") and users[-1].endswith(f"Question: {QUESTIONS[i]}")
        if i:  # the earlier prompt is a prefix of this one: history append-only, as sent
            assert ex.messages[: len(sent[i - 1].messages)] == sent[i - 1].messages
            assert ex.cached_tokens is not None and ex.cached_tokens >= sent[i - 1].prompt_tokens - 8
    assert (
        "Also relevant, shown before: turn 1 item" in user_messages(sent[1].messages)[-1]
    )  # turn 1's memories: pointers
    state = app.get_state(config).values["messages"]
    assert [m.content for m in model_messages(state) if isinstance(m, HumanMessage)] == user_messages(sent[-1].messages)


def test_the_graph_state_keeps_the_users_questions_as_typed(store: Any, server: Any, probe: Any) -> None:
    """Regression: the append layout replaced the typed question in state["messages"] (and the
    checkpointer) by "Context:\n[Doc 1] ...", so a chat UI showed memory blocks as the user's message."""
    prompt = MemoryPrompt(store, system=SYSTEM, layout="append", top_k=3)
    app = _graph(memory_node(prompt, _llm(server, probe)))
    config = {"configurable": {"thread_id": "lg-typed"}}
    for q in QUESTIONS[:2]:
        app.invoke({"messages": [HumanMessage(q)], "mem0_user_id": "alice"}, config)
    state = app.get_state(config).values["messages"]  # read back from the checkpointer
    humans = [m for m in state if isinstance(m, HumanMessage)]
    assert [m.content for m in humans] == QUESTIONS[:2]
    assert all(not m.content.startswith("Context:") for m in humans)
    assert [m.additional_kwargs[SENT_KEY] for m in humans] == user_messages(probe.last.messages)
    assert (
        "Also relevant, shown before: turn 1 item" in user_messages(probe.last.messages)[-1]
    )  # dedup still points at turn 1


def test_late_layout_keeps_the_questions_as_typed(store: Any, server: Any, probe: Any) -> None:
    prompt = MemoryPrompt(store, system=SYSTEM, layout="late", top_k=3)
    app = _graph(memory_node(prompt, _llm(server, probe)))
    config = {"configurable": {"thread_id": "lg-late"}}
    for q in QUESTIONS[:2]:
        app.invoke({"messages": [HumanMessage(q)], "mem0_user_id": "alice"}, config)
    second = probe.exchanges[-1]
    assert user_messages(second.messages)[:-1] == [QUESTIONS[0]]
    assert "shown before" not in user_messages(second.messages)[-1]
    assert second.cached_tokens is not None and second.cached_tokens > 0  # system + first question


def test_mem0_documented_pattern_reuses_far_less(store: Any, server: Any, probe: Any) -> None:
    """mem0's LangGraph guide: SystemMessage(... memories) + history, every turn (the baseline)."""
    llm = _llm(server, probe)
    history: list[BaseMessage] = []
    for q in QUESTIONS:
        memories = store.search(q, filters={"user_id": "alice"}, top_k=3)["results"]
        context = "Relevant information from previous conversations:\n" + "".join(
            f"- {m['memory']}\n" for m in memories
        )
        history.append(HumanMessage(q))
        reply = llm.invoke([SystemMessage(f"{SYSTEM}\n{context}")] + history)
        history.append(reply)
    baseline = probe.exchanges[-1]
    prompt = MemoryPrompt(store, system=SYSTEM, layout="append", top_k=3)
    app = _graph(memory_node(prompt, llm))
    for q in QUESTIONS:
        app.invoke({"messages": [HumanMessage(q)], "mem0_user_id": "alice"}, {"configurable": {"thread_id": "lg-cmp"}})
    ours = probe.exchanges[-1]
    assert baseline.cached_tokens is not None and ours.cached_tokens is not None
    # the guide's system message changes each turn: only the text before the memories is reused; here
    # everything up to this turn's user message is (this toy history is short, so compare fractions)
    assert ours.cached_tokens / ours.prompt_tokens > 2 * baseline.cached_tokens / baseline.prompt_tokens, (
        ours.cached_tokens,
        ours.prompt_tokens,
        baseline.cached_tokens,
        baseline.prompt_tokens,
    )


def test_failed_model_call_rolls_the_turn_back(store: Any, server: Any, probe: Any) -> None:
    prompt = MemoryPrompt(store, system=SYSTEM, layout="append", top_k=3)

    class Broken:
        def invoke(self, *args: Any, **kwargs: Any) -> Any:
            raise ConnectionError("engine down")

    broken = _graph(memory_node(prompt, Broken()))
    config = {"configurable": {"thread_id": "lg-fail"}}
    with pytest.raises(ConnectionError):
        broken.invoke({"messages": [HumanMessage(QUESTIONS[0])], "mem0_user_id": "alice"}, config)
    app = _graph(memory_node(prompt, _llm(server, probe)))
    app.invoke({"messages": [HumanMessage(QUESTIONS[0])], "mem0_user_id": "alice"}, config)
    assert "shown before" not in user_messages(probe.last.messages)[-1]


async def test_async_graph(store: Any, server: Any, probe: Any) -> None:
    llm = ChatOpenAI(
        base_url=f"{server.base_url}/v1",
        api_key="none",
        model="random",
        max_tokens=4,
        streaming=True,
        stream_usage=True,
        http_async_client=probe.async_client(),
    )
    app = _graph(memory_node(MemoryPrompt(store, system=SYSTEM, top_k=2), llm))
    await app.ainvoke(
        {"messages": [HumanMessage(QUESTIONS[2])], "mem0_user_id": "alice"}, {"configurable": {"thread_id": "lg-async"}}
    )
    assert "Miso" in user_messages(probe.last.messages)[-1]
