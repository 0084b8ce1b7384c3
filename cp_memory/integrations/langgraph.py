"""LangGraph / LangChain: mem0 memories in a cache-stable message layout (``pip install 'cp-memory[langgraph]'``).

mem0's LangGraph guide builds ``SystemMessage(f"... {memories}")`` + history every turn: the first message
changes, so the engine re-prefills the whole conversation each turn. With this module the system message
is fixed and the memories travel in the newest user message (see :mod:`cp_memory.integrations.chat`)::

    from cp_memory.integrations.langgraph import MemoryPrompt, memory_node

    prompt = MemoryPrompt(default_memory(), system="You are a helpful assistant.")  # wrapped with CHAT_CONFIG
    graph = StateGraph(State)                       # State: messages (add_messages) + mem0_user_id
    graph.add_node("chatbot", memory_node(prompt, ChatOpenAI(base_url=..., model=...)))
    ...
    app = graph.compile(checkpointer=InMemorySaver())
    app.invoke({"messages": [HumanMessage(q)], "mem0_user_id": "alice"},
               {"configurable": {"thread_id": "chat-1"}})          # thread_id = the dedup conversation

Or by hand, in your own node: ``turn = prompt.prepare(state["messages"], filters=..., conversation_id=...)``,
``reply = llm.invoke(turn.messages)``, ``prompt.commit(turn)`` (only after the model answered), and return
``{"messages": turn.state_update(reply)}``. The graph state (and its checkpointer) keeps every question as
the user typed it, so a chat UI shows the user's own words; in the ``"append"`` layout the update stores the
message as sent beside it, in ``additional_kwargs[SENT_KEY]`` of the question (same message id), and
:func:`model_messages` gives the model each earlier question as sent: the model's input stays append-only
and the next turn's pointers resolve.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..extras import requires
from .chat import DEFAULT_LAYOUT, ChatMemory, Layout, MemoryTurn, user_content

with requires("langgraph", "cp_memory.integrations.langgraph"):
    from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
    from langchain_core.runnables import RunnableConfig, RunnableLambda

__all__ = ["SENT_KEY", "MemoryPrompt", "PreparedTurn", "cache_stable_messages", "memory_node", "model_messages"]

#: ``HumanMessage.additional_kwargs`` key holding the question's user message as sent (``"append"`` layout)
SENT_KEY = "cp_memory_sent"


def model_messages(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The graph's messages as the model saw them: each question answered in the ``"append"`` layout becomes
    its user message as sent (``additional_kwargs[SENT_KEY]``, same id); everything else is unchanged."""
    out: list[BaseMessage] = []
    for m in messages:
        sent = m.additional_kwargs.get(SENT_KEY) if isinstance(m, HumanMessage) else None
        out.append(HumanMessage(content=sent, id=m.id, name=m.name) if isinstance(sent, str) else m)
    return out


def cache_stable_messages(
    query: str, response: Mapping[str, Any], *, system: str | SystemMessage | None, history: Sequence[BaseMessage] = ()
) -> list[BaseMessage]:
    """``[SystemMessage(system)] + history + [HumanMessage(memories + annotations + question)]``.

    ``response``: a ``ContextPilotMemory.search`` response (a plain mem0 response is rendered in its own
    order). The system message never carries memories, so it and the history stay a cacheable prefix.
    """
    out: list[BaseMessage] = []
    if system is not None:
        out.append(system if isinstance(system, SystemMessage) else SystemMessage(content=system))
    for i, m in enumerate(history):
        if not isinstance(m, BaseMessage):
            raise TypeError(f"history[{i}] must be a LangChain message, got {type(m).__name__}")
        out.append(m)
    out.append(HumanMessage(content=user_content(query, response)))
    return out


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    raise TypeError(
        "the newest user message must have text content (str), got "
        f"{type(content).__name__}; multimodal messages are not supported"
    )


@dataclass(frozen=True)
class PreparedTurn:
    """What to send this turn, and how to record it in the graph state."""

    messages: list[BaseMessage]  # system + history (as sent) + the user message carrying the memories
    question: HumanMessage  # the user's message as it came in
    sent_message: HumanMessage  # the user message as sent to the model
    memory: MemoryTurn

    @property
    def state_message(self) -> HumanMessage:
        """The question for the graph state: as typed (same id), with the message as sent in
        ``additional_kwargs[SENT_KEY]``."""
        q = self.question
        extra = {**q.additional_kwargs, SENT_KEY: self.sent_message.content}
        return HumanMessage(content=q.content, id=q.id, name=q.name, additional_kwargs=extra)

    def state_update(self, reply: BaseMessage) -> list[BaseMessage]:
        """Messages for the ``add_messages`` reducer: ``"append"`` updates the question (same id, its text as
        typed) with the message as sent beside it, then adds the reply; ``"late"`` only adds the reply."""
        if self.memory.layout == "append":
            return [self.state_message, reply]
        return [reply]


class MemoryPrompt:
    """Builds each turn's messages from the graph's messages and a ContextPilot search.

    Args:
        memory: a :class:`~cp_memory.memory.ContextPilotMemory` (sync or async; a plain mem0 ``Memory`` is
            wrapped).
        system: the fixed system message.
        layout: ``"append"`` (default, measured best) or ``"late"``; see :mod:`cp_memory.integrations.chat`.
        top_k: memories per search; ``search_kwargs``: more arguments for every search.
    """

    def __init__(
        self,
        memory: Any,
        *,
        system: str | None,
        layout: Layout = DEFAULT_LAYOUT,
        top_k: int = 10,
        search_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.chat = ChatMemory(memory, layout=layout, top_k=top_k, search_kwargs=search_kwargs)
        self.system = system

    def _split(self, messages: Sequence[BaseMessage]) -> tuple[HumanMessage, list[BaseMessage], list[str]]:
        if not messages or not isinstance(messages[-1], HumanMessage):
            raise ValueError("the last message must be the user's HumanMessage (the question of this turn)")
        question = messages[-1]
        if self.chat.layout == "append" and question.id is None:
            raise ValueError(
                "the 'append' layout records the message as sent on the question in the graph state, by its "
                "id: pass state['messages'] of a graph using add_messages (which gives every message an id)"
            )
        history = model_messages(messages[:-1])  # the model sees earlier questions as they were sent
        return (
            question,
            history,
            [m.content for m in history if isinstance(m, HumanMessage) and isinstance(m.content, str)],
        )

    def _prepared(self, question: HumanMessage, history: list[BaseMessage], turn: MemoryTurn) -> PreparedTurn:
        messages = cache_stable_messages(turn.query, turn.response, system=self.system, history=history)
        sent = HumanMessage(content=messages[-1].content, id=question.id, name=question.name)
        return PreparedTurn(messages=messages[:-1] + [sent], question=question, sent_message=sent, memory=turn)

    def prepare(
        self, messages: Sequence[BaseMessage], *, filters: Mapping[str, Any], conversation_id: str | None = None
    ) -> PreparedTurn:
        """Search with the newest user message and lay out this turn's messages.

        ``filters``: whose memories (``{"user_id": ...}``); ``conversation_id``: the dedup conversation
        (the graph's ``thread_id``; None: no dedup). Commit the turn after the model answered."""
        question, history, user_texts = self._split(messages)
        turn = self.chat.turn(_text(question), filters=filters, history=user_texts, conversation_id=conversation_id)
        return self._prepared(question, history, turn)

    async def aprepare(
        self, messages: Sequence[BaseMessage], *, filters: Mapping[str, Any], conversation_id: str | None = None
    ) -> PreparedTurn:
        """:meth:`prepare`, awaited."""
        question, history, user_texts = self._split(messages)
        turn = await self.chat.aturn(
            _text(question), filters=filters, history=user_texts, conversation_id=conversation_id
        )
        return self._prepared(question, history, turn)

    def commit(self, turn: PreparedTurn) -> None:
        """The model answered ``turn.messages``: later turns may point at its memories."""
        self.chat.commit(turn.memory)

    def rollback(self, turn: PreparedTurn) -> None:
        """The model call failed: forget the turn. Idempotent."""
        self.chat.rollback(turn.memory)

    @contextlib.contextmanager
    def sending(self, turn: PreparedTurn) -> Iterator[PreparedTurn]:
        """``with prompt.sending(turn): reply = llm.invoke(turn.messages)`` commits on success only."""
        try:
            yield turn
        except BaseException:
            self.rollback(turn)
            raise
        self.commit(turn)


def _default_filters(state: Mapping[str, Any]) -> Mapping[str, Any]:
    user = state.get("mem0_user_id")
    if not user:
        raise ValueError("state has no 'mem0_user_id'; pass filters=lambda state: {'user_id': ...}")
    return {"user_id": user}


def _thread_id(config: RunnableConfig | None) -> str | None:
    configurable = (config or {}).get("configurable") or {}
    thread = configurable.get("thread_id")
    return str(thread) if thread is not None else None


def memory_node(
    prompt: MemoryPrompt,
    model: Any,
    *,
    filters: Callable[[Mapping[str, Any]], Mapping[str, Any]] = _default_filters,
    conversation_id: Callable[[RunnableConfig | None], str | None] = _thread_id,
) -> RunnableLambda[Any, Any]:
    """A LangGraph node (sync and async): search, call ``model`` (any chat model / runnable taking
    messages), commit after it answered, and return the state update.

    ``filters(state)`` names whose memories (default: ``{"user_id": state["mem0_user_id"]}``, mem0's guide's
    state); ``conversation_id(config)`` the dedup conversation (default: the ``thread_id``).
    """

    def node(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        turn = prompt.prepare(state["messages"], filters=filters(state), conversation_id=conversation_id(config))
        with prompt.sending(turn):
            reply = model.invoke(turn.messages, config)
        return {"messages": turn.state_update(reply)}

    async def anode(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        turn = await prompt.aprepare(state["messages"], filters=filters(state), conversation_id=conversation_id(config))
        with prompt.sending(turn):
            reply = await model.ainvoke(turn.messages, config)
        return {"messages": turn.state_update(reply)}

    return RunnableLambda(node, afunc=anode, name="cp_memory")
