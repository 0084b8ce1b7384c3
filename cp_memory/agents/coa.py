"""Chain-of-Agents (Zhang et al. 2024) with ContextPilot's agent-aware routing.

Worker agents read the question's context one segment each, in sequence; each writes a *communication
unit* (CU) — a summary of its segment and of the previous CU — for the next worker; a manager answers
from the last CU. Prompts are the paper's (Tables 11–12), with the segment placed first so that it is the
reusable prefix of the worker prompt::

    {segment}
    Here is the summary of the previous source text: {previous_cu}
    Question: {question}
    You need to read current source text and summary of previous source text (if any) and ...

Reuse comes from three pieces:

* :class:`~cp_memory.agents.segment.Segmenter` packs the blocks into segments aligned with the segments built
  before, so recurring documents give byte-identical segments;
* :class:`~cp_memory.agents.routing.AgentRouter` sends each segment to the worker whose engine cache holds it;
* in a conversation (``conversation_id``), documents already processed in an earlier turn are not sent
  again (:class:`cp_memory.core.dedup.Deduplicator`): a location annotation (``Please refer to [Doc X] in the
  previous conversation (turn 1).``) and the CU that turn ended with take their place, ahead of this
  turn's chain.

Questions are independent: :meth:`ChainOfAgents.answer_many` / :meth:`~ChainOfAgents.aanswer_many` run
many chains concurrently (sequential within a question, parallel across questions); a failure is reported
for its question only, as a :class:`ChainOfAgentsError`. Turns of one conversation must run in order.

One flow for sync and async: :meth:`ChainOfAgents.plan` (no I/O) then :meth:`ChainOfAgents.flow`, a
generator with no I/O that yields each engine request and returns the :class:`CoAResult`; the drivers
:func:`~cp_memory.agents.flow.drive` (sync clients) and :func:`~cp_memory.agents.flow.adrive` (async
clients) send the requests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import warnings
from collections.abc import Generator, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cp_memory.core.blocks import ContextBlock, text_digest
from cp_memory.core.checks import positive_int
from cp_memory.core.dedup import Deduplicator

from .config import ChainConfig, config_fields
from .conversation import Conversations
from .errors import ChainOfAgentsError
from .flow import adrive, drive
from .prompts import (
    manager_prompt,
    worker_prompt,
)
from .records import (
    CallStats,
    CoAPlan,
    CoAQuery,
    CoAResult,
    EngineCall,
    FlowStep,
    Role,
    RouterStep,
)
from .routes import Route
from .routing import AgentRouter
from .segment import Segment, Segmenter

__all__ = ["ChainOfAgents"]

logger = logging.getLogger(__name__)


class ChainOfAgents:
    """Chain-of-Agents over an :class:`AgentRouter`'s workers (see module doc).

    Args:
        router: the worker pool; its clients are sync (:meth:`answer`) or async (:meth:`aanswer`).
        config: the chain's settings (:class:`ChainConfig`; default ``ChainConfig()``).
        segmenter: a shared :class:`Segmenter` (default: a new one with ``config.segment_tokens``).
        manager: client for the manager call; None routes it through ``router`` like a request with
            nothing to reuse (least-loaded worker).
        dedup: a shared :class:`Deduplicator` for conversations (default: a new one remembering
            ``config.max_conversations`` conversations).
        **options: deprecated: :class:`ChainConfig` fields given one by one (``worker_max_tokens=48``,
            ...), applied over ``config`` with a ``DeprecationWarning``; they will be removed in the next
            release.
    """

    def __init__(
        self,
        router: AgentRouter[Any],
        *,
        config: ChainConfig | None = None,
        segmenter: Segmenter | None = None,
        manager: Any | None = None,
        dedup: Deduplicator | None = None,
        **options: Any,
    ) -> None:
        if not isinstance(router, AgentRouter):
            raise TypeError(f"router must be an AgentRouter, got {type(router).__name__}")
        if config is not None and not isinstance(config, ChainConfig):
            raise TypeError(f"config must be a ChainConfig, got {type(config).__name__}")
        cfg = config if config is not None else ChainConfig()
        if options:
            unknown = sorted(set(options) - config_fields())
            if unknown:
                raise TypeError(f"ChainOfAgents() got unexpected keyword argument(s): {', '.join(unknown)}")
            warnings.warn(
                f"ChainOfAgents({', '.join(f'{k}=...' for k in options)}) is deprecated and will be removed in "
                "the next release: pass config=ChainConfig(...) instead",
                DeprecationWarning,
                stacklevel=2,
            )
            cfg = dataclasses.replace(cfg, **options)
        self.router = router
        self.config = cfg
        self.segmenter = segmenter if segmenter is not None else Segmenter(cfg.segment_tokens)
        self.manager = manager
        self.conversations = Conversations(dedup, max_conversations=cfg.max_conversations)
        prefix = cfg.manager_template.split("{", 1)[0]
        self._manager_prefix = (("manager-prefix", text_digest(prefix)),) if prefix and cfg.manager_affinity else ()
        self._manager_prefix_tokens = tuple(self.segmenter.token_len(prefix) for _ in self._manager_prefix)

    # ------------------------------------------------------------------ planning (no I/O)
    def plan(
        self,
        question: str,
        blocks: Sequence[ContextBlock],
        *,
        conversation_id: Hashable | None = None,
        tag: Hashable | None = None,
    ) -> CoAPlan:
        """Dedup (in a conversation) and segment a question's blocks; no I/O.

        In a conversation the turn is only *planned* (:meth:`Deduplicator.plan`): :meth:`run` commits
        it once the chain succeeded and rolls it back if it fails, so a failed question asked again
        sends its documents again. A plan that is never run expires with the deduplicator's
        ``max_pending``.
        """
        if not isinstance(question, str):
            raise TypeError(f"question must be str, got {type(question).__name__}")
        if blocks is None or isinstance(blocks, (str, bytes)) or not isinstance(blocks, Sequence):
            raise TypeError(f"blocks must be a list or tuple of ContextBlock, got {type(blocks).__name__}")
        blocks = list(blocks)
        if conversation_id is None:
            return CoAPlan(
                question=question,
                segments=self.segmenter.split(blocks),
                first_cu="",
                conversation_id=None,
                turn=None,
                duplicates=(),
                annotations=(),
                tag=tag,
            )
        t = self.conversations.plan(conversation_id, blocks, label_template=self.segmenter.label_template)
        try:
            segments = self.segmenter.split(list(t.blocks))
        except BaseException:
            self.conversations.rollback(t.pending)
            raise
        return CoAPlan(
            question=question,
            segments=segments,
            first_cu=t.first_cu,
            conversation_id=conversation_id,
            turn=t.turn,
            duplicates=t.duplicates,
            annotations=t.annotations,
            tag=tag,
            dedup=t.pending,
        )

    @property
    def dedup(self) -> Deduplicator:
        """The conversations' :class:`Deduplicator`."""
        return self.conversations.dedup

    def forget(self, conversation_id: Hashable) -> bool:
        """Drop a conversation's dedup record and CUs."""
        return self.conversations.forget(conversation_id)

    # ------------------------------------------------------------------ the chain (no I/O)
    def flow(self, plan: CoAPlan) -> Generator[FlowStep, Any, CoAResult]:
        """The chain of ``plan`` as an I/O-free generator: yields each :class:`EngineCall` (workers in
        chain order, then the manager), each preceded by the :class:`RouterStep` that routes it and followed
        by the one that releases it, is sent each step's result (or thrown its exception), returns
        the :class:`CoAResult`. Failures are raised as :class:`ChainOfAgentsError`; on any failure the
        worker is released and the conversation's turn is rolled back. Run it with
        :func:`~cp_memory.agents.flow.drive` / :func:`~cp_memory.agents.flow.adrive`."""
        t0 = time.perf_counter()
        cu = plan.first_cu
        cus: list[str] = []
        calls: list[CallStats] = []
        try:
            for seg in plan.segments:
                cu, stats = yield from self._worker_step(plan, seg, cu)
                cus.append(cu)
                calls.append(stats)
            answer, stats = yield from self._manager_step(plan, cu)
            calls.append(stats)
        except BaseException:
            if plan.dedup is not None:
                self.conversations.rollback(plan.dedup)
            raise
        turn = plan.turn
        if plan.dedup is not None:
            turn = self.conversations.commit(plan.dedup, cus[-1] if cus else plan.first_cu)
        return CoAResult(
            question=plan.question,
            answer=answer,
            cus=tuple(cus),
            calls=tuple(calls),
            segments=plan.segments,
            wall_s=time.perf_counter() - t0,
            conversation_id=plan.conversation_id,
            turn=turn,
            duplicates=plan.duplicates,
            annotations=plan.annotations,
            tag=plan.tag,
        )

    def _worker_step(
        self, plan: CoAPlan, seg: Segment, previous_cu: str
    ) -> Generator[FlowStep, Any, tuple[str, CallStats]]:
        """One worker: reads ``seg`` and the previous CU on the worker the router picks; returns its CU."""
        cfg = self.config
        prompt = worker_prompt(
            seg.text, previous_cu, plan.question, cfg.worker_template, special_tokens=self.segmenter.special_tokens
        )
        route: Route = yield RouterStep(
            self.router,
            "route",
            seg.keys,
            {
                "token_lens": seg.token_lens,
                "tail_key": "worker",
                "home_key": seg.ids[0],
                "tail_tokens": self._tail(prompt[len(seg.text) :], cfg.worker_max_tokens),
                "text": seg.text,  # the segment opens the worker prompt: a worker's feed tracks it
            },
        )
        res = yield from self._call(
            plan,
            "worker",
            seg.position,
            route,
            self.router.client(route.worker),
            prompt,
            max_tokens=cfg.worker_max_tokens,
            request_id=route.request_id,
        )
        stats = CallStats.of(role="worker", step=seg.position, route=route, seg=seg, res=res, manager_name="")
        return res.text.strip(), stats

    def _manager_step(self, plan: CoAPlan, last_cu: str) -> Generator[FlowStep, Any, tuple[str, CallStats]]:
        """The manager: answers the question from the last CU; returns the answer."""
        cfg = self.config
        prompt = manager_prompt(
            last_cu, plan.question, cfg.manager_template, special_tokens=self.segmenter.special_tokens
        )
        route = yield from self._manager_route(prompt)
        client = self.manager if route is None else self.router.client(route.worker)
        step = len(plan.segments)
        res = yield from self._call(
            plan,
            "manager",
            step,
            route,
            client,
            prompt,
            max_tokens=cfg.manager_max_tokens,
            request_id=route.request_id if route is not None else None,
            stop=list(cfg.manager_stop) if cfg.manager_stop else None,
        )
        stats = CallStats.of(role="manager", step=step, route=route, seg=None, res=res, manager_name="manager")
        return res.text.strip(), stats

    def _manager_route(self, prompt: str) -> Generator[FlowStep, Any, Route | None]:
        """The manager's worker, routed like a request whose only reusable part is the manager template's
        fixed prefix; None with a dedicated ``manager`` client."""
        if self.manager is not None:
            return None
        prefix = sum(self._manager_prefix_tokens)
        tail = self._tail(prompt, self.config.manager_max_tokens)
        # one tail per prefix, as for workers: llama.cpp's prompt cache takes the cached manager
        # prompt out to reuse its prefix and saves the new one in its place
        route: Route = yield RouterStep(
            self.router,
            "route",
            self._manager_prefix,
            {
                "token_lens": self._manager_prefix_tokens,
                "tail_tokens": max(0, tail - prefix) if tail else 0,
                "tail_key": "manager",
            },
        )
        return route

    def _tail(self, text: str, max_tokens: int) -> int:
        """Tokens a prompt's non-reusable part and its generation take in the engine cache (0: not modelled)."""
        return self.segmenter.token_len(text) + max_tokens if self.config.model_tails else 0

    def _call(
        self, plan: CoAPlan, role: Role, step: int, route: Route | None, client: Any, prompt: str, **kwargs: Any
    ) -> Generator[FlowStep, Any, Any]:
        """One engine call: yield it, release the worker (failed on error), map errors."""
        name = route.worker_name if route is not None else "manager"
        chat = self.config.chat
        call = EngineCall(
            client=client,
            method="chat" if chat else "complete",
            payload=[{"role": "user", "content": prompt}] if chat else prompt,
            kwargs={"temperature": self.config.temperature, **kwargs},
            worker_name=name,
        )
        try:
            res = yield call
        except Exception as exc:
            if route is not None:
                yield RouterStep(self.router, "release", route, {"ok": False})
            raise self._fail(plan, role, step, name, exc) from exc
        except BaseException:  # cancelled, interrupted: free the worker at once (no await), propagate as is
            if route is not None:
                self.router.release(route, ok=False)
            raise
        if route is not None:
            yield RouterStep(self.router, "release", route, {"ok": True})
        return res

    @staticmethod
    def _fail(plan: CoAPlan, role: Role, step: int, name: str, exc: Exception) -> ChainOfAgentsError:
        what = f"worker step {step + 1}/{len(plan.segments)}" if role == "worker" else "manager"
        msg = (
            f"Chain-of-Agents failed for question {plan.question[:80]!r} at the {what} on {name}: "
            f"{type(exc).__name__}: {exc}"
        )
        logger.warning("%s", msg)
        return ChainOfAgentsError(msg, question=plan.question, role=role, step=step, worker_name=name, tag=plan.tag)

    # ------------------------------------------------------------------ drivers
    def run(self, plan: CoAPlan) -> CoAResult:
        """Run a :meth:`plan` with sync clients. Raises :class:`ChainOfAgentsError`."""
        return drive(self.flow(plan))

    async def arun(self, plan: CoAPlan) -> CoAResult:
        """Run a :meth:`plan` with async clients. Raises :class:`ChainOfAgentsError`."""
        return await adrive(self.flow(plan))

    def answer(
        self,
        question: str,
        blocks: Sequence[ContextBlock],
        *,
        conversation_id: Hashable | None = None,
        tag: Hashable | None = None,
    ) -> CoAResult:
        """Run the chain for one question with sync clients. Raises :class:`ChainOfAgentsError`."""
        return self.run(self.plan(question, blocks, conversation_id=conversation_id, tag=tag))

    async def aanswer(
        self,
        question: str,
        blocks: Sequence[ContextBlock],
        *,
        conversation_id: Hashable | None = None,
        tag: Hashable | None = None,
    ) -> CoAResult:
        """:meth:`answer` with async clients."""
        return await self.arun(self.plan(question, blocks, conversation_id=conversation_id, tag=tag))

    def answer_many(
        self, queries: Sequence[CoAQuery], *, max_concurrency: int = 4
    ) -> list[CoAResult | ChainOfAgentsError]:
        """Answer many questions concurrently (threads); a failed question yields its error in place."""
        _check_concurrency(max_concurrency)

        def one(q: CoAQuery) -> CoAResult | ChainOfAgentsError:
            try:
                return self.answer(q.question, q.blocks, conversation_id=q.conversation_id, tag=q.tag)
            except ChainOfAgentsError as exc:
                return exc

        with ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="coa") as pool:
            return list(pool.map(one, queries))

    async def aanswer_many(
        self, queries: Sequence[CoAQuery], *, max_concurrency: int = 4
    ) -> list[CoAResult | ChainOfAgentsError]:
        """:meth:`answer_many` with async clients (at most ``max_concurrency`` chains at a time)."""
        _check_concurrency(max_concurrency)
        sem = asyncio.Semaphore(max_concurrency)

        async def one(q: CoAQuery) -> CoAResult | ChainOfAgentsError:
            async with sem:
                try:
                    return await self.aanswer(q.question, q.blocks, conversation_id=q.conversation_id, tag=q.tag)
                except ChainOfAgentsError as exc:
                    return exc

        return list(await asyncio.gather(*(one(q) for q in queries)))


def _check_concurrency(max_concurrency: int) -> None:
    positive_int(max_concurrency, "max_concurrency")
