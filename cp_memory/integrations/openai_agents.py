"""OpenAI Agents SDK: a memory tool whose output is the cache-stable context.

Needs ``pip install 'cp-memory[openai-agents]'``.

mem0's guide exposes ``mem0.search`` as a function tool returning ``"- memory"`` lines, with the user id as a
model-filled argument. :class:`MemoryTools` gives a ``search_memory(query)`` tool (strict JSON schema) that
reads the user from the run context, never from the model, and returns the memories aligned and annotated;
within a conversation, memories an earlier search already returned are replaced by pointers to their line
in that search's output (``turn 1 item 3``: its third ``-`` line; the output stays in the conversation
history, where the model can read it)::

    from agents import Agent
    from cp_memory.integrations.openai_agents import MemoryContext, MemoryTools

    tools = MemoryTools(default_memory(), top_k=10)   # a mem0 Memory: wrapped with CHAT_CONFIG
    agent = Agent(name="assistant", instructions="...", tools=[tools.search_tool])
    ctx = MemoryContext(user_id="alice", conversation_id="chat-1")   # the app keeps this chat's history
    result = await tools.run(agent, history + [{"role": "user", "content": question}], context=ctx)
    history = result.to_input_list()

Dedup needs the run hooks (``tools.run`` installs them, or pass ``hooks=tools.hooks`` to ``Runner.run``).
They keep one record per *run* (its ``RunContextWrapper``), so concurrent runs of one conversation never mix
their searches: after a model call, each of its ``search_memory`` calls remembers which earlier search
outputs that call's input held (the history the model saw); the search is de-duplicated only when those
are exactly the conversation's committed searches and every pointer names the memory that output shows at
that line. A search is committed after the next model call *of its run* that carried its output
succeeded; the run's searches its next model input does not carry, and those of a failed run, are rolled
back. A run without the history (or without the hooks, or without a ``conversation_id``) simply gets every
memory in full.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.lru import LRUMap
from ..core.render import context_of
from ..extras import requires
from .chat import ChatMemory, MemoryTurn

with requires("openai-agents", "cp_memory.integrations.openai_agents"):
    from agents import (
        Agent,
        FunctionTool,
        RunContextWrapper,
        RunHooks,
        Runner,
        function_tool,
    )
    from agents.tool_context import ToolContext

__all__ = ["EMPTY_OUTPUT", "MemoryContext", "MemoryHooks", "MemoryTools", "scope_of_context"]

#: the tool's output when the search found nothing (no turn is recorded for it)
EMPTY_OUTPUT = "No relevant memories found."
#: says what a pointer means in 19 tokens (earlier wordings took 28 and 21; the tool list is prefilled at turn 1)
_DESCRIPTION = "Search the user's memories; 'turn N item i' = item i of output N."
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
class _Run:
    """One ``Runner.run`` of one conversation."""

    run: Any  # what identifies the run (kept: an id() is only unique while its object lives), see _identity
    key: tuple[Any, ...] | None  # (filters, conversation); None: no conversation, no dedup
    seen: list[str] = field(default_factory=list)  # memory outputs in this run's last model input
    carried: list[str] = field(default_factory=list)  # pending call ids that model input holds, in order
    asked: dict[str, list[str]] = field(default_factory=dict)  # call id -> the outputs its model call saw
    searched: list[str] = field(default_factory=list)  # call ids of this run's pending searches


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)


def _identity(ctx: Any) -> Any:
    """The object shared by every context of one run: the SDK hands hooks the run's ``RunContextWrapper``,
    tools a ``ToolContext`` copied from it and ``on_agent_end`` an ``AgentHookContext``, all sharing the
    run's ``usage`` record (updated in place)."""
    usage = getattr(ctx, "usage", None)
    return usage if usage is not None else ctx


@dataclass(frozen=True)
class _Ident:
    usage: Any  # a stand-in context whose identity is a known run's


def _key(filters: Mapping[str, Any], conversation: str | None) -> tuple[Any, ...] | None:
    if conversation is None:
        return None
    return (tuple(sorted((k, repr(v)) for k, v in filters.items())), conversation)


class MemoryTools:
    """The memory tool, its run hooks and a ``run`` helper, sharing one record per run (bounded).

    Args:
        memory: a :class:`~cp_memory.memory.ContextPilotMemory` (sync or async; a plain mem0 ``Memory`` is
            wrapped).
        top_k: memories per search. ``name`` / ``description``: the tool's.
        scope: ``context -> (filters, conversation_id)``; default :func:`scope_of_context`.
        max_runs: runs remembered at once (a run that never ends, e.g. one that failed outside
            :meth:`run`, is forgotten after this many newer ones; its searches were never committed).
    """

    def __init__(
        self,
        memory: Any,
        *,
        top_k: int = 10,
        name: str = "search_memory",
        description: str = _DESCRIPTION,
        scope: Callable[[Any], tuple[dict[str, Any], str | None]] = scope_of_context,
        max_runs: int = 10_000,
    ) -> None:
        self.chat = ChatMemory(memory, layout="append", top_k=top_k)
        self.name = name
        self.scope = scope
        self._runs: LRUMap[int, _Run] = LRUMap(max_runs, on_evict=self._forget_run)
        self._pending: dict[tuple[int, str], MemoryTurn] = {}  # (id(run), call id) -> searched, not yet sent
        self._lock = threading.Lock()
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
        """The tool's body: search, keep the turn pending until a model call of its run carried it."""
        filters, conversation = self.scope(ctx.context)
        call_id = getattr(ctx, "tool_call_id", None)
        rec = self._find(ctx)
        seen = None
        if rec is not None and call_id and conversation is not None:
            with self._lock:
                seen = rec.asked.pop(str(call_id), None)
        if rec is None or seen is None:  # no hooks, no conversation or no call id: the history is unknown
            turn = await self.chat.aturn(query, filters=filters)
        else:
            turn = await self.chat.aturn(query, filters=filters, conversation_id=conversation, contexts=seen)
            if turn.conversation_id is not None and turn.shows_memories:
                with self._lock:
                    self._pending[(id(rec.run), str(call_id))] = turn
                    rec.searched.append(str(call_id))
        if not turn.shows_memories:
            self.chat.rollback(turn)
            return EMPTY_OUTPUT
        return context_of(turn.response)

    def _find(self, ctx: Any) -> _Run | None:
        ident = _identity(ctx)
        with self._lock:
            rec = self._runs.peek(id(ident))
        return rec if rec is not None and rec.run is ident else None

    def _run(self, ctx: Any) -> _Run:
        filters, conversation = self.scope(ctx.context)
        ident = _identity(ctx)
        with self._lock:
            rec = self._runs.get(id(ident))
            if rec is None or rec.run is not ident:
                rec = _Run(ident, _key(filters, conversation))
                self._runs.set(id(ident), rec)
            return rec

    def _forget_run(self, _: int, rec: _Run) -> None:
        for cid in rec.searched:
            turn = self._pending.pop((id(rec.run), cid), None)
            if turn is not None:
                self.chat.rollback(turn)
        rec.searched.clear()

    # ------------------------------------------------------------------ what the hooks do
    def observe(self, run: RunContextWrapper[Any], input_items: Sequence[Any]) -> None:
        """Before a model call of ``run``: which of this tool's outputs does its input hold? The run's pending
        searches whose output is not there were never sent: rolled back."""
        rec = self._run(run)
        if rec.key is None:
            return
        names = {_field(i, "call_id"): _field(i, "name") for i in input_items if _field(i, "type") == "function_call"}
        ours = [
            (_field(i, "call_id"), _field(i, "output"))
            for i in input_items
            if _field(i, "type") == "function_call_output" and names.get(_field(i, "call_id")) == self.name
        ]
        present = {cid for cid, _ in ours}
        ident = id(rec.run)
        with self._lock:
            dropped = [t for c in rec.searched if c not in present and (t := self._pending.pop((ident, c), None))]
            rec.searched = [c for c in rec.searched if c in present]
            rec.carried = [c for c, _ in ours if (ident, c) in self._pending]
            rec.seen = [out for _, out in ours if isinstance(out, str) and out != EMPTY_OUTPUT]
        for turn in dropped:
            self.chat.rollback(turn)

    def sent(self, run: RunContextWrapper[Any], response: Any = None) -> None:
        """After a model call of ``run`` succeeded: commit the searches its input carried, in their order
        there; remember, for each memory search the model asked for, the outputs its input held."""
        rec = self._run(run)
        if rec.key is None:
            return
        ident = id(rec.run)
        with self._lock:
            done = [t for c in rec.carried if (t := self._pending.pop((ident, c), None)) is not None]
            rec.searched = [c for c in rec.searched if c not in rec.carried]
            rec.carried = []
            for item in _field(response, "output") or ():
                if _field(item, "type") == "function_call" and _field(item, "name") == self.name:
                    cid = _field(item, "call_id")
                    if isinstance(cid, str) and cid:
                        rec.asked[cid] = list(rec.seen)
        for turn in done:
            self.chat.commit(turn)

    def finished(self, run: Any) -> None:
        """``run`` (any context of it) ended: roll back what it searched and never sent, forget it."""
        rec = self._find(run)
        if rec is None:
            return
        with self._lock:
            self._runs.pop(id(rec.run))
            left = [t for c in rec.searched if (t := self._pending.pop((id(rec.run), c), None)) is not None]
            rec.searched.clear()
        for turn in left:
            self.chat.rollback(turn)

    def abandon(self, context: Any) -> None:
        """Roll back every search of the conversation of ``context`` (the run context you passed to
        ``Runner.run``) not yet committed, and forget its runs. For an app that ran ``Runner.run`` or
        ``run_streamed`` with :attr:`hooks` itself and saw it fail, and only while no other run of that
        conversation is in progress (:meth:`run` rolls back exactly its own run's searches)."""
        filters, conversation = self.scope(context)
        key = _key(filters, conversation)
        with self._lock:
            runs = [r.run for _, r in self._runs.items() if r.key == key]
        for ident in runs:
            self.finished(_Ident(ident))

    # ------------------------------------------------------------------ running
    async def run(self, agent: Agent[Any], input: Any, *, context: Any, **kwargs: Any) -> Any:
        """``Runner.run`` with run hooks of its own; on failure, the run's pending searches are rolled back."""
        if "hooks" in kwargs:
            raise TypeError("MemoryTools.run installs its own hooks; subclass MemoryHooks to add yours")
        hooks = MemoryHooks(self, _track=True)
        try:
            return await Runner.run(agent, input, context=context, hooks=hooks, **kwargs)
        finally:
            for run in hooks.runs:
                self.finished(run)  # after a failure: its searches not sent are rolled back


class MemoryHooks(RunHooks[Any]):
    """Run hooks that commit memory searches once the model call that carried them succeeded.

    One instance may serve any number of runs, concurrent ones included (each run has its own record)."""

    def __init__(self, tools: MemoryTools, *, _track: bool = False) -> None:
        self.tools = tools
        self._track = _track
        self.runs: list[Any] = []  # with _track (MemoryTools.run's own hooks): the runs served

    async def on_llm_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], system_prompt: str | None, input_items: list[Any]
    ) -> None:
        if self._track and not any(r is context for r in self.runs):
            self.runs.append(context)
        self.tools.observe(context, input_items)

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Agent[Any], response: Any) -> None:
        self.tools.sent(context, response)

    async def on_agent_end(self, context: RunContextWrapper[Any], agent: Agent[Any], output: Any) -> None:
        self.tools.finished(context)
