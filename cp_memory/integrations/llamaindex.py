"""LlamaIndex: ``Mem0Memory`` with the cache-stable layout (``pip install 'cp-memory[llamaindex]'``).

``llama-index-memory-mem0``'s ``Mem0Memory`` puts the retrieved memories into a **system message** in
front of the chat history, so every turn changes the first bytes of the prompt. :class:`ContextPilotMem0Memory`
is a drop-in subclass: chat engines and agents call ``get``/``put`` as before, and get the chat history
with the memories (aligned, de-duplicated, annotated) in the newest user message instead::

    from cp_memory.integrations.llamaindex import ContextPilotMem0Memory
    from llama_index.core.chat_engine import SimpleChatEngine

    memory = ContextPilotMem0Memory.from_memory(default_memory(), context={"user_id": "alice"})
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory, system_prompt="You are helpful.")
    engine.chat("Where do I live?")

Each instance holds one chat (its ``primary_memory``), which is also its dedup conversation
(``conversation_id``, a fresh id unless given). One user message is one turn: every ``get`` until the
answer (an agent such as ``FunctionAgent`` or ``ReActAgent`` calls ``aget`` before each model step and once
after the answer) returns the same turn, searched once. The turn counts as sent when the model's answer (or
its tool call) is ``put`` into the memory (the call succeeded); a new user message without an answer in
between rolls it back. In the ``"append"`` layout the user message is kept in the chat history *as sent*,
so later turns point at it. Engines that call ``get(input=...)`` before they put the user message
(``ContextChatEngine``, ``CondensePlusContextChatEngine``) get the history unchanged, with a warning.
The search query is built as ``Mem0Memory`` builds it (the last ``search_msg_limit`` messages, with the
questions as typed), so both retrieve the same memories.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import uuid
from typing import Any

# llama_index.memory.mem0 imports mem0, which reads MEM0_TELEMETRY once, at import: keep cp_memory's offline
# default (as cp_memory.memory does) unless the application chose otherwise
os.environ.setdefault("MEM0_TELEMETRY", "False")

from ..core.checks import one_of
from ..extras import requires
from .chat import (
    DEFAULT_LAYOUT,
    LAYOUTS,
    ChatMemory,
    MemoryTurn,
    as_wrapper,
    question_of,
)

with requires("llamaindex", "cp_memory.integrations.llamaindex"):
    from llama_index.core.base.llms.types import ChatMessage, MessageRole
    from llama_index.core.bridge.pydantic import Field, PrivateAttr, model_serializer
    from llama_index.core.memory import Memory as LlamaIndexMemory
    from llama_index.memory.mem0 import Mem0Memory
    from llama_index.memory.mem0.utils import (
        convert_chat_history_to_dict,
        convert_messages_to_string,
    )

__all__ = ["ContextPilotMem0Memory"]


logger = logging.getLogger(__name__)

_NOT_ANSWERS = frozenset({MessageRole.USER, MessageRole.SYSTEM, MessageRole.DEVELOPER})


def _answers(message: ChatMessage) -> bool:
    """Whether a message is the model's (or its tools') part of a turn: anything but user and system."""
    return message.role not in _NOT_ANSWERS


def _fingerprint(messages: list[ChatMessage]) -> str:
    """The chat up to and including a user message, questions as typed: which turn a get() belongs to."""
    digest = hashlib.sha256()
    for m in messages:
        content = _plain(m).content if isinstance(m.content, str) else repr(m.blocks)
        digest.update(f"{m.role.value}\x00{content}\x01".encode())
    return digest.hexdigest()


def _plain(message: ChatMessage) -> ChatMessage:
    if message.role == MessageRole.USER and isinstance(message.content, str):
        return ChatMessage(role=MessageRole.USER, content=question_of(message.content))
    return message


class ContextPilotMem0Memory(Mem0Memory):  # type: ignore[misc]  # llama-index-memory-mem0 ships no types
    """``Mem0Memory`` whose ``get`` puts the memories late in the conversation, never in a system message.

    Fields beyond ``Mem0Memory``'s: ``layout`` (``"append"`` or ``"late"``), ``top_k`` (memories per
    search), ``conversation_id`` (dedup conversation; default a fresh id per instance), ``write_back``
    (``put`` adds the chat to mem0, as ``Mem0Memory`` does; False: read-only) and ``add_kwargs`` (extra
    arguments of that ``add``, ``{"infer": False}`` stores every message verbatim: tests only).
    """

    layout: str = Field(default=DEFAULT_LAYOUT, description="'append' (default) or 'late'")
    top_k: int = Field(default=10, description="memories per search")
    conversation_id: str = Field(
        default_factory=lambda: f"llamaindex-{uuid.uuid4().hex}", description="dedup conversation of this chat"
    )
    write_back: bool = Field(default=True, description="put() adds the chat to mem0, like Mem0Memory")
    add_kwargs: dict = Field(default_factory=dict, description="extra arguments of mem0's add()")  # type: ignore[type-arg]

    _chat: ChatMemory = PrivateAttr()
    _pending: tuple[str, MemoryTurn] | None = PrivateAttr(default=None)  # (chat state, turn) not yet answered
    _shown: tuple[str, MemoryTurn] | None = PrivateAttr(default=None)  # the last answered turn
    _lock: Any = PrivateAttr(default_factory=threading.RLock)
    _warned: bool = PrivateAttr(default=False)

    def __init__(self, context: Any = None, **kwargs: Any) -> None:
        client = kwargs.pop("client", None)
        if client is None:
            raise TypeError(
                "ContextPilotMem0Memory needs client= (a mem0 Memory or ContextPilotMemory); "
                "or use from_memory / from_config"
            )
        wrapped = as_wrapper(client)
        super().__init__(context=context, client=wrapped, **kwargs)
        one_of(self.layout, "layout", LAYOUTS)
        self._chat = ChatMemory(wrapped, layout=self.layout, top_k=self.top_k)  # type: ignore[arg-type]

    @classmethod
    def class_name(cls) -> str:
        return "ContextPilotMem0Memory"

    @classmethod
    def from_memory(
        cls,
        memory: Any,
        context: dict[str, Any],
        *,
        search_msg_limit: int = 5,
        primary_memory: LlamaIndexMemory | None = None,
        **kwargs: Any,
    ) -> ContextPilotMem0Memory:
        """From a mem0 ``Memory`` or a :class:`~cp_memory.memory.ContextPilotMemory`; ``kwargs``: the fields."""
        return cls(
            context=context,
            client=memory,
            search_msg_limit=search_msg_limit,
            primary_memory=primary_memory or LlamaIndexMemory.from_defaults(),
            **kwargs,
        )

    @classmethod
    def from_config(
        cls, context: dict[str, Any], config: dict[str, Any], search_msg_limit: int = 5, **kwargs: Any
    ) -> ContextPilotMem0Memory:
        """``Mem0Memory.from_config``'s arguments: builds mem0's ``Memory.from_config(config)`` and wraps it."""
        from mem0 import Memory

        return cls.from_memory(
            Memory.from_config(config_dict=config), context, search_msg_limit=search_msg_limit, **kwargs
        )

    @classmethod
    def from_client(
        cls,
        context: dict[str, Any],
        api_key: str | None = None,
        host: str | None = None,
        org_id: str | None = None,
        project_id: str | None = None,
        search_msg_limit: int = 5,
        **kwargs: Any,
    ) -> ContextPilotMem0Memory:
        """``Mem0Memory.from_client``'s arguments: mem0's hosted ``MemoryClient``, wrapped."""
        from mem0 import MemoryClient

        client = MemoryClient(api_key=api_key, host=host, org_id=org_id, project_id=project_id)
        return cls.from_memory(client, context, search_msg_limit=search_msg_limit, **kwargs)

    # ------------------------------------------------------------------ BaseMemory
    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        """The chat history; the newest user message carries the memories, then the question.

        One turn per user message: every ``get`` until its answer is ``put`` (an agent calls ``aget`` before
        each model step) returns the same turn, and after the answer the turn's message as committed."""
        messages: list[ChatMessage] = self.primary_memory.get(input=input, **kwargs)
        users = [i for i, m in enumerate(messages) if m.role == MessageRole.USER]
        if not users or not isinstance(messages[users[-1]].content, str):
            return messages
        u = users[-1]
        state = _fingerprint(messages[: u + 1])
        with self._lock:
            shown = self._shown if self._shown is not None and self._shown[0] == state else None
            if shown is None and self._pending is not None and self._pending[0] == state:
                shown = self._pending
            if shown is None and any(_answers(m) for m in messages[u + 1 :]):
                if input and input != question_of(messages[u].content or "") and not self._warned:
                    self._warned = True  # an engine that calls get(input=question) before it puts the question
                    logger.warning(
                        "ContextPilotMem0Memory.get(input=...) before the user message was put (e.g. "
                        "ContextChatEngine): no memories are added; use an engine or agent that puts the "
                        "user message first (SimpleChatEngine, FunctionAgent, ReActAgent) or Mem0Memory"
                    )
                return messages  # an answered turn this instance did not make (e.g. a restored history)
            if shown is None:
                self._drop_pending()
                turn = self._new_turn(messages, u, input)
                self._pending = (state, turn)
            else:
                turn = shown[1]
        return messages[:u] + [ChatMessage(role=MessageRole.USER, content=turn.content)] + messages[u + 1 :]

    def put(self, message: ChatMessage) -> None:
        """Add a message. The model's answer (any message but a user or system one) commits the turn of the
        user message it follows (and, in ``"append"``, keeps that message as sent in the history); a new
        user message instead means the last turn was never answered: rolled back."""
        with self._lock:
            if message.role == MessageRole.USER:
                self._drop_pending()
            elif _answers(message) and self._pending is not None:
                state, turn = self._pending
                self._pending = None
                if state == self._current_state():
                    self._chat.commit(turn)
                    if turn.layout == "append":
                        self._keep_as_sent(turn)
                    self._shown = (state, turn)
                else:  # the history moved on (set()): this turn's user message is not the one answered
                    self._chat.rollback(turn)
        super().put(message)

    def set(self, messages: list[ChatMessage]) -> None:
        with self._lock:
            self._drop_pending()
            self._shown = None
        super().set(messages)

    def reset(self) -> None:
        with self._lock:
            self._drop_pending()
            self._shown = None
        super().reset()

    @model_serializer
    def serialize_memory(self) -> dict[str, Any]:
        """``Mem0Memory``'s fields plus this class's own (``layout``, ``top_k``, ``conversation_id``,
        ``write_back``, ``add_kwargs``)."""
        out: dict[str, Any] = super().serialize_memory()
        out.update(
            layout=self.layout,
            top_k=self.top_k,
            conversation_id=self.conversation_id,
            write_back=self.write_back,
            add_kwargs=dict(self.add_kwargs),
        )
        return out

    # ------------------------------------------------------------------ internals
    def _new_turn(self, messages: list[ChatMessage], u: int, input: str | None) -> MemoryTurn:
        question = question_of(messages[u].content or "")
        query = convert_messages_to_string([_plain(m) for m in messages], input, limit=self.search_msg_limit)
        history = [m.content for m in messages[:u] if m.role == MessageRole.USER and isinstance(m.content, str)]
        return self._chat.turn(
            query,
            filters=self.context.build_filter(),
            history=history,
            conversation_id=self.conversation_id,
            question=question,
        )

    def _current_state(self) -> str | None:
        history = self.primary_memory.get_all()
        users = [i for i, m in enumerate(history) if m.role == MessageRole.USER]
        return _fingerprint(history[: users[-1] + 1]) if users else None

    def _drop_pending(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            self._chat.rollback(pending[1])

    def _keep_as_sent(self, turn: MemoryTurn) -> None:
        history = self.primary_memory.get_all()
        for i in range(len(history) - 1, -1, -1):
            m = history[i]
            if m.role == MessageRole.USER:
                if m.content == turn.question:
                    history[i] = ChatMessage(role=MessageRole.USER, content=turn.content)
                    self.primary_memory.set(history)
                return

    def _add_msgs_to_client_memory(self, messages: list[ChatMessage]) -> None:
        if not self.write_back:
            return
        plain = convert_chat_history_to_dict([_plain(m) for m in messages])
        if plain:
            self.add(messages=plain, **self.context.model_dump(), **self.add_kwargs)
