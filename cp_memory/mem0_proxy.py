"""A drop-in for mem0's chat proxy (``mem0.proxy.main.Mem0``) that works on mem0 >= 2 and keeps the prompt cache.

``from cp_memory.mem0_proxy import Mem0`` instead of ``from mem0.proxy.main import Mem0``; the rest of the
code stays::

    client = Mem0(config=config)            # or Mem0(api_key="m0-...") for the platform, or Mem0() offline
    answer = client.chat.completions.create(model="...", messages=[...], user_id="alice")
    answer.choices[0].message.content       # the openai SDK's ChatCompletion, as the provider sent it

What changes against mem0's own proxy (which on mem0ai 2.2.1 raises in ``search``, passes ``filters=`` to
``add`` and needs litellm):

* the search runs through :class:`~cp_memory.memory.wrappers.ContextPilotMemory` with mem0 2's
  ``filters={"user_id": ...}``: memories in the user's aligned order, memories sent in earlier turns of the
  conversation as location annotations (dedup);
* the memories are placed by the gateway's rule (:mod:`cp_memory.core.chat_memories`): at the start of the
  newest user message, and sent again with the earlier turns that carried them, so every earlier byte of the
  conversation stays what the engine or provider cached (mem0 rewrites the last user message into
  "- Relevant Memories/Facts: ... - User Question: ..." and sends the history without it next time);
* the model is called with the ``openai`` SDK (``base_url`` per call, ``Mem0(base_url=..., client=...)``,
  ``OPENAI_BASE_URL``, or the mem0 config's ``llm`` ``openai_base_url``), not litellm;
* the turn (the newest user message and the answer) is added to mem0 after the answer, by a background
  worker (bounded queue, retries, logged failures), with the scope the call named.

:class:`AsyncMem0` is the same over ``AsyncMemory`` / ``AsyncMemoryClient`` and ``openai.AsyncOpenAI``
(``await client.chat.completions.create(...)``). Both share one I/O-free flow (:class:`_Flow`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai

from .core.chat_memories import (
    CHAT_MEMORY_OPTIONS,
    DEFAULT_QUERY_TURNS,
    ChatShape,
    MemoryLog,
    memories_text,
    opening,
    place_memories,
    query_text,
    text_of,
)
from .core.drive import adrive_flow, drive_flow
from .core.prompt import contract_of
from .memory.background import Turn, TurnWriter
from .memory.wrappers import AsyncContextPilotMemory, ContextPilotMemory

__all__ = ["AsyncMem0", "Mem0"]

logger = logging.getLogger(__name__)

#: mem0's proxy's own system prompt, used when the messages bring none (as mem0's proxy does)
try:
    from mem0.configs.prompts import MEMORY_ANSWER_PROMPT
except ImportError:  # pragma: no cover
    MEMORY_ANSWER_PROMPT = "You are an expert at answering questions based on the provided memories."
#: arguments of mem0's proxy that belong to litellm, not to the openai SDK (dropped; ``base_url`` and
#: ``api_key`` choose the client of that call)
_LITELLM_ONLY = ("deployment_id", "model_list", "api_version")
_NO_LLM_HOST = "127.0.0.1:9"  # the embedded default's closed port: no LLM configured


@dataclass
class _Call:
    """One ``create`` call, prepared: what to search, the conversation, the client's messages."""

    client_messages: list[Any]
    messages: list[Any]
    scope: dict[str, str]
    search: dict[str, Any] | None
    base: str
    metadata: Mapping[str, Any] | None = None
    placed: int | None = None
    response: Any = None
    options: dict[str, Any] = field(default_factory=dict)


def _llm_config(config: Mapping[str, Any] | None) -> Mapping[str, Any]:
    llm = (config or {}).get("mem0", config or {}).get("llm") if isinstance(config, Mapping) else None
    inner = llm.get("config") if isinstance(llm, Mapping) else None
    return inner if isinstance(inner, Mapping) else {}


def _infers(config: Mapping[str, Any] | None, api_key: str | None) -> bool:
    """mem0's own default (``add`` infers facts with the store's LLM), except for cp_memory's offline store
    (no config: the embedded default; or a config whose LLM is its closed port): raw messages are stored."""
    if api_key:
        return True
    if config is None:
        return False
    return _NO_LLM_HOST not in str(_llm_config(config).get("openai_base_url", ""))


class _Flow:
    """The I/O-free steps of ``create`` (both drivers): prepare, place, finish."""

    def __init__(self, infer: bool, query_turns: int, max_conversations: int) -> None:
        self.infer = infer
        self.query_turns = query_turns
        self.log = MemoryLog(max_conversations)

    def prepare(self, messages: Sequence[Any] | None, ids: dict[str, Any], kwargs: dict[str, Any]) -> _Call:
        scope = {k: str(v) for k, v in ids.items() if v}
        if not scope:
            raise ValueError("One of user_id, agent_id, run_id must be provided")
        given = [dict(m) for m in (messages or [])]
        if not given or given[0].get("role") != "system":
            given = [{"role": "system", "content": MEMORY_ANSWER_PROMPT}, *given]
        base = "&".join(f"{k}={v}" for k, v in sorted(scope.items())) + "#" + opening(given)
        restored, conversation = self.log.restore(base, given)
        filters = {**(kwargs.pop("filters", None) or {}), **scope}
        text = query_text(given, self.query_turns) if given[-1].get("role") == "user" else ""
        search = None
        if text:
            limit = kwargs.pop("limit", None) or kwargs.pop("top_k", None) or 10
            search = {"query": text, "filters": filters, "top_k": int(limit), "conversation_id": conversation}
        kwargs.pop("limit", None), kwargs.pop("top_k", None)
        return _Call(given, restored, scope, search, base, kwargs.pop("metadata", None))

    def place(self, call: _Call, response: Any) -> list[Any]:
        """The messages to send: the found memories at the start of the newest user message."""
        contract = contract_of(response) if response is not None else None
        text = memories_text(contract) if contract is not None else None
        placed = place_memories(ChatShape.OPENAI, call.messages, text) if text is not None else None
        if placed is None:
            return call.messages
        call.placed, call.response = placed.index, response
        return placed.messages

    def finish(self, call: _Call, sent: list[Any], answer_text: str) -> Turn:
        """The request was answered: remember what was sent; the turn to add to mem0."""
        self.log.record(call.base, call.client_messages, sent, call.placed)
        user = text_of(call.client_messages[-1].get("content")).strip()
        turn: list[dict[str, Any]] = [{"role": "user", "content": user}] if user else []
        if answer_text.strip():
            turn.append({"role": "assistant", "content": answer_text.strip()})
        options: dict[str, Any] = {**call.scope, "infer": self.infer}
        if call.metadata:
            options["metadata"] = dict(call.metadata)
        return Turn(tuple(turn), options)


def _answer_text(answer: Any) -> str:
    """A ChatCompletion's text (a stream's: unknown, empty)."""
    choices = getattr(answer, "choices", None)
    if not choices:
        return ""
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    return content if isinstance(content, str) else ""


def _client_options(config: Mapping[str, Any] | None, base_url: str | None, api_key: str | None) -> dict[str, Any]:
    """The openai client's ``base_url`` and ``api_key``: given, else the environment, else the mem0 config's
    ``llm`` section (never the offline store's closed port)."""
    llm = _llm_config(config)
    url = base_url or os.environ.get("OPENAI_BASE_URL") or llm.get("openai_base_url")
    if url and _NO_LLM_HOST in str(url):
        url = None
    key = api_key or os.environ.get("OPENAI_API_KEY") or llm.get("api_key")
    if not key and url:
        key = "no-key"  # a local engine without a key: the SDK insists on one
    return {"base_url": url, "api_key": key}


def _open_memory(config: Mapping[str, Any] | None, api_key: str | None, host: str | None, asynchronous: bool) -> Any:
    """The wrapped store, with :data:`~cp_memory.core.chat_memories.CHAT_MEMORY_OPTIONS` (a config's own
    ``context_pilot`` part wins)."""
    wrapper = AsyncContextPilotMemory if asynchronous else ContextPilotMemory
    options = dict(CHAT_MEMORY_OPTIONS)
    if api_key:
        from mem0 import AsyncMemoryClient, MemoryClient

        hosted = AsyncMemoryClient if asynchronous else MemoryClient
        return wrapper(hosted(api_key=api_key, host=host), **options)
    if config:
        given = dict(config)
        split = "mem0" in given or "context_pilot" in given
        return wrapper.from_config(given if split else {"mem0": given, "context_pilot": options})
    from .embedded import default_memory

    store = default_memory(async_=True) if asynchronous else default_memory()
    return wrapper(store, **options)


class _Base:
    """Construction shared by :class:`Mem0` and :class:`AsyncMem0` (mem0's ``Mem0(config, api_key, host)``)."""

    _asynchronous = False

    def __init__(
        self,
        config: dict[str, Any] | None = None,
        api_key: str | None = None,
        host: str | None = None,
        *,
        base_url: str | None = None,
        llm_api_key: str | None = None,
        client: Any = None,
        memory: Any = None,
        infer: bool | None = None,
        query_turns: int = DEFAULT_QUERY_TURNS,
        max_conversations: int = 1024,
        add_queue: int = 256,
    ) -> None:
        """``config``: a mem0 config dict (``Memory.from_config``; also ``{"mem0": ..., "context_pilot": ...}``);
        ``api_key``/``host``: mem0's platform (``MemoryClient``); neither: cp_memory's offline default store.
        ``base_url``/``llm_api_key``/``client``: the model's OpenAI-compatible endpoint (default: the
        environment, then the config's ``llm`` section). ``memory``: a ready (wrapped) mem0 store.
        ``infer``: mem0 ``add``'s ``infer`` for the turns (default: mem0's, False for the offline store)."""
        self.config = config
        self.memory = memory if memory is not None else _open_memory(config, api_key, host, self._asynchronous)
        self._client_settings = _client_options(config, base_url, llm_api_key)
        self._client = client
        self._flow = _Flow(_infers(config, api_key) if infer is None else infer, query_turns, max_conversations)
        self._writer = TurnWriter(self.memory.add, capacity=add_queue)
        self.mem0_client = self.memory  # mem0's proxy's attribute name
        self.chat: Any = AsyncChat(self) if self._asynchronous else Chat(self)

    def _model_client(self, kwargs: dict[str, Any]) -> Any:
        """The openai client of one call (``base_url``/``api_key`` of the call build one of its own)."""
        for name in _LITELLM_ONLY:
            if kwargs.pop(name, None) is not None:
                logger.warning("mem0 proxy: %s is a litellm argument; ignored", name)
        url, key = kwargs.pop("base_url", None), kwargs.pop("api_key", None)
        kind = openai.AsyncOpenAI if self._asynchronous else openai.OpenAI
        if url or key:
            settings = {**self._client_settings, **{k: v for k, v in (("base_url", url), ("api_key", key)) if v}}
            return kind(**settings)
        if self._client is None:
            self._client = kind(**self._client_settings)
        return self._client

    def _settle(self, call: _Call, ok: bool) -> None:
        if call.response is None:
            return
        try:
            self.memory.commit(call.response) if ok else self.memory.rollback(call.response)
        except Exception:
            logger.exception("mem0 proxy: settling the memories' dedup turn failed")

    def _found(self, response: Any) -> Any:
        """The search's response when it shows memories; else its turn is rolled back and None."""
        contract = contract_of(response)
        if contract is not None and contract.shows_memories:
            return response
        self._settle(_Call([], [], {}, None, "", response=response), False)
        return None

    def flush(self, timeout_s: float = 60.0) -> bool:
        """Wait until the queued turns were added to mem0 (True), at most ``timeout_s`` seconds."""
        return self._writer.join(timeout_s)

    def close(self) -> None:
        """Finish the queued turns and stop the background worker."""
        self._writer.close()


def _prepare(owner: _Base, messages: Any, ids: dict[str, Any], mem0_args: dict[str, Any]) -> _Call:
    return owner._flow.prepare(messages, ids, {k: v for k, v in mem0_args.items() if v is not None})


@dataclass(frozen=True)
class _Step:
    """What ``create``'s flow asks its driver for: mem0's search (``sent`` None) or the model call on ``sent``."""

    query: Any = None
    search: dict[str, Any] = field(default_factory=dict)
    sent: list[Any] | None = None


def _create(owner: _Base, messages: Any, ids: dict[str, Any], args: dict[str, Any]) -> Generator[_Step, Any, Any]:
    """``create`` without I/O, for the sync and the async driver: the search (fail open: no memories), the
    placement, the model call (its turn settled either way), the turn queued for mem0's ``add``."""
    call = _prepare(owner, messages, ids, args)
    response = None
    if call.search is not None:
        query = call.search.pop("query")
        try:
            response = owner._found((yield _Step(query, call.search)))
        except Exception:  # fail open: the model is called without memories
            logger.exception("mem0 proxy: the memory search failed; calling the model without memories")
    sent = owner._flow.place(call, response)
    try:
        answer = yield _Step(sent=sent)
    except BaseException:
        owner._settle(call, False)
        raise
    owner._settle(call, True)
    owner._writer.submit(owner._flow.finish(call, sent, _answer_text(answer)))
    return answer


class Completions:
    """``client.chat.completions`` of :class:`Mem0`."""

    def __init__(self, owner: _Base) -> None:
        self._owner = owner

    def create(
        self,
        model: str,
        messages: list[Any] | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        filters: dict[str, Any] | None = None,
        limit: int | None = None,
        top_k: int | None = 10,
        **kwargs: Any,
    ) -> Any:
        """mem0's ``create``: memories searched for the scope and placed, the model called, the turn added
        after; returns the openai SDK's ``ChatCompletion`` (a ``Stream`` with ``stream=True``)."""
        gen = _create(
            self._owner,
            messages,
            {"user_id": user_id, "agent_id": agent_id, "run_id": run_id},
            {"filters": filters, "limit": limit, "top_k": top_k, "metadata": metadata},
        )
        owner = self._owner

        def answer(step: _Step) -> Any:
            if step.sent is None:
                return owner.memory.search(step.query, **step.search)
            return owner._model_client(kwargs).chat.completions.create(model=model, messages=step.sent, **kwargs)

        return drive_flow(gen, answer)


class Chat:
    def __init__(self, owner: _Base) -> None:
        self.completions = Completions(owner)


class Mem0(_Base):
    """Drop-in for ``mem0.proxy.main.Mem0``: ``Mem0(config=..., api_key=..., host=...)``, then
    ``.chat.completions.create(model, messages, user_id=..., ...)`` (see the module)."""


class AsyncCompletions:
    """``client.chat.completions`` of :class:`AsyncMem0`."""

    def __init__(self, owner: _Base) -> None:
        self._owner = owner

    async def create(
        self,
        model: str,
        messages: list[Any] | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        filters: dict[str, Any] | None = None,
        limit: int | None = None,
        top_k: int | None = 10,
        **kwargs: Any,
    ) -> Any:
        """The async twin of :meth:`Completions.create` (``await``)."""
        gen = _create(
            self._owner,
            messages,
            {"user_id": user_id, "agent_id": agent_id, "run_id": run_id},
            {"filters": filters, "limit": limit, "top_k": top_k, "metadata": metadata},
        )
        owner = self._owner

        def answer(step: _Step) -> Awaitable[Any]:
            if step.sent is None:
                return owner.memory.search(step.query, **step.search)  # type: ignore[no-any-return]
            create = owner._model_client(kwargs).chat.completions.create
            return create(model=model, messages=step.sent, **kwargs)  # type: ignore[no-any-return]

        return await adrive_flow(gen, answer)


class AsyncChat:
    def __init__(self, owner: _Base) -> None:
        self.completions = AsyncCompletions(owner)


class AsyncMem0(_Base):
    """:class:`Mem0` over ``AsyncMemory`` / ``AsyncMemoryClient`` and ``openai.AsyncOpenAI``."""

    _asynchronous = True
