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
(``conversation_id``, a fresh id unless given). A turn counts as sent when the model's answer is ``put``
into the memory (the call succeeded); a new user message without an answer in between rolls it back. In
the ``"append"`` layout the user message is kept in the chat history *as sent*, so later turns point at it.
The search query is built as ``Mem0Memory`` builds it (the last ``search_msg_limit`` messages, with the
questions as typed), so both retrieve the same memories.
"""

from __future__ import annotations

import os
import threading
import uuid
from typing import Any

# llama_index.memory.mem0 imports mem0, which reads MEM0_TELEMETRY once, at import: keep cp_memory's offline
# default (as cp_memory.memory does) unless the application chose otherwise
os.environ.setdefault("MEM0_TELEMETRY", "False")

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.memory import Memory as LlamaIndexMemory
from llama_index.memory.mem0 import Mem0Memory
from llama_index.memory.mem0.utils import (
    convert_chat_history_to_dict,
    convert_messages_to_string,
)

from .chat import (
    DEFAULT_LAYOUT,
    LAYOUTS,
    ChatMemory,
    MemoryTurn,
    as_wrapper,
    question_of,
)

__all__ = ["ContextPilotMem0Memory"]


def _plain(message: ChatMessage) -> ChatMessage:
    if message.role == MessageRole.USER and isinstance(message.content, str):
        return ChatMessage(role=MessageRole.USER, content=question_of(message.content))
    return message


class ContextPilotMem0Memory(Mem0Memory):  # type: ignore[misc]  # llama-index-memory-mem0 ships no types
    """``Mem0Memory`` whose ``get`` puts the memories late in the conversation, never in a system message.

    Fields beyond ``Mem0Memory``'s: ``layout`` (``"append"`` or ``"late"``), ``top_k`` (memories per
    search), ``conversation_id`` (dedup conversation; default a fresh id per instance), ``write_back``
    (``put`` adds the chat to mem0, as ``Mem0Memory`` does; False: read-only) and ``add_kwargs`` (extra
    arguments of that ``add``, e.g. ``{"infer": False}`` for an offline store).
    """

    layout: str = Field(default=DEFAULT_LAYOUT, description="'append' (default) or 'late'")
    top_k: int = Field(default=10, description="memories per search")
    conversation_id: str = Field(
        default_factory=lambda: f"llamaindex-{uuid.uuid4().hex}", description="dedup conversation of this chat"
    )
    write_back: bool = Field(default=True, description="put() adds the chat to mem0, like Mem0Memory")
    add_kwargs: dict = Field(default_factory=dict, description="extra arguments of mem0's add()")  # type: ignore[type-arg]

    _chat: ChatMemory = PrivateAttr()
    _pending: MemoryTurn | None = PrivateAttr(default=None)
    _lock: Any = PrivateAttr(default_factory=threading.RLock)

    def __init__(self, context: Any = None, **kwargs: Any) -> None:
        client = kwargs.pop("client", None)
        if client is None:
            raise TypeError(
                "ContextPilotMem0Memory needs client= (a mem0 Memory or ContextPilotMemory); "
                "or use from_memory / from_config"
            )
        wrapped = as_wrapper(client)
        super().__init__(context=context, client=wrapped, **kwargs)
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
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
        """The chat history; the newest user message carries the memories, then the question."""
        messages: list[ChatMessage] = self.primary_memory.get(input=input, **kwargs)
        with self._lock:
            self._drop_pending()
        users = [i for i, m in enumerate(messages) if m.role == MessageRole.USER]
        if not users or not isinstance(messages[users[-1]].content, str):
            return messages
        u = users[-1]
        question = question_of(messages[u].content or "")
        query = convert_messages_to_string([_plain(m) for m in messages], input, limit=self.search_msg_limit)
        history = [m.content for m in messages[:u] if m.role == MessageRole.USER and isinstance(m.content, str)]
        turn = self._chat.turn(
            query,
            filters=self.context.build_filter(),
            history=history,
            conversation_id=self.conversation_id,
            question=question,
        )
        with self._lock:
            self._pending = turn
        return messages[:u] + [ChatMessage(role=MessageRole.USER, content=turn.content)] + messages[u + 1 :]

    def put(self, message: ChatMessage) -> None:
        """Add a message. The model's answer commits the pending turn (and, in ``"append"``, keeps the user
        message as sent in the history); a user message instead means the last turn was never answered."""
        with self._lock:
            turn, self._pending = self._pending, None
        if turn is not None:
            if message.role == MessageRole.USER:
                self._chat.rollback(turn)
            else:
                self._chat.commit(turn)
                if turn.layout == "append":
                    self._keep_as_sent(turn)
        super().put(message)

    def set(self, messages: list[ChatMessage]) -> None:
        with self._lock:
            self._drop_pending()
        super().set(messages)

    def reset(self) -> None:
        with self._lock:
            self._drop_pending()
        super().reset()

    # ------------------------------------------------------------------ internals
    def _drop_pending(self) -> None:
        turn, self._pending = self._pending, None
        if turn is not None:
            self._chat.rollback(turn)

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
