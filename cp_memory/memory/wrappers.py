"""ContextPilotMemory and its twins: mem0 objects whose ``search`` aligns, annotates and de-duplicates.

=====================================  =========================================
wraps                                  wrapper (``isinstance`` of the mem0 class)
=====================================  =========================================
``mem0.Memory``                        :class:`ContextPilotMemory`
``mem0.AsyncMemory``                   :class:`AsyncContextPilotMemory`
``mem0.MemoryClient`` (hosted)         :class:`ContextPilotMemoryClient`
``mem0.AsyncMemoryClient`` (hosted)    :class:`AsyncContextPilotMemoryClient`
=====================================  =========================================

``ContextPilotMemory(client)`` / ``AsyncContextPilotMemory(async_client)`` pick the hosted class for you.
Every attribute other than the wrapper's own names reads and writes the wrapped object (see
:mod:`.proxy`). The search itself is :func:`.flow.search_flow`, driven sync or async.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from mem0 import AsyncMemory, AsyncMemoryClient, Memory, MemoryClient

from ..core.dedup import Deduplicator
from ..core.engine_cache import EngineCache
from ..core.index import ContextIndex
from ..core.scope import ENTITY_KEYS, entity_ids, scope_of
from ..providers.account import Savings, SavingsAccount
from ..state.ops import run
from .admission import store_admission
from .calls import SearchCall, hosted_call, local_call
from .config import ContextPilotConfig
from .errors import FiltersTypeError
from .flow import adrive_search, drive_search, search_flow
from .pipeline import SearchPipeline
from .proxy import (
    OWN_NAMES,
    ForwardingProxy,
    retrying,
    transient_errors,
    with_conversation,
)

__all__ = [
    "AsyncContextPilotMemory",
    "AsyncContextPilotMemoryClient",
    "ContextPilotMemory",
    "ContextPilotMemoryClient",
    "FiltersTypeError",
]

logger = logging.getLogger(__name__)


def _default_top_k(search: Any) -> int | None:
    try:
        default = inspect.signature(search).parameters["top_k"].default
    except (KeyError, TypeError, ValueError):
        return None
    return default if isinstance(default, int) and not isinstance(default, bool) else None


def _split_config(config_dict: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    if not isinstance(config_dict, Mapping):
        raise TypeError(f"from_config takes a dict, got {type(config_dict).__name__}")
    if "mem0" in config_dict or "context_pilot" in config_dict:
        unknown = set(config_dict) - {"mem0", "context_pilot"}
        if unknown:
            raise ValueError(f"from_config: unknown top-level keys {sorted(unknown)}; use 'mem0' and 'context_pilot'")
        return dict(config_dict.get("mem0") or {}), dict(config_dict.get("context_pilot") or {})
    return dict(config_dict), None


class _Wrapper(ForwardingProxy):
    """Construction, state and the wrapper's own methods, shared by the four classes."""

    _cp_async: ClassVar[bool] = False
    _cp_hosted: ClassVar[bool] = False
    _cp_kind: ClassVar[type] = object

    def __init__(
        self,
        memory: Any,
        config: ContextPilotConfig | dict[str, Any] | None = None,
        *,
        retry_on: tuple[type[BaseException], ...] | None = None,
        **options: Any,
    ) -> None:
        if memory is None:
            raise TypeError(
                f"{type(self).__name__} needs a mem0 object to wrap (e.g. cp_memory.embedded.default_memory())"
            )
        search = getattr(memory, "search", None)
        if not callable(search):
            raise TypeError(f"{type(self).__name__} wraps a mem0 Memory; {type(memory).__name__} has no search()")
        if inspect.iscoroutinefunction(search) != self._cp_async:
            want = "AsyncContextPilotMemory" if not self._cp_async else "ContextPilotMemory"
            raise TypeError(
                f"{type(memory).__name__}.search is {'async' if not self._cp_async else 'sync'}: "
                f"wrap it with {want}, not {type(self).__name__}"
            )
        self._cp_wrapped = memory
        self._cp_config = ContextPilotConfig.from_kwargs(config, **options)
        self._cp_pipeline = SearchPipeline(self._cp_config)
        self._cp_retry_on = retry_on if retry_on is not None else transient_errors()
        self._cp_default_top_k = _default_top_k(search)
        self._cp_savings = SavingsAccount()

    # ------------------------------------------------------------------ internals
    def _cp_retrying(self, fn: Any) -> Any:
        c = self._cp_config
        return retrying(fn, c.retry_attempts, c.retry_wait_s, self._cp_retry_on)

    def _cp_call(self, query: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> SearchCall:
        # the local Memory fails on a non-dict ``filters`` with an unhelpful AttributeError: named here; the
        # hosted client sends it on (the platform decides), and so does its wrapper
        if not self._cp_hosted and not isinstance(kwargs.get("filters", {}), (Mapping, type(None))):
            raise FiltersTypeError(
                f"filters must be a dict such as {{'user_id': 'alice'}}, got "
                f"{type(kwargs['filters']).__name__} {kwargs['filters']!r:.80}"
            )
        if self._cp_hosted:
            return hosted_call(query, args, kwargs, self._cp_default_top_k)
        return local_call(query, args, kwargs, self._cp_default_top_k)

    def _cp_search(self, query: Any, args: tuple[Any, ...], conversation_id: Any, kwargs: dict[str, Any]) -> Any:
        flow = search_flow(self._cp_pipeline, self._cp_call(query, args, kwargs), conversation_id)
        wrapped = self._cp_wrapped
        admit = None if self._cp_hosted else self._cp_retrying(store_admission(wrapped, asynchronous=self._cp_async))
        search, get, shared = (
            self._cp_retrying(wrapped.search),
            self._cp_retrying(wrapped.get),
            self._cp_pipeline.shared,
        )
        if self._cp_async:  # the shared store's async side: the event loop never waits on it
            return adrive_search(flow, search, get, admit, None if shared is None else shared.state.astore)
        return drive_search(flow, search, get, admit, None if shared is None else shared.state.store)

    def _cp_forget_entities(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        named: dict[str, Any] = {}
        if args and not self._cp_hosted:
            named.update(zip(ENTITY_KEYS, args))
        elif args and hasattr(args[0], "model_dump"):
            named.update(args[0].model_dump(exclude_unset=True))
        named.update(kwargs)
        ids = entity_ids(named)
        if ids:
            self._cp_pipeline.scopes.forget_matching(ids)

    # ------------------------------------------------------------------ own API
    @property
    def wrapped(self) -> Any:
        """The wrapped mem0 object."""
        return self._cp_wrapped

    @property
    def cp_config(self) -> ContextPilotConfig:
        """This wrapper's :class:`~cp_memory.memory.config.ContextPilotConfig` (``mem0``'s own is ``.config``)."""
        return self._cp_config

    @property
    def deduplicator(self) -> Deduplicator:
        return self._cp_pipeline.deduplicator

    @property
    def scopes(self) -> list[str]:
        """Scopes with an index in memory, least recently used first."""
        return [str(s) for s, _ in self._cp_pipeline.scopes.states.items()]

    def index_for(self, filters: Mapping[str, Any]) -> ContextIndex:
        """The context index of the scope a search with ``filters`` belongs to (created if new)."""
        scope = scope_of(filters)
        if scope is None:
            raise ValueError("filters must contain at least one of user_id, agent_id, run_id")
        return self._cp_pipeline.scopes.get(scope).index

    def commit(
        self, response: Any, usage: Any = None, *, model: str | None = None, preamble: str | None = None
    ) -> int | None:
        """The turn of ``response`` was sent to the model: register its memories as sent.

        Returns the committed turn number (None when the search had no conversation). Raises
        ``ValueError`` for a turn committed or rolled back before. ``usage``: the model's reply (or its
        ``usage``, a stream's :class:`~cp_memory.providers.CacheUsage`): added to :meth:`savings`; odd usage
        counts as zeros, never raises. ``preamble``: with a followed engine feed, the prompt's text before the
        memory lines as sent (system prompt, template head): the turn's request binds to exactly that
        prompt's cached chain (else to the chain a prompt holding its lines used last).
        """
        turn = self._cp_pipeline.turns.commit(response, preamble=preamble)
        if usage is not None:
            self._cp_savings.add(usage, model=model)
        return turn

    @property
    def savings_account(self) -> SavingsAccount:
        """This wrapper's running prompt-cache account (``set_prices(model, PriceRatios(...))``, ``log_every``)."""
        return self._cp_savings

    def savings(self, *, log: bool = False) -> Savings:
        """Prompt-cache totals of the usage passed to :meth:`commit`: tokens read, written, uncached, and the
        input cost at list-price ratios; ``log=True`` also logs them at INFO."""
        return self._cp_savings.log() if log else self._cp_savings.summary()

    def rollback(self, response: Any) -> None:
        """The turn of ``response`` was not sent (the model call failed): forget it. Idempotent."""
        self._cp_pipeline.turns.rollback(response)

    @contextlib.contextmanager
    def sending(self, response: Any) -> Iterator[Any]:
        """``with memory.sending(response): call_the_model(...)`` commits on success, rolls back on error."""
        try:
            yield response
        except BaseException:
            self.rollback(response)
            raise
        self.commit(response)

    def forget_conversation(self, conversation_id: str, *, filters: Mapping[str, Any]) -> bool:
        """Drop a conversation's dedup record (its next search sends everything again)."""
        scope = scope_of(filters)
        if scope is None:
            raise ValueError("filters must contain at least one of user_id, agent_id, run_id")
        return self._cp_pipeline.deduplicator.forget((scope.entities, str(conversation_id).strip()))

    def save(self) -> None:
        """Snapshot changed indexes to ``index_dir`` now (also done every ``snapshot_every`` inserts)."""
        self._cp_pipeline.scopes.save()

    def follow_engine(self, engine: EngineCache | None) -> None:
        """Keep every scope's index in step with an engine's KV-cache events (vLLM, SGLang).

        ``engine``: an :class:`~cp_memory.core.engine_cache.EngineCache`, e.g. a started
        :class:`cp_memory.engine.EngineCacheFeed`; None stops following. Every index — in memory now,
        created or restored later — is attached: its ``capacity_tokens`` model is paused while the feed is
        healthy and resumes when it is lost (garbage, a gap, a dead engine: logged, no search fails). Each
        search's block section is tracked under its index request — on :meth:`commit` for a conversation
        turn (the prompt was sent), at once otherwise — and the request leaves the index as soon as the
        engine drops one of the blocks that section (or the prompt before it) occupies.
        """
        self._cp_pipeline.scopes.follow(engine)

    # ------------------------------------------------------------------ mem0 methods with a side effect
    def delete_all(self, *args: Any, **kwargs: Any) -> Any:
        self._cp_forget_entities(args, kwargs)  # before the call: an index of deleted memories is useless
        return self._cp_wrapped.delete_all(*args, **kwargs)

    def reset(self, *args: Any, **kwargs: Any) -> Any:
        self._cp_pipeline.scopes.forget_all()
        return self._cp_wrapped.reset(*args, **kwargs)

    def close(self, *args: Any, **kwargs: Any) -> Any:
        self.save()
        return self._cp_wrapped.close(*args, **kwargs)


def _mem0_like(cls: type, *names: str) -> None:
    """Give the wrapper's side-effect methods mem0's signature and docstring (``help()``, ``inspect``)."""

    def dress(ours: Any, theirs: Any) -> Any:
        if inspect.iscoroutinefunction(theirs):  # async def stays async def (code checks iscoroutinefunction)

            @functools.wraps(theirs)
            async def amethod(self: Any, *args: Any, **kwargs: Any) -> Any:
                return await ours(self, *args, **kwargs)

            return amethod

        @functools.wraps(theirs)
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            return ours(self, *args, **kwargs)

        return method

    for name in names:
        theirs = getattr(cls._cp_kind, name, None)  # type: ignore[attr-defined]
        if theirs is not None:
            setattr(cls, name, dress(getattr(_Wrapper, name), theirs))


class _AsyncTurns:
    """``acommit`` / ``arollback``: :meth:`_Wrapper.commit` / :meth:`_Wrapper.rollback` for async code. With a
    shared state store (``state_store="redis://..."``) they wait on Redis with ``await`` (the sync ones
    block the calling thread, the event loop's included, up to ``state_timeout_s``); without one they are
    the same as the sync ones."""

    _cp_pipeline: SearchPipeline
    _cp_savings: SavingsAccount

    async def acommit(
        self, response: Any, usage: Any = None, *, model: str | None = None, preamble: str | None = None
    ) -> int | None:
        """:meth:`commit`, awaiting the shared store."""
        turns, shared = self._cp_pipeline.turns, self._cp_pipeline.shared
        op = turns.commit_op(response, preamble=preamble)
        turn = await shared.state.arun(op) if shared is not None else run(op, None)
        if usage is not None:
            self._cp_savings.add(usage, model=model)
        return turn

    async def arollback(self, response: Any) -> None:
        """:meth:`rollback`, awaiting the shared store. Idempotent."""
        turns, shared = self._cp_pipeline.turns, self._cp_pipeline.shared
        op = turns.rollback_op(response)
        await shared.state.arun(op) if shared is not None else run(op, None)


class ContextPilotMemory(_Wrapper, Memory):
    """A mem0 ``Memory`` whose ``search`` aligns, annotates and de-duplicates memories. Thread-safe.

    ``ContextPilotMemory(memory, config=ContextPilotConfig(...))`` or keyword options
    (``ContextPilotMemory(memory, extra_budget=0.1)``); see :class:`~cp_memory.memory.config.ContextPilotConfig`.
    Wrapping a hosted ``MemoryClient`` returns a :class:`ContextPilotMemoryClient`.
    """

    _cp_kind = Memory

    def __new__(cls, memory: Any = None, *args: Any, **kwargs: Any) -> Any:
        if cls is ContextPilotMemory and isinstance(memory, MemoryClient):
            return ContextPilotMemoryClient(memory, *args, **kwargs)
        return object.__new__(cls)

    @with_conversation(Memory.search)
    def search(self, query: str, *args: Any, conversation_id: str | None = None, **kwargs: Any) -> Any:
        return self._cp_search(query, args, conversation_id, kwargs)

    @classmethod
    def from_config(cls, config_dict: dict[str, Any]) -> ContextPilotMemory:  # type: ignore[override]
        """``Memory.from_config`` then wrap: ``{"mem0": {...}, "context_pilot": {...}}`` or a plain mem0 config."""
        mem0_part, cp_part = _split_config(config_dict)
        wrapper: ContextPilotMemory = cls(Memory.from_config(mem0_part), config=cp_part)
        return wrapper

    def __enter__(self) -> ContextPilotMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncContextPilotMemory(_AsyncTurns, _Wrapper, AsyncMemory):
    """The same for mem0's ``AsyncMemory``: ``await memory.search(...)``; ``close()`` is sync, like mem0's."""

    _cp_async = True
    _cp_kind = AsyncMemory

    def __new__(cls, memory: Any = None, *args: Any, **kwargs: Any) -> Any:
        if cls is AsyncContextPilotMemory and isinstance(memory, AsyncMemoryClient):
            return AsyncContextPilotMemoryClient(memory, *args, **kwargs)
        return object.__new__(cls)

    @with_conversation(AsyncMemory.search)
    async def search(self, query: str, *args: Any, conversation_id: str | None = None, **kwargs: Any) -> Any:
        return await self._cp_search(query, args, conversation_id, kwargs)

    @classmethod
    def from_config(cls, config_dict: dict[str, Any]) -> AsyncContextPilotMemory:  # type: ignore[override]
        """``AsyncMemory.from_config`` then wrap (same config shapes as ContextPilotMemory.from_config)."""
        mem0_part, cp_part = _split_config(config_dict)
        wrapper: AsyncContextPilotMemory = cls(AsyncMemory.from_config(mem0_part), config=cp_part)
        return wrapper

    async def __aenter__(self) -> AsyncContextPilotMemory:
        return self

    async def __aexit__(self, *exc: object) -> bool:
        self.close()
        return False


_HOSTED_OWN = OWN_NAMES - {"close", "from_config", "__enter__", "__exit__", "__aenter__", "__aexit__"}


class ContextPilotMemoryClient(_Wrapper, MemoryClient):
    """mem0's hosted ``MemoryClient``, wrapped: every argument reaches the platform unchanged (only
    ``top_k`` grows when dedup must make up for memories already sent). Snapshots: call ``save()``."""

    _cp_hosted = True
    _cp_kind = MemoryClient
    _OWN = _HOSTED_OWN

    @with_conversation(MemoryClient.search)
    def search(self, query: str, *args: Any, conversation_id: str | None = None, **kwargs: Any) -> Any:
        return self._cp_search(query, args, conversation_id, kwargs)


class AsyncContextPilotMemoryClient(_AsyncTurns, _Wrapper, AsyncMemoryClient):
    """mem0's hosted ``AsyncMemoryClient``, wrapped (see :class:`ContextPilotMemoryClient`)."""

    _cp_async = True
    _cp_hosted = True
    _cp_kind = AsyncMemoryClient
    _OWN = _HOSTED_OWN

    @with_conversation(AsyncMemoryClient.search)
    async def search(self, query: str, *args: Any, conversation_id: str | None = None, **kwargs: Any) -> Any:
        return await self._cp_search(query, args, conversation_id, kwargs)


for _cls in (ContextPilotMemory, AsyncContextPilotMemory, ContextPilotMemoryClient, AsyncContextPilotMemoryClient):
    _mem0_like(_cls, "delete_all", "reset", "close")
for _cls in (ContextPilotMemory, AsyncContextPilotMemory):
    _ours, _theirs = _cls.__dict__["from_config"].__func__, _cls._cp_kind.from_config
    _ours.__signature__ = inspect.signature(_theirs.__func__)  # (cls, config_dict): bound, as mem0's
    _ours.__doc__ = (inspect.getdoc(_theirs) or "") + "\n\n" + (_ours.__doc__ or "")
