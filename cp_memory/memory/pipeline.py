"""The search pipeline, I/O-free: mem0 results -> blocks -> index/alignment -> dedup -> render.

Written once and driven by two thin drivers (:mod:`.flow`), sync and async. Each step is a pure function
of its inputs plus the wrapper's own state (per-scope indexes, dedup records, pending turns):

1. :meth:`SearchPipeline.plan` — the scope, the dedup conversation and how many results to ask mem0 for
   (``top_k`` plus, bounded, the number of memories the conversation already sent);
2. :meth:`~SearchPipeline.window` — mem0's results become blocks; the first ``top_k`` *fresh* ones (not
   sent before, no same-text copy of another) form the window; duplicate ids are collapsed with a warning;
3. :meth:`~SearchPipeline.align` — the fresh blocks are inserted into the scope's context index, which
   returns the aligned order (plus superset/swap extras: ids to verify with mem0 before use);
4. :meth:`~SearchPipeline.finish` — extras that passed verification join, the conversation's dedup plan
   replaces already-sent memories by location annotations, labels and the order annotation (mem0's top
   ``annotate_top``, :func:`~cp_memory.core.annotations.owed_order_annotation`) are made and the context
   is rendered, once, into the typed prompt contract (:mod:`cp_memory.core.prompt`) the response carries
   for everything downstream. The turn is pending until committed (:mod:`.turns`), or committed at once
   (``commit="on_search"``).

Any failure of steps 2-4 falls back to mem0's own order (:meth:`fallback`, :mod:`.response`; never raises).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..core.annotations import block_label, grouped_locations, owed_order_annotation
from ..core.blocks import ContextBlock, blocks_from_mem0, estimate_tokens
from ..core.dedup import Deduplicator, DedupResult
from ..core.index import Placement
from ..core.prompt import RenderedContext, rendered_context
from ..core.scope import Scope
from ..state.ops import Op, run
from ..state.store import StateStore, Versioned
from .calls import SearchCall
from .config import ContextPilotConfig
from .filters import StoredCopy, admits
from .response import fallback_response, respond, results_of
from .shared import open_shared
from .state import ScopeState, ScopeStore
from .turns import Turns
from .types import ContextPilotInfo, RenderedBlock, SentMemory

__all__ = ["Aligned", "DedupTurn", "SearchPlan", "SearchPipeline", "Window"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class SearchPlan:
    """What one search asks of mem0: the call, its conversation (None: no dedup), how many results to fetch."""

    call: SearchCall
    conversation: str | None
    fetch_k: int | None
    #: with a shared store: the scope's index as read with the conversation's record (the token it was read
    #: against, the value), for the search's insert
    index_read: tuple[str, Versioned] | None = None


@dataclass(frozen=True)
class Window:
    """mem0's results for one search, split into the blocks the prompt can use."""

    plan: SearchPlan
    response: Any
    results: list[Mapping[str, Any]]  # mem0's results, ids collapsed (rank = position)
    fresh: list[ContextBlock]  # the first top_k not-yet-sent blocks, mem0 order
    pre_sent: list[ContextBlock]  # window results within top_k already sent (or same-text copies)
    short: int  # fresh blocks missing to reach top_k although mem0 had more
    passed: list[ContextBlock]  # already sent, ranked below top_k: left out without a pointer
    scanned: int  # results of mem0's list the window looked at


@dataclass(frozen=True)
class DedupTurn:
    """The blocks a search keeps after dedup and the turn it opened (none without a conversation)."""

    kept: list[ContextBlock]
    sent: tuple[SentMemory, ...] = ()  # retrieved memories replaced by pointers
    turn: int | None = None
    turn_id: str | None = None
    committed: bool = False


@dataclass(frozen=True)
class Aligned:
    window: Window
    state: ScopeState | None
    placement: Placement | None
    extra_keys: tuple[tuple[Hashable, str], ...]  # (id, digest) of extras to verify


class SearchPipeline:
    """The wrapper's state and the I/O-free steps of one search. Thread-safe."""

    def __init__(self, config: ContextPilotConfig, store: StateStore | None = None) -> None:
        self.config = config
        self.scopes = ScopeStore(config)
        self.shared = open_shared(config, self.scopes, store)  # None: in-process state (the default)
        self.deduplicator = (
            self.shared.deduplicator
            if self.shared is not None
            else Deduplicator(max_conversations=config.max_conversations, content=config.content_dedup)
        )
        self.turns = Turns(self.deduplicator, config.max_pending_turns, self.scopes, self.shared)

    # ------------------------------------------------------------------ store operations
    def run(self, op: Op[T]) -> T:
        """Drive a step with the sync store (or none: without a shared store no step asks for one)."""
        return run(op, None if self.shared is None else self.shared.state.store)

    def done(self) -> None:
        """The search's flow ended: its read of the conversation's shared record is not reused after it."""
        if self.shared is not None:
            self.shared.deduplicator.done()

    # ------------------------------------------------------------------ 1. plan
    def plan(self, call: SearchCall, conversation_id: Any) -> SearchPlan:
        return self.run(self.plan_op(call, conversation_id))

    def plan_op(self, call: SearchCall, conversation_id: Any) -> Op[SearchPlan]:
        """The plan; with a shared store, the search's one read of the conversation's record."""
        conversation = None
        if self.config.dedup and call.scope is not None:
            conv = conversation_id
            if conv is None and self.config.run_id_as_conversation:
                conv = call.scope.run_id
            if conv is not None:
                if not isinstance(conv, (str, int)) or isinstance(conv, bool) or not str(conv).strip():
                    raise TypeError(f"conversation_id must be a non-empty str, got {conversation_id!r}")
                conversation = str(conv).strip()
        fetch_k, index_read = call.top_k, None
        if conversation is not None and call.scope is not None:
            key = self._conversation_key(call.scope, conversation)
            if self.shared is not None:
                sent, index_read = yield from self._load_shared(call.scope, key)
            else:
                sent = self.deduplicator.sent_count(key)
            if call.top_k is not None:
                fetch_k = call.top_k + min(sent, self.config.max_overfetch)
        return SearchPlan(call, conversation, fetch_k, index_read)

    def _load_shared(self, scope: Scope, key: tuple[Scope, str]) -> Op[tuple[int, tuple[str, Versioned] | None]]:
        """The conversation's record and, where the search will align, the scope's index: one round trip."""
        assert self.shared is not None
        dedup = self.shared.deduplicator
        if not self.config.align:
            return (yield from dedup.load(key)), None
        index_key, have = self.shared.index_read(scope)
        got = yield from self.shared.state.read_many([(dedup.load_key(key), ""), (index_key, have)])
        sent = yield from dedup.loaded(key, None if got is None else got[0])
        return sent, None if got is None else (have, got[1])

    @staticmethod
    def _conversation_key(scope: Scope, conversation: str) -> tuple[Scope, str]:
        return (scope.entities, conversation)

    def refetch_k(self, window: Window) -> int | None:
        """A larger top_k when the window came up short because of same-text copies (one retry, bounded)."""
        plan = window.plan
        if window.short <= 0 or plan.fetch_k is None or plan.call.top_k is None:
            return None
        bound = plan.call.top_k + self.config.max_overfetch
        new_k = min(bound, plan.fetch_k + 2 * window.short)
        return new_k if new_k > plan.fetch_k else None

    # ------------------------------------------------------------------ 2. window
    def window(self, plan: SearchPlan, response: Any) -> Window | None:
        """Blocks of mem0's results; None when the response is not a result list (returned untouched)."""
        raw = results_of(response)
        if raw is None:
            return None
        converted = blocks_from_mem0(raw)  # ids checked, repeated ids collapsed (with a warning)
        results, blocks = list(converted.results), list(converted.blocks)
        top_k = plan.call.top_k if plan.call.top_k is not None else len(blocks)
        where: Sequence[Any] = (None,) * len(blocks)
        if plan.conversation is not None and plan.call.scope is not None:
            where = self.deduplicator.peek(self._conversation_key(plan.call.scope, plan.conversation), blocks)
        fresh: list[ContextBlock] = []
        pre_sent: list[ContextBlock] = []
        passed: list[ContextBlock] = []
        digests: set[str] = set()
        scanned = 0
        for rank, (block, loc) in enumerate(zip(blocks, where)):
            if len(fresh) >= top_k:
                break
            scanned += 1
            copy = (
                plan.conversation is not None
                and self.config.content_dedup
                and bool(block.text.strip())
                and block.digest in digests
            )
            if loc is not None or copy:
                # within mem0's top_k a sent memory gets a pointer (the paper's dedup); below it (reached only
                # by the over-fetch) it gets none: a plain top_k search would not have returned it at all
                (pre_sent if rank < top_k else passed).append(block)
            else:
                fresh.append(block)
                digests.add(block.digest)
        had_more = plan.fetch_k is not None and len(raw) >= plan.fetch_k
        short = top_k - len(fresh) if had_more and (pre_sent or passed) else 0
        return Window(plan, response, results, fresh, pre_sent, max(0, short), passed, scanned)

    # ------------------------------------------------------------------ 3. align
    def align(self, window: Window) -> Aligned:
        return self.run(self.align_op(window))

    def align_op(self, window: Window) -> Op[Aligned]:
        """The fresh blocks into the scope's index (with a shared store: read, insert, compare-and-set)."""
        scope = window.plan.call.scope
        if scope is None or not window.fresh or not self.config.align:
            return Aligned(window, None, None, ())
        state = self.scopes.get(scope)
        keys = [b.key for b in window.fresh]
        lens = [estimate_tokens(b.text) for b in window.fresh] if self.config.capacity_tokens else None
        if self.shared is not None:
            placement = yield from self.shared.insert(state, keys, lens, window.plan.index_read)
        else:
            placement = self._insert(state, keys, lens)
        fresh_keys = set(keys)
        window_ids = {b.id for b in window.fresh} | {b.id for b in window.pre_sent}
        extra = tuple(
            k
            for k in placement.extra
            if isinstance(k, tuple) and len(k) == 2 and k not in fresh_keys and k[0] not in window_ids
        )
        if extra and not window.plan.call.extras_allowed:
            logger.debug("superset/swap extras refused: the call narrows results in ways they cannot be checked for")
            extra = ()
        return Aligned(window, state, placement, extra)

    def _insert(self, state: ScopeState, keys: Sequence[Hashable], lens: list[int] | None) -> Placement:
        """One request into this process's index of the scope (the in-process store)."""
        with state.lock:
            placement = state.index.insert(keys, token_lens=lens)
            state.index.trim(self.config.max_requests_per_scope)  # the feed hears of it (ScopeStore.get)
            self.scopes.note_insert(state)
        return placement

    @staticmethod
    def reads_extras(aligned: Aligned) -> bool:
        """Where the store cannot decide (:mod:`.admission`: not mem0's Qdrant, or the hosted platform), may
        extras be read with ``get`` and checked here alone? Only for a scope of entity ids: entity ids never
        change, and their equality means the same on every store; other conditions (metadata, categories,
        operators) are left to stores, whose semantics differ."""
        scope = aligned.window.plan.call.scope
        return scope is not None and scope.pure

    def check_extra(self, aligned: Aligned, key: tuple[Hashable, str], copy: StoredCopy | None) -> ContextBlock | None:
        """An extra, if its current stored copy has the same text and passes the caller's whole filter set
        (:func:`.filters.admits`; the store already admitted it where it can decide)."""
        call = aligned.window.plan.call
        if copy is None or copy.id != str(key[0]):
            return None
        block = ContextBlock(id=key[0], text=copy.text)
        if block.key != key:
            return None  # edited since it was cached: its text would not hit the prefix anyway
        if not admits(call.filters, copy, show_expired=call.show_expired):
            logger.warning(
                "superset/swap alignment proposed memory %s outside the caller's filters (%s); left out",
                key[0],
                call.scope,
            )
            return None
        return block

    # ------------------------------------------------------------------ 4. finish
    def finish(self, aligned: Aligned, extras: Mapping[tuple[Hashable, str], ContextBlock]) -> Any:
        return self.run(self.finish_op(aligned, extras))

    def finish_op(self, aligned: Aligned, extras: Mapping[tuple[Hashable, str], ContextBlock]) -> Op[Any]:
        """Dedup, label, annotate, render; the response in mem0's shape plus ``context_pilot``."""
        window = aligned.window
        candidates, dropped = self._candidates(aligned, extras)
        dropped_ids = {k[0] if isinstance(k, tuple) else k for k in dropped}
        extra_ids = {b.id for b in extras.values()}
        rank = {r["id"]: i for i, r in enumerate(window.results)}
        turn = yield from self._dedup_turn(aligned, candidates + window.pre_sent, extra_ids, rank)
        style, kept = self.config.labels, turn.kept
        labels = {b.id: block_label(i, style) for i, b in enumerate(kept, start=1)}
        retrieved = [b.id for b in kept if b.id not in extra_ids]
        annotation = ""
        if self.config.annotate:  # mem0's top annotate_top, unless the prompt's order already shows them
            ranking = sorted(retrieved, key=rank.__getitem__)
            shown = [b.id for b in kept]
            annotation = owed_order_annotation(shown, ranking, labels, style=style, top=self.config.annotate_top)
        context = rendered_context(
            kept,
            order_annotation=annotation or None,
            location_annotations=list(dict.fromkeys(s.annotation for s in turn.sent)),  # a grouped line once
            special_tokens=self.config.special_tokens,
            labels=style,
            shared=self._shared(aligned, kept),
        )
        by_id = {r["id"]: r for r in window.results}
        out_ids = [i for i in retrieved if i in by_id and i not in dropped_ids]
        if self.config.results_order == "mem0":
            out_ids.sort(key=rank.__getitem__)
        info = self._info(aligned, turn, extra_ids, dropped_ids, annotation, context)
        return respond(window.response, [dict(by_id[i], rank=rank[i]) for i in out_ids], info)

    def _dedup_turn(
        self, aligned: Aligned, candidates: list[ContextBlock], extra_ids: set[Hashable], rank: Mapping[Hashable, int]
    ) -> Op[DedupTurn]:
        """The conversation's dedup plan of ``candidates`` (all kept without a conversation), opened as a
        pending turn or committed at once (``commit="on_search"``)."""
        plan, placement = aligned.window.plan, aligned.placement
        scope = plan.call.scope
        if plan.conversation is None or scope is None:
            self._track_now(aligned, candidates)
            return DedupTurn(candidates)
        key = self._conversation_key(scope, plan.conversation)
        result = self._dedup_plan(key, candidates, extra_ids, rank, plan.call.top_k)
        turn_id, committed = None, self.config.commit == "on_search"
        if committed:
            if self.shared is not None:
                result = yield from self.shared.deduplicator.commit_op(result)
            else:
                result = self.deduplicator.commit(result)
            self._track_now(aligned, result.blocks)
        else:  # pending: its section is tracked once the turn is committed (the prompt was sent)
            rid = None if placement is None else placement.request_id
            turn_id = self.turns.open(result, aligned.state, rid, self.scopes.engine.section(result.blocks))
        sent = self._sent_memories(result, candidates, extra_ids, rank)
        return DedupTurn(list(result.blocks), tuple(sent), result.turn, turn_id, committed)

    def _track_now(self, aligned: Aligned, blocks: Sequence[ContextBlock]) -> None:
        """Nothing to commit: the prompt counts as sent, so a followed engine feed tracks its section now."""
        if aligned.state is not None and aligned.placement is not None:
            section = self.scopes.engine.section(blocks)
            self.scopes.engine.track(aligned.state.index, aligned.placement.request_id, section)

    @staticmethod
    def _info(
        aligned: Aligned,
        turn: DedupTurn,
        extra_ids: set[Hashable],
        dropped_ids: set[Hashable],
        annotation: str,
        context: RenderedContext,
    ) -> ContextPilotInfo:
        """``context_pilot``: what the search did, for the caller and for commit/rollback; ``context`` the
        prompt's context as rendered (its text, annotation lines, shared prefix, each block as shown)."""
        window, placement, kept = aligned.window, aligned.placement, turn.kept
        scope = window.plan.call.scope
        return ContextPilotInfo(
            scope=str(scope) if scope is not None else None,
            conversation_id=window.plan.conversation,
            turn=turn.turn,
            turn_id=turn.turn_id,
            committed=turn.committed,
            original_ids=tuple(str(r["id"]) for r in window.results[: window.scanned]),
            passed=tuple(str(b.id) for b in window.passed),
            order=tuple(str(b.id) for b in kept),
            prefix_len=context.shared,
            extra=tuple(str(b.id) for b in kept if b.id in extra_ids),
            dropped=tuple(str(i) for i in dropped_ids),
            request_id=None if placement is None else str(placement.request_id),
            sent=turn.sent,
            order_annotation=annotation,
            blocks=tuple(
                RenderedBlock.of(shown, id=str(b.id), text=b.text, extra=b.id in extra_ids)
                for b, shown in zip(kept, context.blocks)
            ),
            context=context.text,
            annotations=context.annotations,
            fetched=len(window.results),
        )

    @staticmethod
    def _shared(aligned: Aligned, kept: Sequence[ContextBlock]) -> int:
        """Leading kept blocks that are the aligned prefix the scope's index already held."""
        placement = aligned.placement
        if placement is None:
            return 0
        shared = zip([k.key for k in kept], placement.order[: placement.prefix_len])
        return sum(1 for _ in itertools.takewhile(lambda ab: ab[0] == ab[1], shared))

    def _candidates(
        self, aligned: Aligned, extras: Mapping[tuple[Hashable, str], ContextBlock]
    ) -> tuple[list[ContextBlock], tuple[Hashable, ...]]:
        """The fresh blocks and verified extras in aligned order, and the keys swap dropped for extras."""
        window, placement = aligned.window, aligned.placement
        if placement is None:
            return list(window.fresh), ()
        by_key = {b.key: b for b in window.fresh}
        order = [by_key.get(k) or extras.get(k) for k in placement.order]  # type: ignore[call-overload]
        candidates = [b for b in order if b is not None]
        dropped = tuple(getattr(placement, "dropped", ()) or ())
        if dropped and len(extras) < len(aligned.extra_keys):
            # swap traded retrieved memories for extras that failed verification: put them all back
            placed = {b.key for b in candidates}
            candidates += [b for b in window.fresh if b.key not in placed]
            dropped = ()
        return candidates, dropped

    def _sent_memories(
        self,
        result: DedupResult,
        candidates: list[ContextBlock],
        extra_ids: set[Hashable],
        rank: Mapping[Hashable, int],
    ) -> list[SentMemory]:
        """A pointer record for each retrieved memory dedup left out (an extra sent before has none: it
        was not retrieved, there is nothing to point to); numbered labels share one line per turn."""
        style = self.config.labels
        texts = {b.id: b.text for b in candidates}
        sent = [
            SentMemory(
                id=str(d.block_id),
                turn=d.location.turn,
                position=d.location.position,
                label=block_label(d.location.position, style),
                annotation=d.annotation,
                rank=rank[d.block_id],
                text=texts.get(d.block_id, ""),
            )
            for d in result.dropped
            if d.block_id not in extra_ids
        ]
        if style != "doc" and sent:
            # one line for every pointer of the turn (annotations.grouped_locations)
            line = grouped_locations([(s.turn, s.position) for s in sent], turn=result.turn)
            sent = [s.model_copy(update={"annotation": line}) for s in sent]
        return sent

    def _dedup_plan(
        self,
        key: Hashable,
        candidates: list[ContextBlock],
        extra_ids: set[Hashable],
        rank: Mapping[Hashable, int],
        top_k: int | None,
    ) -> DedupResult:
        """The conversation's dedup plan of ``candidates``, keeping at most ``top_k`` retrieved memories.

        The window counted memories the conversation had sent as pointers, not as part of its ``top_k``
        fresh ones. If the record is gone by now (``forget_conversation``, or LRU eviction by other
        conversations, between the window and this plan), they are fresh again and the plan would keep
        more than ``top_k``. Then the lowest-ranked kept memories are left out, as a plain ``top_k`` search
        would leave them, and the turn is planned again (each round has fewer candidates: it ends).
        """
        while True:
            result = self.deduplicator.plan(key, candidates)
            shown = [b.id for b in result.blocks if b.id not in extra_ids]
            if top_k is None or len(shown) <= top_k:
                return result
            self.deduplicator.rollback(result)
            beyond = set(sorted(shown, key=rank.__getitem__)[top_k:])
            logger.debug("dedup record changed during the search; left out %d memories beyond top_k", len(beyond))
            candidates = [b for b in candidates if b.id not in beyond]

    def fallback(self, plan: SearchPlan, response: Any, exc: BaseException | None) -> Any:
        """mem0's own order, plainly rendered, top_k honoured. Never raises."""
        return fallback_response(self.config, plan.call, plan.conversation, response, exc)
