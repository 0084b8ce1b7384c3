"""The chat layout every integration shares: memories late in the conversation, never in the system message.

mem0's documented framework patterns put the retrieved memories into the **system message** each turn, so
the first bytes of every prompt change and an engine's prefix cache re-prefills the whole conversation.
Here the system message is fixed, the history follows unchanged, and the memory block (aligned order,
order annotation, location annotations) travels in the newest user message, just before the question::

    system      fixed text                               <- cached across turns and chats
    history     earlier turns (see the layouts)          <- cached: it is what the engine saw last turn
    user        Context:\\n[Doc 1] ...\\n\\n<annotations>\\n\\nQuestion: <question>

Two layouts (:data:`Layout`):

* ``"late"``: the history keeps each earlier question as the user typed it; only the newest user message
  carries memories. The prompt stays short, but the previous turn's user message changes (its memories are
  gone) so the engine re-prefills it, plus the new memories. No multi-turn dedup (nothing to point at).
* ``"append"`` (the paper's multi-turn design): each turn's user message stays in the history *as sent*,
  memories included, so the history is append-only and fully cached; memories already sent in an earlier
  turn are not sent again but replaced by a location annotation pointing at that turn's ``[Doc i]``.
  Prefills the least; the context grows by each turn's *fresh* memories.

This module is I/O-free except :meth:`ChatMemory.turn` / :meth:`ChatMemory.aturn`, two thin drivers of
the same steps. Before a de-duplicated turn is used, its pointers are checked against the history the
caller passes (:func:`pointers_resolve`); if the history does not hold the turns the pointers name, or the
``[Doc i]`` line a pointer names does not show the memory it stands for (a trimmed history, a restarted
process with a persisted history, two submits of one turn kept in another order), the turn is rolled back
and searched again without dedup, and the conversation stays without dedup: a pointer always names the
memory the model's history shows there.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core.blocks import normalize_text
from ..core.checks import one_of, positive_int
from ..core.lru import LRUMap
from ..core.prompt import (
    CONTEXT_HEAD,
    NO_CONTEXT_HEAD,
    QUESTION_MARK,
    PromptBlock,
    PromptContract,
    contract_of,
    one_line,
    prompt_contract,
)
from ..core.special_tokens import DEFAULT_SPECIAL_TOKENS
from ..memory.config import ContextPilotConfig

__all__ = [
    "CHAT_CONFIG",
    "DEFAULT_LAYOUT",
    "LAYOUTS",
    "ChatMemory",
    "Layout",
    "MemoryTurn",
    "as_wrapper",
    "context_messages",
    "is_context_message",
    "pointers_resolve",
    "question_of",
    "shows_block",
    "shows_memories",
    "user_content",
]

logger = logging.getLogger(__name__)

Layout = Literal["late", "append"]
LAYOUTS: tuple[str, ...] = ("late", "append")
#: chosen by measurement (docs/integrations.md): append-only history with dedup prefills the least
DEFAULT_LAYOUT: Layout = "append"

#: The wrapper settings of the chat layouts, chosen by measurement (docs/integrations.md): no over-fetch
#: (the paper's dedup: a turn's ``top_k`` memories are shown fresh or as pointers; over-fetching adds more
#: fresh memories and a pointer for each earlier one it re-finds, which costs more than it saves), no
#: alignment (the memories follow the history, so reordering cannot create a prefix hit, and an order
#: annotation would only add tokens) and bullet labels (``- text``: mem0's own list form, so turn 1 costs
#: what mem0's pattern costs; a pointer names an item by its position, ``turn 1 items 3, 7``; numbered
#: ``3 text`` costs the same up to 9 items, ``10`` one token more; ``[Doc 3]`` costs 4). A plain mem0
#: ``Memory`` is wrapped with these; ``ContextPilotMemory(memory, config=CHAT_CONFIG)`` builds such a
#: wrapper yourself.
CHAT_CONFIG = ContextPilotConfig(max_overfetch=0, align=False, labels="bullet")
_CHAT_FIELDS = ("max_overfetch", "align", "labels")


def user_content(query: str, response: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> str:
    """The newest user message: ``Context:`` + the rendered memories + annotations, then the question
    (:data:`cp_memory.render.USER_TEMPLATE`); just ``Question: ...`` when there is no context. The text of
    the search's prompt contract (:meth:`cp_memory.core.prompt.PromptContract.user_message`)."""
    return prompt_contract(response).user_message(query).text


def is_context_message(content: Any) -> bool:
    """Whether a user message's text (of a history the caller passes) was made by :func:`user_content` with
    memories in it."""
    return isinstance(content, str) and content.startswith(CONTEXT_HEAD) and QUESTION_MARK in content


def question_of(content: str) -> str:
    """The question inside a :func:`user_content` text of a history (any other text is returned unchanged)."""
    if is_context_message(content):
        return content.rsplit(QUESTION_MARK, 1)[1]
    if content.startswith(NO_CONTEXT_HEAD):
        return content[len(NO_CONTEXT_HEAD) :]
    return content


def context_messages(user_texts: Sequence[Any]) -> list[str]:
    """The user messages of a history that carried memories, in order: turn ``t`` is item ``t - 1``."""
    return [t for t in user_texts if is_context_message(t)]


def pointers_resolve(response: Mapping[str, Any] | Sequence[Any], contexts: Sequence[str]) -> bool:
    """Whether a de-duplicated turn fits the history: the history holds exactly the earlier turns (one
    context per committed turn) and each pointer names a ``[Doc i]`` line that shows the memory it stands
    for (same text), in the earlier turn it names or, for a same-text copy within this search, in this
    turn's own blocks.

    ``contexts``: the texts that carried earlier turns' memories, oldest first (user messages for the chat
    layouts, tool outputs for tools). A response without a dedup turn always fits.
    """
    contract = contract_of(response)
    turn = contract.turn if contract is not None else None
    if contract is None or turn is None:
        return True
    if len(contexts) != turn - 1:
        return False
    for p in contract.pointers:
        if p.turn == turn:  # a same-text copy of a block this very search shows
            if not _shows(contract.context.blocks, p.label, p.text, p.position):
                return False
        elif not 1 <= p.turn < turn or not shows_block(contexts[p.turn - 1], p.label, p.text, position=p.position):
            return False
    return True


def _shows(blocks: Sequence[PromptBlock], label: str, memory: str, position: int | None) -> bool:
    """Whether one of a contract's own block lines (the one at ``position``, when given) is ``label memory``
    (texts compared as in shows_block)."""
    want = _shown_form(memory)
    lines = blocks if position is None else blocks[position - 1 : position] if position >= 1 else ()
    return any(b.label == label and _shown_form(b.text) == want for b in lines)


def shows_block(text: str, label: str, memory: str, *, position: int | None = None) -> bool:
    """Whether ``text`` (a context of the history, or a user message carrying one) has the block line
    ``label memory``; with ``position``, as its ``position``-th block line (1-based), which is what a pointer
    names in the ``"bullet"`` style (every label there is ``-``).

    Only the block section counts (the lines before the first blank line of the context; never the
    annotations or the question); texts are compared as content dedup compares them (whitespace folded,
    case kept), with control tokens made inert on both sides."""
    if not isinstance(text, str):
        return False
    if text.startswith(CONTEXT_HEAD):
        text = text[len(CONTEXT_HEAD) :]
    lines = text.split("\n\n", 1)[0].splitlines()
    if position is not None:
        lines = lines[position - 1 : position] if position >= 1 else []
    head, want = f"{label} ", _shown_form(memory)
    return any(line.startswith(head) and _shown_form(line[len(head) :]) == want for line in lines)


def _shown_form(text: str) -> str:
    """A block text as the prompt shows it, for comparison: one line, control tokens made inert (idempotent,
    so a line already rendered with the default policy, or rendered with the policy off, compares equal to
    the raw memory), whitespace folded as content dedup folds it (case kept: case-only variants are other
    facts)."""
    return normalize_text(DEFAULT_SPECIAL_TOKENS.neutralise(one_line(text)))


def shows_memories(response: Any) -> bool:
    """Whether a search put anything in the prompt: a block or a pointer."""
    return prompt_contract(response).shows_memories


def as_wrapper(memory: Any) -> Any:
    """``memory`` if it is a ContextPilot wrapper; a plain mem0 ``Memory``/``AsyncMemory`` gets wrapped with
    :data:`CHAT_CONFIG` (no over-fetch, no alignment, bullet labels: what prefills the least in a chat,
    docs/integrations.md). A wrapper of your own whose settings differ is used as it is, with a warning."""
    from ..memory import AsyncContextPilotMemory, ContextPilotMemory

    if (
        callable(getattr(memory, "commit", None))
        and callable(getattr(memory, "rollback", None))
        and hasattr(memory, "cp_config")
    ):
        _check_settings(memory.cp_config)
        return memory
    from mem0 import AsyncMemory, AsyncMemoryClient, Memory, MemoryClient

    if isinstance(memory, (AsyncMemory, AsyncMemoryClient)):
        return AsyncContextPilotMemory(memory, config=CHAT_CONFIG)
    if isinstance(memory, (Memory, MemoryClient)):
        return ContextPilotMemory(memory, config=CHAT_CONFIG)
    raise TypeError(f"expected a mem0 Memory or a cp_memory ContextPilotMemory, got {type(memory).__name__}")


def _check_settings(config: Any) -> None:
    if not isinstance(config, ContextPilotConfig):
        return
    differ = {f: getattr(config, f) for f in _CHAT_FIELDS if getattr(config, f) != getattr(CHAT_CONFIG, f)}
    if differ:
        logger.warning(
            "this ContextPilotMemory has %s; in a chat that prefills more tokens than %s "
            "(docs/integrations.md): pass a plain mem0 Memory, or ContextPilotMemory(..., config=CHAT_CONFIG)",
            ", ".join(f"{k}={v!r}" for k, v in differ.items()),
            ", ".join(f"{k}={getattr(CHAT_CONFIG, k)!r}" for k in differ),
        )


@dataclass(frozen=True)
class MemoryTurn:
    """One turn's memories: what to send, and the search response to commit or roll back."""

    query: str  # what was searched
    response: Mapping[str, Any]
    content: str  # the newest user message: user_content(question, response)
    layout: Layout
    conversation_id: str | None  # the dedup conversation (None: no dedup this turn)
    filters: Mapping[str, Any] = field(default_factory=dict)
    question: str = ""  # the question shown (default: the query)

    @property
    def contract(self) -> PromptContract:
        """The search's prompt contract (:mod:`cp_memory.core.prompt`): what the prompt carries, typed."""
        return prompt_contract(self.response)

    @property
    def context(self) -> str:
        return self.contract.context.text

    @property
    def sent(self) -> list[Mapping[str, Any]]:
        """Memories replaced by pointers to earlier turns: the response's ``context_pilot["sent"]`` records
        (the typed ones: ``contract.pointers``)."""
        r = self.response
        info = r.get("context_pilot") if isinstance(r, Mapping) else getattr(r, "context_pilot", None)
        return list(info.get("sent") or ()) if isinstance(info, Mapping) else []

    @property
    def shows_memories(self) -> bool:
        return shows_memories(self.response)


class ChatMemory:
    """The integrations' shared engine: search, check the pointers, commit after the model answered.

    ``memory``: a :class:`~cp_memory.memory.ContextPilotMemory` (a plain mem0 ``Memory`` is wrapped).
    ``top_k`` and ``search_kwargs`` go to every search. Remembers (bounded) conversations whose history
    did not match their dedup record, which then run without dedup.
    """

    def __init__(
        self,
        memory: Any,
        *,
        layout: Layout = DEFAULT_LAYOUT,
        top_k: int = 10,
        search_kwargs: Mapping[str, Any] | None = None,
        max_conversations: int = 10_000,
    ) -> None:
        one_of(layout, "layout", LAYOUTS)
        positive_int(top_k, "top_k")
        extra = dict(search_kwargs or {})
        for reserved in ("query", "filters", "top_k", "conversation_id"):
            if reserved in extra:
                raise ValueError(f"search_kwargs must not set {reserved!r}; it is an argument of its own")
        self.memory = as_wrapper(memory)
        self.is_async = inspect.iscoroutinefunction(self.memory.search)
        self.layout: Layout = layout
        self.top_k = top_k
        self.search_kwargs = extra
        self._degraded: LRUMap[tuple[Any, ...], bool] = LRUMap(max_conversations)

    # ------------------------------------------------------------------ I/O-free steps
    def _conversation(self, filters: Mapping[str, Any], conversation_id: str | None) -> str | None:
        if self.layout != "append" or conversation_id is None:
            return None
        if not isinstance(conversation_id, str) or not conversation_id.strip():
            raise ValueError(f"conversation_id must be a non-empty str, got {conversation_id!r}")
        return None if self._degraded.get(_key(filters, conversation_id)) else conversation_id

    def _args(self, query: str, filters: Mapping[str, Any], conversation: str | None) -> dict[str, Any]:
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"query must be a non-empty str, got {query!r}")
        if not isinstance(filters, Mapping) or not filters:
            raise ValueError("filters must name whose memories to read, e.g. {'user_id': 'alice'}")
        return {"filters": dict(filters), "top_k": self.top_k, "conversation_id": conversation, **self.search_kwargs}

    def _degrade(self, filters: Mapping[str, Any], conversation: str) -> None:
        logger.warning(
            "conversation %r: the history does not hold the turns its dedup record names (trimmed or "
            "restored history?); continuing without dedup for this conversation",
            conversation,
        )
        self._degraded.set(_key(filters, conversation), True)
        try:
            self.memory.forget_conversation(conversation, filters=filters)
        except Exception:  # the record is unused from now on; failing to free it loses nothing
            logger.debug("forget_conversation failed", exc_info=True)

    def _turn(
        self, query: str, response: Any, filters: Mapping[str, Any], conversation: str | None, question: str | None
    ) -> MemoryTurn:
        shown = query if question is None else question
        return MemoryTurn(
            query=query,
            response=response,
            content=user_content(shown, response),
            layout=self.layout,
            conversation_id=conversation,
            filters=dict(filters),
            question=shown,
        )

    # ------------------------------------------------------------------ drivers
    def turn(
        self,
        query: str,
        *,
        filters: Mapping[str, Any],
        history: Sequence[Any] = (),
        conversation_id: str | None = None,
        question: str | None = None,
        contexts: Sequence[str] | None = None,
    ) -> MemoryTurn:
        """Search for one turn and lay out its user message; commit the turn once the model answered.

        To check dedup pointers, pass ``history`` (the texts of the user messages so far) or, for tools,
        ``contexts`` (the earlier turns' memory outputs visible to the model, oldest first). ``question``:
        the text shown as the question when it is not the search query."""
        if self.is_async:
            raise TypeError("this ChatMemory wraps an async memory: use `await aturn(...)`")
        conversation = self._conversation(filters, conversation_id)
        response = self.memory.search(query, **self._args(query, filters, conversation))
        if conversation is not None and not pointers_resolve(response, _contexts(history, contexts)):
            self.memory.rollback(response)
            self._degrade(filters, conversation)
            conversation = None
            response = self.memory.search(query, **self._args(query, filters, None))
        return self._turn(query, response, filters, conversation, question)

    async def aturn(
        self,
        query: str,
        *,
        filters: Mapping[str, Any],
        history: Sequence[Any] = (),
        conversation_id: str | None = None,
        question: str | None = None,
        contexts: Sequence[str] | None = None,
    ) -> MemoryTurn:
        """:meth:`turn` awaited: an async memory is awaited, a sync one runs in a worker thread."""
        conversation = self._conversation(filters, conversation_id)
        response = await self._asearch(query, self._args(query, filters, conversation))
        if conversation is not None and not pointers_resolve(response, _contexts(history, contexts)):
            self.memory.rollback(response)
            self._degrade(filters, conversation)
            conversation = None
            response = await self._asearch(query, self._args(query, filters, None))
        return self._turn(query, response, filters, conversation, question)

    async def _asearch(self, query: str, args: dict[str, Any]) -> Any:
        if self.is_async:
            return await self.memory.search(query, **args)
        return await asyncio.to_thread(self.memory.search, query, **args)

    def commit(self, turn: MemoryTurn) -> None:
        """The model answered a prompt carrying ``turn``: later turns may point at its memories.

        A turn that showed no memory is rolled back instead (it is no turn a pointer could name)."""
        if turn.shows_memories:
            self.memory.commit(turn.response)
        else:
            self.memory.rollback(turn.response)

    def rollback(self, turn: MemoryTurn) -> None:
        """The prompt carrying ``turn`` never reached the model. Idempotent."""
        self.memory.rollback(turn.response)


def _contexts(history: Sequence[Any], contexts: Sequence[str] | None) -> list[str]:
    if contexts is not None:
        if history:
            raise ValueError("pass history (user messages) or contexts (memory outputs), not both")
        return list(contexts)
    return context_messages(history)


def _key(filters: Mapping[str, Any], conversation: str) -> tuple[Any, ...]:
    return (tuple(sorted((str(k), repr(v)) for k, v in filters.items())), conversation)
