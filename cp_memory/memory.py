"""ContextPilotMemory: a drop-in wrapper around a mem0 ``Memory`` that aligns, annotates and de-duplicates.

    from cp_memory.embedded import default_memory
    from cp_memory.memory import ContextPilotMemory
    from cp_memory.render import build_prompt

    memory = ContextPilotMemory(default_memory())          # or wrap any existing mem0 Memory
    memory.add("Alice lives in Lisbon", user_id="alice", infer=False)
    found = memory.search("Where does Alice live?", filters={"user_id": "alice", "run_id": "chat-1"})
    found["results"]          # mem0's own result dicts, in the aligned (cache-friendly) order
    found["context_pilot"]    # ranks, placement, dedup outcome, annotations, rendered context
    prompt = build_prompt("Where does Alice live?", found)

Per search:

1. mem0's ``search`` runs with the caller's arguments (``filters`` carries user/agent/run ids). With
   dedup on and a conversation that already sent memories, it asks for ``top_k`` plus (bounded) the
   number already sent, so the prompt still gets ``top_k`` fresh memories where mem0 has them.
2. Each result becomes ``ContextBlock(id=result["id"], text=result["memory"])``; the fresh ones are
   inserted into the user's :class:`~cp_memory.index.ContextIndex` under ``block.key`` = (id, text
   digest), so an edited memory never matches a prefix cached with its old text.
3. The placement's order (plus superset-alignment extras, other memories of the same user, re-read from
   mem0 and checked against their digest and owner) is de-duplicated against the conversation's earlier
   turns: already-sent memories are replaced by location annotations.
4. The response is mem0's ``{"results": [...]}`` with the same dicts in the aligned order, plus a
   ``"context_pilot"`` dict (:class:`ContextPilotInfo`). Any internal failure of steps 2-3 is logged and
   the search falls back to mem0's own order: memories are never lost.

Every other public method of mem0's Memory passes through unchanged.
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable

from .annotations import doc_label, order_annotation
from .blocks import ContextBlock
from .dedup import Deduplicator
from .index import ContextIndex, Placement
from .render import render_context

__all__ = [
    "ContextPilotInfo", "RenderedBlock", "LocationInfo", "ContextPilotMemory", "AsyncContextPilotMemory",
    "scope_of", "SCOPE_KEYS",
]

logger = logging.getLogger(__name__)

#: Filter keys that name whose memories a search reads, in the order used to pick the index's owner.
SCOPE_KEYS: tuple[str, ...] = ("user_id", "agent_id", "run_id")
_SNAPSHOT_SUFFIX = ".cpidx"


# ---------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class RenderedBlock:
    """One block as the prompt shows it."""

    label: str          # "[Doc 3]": position among the rendered blocks
    id: str             # mem0 memory id
    text: str
    extra: bool = False  # superset alignment brought it in; it was not retrieved for this query


@dataclass(frozen=True)
class LocationInfo:
    """A retrieved memory left out because it was sent in an earlier turn (or is a same-text copy)."""

    id: str             # the memory id that was left out
    turn: int           # turn in which the earlier copy was sent
    position: int       # its position in that turn
    label: str          # the label it had there
    annotation: str     # text put into the prompt instead of the memory


@dataclass(frozen=True)
class ContextPilotInfo:
    """What ContextPilot did to one search (``response["context_pilot"]`` is :meth:`to_dict`)."""

    scope: str | None                       # index owner, e.g. "user_id=alice"
    conversation_id: str | None             # dedup conversation (None: no dedup for this search)
    turn: int | None                        # 1-based turn in that conversation
    original_ids: tuple[str, ...]           # mem0's ranking of the returned results
    original_ranks: tuple[int, ...]         # per returned result (aligned order): 0-based mem0 rank
    order: tuple[str, ...]                  # memory ids in prompt order (kept retrieved + extra)
    prefix_len: int                         # leading rendered blocks already in the user's index
    extra: tuple[str, ...]                  # ids in ``order`` that were not retrieved (same user)
    request_id: str | None                  # index request id (None when nothing was inserted)
    duplicates: tuple[str, ...]             # retrieved ids replaced by location annotations
    locations: tuple[LocationInfo, ...]     # parallel to ``duplicates``
    order_annotation: str                   # "" when off or fewer than two retrieved blocks are shown
    blocks: tuple[RenderedBlock, ...]       # the rendered block section
    context: str                            # render_context(): blocks, then annotations
    fetched: int                            # results mem0 returned (top_k + over-fetch for dedup)
    fallback: bool = False                  # True: alignment/dedup failed, mem0's order is returned
    error: str | None = None                # the failure, when ``fallback``

    @property
    def location_annotations(self) -> tuple[str, ...]:
        return tuple(loc.annotation for loc in self.locations)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (lists, str, int, bool, None)."""
        return {
            "scope": self.scope,
            "conversation_id": self.conversation_id,
            "turn": self.turn,
            "original_ids": list(self.original_ids),
            "original_ranks": list(self.original_ranks),
            "order": list(self.order),
            "prefix_len": self.prefix_len,
            "extra": list(self.extra),
            "request_id": self.request_id,
            "duplicates": list(self.duplicates),
            "locations": [{"id": loc.id, "turn": loc.turn, "position": loc.position, "label": loc.label,
                           "annotation": loc.annotation} for loc in self.locations],
            "location_annotations": list(self.location_annotations),
            "order_annotation": self.order_annotation,
            "labels": {b.id: b.label for b in self.blocks},
            "blocks": [{"label": b.label, "id": b.id, "text": b.text, "extra": b.extra} for b in self.blocks],
            "context": self.context,
            "fetched": self.fetched,
            "fallback": self.fallback,
            "error": self.error,
        }


def scope_of(filters: Mapping[str, Any] | None) -> str | None:
    """The index owner of a search: ``user_id``, else ``agent_id``, else ``run_id`` (trimmed like mem0)."""
    if not isinstance(filters, Mapping):
        return None
    for key in SCOPE_KEYS:
        value = filters.get(key)
        if value is None or isinstance(value, (Mapping, list, tuple, set)):
            continue
        text = str(value).strip()
        if text:
            return f"{key}={text}"
    return None


# ---------------------------------------------------------------------------------------------- state
class _LRU:
    """Small thread-safe LRU map (instance state only)."""

    def __init__(self, capacity: int, on_evict: Callable[[Hashable, Any], None] | None = None) -> None:
        self.capacity = capacity
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._on_evict = on_evict

    def get_or_create(self, key: Hashable, factory: Callable[[], Any]) -> Any:
        evicted = []
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
                return item
            item = self._items[key] = factory()
            while len(self._items) > self.capacity:
                evicted.append(self._items.popitem(last=False))
        for k, v in evicted:
            if self._on_evict is not None:
                self._on_evict(k, v)
        return item

    def get(self, key: Hashable) -> Any:
        with self._lock:
            return self._items.get(key)

    def pop(self, key: Hashable) -> Any:
        with self._lock:
            return self._items.pop(key, None)

    def items(self) -> list[tuple[Hashable, Any]]:
        with self._lock:
            return list(self._items.items())

    def clear(self) -> list[tuple[Hashable, Any]]:
        with self._lock:
            out = list(self._items.items())
            self._items.clear()
            return out

    def __len__(self) -> int:
        return len(self._items)


@dataclass
class _UserState:
    scope: str
    index: ContextIndex
    requests: deque = field(default_factory=deque)
    lock: threading.Lock = field(default_factory=threading.Lock)
    unsaved: int = 0


@dataclass
class _Plan:
    """Step 1 outcome: what to ask mem0 for."""

    scope: str | None
    conversation: str | None
    top_k: Any
    fetch_k: Any


@dataclass
class _Aligned:
    """Step 2 outcome: the window of mem0 results, their blocks and the placement."""

    plan: _Plan
    response: Mapping[str, Any]
    results: list
    window: list
    blocks: dict                      # key -> ContextBlock (retrieved, window)
    pre_dup: list                     # ContextBlocks believed already sent (window order)
    placement: Placement | None
    extra_keys: tuple


class _Engine:
    """The I/O-free part of the wrapper, shared by the sync and async classes."""

    def __init__(self, *, alpha: float, annotate: bool, dedup: bool, extra_budget: float,
                 index_dir: str | os.PathLike[str] | None, max_users: int, max_conversations: int,
                 max_requests_per_user: int, max_overfetch: int, snapshot_every: int,
                 capacity_tokens: int | None, content_dedup: bool, tail_order: str) -> None:
        for name, value, low in (("max_users", max_users, 1), ("max_conversations", max_conversations, 1),
                                 ("max_requests_per_user", max_requests_per_user, 1),
                                 ("max_overfetch", max_overfetch, 0), ("snapshot_every", snapshot_every, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        # validate index options once, eagerly (a bad alpha should fail at construction, not first search)
        ContextIndex(alpha=alpha, extra_budget=extra_budget, capacity_tokens=capacity_tokens,
                     tail_order=tail_order)
        self.alpha = alpha
        self.annotate = annotate
        self.dedup_enabled = dedup
        self.extra_budget = extra_budget
        self.capacity_tokens = capacity_tokens
        self.tail_order = tail_order
        self.max_requests_per_user = max_requests_per_user
        self.max_overfetch = max_overfetch
        self.snapshot_every = snapshot_every
        self.index_dir = Path(index_dir) if index_dir is not None else None
        if self.index_dir is not None:
            self.index_dir.mkdir(parents=True, exist_ok=True)
        self.users = _LRU(max_users, on_evict=self._on_user_evicted)
        self.content_dedup = content_dedup
        self.deduplicator = Deduplicator(max_conversations=max_conversations, content=content_dedup)
        # what each conversation was sent (id -> digest), to pick the result window *before* dedup runs:
        # the Deduplicator is authoritative, this only sizes the over-fetch and keeps sent blocks out of
        # the index insert

    # ------------------------------------------------------------------ per-user index + persistence
    def _path(self, scope: str) -> Path:
        assert self.index_dir is not None
        name = hashlib.sha1(scope.encode("utf-8")).hexdigest()[:24]
        return self.index_dir / f"{name}{_SNAPSHOT_SUFFIX}"

    def _new_state(self, scope: str) -> _UserState:
        index = None
        if self.index_dir is not None:
            path = self._path(scope)
            if path.is_file():
                try:
                    index = ContextIndex.restore(path.read_bytes())
                    logger.debug("restored context index for %s (%d requests)", scope, len(index))
                except (OSError, ValueError):
                    logger.exception("could not restore context index for %s from %s; starting empty",
                                     scope, path)
        if index is None:
            index = ContextIndex(alpha=self.alpha, extra_budget=self.extra_budget,
                                 capacity_tokens=self.capacity_tokens, tail_order=self.tail_order)
        return _UserState(scope=scope, index=index, requests=deque(index.request_ids()))

    def state(self, scope: str) -> _UserState:
        return self.users.get_or_create(scope, lambda: self._new_state(scope))

    def _save(self, state: _UserState) -> None:
        if self.index_dir is None:
            return
        path = self._path(state.scope)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.write_bytes(state.index.snapshot())
            os.replace(tmp, path)
            state.unsaved = 0
        except Exception:
            logger.exception("could not snapshot context index for %s to %s", state.scope, path)
            tmp.unlink(missing_ok=True)

    def _on_user_evicted(self, scope: Hashable, state: _UserState) -> None:
        with state.lock:
            if state.unsaved:
                self._save(state)

    def flush(self) -> None:
        """Snapshot every user's index that changed since its last snapshot."""
        for _, state in self.users.items():
            with state.lock:
                if state.unsaved:
                    self._save(state)

    def drop(self, scope: str | None = None) -> None:
        """Forget one user's index (or all), in memory and on disk."""
        states = [(scope, self.users.pop(scope))] if scope is not None else self.users.clear()
        if self.index_dir is None:
            return
        paths = [self._path(s) for s, _ in states if s is not None] if scope is not None \
            else list(self.index_dir.glob(f"*{_SNAPSHOT_SUFFIX}"))
        for p in paths:
            p.unlink(missing_ok=True)

    # ------------------------------------------------------------------ the pipeline
    def plan(self, filters: Any, top_k: Any, conversation_id: Any) -> _Plan:
        scope = scope_of(filters)
        conversation = None
        if self.dedup_enabled and scope is not None:
            conv = conversation_id if conversation_id is not None else (
                filters.get("run_id") if isinstance(filters, Mapping) else None)
            if conv is not None and str(conv).strip():
                conversation = str(conv).strip()
        fetch_k = top_k
        valid_k = isinstance(top_k, int) and not isinstance(top_k, bool) and top_k > 0
        if conversation is not None and valid_k:
            sent = self.deduplicator.sent_count((scope, conversation))
            fetch_k = top_k + min(sent, self.max_overfetch)
        return _Plan(scope, conversation, top_k, fetch_k)

    def align(self, plan: _Plan, response: Any) -> _Aligned | None:
        """Pick the result window, build blocks, insert into the user's index. None: nothing to align."""
        if not isinstance(response, Mapping) or not isinstance(response.get("results"), list):
            return None
        results = response["results"]
        top_k = plan.top_k if isinstance(plan.top_k, int) and not isinstance(plan.top_k, bool) else len(results)
        window: list = []
        fresh: list[ContextBlock] = []
        pre_dup: list[ContextBlock] = []
        candidates = [ContextBlock(id=r["id"], text="" if r.get("memory") is None else str(r["memory"]))
                      for r in results]
        if plan.conversation is not None:
            # the deduplicator owns what was sent; ask it (without registering) which results it would drop
            sent_where = self.deduplicator.peek((plan.scope, plan.conversation), candidates)
        else:
            sent_where = (None,) * len(candidates)
        for r, block, where in zip(results, candidates, sent_where):
            if len(fresh) >= top_k:
                break
            window.append(r)
            (pre_dup if where is not None else fresh).append(block)
        blocks = {b.key: b for b in fresh}
        placement = None
        if plan.scope is not None and fresh:
            state = self.state(plan.scope)
            token_lens = [max(1, len(b.text) // 4) for b in fresh] if self.capacity_tokens else None
            with state.lock:
                placement = state.index.insert([b.key for b in fresh], token_lens=token_lens)
                state.requests.append(placement.request_id)
                while len(state.requests) > self.max_requests_per_user:
                    state.index.evict(state.requests.popleft())
                state.unsaved += 1
                if state.unsaved >= self.snapshot_every:
                    self._save(state)
        window_ids = {r["id"] for r in window}
        extra = tuple(k for k in placement.extra if k not in blocks and isinstance(k, tuple)
                      and k[0] not in window_ids) if placement is not None else ()
        return _Aligned(plan, response, results, window, blocks, pre_dup, placement, extra)

    def finish(self, aligned: _Aligned, extras: Mapping[Hashable, ContextBlock]) -> dict[str, Any]:
        """Dedup, label, annotate, render, reorder. ``extras``: verified extra blocks by key."""
        plan = aligned.plan
        if aligned.placement is not None:
            order = [aligned.blocks.get(k) or extras.get(k) for k in aligned.placement.order]
            candidates = [b for b in order if b is not None]
        else:
            candidates = list(aligned.blocks.values())
        extra_ids = {extras[k].id for k in aligned.extra_keys if k in extras}
        candidates += aligned.pre_dup
        turn = None
        locations: list[LocationInfo] = []
        duplicates: list[str] = []
        if plan.conversation is not None:
            conv_key = (plan.scope, plan.conversation)
            result = self.deduplicator.dedup(conv_key, candidates)
            turn = result.turn
            kept = list(result.blocks)
            for bid, loc, note in zip(result.duplicates, result.locations, result.annotations):
                if bid in extra_ids:
                    continue  # an extra block that was sent before: not retrieved, nothing to point to
                duplicates.append(bid)
                locations.append(LocationInfo(id=bid, turn=loc.turn, position=loc.position, label=loc.label,
                                              annotation=note))
        else:
            kept = candidates
        labels = {b.id: doc_label(i) for i, b in enumerate(kept, start=1)}
        rank = {r["id"]: i for i, r in enumerate(aligned.results)}
        retrieved_kept = [b.id for b in kept if b.id not in extra_ids]
        annotation = ""
        if self.annotate and len(retrieved_kept) >= 2:
            original = sorted(retrieved_kept, key=rank.__getitem__)
            annotation = order_annotation(original, retrieved_kept, label=labels)
        rendered = tuple(RenderedBlock(label=labels[b.id], id=b.id, text=b.text, extra=b.id in extra_ids)
                         for b in kept)
        context = render_context(kept, order_annotation=annotation or None,
                                 location_annotations=[loc.annotation for loc in locations])
        by_id = {r["id"]: r for r in aligned.window}
        out_ids = [bid for bid in retrieved_kept if bid in by_id]
        placed = set(out_ids)
        out_ids += [r["id"] for r in aligned.window if r["id"] not in placed]
        prefix_len = 0
        if aligned.placement is not None:
            kept_keys = [b.key for b in kept]
            for a, b in zip(kept_keys, aligned.placement.order[:aligned.placement.prefix_len]):
                if a != b:
                    break
                prefix_len += 1
        info = ContextPilotInfo(
            scope=plan.scope, conversation_id=plan.conversation, turn=turn,
            original_ids=tuple(r["id"] for r in aligned.window),
            original_ranks=tuple(rank[i] for i in out_ids),
            order=tuple(b.id for b in kept), prefix_len=prefix_len,
            extra=tuple(b.id for b in kept if b.id in extra_ids),
            request_id=None if aligned.placement is None else str(aligned.placement.request_id),
            duplicates=tuple(duplicates), locations=tuple(locations), order_annotation=annotation,
            blocks=rendered, context=context, fetched=len(aligned.results))
        return _respond(aligned.response, [by_id[i] for i in out_ids], info)

    def fallback(self, plan: _Plan, response: Any, exc: BaseException | None) -> Any:
        """mem0's own order, plainly rendered; the caller's top_k honoured."""
        if not isinstance(response, Mapping) or not isinstance(response.get("results"), list):
            return response
        results = response["results"]
        if isinstance(plan.top_k, int) and not isinstance(plan.top_k, bool):
            results = results[:plan.top_k]
        try:
            context = render_context(results)
            rendered = tuple(RenderedBlock(label=doc_label(i), id=r["id"], text=str(r.get("memory") or ""))
                             for i, r in enumerate(results, start=1))
        except Exception:
            logger.exception("rendering mem0 results failed too; context left empty")
            context, rendered = "", ()
        ids = tuple(str(r.get("id")) for r in results if isinstance(r, Mapping))
        info = ContextPilotInfo(
            scope=plan.scope, conversation_id=plan.conversation, turn=None, original_ids=ids,
            original_ranks=tuple(range(len(ids))), order=ids, prefix_len=0, extra=(), request_id=None,
            duplicates=(), locations=(), order_annotation="", blocks=rendered, context=context,
            fetched=len(response["results"]), fallback=True,
            error=None if exc is None else f"{type(exc).__name__}: {exc}")
        return _respond(response, list(results), info)

    @staticmethod
    def check_extra(key: Hashable, scope: str | None, item: Any) -> ContextBlock | None:
        """An extra block, if mem0's current copy still has that text and belongs to the same scope."""
        if not isinstance(item, Mapping) or scope is None or not isinstance(key, tuple):
            return None
        field_name, _, value = scope.partition("=")
        if str(item.get(field_name, "")).strip() != value:
            logger.warning("superset alignment proposed memory %s outside %s; dropped", key[0], scope)
            return None
        block = ContextBlock(id=item.get("id", key[0]), text=str(item.get("memory") or ""))
        return block if block.key == key else None


def _respond(response: Mapping[str, Any], results: list, info: ContextPilotInfo) -> dict[str, Any]:
    out = dict(response)
    out["results"] = results
    out["context_pilot"] = info.to_dict()
    return out


def _transient_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]
    try:
        from mem0.exceptions import NetworkError, RateLimitError
        errors += [NetworkError, RateLimitError]
    except ImportError:  # pragma: no cover
        pass
    try:
        import httpx
        errors.append(httpx.TransportError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(errors)


# ---------------------------------------------------------------------------------------------- wrappers
class _Base:
    """Shared construction, passthrough and introspection."""

    _OWN = frozenset({"_memory", "_engine", "_retry_kwargs", "_closed"})

    def __init__(self, memory: Any, *, alpha: float = 0.001, annotate: bool = True, dedup: bool = True,
                 extra_budget: float = 0.0, index_dir: str | os.PathLike[str] | None = None,
                 max_users: int = 1024, max_conversations: int = 10_000, max_requests_per_user: int = 1024,
                 max_overfetch: int = 50, snapshot_every: int = 16, capacity_tokens: int | None = None,
                 content_dedup: bool = True, tail_order: str = "frequency", retry_attempts: int = 3,
                 retry_wait_s: float = 0.05,
                 retry_on: tuple[type[BaseException], ...] | None = None) -> None:
        if memory is None:
            raise TypeError("ContextPilotMemory needs a mem0 Memory to wrap (see cp_memory.embedded.default_memory)")
        if not isinstance(retry_attempts, int) or retry_attempts < 1:
            raise ValueError(f"retry_attempts must be an int >= 1, got {retry_attempts!r}")
        self._memory = memory
        self._engine = _Engine(alpha=alpha, annotate=annotate, dedup=dedup, extra_budget=extra_budget,
                               index_dir=index_dir, max_users=max_users, max_conversations=max_conversations,
                               max_requests_per_user=max_requests_per_user, max_overfetch=max_overfetch,
                               snapshot_every=snapshot_every, capacity_tokens=capacity_tokens,
                               content_dedup=content_dedup, tail_order=tail_order)
        from tenacity import retry_if_exception_type, stop_after_attempt, wait_exponential
        self._retry_kwargs = MappingProxyType({
            "stop": stop_after_attempt(retry_attempts),
            "wait": wait_exponential(multiplier=retry_wait_s, max=2.0),
            "retry": retry_if_exception_type(retry_on if retry_on is not None else _transient_errors()),
            "reraise": True,
            "before_sleep": self._log_retry,
        })
        self._closed = False

    @staticmethod
    def _log_retry(state: Any) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        logger.warning("mem0 call failed (attempt %d): %r; retrying", state.attempt_number, exc)

    def __getattr__(self, name: str) -> Any:
        # only called for names not found on the wrapper: everything else of mem0's Memory passes through
        if name in _Base._OWN or name.startswith("__"):
            raise AttributeError(name)
        memory = self.__dict__.get("_memory")
        if memory is None:
            raise AttributeError(name)
        return getattr(memory, name)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | {n for n in dir(self._memory) if not n.startswith("__")})

    @property
    def memory(self) -> Any:
        """The wrapped mem0 Memory."""
        return self._memory

    @property
    def deduplicator(self) -> Deduplicator:
        return self._engine.deduplicator

    def index_for(self, filters: Mapping[str, Any]) -> ContextIndex:
        """The context index of the user a search with ``filters`` belongs to (created if new)."""
        scope = scope_of(filters)
        if scope is None:
            raise ValueError("filters must contain one of user_id, agent_id, run_id")
        return self._engine.state(scope).index

    @property
    def users(self) -> list[str]:
        """Scopes with an index in memory, least recently used first."""
        return [str(k) for k, _ in self._engine.users.items()]

    def forget_conversation(self, conversation_id: str, *, filters: Mapping[str, Any]) -> bool:
        """Drop a conversation's dedup record (its next search sends everything again)."""
        key = (scope_of(filters), str(conversation_id).strip())
        return self._engine.deduplicator.forget(key)

    def _drop_scopes(self, args: tuple, kwargs: dict) -> None:
        # after delete_all of exactly one user/agent/run, its index describes memories that are gone
        named = dict(zip(SCOPE_KEYS, args))
        named.update({k: v for k, v in kwargs.items() if k in SCOPE_KEYS})
        scope = scope_of(named)
        if scope is not None and len([v for v in named.values() if v is not None]) == 1:
            self._engine.drop(scope)

    def flush(self) -> None:
        """Snapshot changed indexes to ``index_dir`` now (also done every ``snapshot_every`` inserts)."""
        self._engine.flush()


class ContextPilotMemory(_Base):
    """Wraps a mem0 ``Memory``; same methods, ``search`` aligns/annotates/dedups. Thread-safe.

    Args:
        memory: the mem0 ``Memory`` to wrap.
        alpha: positional weight of the index's distance (paper Eq. 1).
        annotate: add the order annotation (the retriever's ranking, by label) after the blocks.
        dedup: replace memories sent earlier in the same conversation by location annotations. The
            conversation is ``conversation_id``, else ``filters["run_id"]``; none means no dedup.
        extra_budget: superset alignment (fraction of top_k): reuse a cached prefix that holds other
            memories of the same user; they are shown but not ranked in the order annotation.
        index_dir: folder for per-user index snapshots (restored on a user's first search).
        max_users: users whose index stays in memory (LRU; an evicted user is snapshotted first).
        max_conversations: conversations whose dedup record is kept (LRU).
        max_requests_per_user: live requests per index before the oldest is evicted.
        max_overfetch: bound on the extra results asked of mem0 to make up for deduplicated ones.
        snapshot_every: inserts between two snapshots of a user's index (when ``index_dir``).
        capacity_tokens: model the engine's cache size in each index (None: unbounded).
        content_dedup: also treat a different memory with the same normalized text as a duplicate.
        tail_order: ``"frequency"`` or ``"retrieval"`` order for blocks after the shared prefix.
        retry_attempts, retry_wait_s, retry_on: bounded retries of transient failures of mem0's
            ``search``/``get`` (network, rate limit, timeouts). Validation errors are never retried.
    """

    def search(self, query: str, *, filters: dict[str, Any] | None = None, top_k: int = 20,
               conversation_id: str | None = None, **mem0_kwargs: Any) -> dict[str, Any]:
        """mem0's ``search`` with the same arguments; results come back aligned, with ``context_pilot``."""
        engine = self._engine
        plan = engine.plan(filters, top_k, conversation_id)
        response = self._call(self._memory.search, query, top_k=plan.fetch_k, filters=filters, **mem0_kwargs)
        try:
            aligned = engine.align(plan, response)
            if aligned is None:
                return engine.fallback(plan, response, None)
            extras = {}
            for key in aligned.extra_keys:
                try:
                    item = self._call(self._memory.get, key[0])
                except Exception:
                    logger.warning("could not read extra memory %s; left out", key[0], exc_info=True)
                    continue
                block = engine.check_extra(key, plan.scope, item)
                if block is not None:
                    extras[key] = block
            return engine.finish(aligned, extras)
        except Exception as exc:
            logger.exception("ContextPilot alignment/dedup failed; returning mem0's own order")
            return engine.fallback(plan, response, exc)

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from tenacity import Retrying
        for attempt in Retrying(**self._retry_kwargs):
            with attempt:
                return fn(*args, **kwargs)
        raise AssertionError("unreachable")  # pragma: no cover

    # --- explicit passthroughs (everything else goes through __getattr__) ---------------------------
    def add(self, messages: Any, **kwargs: Any) -> Any:
        return self._memory.add(messages, **kwargs)

    def get(self, memory_id: str) -> Any:
        return self._memory.get(memory_id)

    def get_all(self, **kwargs: Any) -> Any:
        return self._memory.get_all(**kwargs)

    def update(self, memory_id: str, *args: Any, **kwargs: Any) -> Any:
        # the index keys blocks by (id, text digest): the new text never matches a prefix cached with the
        # old one, and the deduplicator sends an edited memory again
        return self._memory.update(memory_id, *args, **kwargs)

    def delete(self, memory_id: str) -> Any:
        return self._memory.delete(memory_id)

    def delete_all(self, *args: Any, **kwargs: Any) -> Any:
        result = self._memory.delete_all(*args, **kwargs)
        self._drop_scopes(args, kwargs)
        return result

    def history(self, memory_id: str) -> Any:
        return self._memory.history(memory_id)

    def reset(self) -> Any:
        result = self._memory.reset()
        self._engine.drop()
        return result

    def close(self) -> None:
        """Snapshot the indexes, then close the wrapped Memory."""
        if self._closed:
            return
        self._closed = True
        self._engine.flush()
        close = getattr(self._memory, "close", None)
        if callable(close):
            close()

    def __enter__(self) -> ContextPilotMemory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncContextPilotMemory(_Base):
    """Async twin of :class:`ContextPilotMemory` for mem0's ``AsyncMemory``: same arguments, same behaviour,
    every mem0 call awaited (``search``, ``get`` for extras, and the passthroughs)."""

    async def search(self, query: str, *, filters: dict[str, Any] | None = None, top_k: int = 20,
                     conversation_id: str | None = None, **mem0_kwargs: Any) -> dict[str, Any]:
        """mem0's ``search`` with the same arguments; results come back aligned, with ``context_pilot``."""
        engine = self._engine
        plan = engine.plan(filters, top_k, conversation_id)
        response = await self._call(self._memory.search, query, top_k=plan.fetch_k, filters=filters,
                                    **mem0_kwargs)
        try:
            aligned = engine.align(plan, response)
            if aligned is None:
                return engine.fallback(plan, response, None)
            extras = {}
            for key in aligned.extra_keys:
                try:
                    item = await self._call(self._memory.get, key[0])
                except Exception:
                    logger.warning("could not read extra memory %s; left out", key[0], exc_info=True)
                    continue
                block = engine.check_extra(key, plan.scope, item)
                if block is not None:
                    extras[key] = block
            return engine.finish(aligned, extras)
        except Exception as exc:
            logger.exception("ContextPilot alignment/dedup failed; returning mem0's own order")
            return engine.fallback(plan, response, exc)

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from tenacity import AsyncRetrying
        async for attempt in AsyncRetrying(**self._retry_kwargs):
            with attempt:
                return await fn(*args, **kwargs)
        raise AssertionError("unreachable")  # pragma: no cover

    async def add(self, messages: Any, **kwargs: Any) -> Any:
        return await self._memory.add(messages, **kwargs)

    async def get(self, memory_id: str) -> Any:
        return await self._memory.get(memory_id)

    async def get_all(self, **kwargs: Any) -> Any:
        return await self._memory.get_all(**kwargs)

    async def update(self, memory_id: str, *args: Any, **kwargs: Any) -> Any:
        return await self._memory.update(memory_id, *args, **kwargs)

    async def delete(self, memory_id: str) -> Any:
        return await self._memory.delete(memory_id)

    async def delete_all(self, *args: Any, **kwargs: Any) -> Any:
        result = await self._memory.delete_all(*args, **kwargs)
        self._drop_scopes(args, kwargs)
        return result

    async def history(self, memory_id: str) -> Any:
        return await self._memory.history(memory_id)

    async def reset(self) -> Any:
        result = await self._memory.reset()
        self._engine.drop()
        return result

    async def close(self) -> None:
        """Snapshot the indexes, then close the wrapped AsyncMemory (its ``close`` is sync in mem0 2.x)."""
        if self._closed:
            return
        self._closed = True
        self._engine.flush()
        close = getattr(self._memory, "close", None)
        if callable(close):
            out = close()
            if hasattr(out, "__await__"):
                await out

    async def __aenter__(self) -> AsyncContextPilotMemory:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
