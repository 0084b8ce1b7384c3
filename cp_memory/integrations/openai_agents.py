"""OpenAI Agents SDK: a memory tool whose output is the cache-stable context.

Needs ``pip install 'cp-memory[openai-agents]'``.

mem0's guide exposes ``mem0.search`` as a function tool returning ``"- memory"`` lines, with the user id as a
model-filled argument. :class:`MemoryTools` gives a ``search_memory(query)`` tool (strict JSON schema) that
reads the user from the run context, never from the model, and returns the memories aligned and annotated;
within a conversation, memories an earlier search already returned are replaced by pointers to that
search's ``[Doc i]`` (its output stays in the conversation history, where the model can read it)::

    from agents import Agent
    from cp_memory.integrations.openai_agents import MemoryContext, MemoryTools

    tools = MemoryTools(ContextPilotMemory(default_memory()), top_k=10)
    agent = Agent(name="assistant", instructions="...", tools=[tools.search_tool])
    ctx = MemoryContext(user_id="alice", conversation_id="chat-1")   # the app keeps this chat's history
    result = await tools.run(agent, history + [{"role": "user", "content": question}], context=ctx)
    history = result.to_input_list()

Dedup needs the run hooks (``tools.run`` installs them, or pass ``hooks=tools.hooks`` to ``Runner.run``):
before each model call they see which earlier search outputs are in its input, and after the call
succeeded they commit the searches it carried. A search is de-duplicated only when the model's input holds
exactly the conversation's committed searches, so a run without the history (or without the hooks, or
without a ``conversation_id``) simply gets every memory in full.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    RunContextWrapper,
    RunHooks,
    Runner,
    function_tool,
)
from agents.tool_context import ToolContext

from ..lru import LRUMap
from ..render import context_of
from .chat import ChatMemory, MemoryTurn

__all__ = ["EMPTY_OUTPUT", "MemoryContext", "MemoryHooks", "MemoryTools", "scope_of_context"]

#: the tool's output when the search found nothing (no turn is recorded for it)
EMPTY_OUTPUT = "No relevant memories found."
_DESCRIPTION = (
    "Search the user's long-term memories (facts from earlier conversations). Returns numbered "
    "memories; a note such as 'refer to [Doc 2] ... (turn 1)' means that memory is the [Doc 2] "
    "of this tool's first output in this conversation."
)
_ENTITY_KEYS = ("user_id", "agent_id", "run_id")


@dataclass
class MemoryContext:
    """A run context for the tool: whose memories (``user_id``/``agent_id``/``run_id``) and, when the app
    keeps the conversation's history across runs, the dedup ``conversation_id``."""

    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    conversation_id: str | None = None


def scope_of_context(context: Any) -> tuple[dict[str, Any], str | None]:
    """``(filters, conversation_id)`` from a run context: a mapping or an object with ``user_id``,
    ``agent_id``, ``run_id`` and optionally ``conversation_id`` (e.g. :class:`MemoryContext`)."""

    def read(name: str) -> Any:
        return context.get(name) if isinstance(context, Mapping) else getattr(context, name, None)

    filters = {k: read(k) for k in _ENTITY_KEYS if read(k) is not None}
    if not filters:
        raise ValueError(
            "the run context names no user: pass context=MemoryContext(user_id=...) (or any object "
            "or dict with user_id / agent_id / run_id) to Runner.run"
        )
    conversation = read("conversation_id")
    return filters, (str(conversation) if conversation is not None else None)


@dataclass
class _Conversation:
    committed: list[str] = field(default_factory=list)  # call ids, in commit order
    pending: dict[str, MemoryTurn] = field(default_factory=dict)  # call id -> searched, not yet sent
    inflight: list[str] = field(default_factory=list)  # pending ids in the current model input
    seen: list[str] | None = None  # memory outputs in the last model input


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)


class MemoryTools:
    """The memory tool, its run hooks and a ``run`` helper, sharing one per-conversation record (bounded).

    Args:
        memory: a :class:`~cp_memory.memory.ContextPilotMemory` (sync or async; a plain mem0 ``Memory`` is
            wrapped).
        top_k: memories per search. ``name`` / ``description``: the tool's.
        scope: ``context -> (filters, conversation_id)``; default :func:`scope_of_context`.
    """

    def __init__(
        self,
        memory: Any,
        *,
        top_k: int = 10,
        name: str = "search_memory",
        description: str = _DESCRIPTION,
        scope: Callable[[Any], tuple[dict[str, Any], str | None]] = scope_of_context,
        max_conversations: int = 10_000,
    ) -> None:
        self.chat = ChatMemory(memory, layout="append", top_k=top_k)
        self.name = name
        self.scope = scope
        self._conversations: LRUMap[tuple[Any, ...], _Conversation] = LRUMap(max_conversations)
        self.search_tool: FunctionTool = self._make_tool(name, description)
        self.hooks = MemoryHooks(self)

    # ------------------------------------------------------------------ the tool
    def _make_tool(self, name: str, description: str) -> FunctionTool:
        async def search_memory(ctx: ToolContext[Any], query: str) -> str:
            """Search the user's memories.

            Args:
                query: what to look for, in a few words.
            """
            return await self.search(ctx, query)

        return function_tool(
            search_memory,
            name_override=name,
            description_override=description,
            strict_mode=True,
            failure_error_function=None,
        )

    async def search(self, ctx: RunContextWrapper[Any], query: str) -> str:
        """The tool's body: search, keep the turn pending until a model call carried it."""
        filters, conversation = self.scope(ctx.context)
        state = self._state(filters, conversation)
        call_id = getattr(ctx, "tool_call_id", None)
        if state is None or state.seen is None or not call_id:
            turn = await self.chat.aturn(query, filters=filters)  # cannot check the history: no dedup
        else:
            turn = await self.chat.aturn(
                query, filters=filters, conversation_id=conversation, contexts=list(state.seen)
            )
            if turn.conversation_id is not None:
                state.pending[call_id] = turn
        if not turn.shows_memories:
            self.chat.rollback(turn)
            if state is not None and call_id:
                state.pending.pop(call_id, None)
            return EMPTY_OUTPUT
        return context_of(turn.response)

    def _state(self, filters: Mapping[str, Any], conversation: str | None) -> _Conversation | None:
        if conversation is None:
            return None
        key = (tuple(sorted((k, repr(v)) for k, v in filters.items())), conversation)
        return self._conversations.get_or_create(key, _Conversation)

    # ------------------------------------------------------------------ what the hooks do
    def observe(self, context: Any, input_items: Sequence[Any]) -> None:
        """Before a model call: which of this tool's outputs does its input hold? Pending searches whose
        output is not there were never sent: rolled back."""
        filters, conversation = self.scope(context)
        state = self._state(filters, conversation)
        if state is None:
            return
        names = {_field(i, "call_id"): _field(i, "name") for i in input_items if _field(i, "type") == "function_call"}
        ours = [
            (_field(i, "call_id"), _field(i, "output"))
            for i in input_items
            if _field(i, "type") == "function_call_output" and names.get(_field(i, "call_id")) == self.name
        ]
        present = {cid for cid, _ in ours}
        for cid in [c for c in state.pending if c not in present]:
            self.chat.rollback(state.pending.pop(cid))
        state.inflight = [cid for cid, _ in ours if cid in state.pending]
        state.seen = [out for _, out in ours if isinstance(out, str) and out != EMPTY_OUTPUT]

    def sent(self, context: Any) -> None:
        """After a model call succeeded: commit the searches its input carried, in their order there."""
        filters, conversation = self.scope(context)
        state = self._state(filters, conversation)
        if state is None:
            return
        for cid in state.inflight:
            turn = state.pending.pop(cid, None)
            if turn is not None:
                self.chat.commit(turn)
                state.committed.append(cid)
        state.inflight = []

    def abandon(self, context: Any) -> None:
        """The run failed: roll back every search of the conversation not yet committed."""
        filters, conversation = self.scope(context)
        state = self._state(filters, conversation)
        if state is None:
            return
        for cid in list(state.pending):
            self.chat.rollback(state.pending.pop(cid))
        state.inflight = []

    # ------------------------------------------------------------------ running
    async def run(self, agent: Agent[Any], input: Any, *, context: Any, **kwargs: Any) -> Any:
        """``Runner.run`` with :attr:`hooks`; on failure, pending searches are rolled back."""
        if "hooks" in kwargs:
            raise TypeError("MemoryTools.run installs its own hooks; subclass MemoryHooks to add yours")
        try:
            return await Runner.run(agent, input, context=context, hooks=self.hooks, **kwargs)
        except BaseException:
            self.abandon(context)
            raise


class MemoryHooks(RunHooks[Any]):
    """Run hooks that commit memory searches once the model call that carried them succeeded."""

    def __init__(self, tools: MemoryTools) -> None:
        self.tools = tools

    async def on_llm_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], system_prompt: str | None, input_items: list[Any]
    ) -> None:
        self.tools.observe(context.context, input_items)

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Agent[Any], response: Any) -> None:
        self.tools.sent(context.context)
