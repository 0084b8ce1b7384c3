"""OpenAI Agents SDK arms. Baseline: mem0's OpenAI Agents SDK guide (docs.mem0.ai/integrations/openai-agents-sdk):
``search_memory(query, user_id)`` and ``save_memory(content, user_id)`` function tools returning
``"- memory"`` lines, the guide's instructions. The cp arm swaps ``search_memory`` for
``MemoryTools.search_tool`` (user from the run context, dedup across the conversation's runs) and runs with
its hooks. Both keep the conversation (``result.to_input_list()``) across turns, both are streamed
(``Runner.run_streamed``), and the first step of each run is scripted (benchmarks.frameworks.scripted): a
call of ``search_memory`` with the user's message, so every arm searches the same query."""

from __future__ import annotations

import asyncio
from typing import Any

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from cp_memory.integrations.openai_agents import MemoryContext, MemoryTools

from .arms import FrameworkRunner
from .probe import EngineProbe, Exchange
from .scripted import ScriptedFirstStep
from .workload import Chat, TurnRecord, count_shown, fixed_answer

INSTRUCTIONS = (
    "You are a helpful personal assistant with memory capabilities.\n"
    "Use the search_memory tool to recall past conversations and user preferences.\n"
    "Use the save_memory tool to store important information about the user.\n"
    "Always personalize your responses based on available memory."
)


class AgentsRunner(FrameworkRunner):
    name = "openai-agents"
    arms = ("mem0", "cp")

    def _tools(self, arm: str) -> tuple[list[Any], MemoryTools | None, dict[str, Any]]:
        mem0 = self.baseline_store

        @function_tool
        def save_memory(content: str, user_id: str) -> str:
            """Save important information to memory"""
            mem0.add([{"role": "user", "content": content}], user_id=user_id)  # read-only here: never called
            return "Information saved to memory."

        if arm == "mem0":

            @function_tool
            def search_memory(query: str, user_id: str) -> str:
                """Search through past conversations and memories"""
                memories = mem0.search(query, user_id=user_id)
                if memories and memories.get("results"):
                    return "\n".join([f"- {mem['memory']}" for mem in memories["results"]])
                return "No relevant memories found."

            return [search_memory, save_memory], None, {"user_id": self.user_id}
        tools = MemoryTools(self.cp[arm], top_k=self.top_k)
        return [tools.search_tool, save_memory], tools, {}

    def shown(self, arm: str, ex: Exchange) -> tuple[int, int]:
        if arm == "mem0":
            return super().shown(arm, ex)
        outputs = [m for m in ex.messages if m.get("role") == "tool"]
        return count_shown(str(outputs[-1].get("content") or "") if outputs else "")

    def chat(self, arm: str, base_url: str, probe: EngineProbe, chat: Chat, answers: str) -> list[TurnRecord]:
        set_tracing_disabled(True)
        return asyncio.run(self._chat(arm, base_url, probe, chat, answers))

    async def _chat(self, arm: str, base_url: str, probe: EngineProbe, chat: Chat, answers: str) -> list[TurnRecord]:
        client = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="none", http_client=probe.async_client())
        tools, memory_tools, extra = self._tools(arm)
        model = ScriptedFirstStep(
            OpenAIChatCompletionsModel(model="local", openai_client=client), "search_memory", extra
        )
        agent = Agent(
            name="Personal Assistant",
            instructions=INSTRUCTIONS,
            tools=tools,
            model=model,
            model_settings=ModelSettings(max_tokens=self.max_tokens, temperature=0),
        )
        context = MemoryContext(user_id=self.user_id, conversation_id=f"{arm}-chat{chat.index}")
        history: list[Any] = []
        out = []
        for turn, question in enumerate(chat.questions, start=1):
            mark = probe.mark()
            hooks = memory_tools.hooks if memory_tools is not None else None
            result = Runner.run_streamed(
                agent, history + [{"role": "user", "content": question}], context=context, hooks=hooks
            )
            try:
                async for _ in result.stream_events():
                    pass
            except BaseException:
                if memory_tools is not None:
                    memory_tools.abandon(context)
                raise
            out.append(
                self.record(arm, answers, chat, turn, self.answer_exchange(probe, mark), str(result.final_output))
            )
            history = result.to_input_list()
            if answers == "fixed":
                history[-1] = {"role": "assistant", "content": fixed_answer(question)}
        await client.close()
        return out
