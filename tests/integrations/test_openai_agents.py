"""OpenAI Agents SDK: the memory tool in real runs against llama-server (chat-completions model).

The first step of each run is scripted (benchmarks.frameworks.scripted): a call of the memory tool with the
user's message as query, so the random-weight model's erratic tool use does not decide what is searched.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.integrations.conftest import require_extra

require_extra("agents", "openai-agents")

from agents import (
    Agent,
    Model,
    ModelSettings,
    OpenAIChatCompletionsModel,
    Runner,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from benchmarks.frameworks.scripted import ScriptedFirstStep
from cp_memory.integrations.openai_agents import (
    EMPTY_OUTPUT,
    MemoryContext,
    MemoryTools,
)
from tests.integrations.conftest import SYSTEM, assert_no_foreign_memory

QUESTIONS = ["Where does Alice live?", "Where does Alice live and what is her job?", "Does Alice have a pet?"]


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    set_tracing_disabled(True)  # the SDK would export traces to the network


def _agent(tools: MemoryTools, server: Any, probe: Any) -> Agent[Any]:
    client = AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key="none", http_client=probe.async_client())
    model = ScriptedFirstStep(OpenAIChatCompletionsModel(model="random", openai_client=client), tools.name)
    return Agent(
        name="assistant",
        instructions=SYSTEM,
        tools=[tools.search_tool],
        model=model,
        model_settings=ModelSettings(max_tokens=4, temperature=0),
    )


def _tool_outputs(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content")) for m in messages if m.get("role") == "tool"]


async def _conversation(tools: MemoryTools, agent: Agent[Any], ctx: Any, questions: list[str]) -> list[Any]:
    history: list[Any] = []
    for q in questions:
        result = await tools.run(agent, history + [{"role": "user", "content": q}], context=ctx)
        history = result.to_input_list()
    return history


def test_tool_schema_is_strict_and_reads_the_user_from_the_context(store: Any) -> None:
    tools = MemoryTools(store)
    schema = tools.search_tool.params_json_schema
    assert tools.search_tool.strict_json_schema
    assert schema["required"] == ["query"] and schema["additionalProperties"] is False
    assert set(schema["properties"]) == {"query"}  # no user_id for the model to fill in


async def test_searches_in_a_conversation_point_at_earlier_outputs(store: Any, server: Any, probe: Any) -> None:
    tools = MemoryTools(store, top_k=3)
    agent = _agent(tools, server, probe)
    await _conversation(tools, agent, MemoryContext(user_id="alice", conversation_id="oa-1"), QUESTIONS)
    sent = probe.exchanges
    assert len(sent) == 3  # one engine call per run: the answer
    for i, ex in enumerate(sent):
        assert ex.messages[0] == {"role": "system", "content": SYSTEM}
        assert_no_foreign_memory(ex.messages)
        outputs = _tool_outputs(ex.messages)
        assert len(outputs) == i + 1
        if i:
            assert ex.messages[: len(sent[i - 1].messages)] == sent[i - 1].messages
            assert ex.cached_tokens is not None and ex.cached_tokens >= sent[i - 1].prompt_tokens - 8
    first, second = _tool_outputs(sent[1].messages)
    assert first.startswith("- ")  # mem0's own list form; pointers name a line by its position
    assert "Also relevant, shown before: turn 1 item" in second


async def test_without_a_conversation_id_every_search_is_sent_in_full(store: Any, server: Any, probe: Any) -> None:
    tools = MemoryTools(store, top_k=3)
    agent = _agent(tools, server, probe)
    await _conversation(tools, agent, MemoryContext(user_id="alice"), QUESTIONS[:1] * 2)
    first, second = _tool_outputs(probe.last.messages)
    assert first == second and "shown before" not in second


async def test_a_history_without_the_earlier_outputs_gets_full_memories(store: Any, server: Any, probe: Any) -> None:
    """Regression: mem0's guide runs each turn without history; pointers would point at nothing."""
    tools = MemoryTools(store, top_k=3)
    agent = _agent(tools, server, probe)
    ctx = MemoryContext(user_id="alice", conversation_id="oa-nohistory")
    await tools.run(agent, QUESTIONS[0], context=ctx)
    await tools.run(agent, QUESTIONS[0], context=ctx)  # the app dropped the history
    (output,) = _tool_outputs(probe.last.messages)
    assert output.startswith("- ") and "shown before" not in output


async def test_a_failed_run_commits_nothing(store: Any, server: Any, probe: Any) -> None:
    tools = MemoryTools(store, top_k=3)
    ctx = MemoryContext(user_id="alice", conversation_id="oa-fail")

    class Down(OpenAIChatCompletionsModel):
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            raise ConnectionError("engine down")

    broken = Agent(
        name="assistant",
        instructions=SYSTEM,
        tools=[tools.search_tool],
        model=ScriptedFirstStep(Down(model="x", openai_client=AsyncOpenAI(api_key="none")), tools.name),
    )
    with pytest.raises(ConnectionError):
        await tools.run(broken, QUESTIONS[0], context=ctx)
    await _conversation(tools, _agent(tools, server, probe), ctx, QUESTIONS[:1])
    (output,) = _tool_outputs(probe.last.messages)
    assert "shown before" not in output


async def test_unknown_user_fails_loudly_and_nobody_sees_another_users_memories(
    store: Any, server: Any, probe: Any
) -> None:
    tools = MemoryTools(store, top_k=3)
    with pytest.raises(ValueError, match="user_id"):
        await tools.run(_agent(tools, server, probe), QUESTIONS[0], context=MemoryContext())
    await Runner.run(
        _agent(tools, server, probe), "Where does Alice live?", context={"user_id": "nobody"}, hooks=tools.hooks
    )
    assert _tool_outputs(probe.last.messages) == [EMPTY_OUTPUT]


def _question(input: Any) -> str:
    users = [i for i in input if isinstance(i, dict) and i.get("role") == "user"]
    return str(users[-1]["content"]) if users else ""


class Gated(Model):
    """The answer step of a run waits until its question's gate opens, then answers (the real model) or,
    for the questions in ``fail``, fails."""

    def __init__(self, inner: Model, fail: set[str]) -> None:
        self.inner, self.fail = inner, fail
        self.gates: dict[str, asyncio.Event] = {}
        self.entered: dict[str, asyncio.Event] = {}

    def gate(self, question: str) -> tuple[asyncio.Event, asyncio.Event]:
        self.gates[question], self.entered[question] = asyncio.Event(), asyncio.Event()
        return self.entered[question], self.gates[question]

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        q = _question(input)
        if q in self.gates:
            self.entered[q].set()
            await self.gates[q].wait()
        if q in self.fail:
            raise ConnectionError("engine down")
        return await self.inner.get_response(system_instructions, input, *args, **kwargs)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@pytest.mark.parametrize("hooks", ["tools.run", "shared tools.hooks"])
async def test_concurrent_runs_of_one_conversation_commit_only_their_own_searches(
    store: Any, server: Any, probe: Any, hooks: str
) -> None:
    """Regression: two runs of one conversation shared one in-flight list, so run B's successful model call
    committed run A's search (A's call failed) and the next turn pointed at A's memories, which the
    history (B's) never showed. A pointer must name the memory the history shows at that label."""
    tools = MemoryTools(store, top_k=3)
    searched: list[Any] = []
    aturn = tools.chat.aturn

    async def recording(*args: Any, **kwargs: Any) -> Any:
        searched.append(await aturn(*args, **kwargs))
        return searched[-1]

    tools.chat.aturn = recording  # type: ignore[method-assign]
    client = AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key="none", http_client=probe.async_client())
    qa, qb = "Where does Alice live?", "Does Alice play music?"
    gated = Gated(OpenAIChatCompletionsModel(model="random", openai_client=client), fail={qa})
    agent = Agent(
        name="assistant",
        instructions=SYSTEM,
        tools=[tools.search_tool],
        model=ScriptedFirstStep(gated, tools.name),
        model_settings=ModelSettings(max_tokens=4, temperature=0),
    )
    ctx = MemoryContext(user_id="alice", conversation_id=f"oa-concurrent-{hooks}")
    history = await _conversation(tools, agent, ctx, ["What is Alice's job?"])

    entered_b, open_b = gated.gate(qb)
    entered_a, open_a = gated.gate(qa)

    def run(question: str) -> Any:
        new = history + [{"role": "user", "content": question}]
        if hooks == "tools.run":
            return tools.run(agent, new, context=ctx)
        return Runner.run(agent, new, context=ctx, hooks=tools.hooks)

    run_b = asyncio.create_task(run(qb))
    await entered_b.wait()  # B searched; its answer call is in flight
    run_a = asyncio.create_task(run(qa))
    await entered_a.wait()  # A searched; its answer call is in flight
    open_b.set()
    result_b = await run_b  # B's answer: B's search is sent
    open_a.set()
    with pytest.raises(ConnectionError):
        await run_a  # A's answer failed: A's search was never sent
    q3 = "Does Alice play music, and where does she live?"
    await tools.run(agent, result_b.to_input_list() + [{"role": "user", "content": q3}], context=ctx)
    outputs = _tool_outputs(probe.last.messages)
    last = searched[-1]
    assert len(outputs) == 3 and last.conversation_id == ctx.conversation_id, "B's history holds the committed turns"
    assert any(s["turn"] == 2 for s in last.sent), "turn 3 points into turn 2"
    for sent in last.sent:  # the pointer names the position-th line of that output ("- memory": bullets)
        line = outputs[sent["turn"] - 1].split("\n\n")[0].splitlines()[sent["position"] - 1]
        assert line.startswith(sent["label"] + " ")
        block, memory = line[len(sent["label"]) + 1 :], store.get(sent["id"])["memory"]
        assert block == memory, f"{sent['annotation']} points at {block!r}, not at {memory!r}"
