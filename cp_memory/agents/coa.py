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
  again (:class:`cp_memory.dedup.Deduplicator`): a location annotation (``Please refer to [Doc X] in the
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
import logging
import time
from collections.abc import Generator, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cp_memory.blocks import ContextBlock, text_digest
from cp_memory.dedup import Deduplicator

from .conversation import Conversations
from .flow import adrive, drive
from .prompts import (
    MANAGER_TEMPLATE,
    PRIOR_TURN_TEMPLATE,
    WORKER_TEMPLATE,
    check_worker_template,
    manager_prompt,
    worker_prompt,
)
from .records import (
    AsyncCompletionClient,
    CallStats,
    ChainOfAgentsError,
    CoAPlan,
    CoAQuery,
    CoAResult,
    CompletionLike,
    EngineCall,
    Role,
    SyncCompletionClient,
)
from .routing import AgentRouter, Route
from .segment import Segmenter

__all__ = [
    "MANAGER_TEMPLATE",
    "PRIOR_TURN_TEMPLATE",
    "WORKER_TEMPLATE",
    "AsyncCompletionClient",
    "CallStats",
    "ChainOfAgents",
    "ChainOfAgentsError",
    "CoAPlan",
    "CoAQuery",
    "CoAResult",
    "CompletionLike",
    "SyncCompletionClient",
    "manager_prompt",
    "worker_prompt",
]

logger = logging.getLogger(__name__)


class ChainOfAgents:
    """Chain-of-Agents over an :class:`AgentRouter`'s workers (see module doc).

    Args:
        router: the worker pool; its clients are sync (:meth:`answer`) or async (:meth:`aanswer`).
        segment_tokens: token budget of one worker's segment (ignored when ``segmenter`` is given).
        segmenter: a shared :class:`Segmenter` (default: a new one with ``segment_tokens``).
        manager: client for the manager call; None routes it through ``router`` like a request with
            nothing to reuse (least-loaded worker).
        worker_max_tokens, manager_max_tokens: generation limits (CU length, answer length).
        manager_stop: stop sequences of the manager's answer (None: stop at ``manager_max_tokens``).
        chat: send each prompt as one user message (``client.chat``) instead of a raw completion, for
            instruct models; the chat template's fixed header keeps the segment a shared prefix.
        temperature: sampling temperature of every call.
        dedup: a shared :class:`Deduplicator` for conversations (default: a new one).
        max_conversations: conversations whose CUs are remembered (least recently used dropped).
        model_tails: tell the router how many tokens each prompt adds after its segment (previous CU,
            question, instructions, generated tokens: the segmenter's ``token_len`` estimate), so its
            per-worker cache models fill up as the engines' caches do (an engine caches whole prompts).
        manager_affinity: route manager calls by their recurring prefix (the manager template's fixed
            text) like any other reusable block: they then share one worker's cache while it is not
            overloaded, instead of spreading their one-off prompts over every worker's cache.
    """

    def __init__(
        self,
        router: AgentRouter[Any],
        *,
        segment_tokens: int = 1024,
        segmenter: Segmenter | None = None,
        manager: Any | None = None,
        worker_max_tokens: int = 128,
        manager_max_tokens: int = 32,
        manager_stop: Sequence[str] | None = None,
        temperature: float = 0.0,
        chat: bool = False,
        dedup: Deduplicator | None = None,
        max_conversations: int = 10_000,
        worker_template: str = WORKER_TEMPLATE,
        manager_template: str = MANAGER_TEMPLATE,
        model_tails: bool = True,
        manager_affinity: bool = True,
    ) -> None:
        if not isinstance(router, AgentRouter):
            raise TypeError(f"router must be an AgentRouter, got {type(router).__name__}")
        for name, v in (("worker_max_tokens", worker_max_tokens), ("manager_max_tokens", manager_max_tokens)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        check_worker_template(worker_template)
        self.router = router
        self.segmenter = segmenter if segmenter is not None else Segmenter(segment_tokens)
        self.manager = manager
        self.worker_max_tokens = worker_max_tokens
        self.manager_max_tokens = manager_max_tokens
        self.manager_stop = list(manager_stop) if manager_stop else None
        self.temperature = temperature
        self.chat = chat
        self.conversations = Conversations(dedup, max_conversations=max_conversations)
        self.max_conversations = max_conversations
        self.worker_template = worker_template
        self.manager_template = manager_template
        self.model_tails = model_tails
        self.manager_affinity = manager_affinity
        prefix = manager_template.split("{", 1)[0]
        self._manager_prefix = (("manager-prefix", text_digest(prefix)),) if prefix and manager_affinity else ()
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
            return CoAPlan(question, self.segmenter.split(blocks), "", None, None, (), (), tag)
        t = self.conversations.plan(conversation_id, blocks, label_template=self.segmenter.label_template)
        try:
            segments = self.segmenter.split(list(t.blocks))
        except BaseException:
            self.conversations.rollback(t.pending)
            raise
        return CoAPlan(
            question, segments, t.first_cu, conversation_id, t.turn, t.duplicates, t.annotations, tag, t.pending
        )

    @property
    def dedup(self) -> Deduplicator:
        """The conversations' :class:`Deduplicator`."""
        return self.conversations.dedup

    def forget(self, conversation_id: Hashable) -> bool:
        """Drop a conversation's dedup record and CUs."""
        return self.conversations.forget(conversation_id)

    # ------------------------------------------------------------------ the chain (no I/O)
    def flow(self, plan: CoAPlan) -> Generator[EngineCall, Any, CoAResult]:
        """The chain of ``plan`` as an I/O-free generator: yields each :class:`EngineCall` (workers in
        chain order, then the manager), is sent each call's result (or thrown its exception), returns
        the :class:`CoAResult`. Failures are raised as :class:`ChainOfAgentsError`; on any failure the
        worker is released and the conversation's turn is rolled back. Run it with
        :func:`~cp_memory.agents.flow.drive` / :func:`~cp_memory.agents.flow.adrive`."""
        t0 = time.perf_counter()
        cu = plan.first_cu
        cus: list[str] = []
        calls: list[CallStats] = []
        try:
            for seg in plan.segments:
                prompt = worker_prompt(
                    seg.text, cu, plan.question, self.worker_template, special_tokens=self.segmenter.special_tokens
                )
                route = self.router.route(
                    seg.keys,
                    seg.token_lens,
                    tail_key="worker",
                    home_key=seg.ids[0],
                    tail_tokens=self._tail(prompt[len(seg.text) :], self.worker_max_tokens),
                )
                res = yield from self._call(
                    plan,
                    "worker",
                    seg.position,
                    route,
                    self.router.client(route.worker),
                    prompt,
                    max_tokens=self.worker_max_tokens,
                    request_id=route.request_id,
                )
                cu = res.text.strip()
                cus.append(cu)
                calls.append(CallStats.of("worker", seg.position, route, seg, res, ""))
            prompt = manager_prompt(
                cu, plan.question, self.manager_template, special_tokens=self.segmenter.special_tokens
            )
            mroute = None
            if self.manager is None:
                prefix = sum(self._manager_prefix_tokens)
                tail = self._tail(prompt, self.manager_max_tokens)
                # one tail per prefix, as for workers: llama.cpp's prompt cache takes the cached manager
                # prompt out to reuse its prefix and saves the new one in its place
                mroute = self.router.route(
                    self._manager_prefix,
                    self._manager_prefix_tokens,
                    tail_tokens=max(0, tail - prefix) if tail else 0,
                    tail_key="manager",
                )
            client = self.manager if mroute is None else self.router.client(mroute.worker)
            res = yield from self._call(
                plan,
                "manager",
                len(plan.segments),
                mroute,
                client,
                prompt,
                max_tokens=self.manager_max_tokens,
                request_id=mroute.request_id if mroute is not None else None,
                stop=self.manager_stop,
            )
            calls.append(CallStats.of("manager", len(plan.segments), mroute, None, res, "manager"))
        except BaseException:
            if plan.dedup is not None:
                self.conversations.rollback(plan.dedup)
            raise
        turn = plan.turn
        if plan.dedup is not None:
            turn = self.conversations.commit(plan.dedup, cus[-1] if cus else plan.first_cu)
        return CoAResult(
            plan.question,
            res.text.strip(),
            tuple(cus),
            tuple(calls),
            plan.segments,
            time.perf_counter() - t0,
            plan.conversation_id,
            turn,
            plan.duplicates,
            plan.annotations,
            plan.tag,
        )

    def _tail(self, text: str, max_tokens: int) -> int:
        """Tokens a prompt's non-reusable part and its generation take in the engine cache (0: not modelled)."""
        return self.segmenter.token_len(text) + max_tokens if self.model_tails else 0

    def _call(
        self, plan: CoAPlan, role: Role, step: int, route: Route | None, client: Any, prompt: str, **kwargs: Any
    ) -> Generator[EngineCall, Any, Any]:
        """One engine call: yield it, release the worker (failed on error), map errors."""
        name = route.worker_name if route is not None else "manager"
        payload: Any = [{"role": "user", "content": prompt}] if self.chat else prompt
        call = EngineCall(
            client, "chat" if self.chat else "complete", payload, {"temperature": self.temperature, **kwargs}, name
        )
        try:
            res = yield call
        except Exception as exc:
            if route is not None:
                self.router.release(route, ok=False)
            raise self._fail(plan, role, step, name, exc) from exc
        except BaseException:  # cancelled, interrupted: free the worker, propagate as is
            if route is not None:
                self.router.release(route, ok=False)
            raise
        if route is not None:
            self.router.release(route, ok=True)
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
    if not isinstance(max_concurrency, int) or max_concurrency < 1:
        raise ValueError(f"max_concurrency must be a positive int, got {max_concurrency!r}")
