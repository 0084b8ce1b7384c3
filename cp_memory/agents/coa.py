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
"""
from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import threading
import time
from collections.abc import Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from cp_memory.annotations import LOCATION_TEMPLATE, SAME_TURN_TEMPLATE, location_annotation
from cp_memory.blocks import ContextBlock
from cp_memory.dedup import Deduplicator

from .routing import AgentRouter, Route
from .segment import Segment, Segmenter, block_label

__all__ = [
    "WORKER_TEMPLATE", "MANAGER_TEMPLATE", "PRIOR_TURN_TEMPLATE",
    "worker_prompt", "manager_prompt",
    "CompletionLike", "SyncCompletionClient", "AsyncCompletionClient",
    "CallStats", "CoAPlan", "CoAResult", "CoAQuery", "ChainOfAgents", "ChainOfAgentsError",
]

logger = logging.getLogger(__name__)

#: worker prompt (paper Table 11); the segment comes first so it is the prompt's reusable prefix
WORKER_TEMPLATE = (
    "{segment}\n"
    "Here is the summary of the previous source text: {previous_cu}\n"
    "Question: {question}\n"
    "You need to read current source text and summary of previous source text (if any) and generate a "
    "summary to include them both. Later, this summary will be used for other agents to answer the Query, "
    "if any. So please write the summary that can include the evidence for answering the Query:"
)
#: manager prompt (paper Table 12)
MANAGER_TEMPLATE = (
    "The following are given passages. However, the source text is too long and has been summarized. "
    "You need to answer based on the summary: {cu}\n"
    "Question: {question}\n"
    "Answer:"
)
#: in a conversation, the CU an earlier turn ended with, shown with the location annotations
PRIOR_TURN_TEMPLATE = "Summary of the previous conversation (turn {turn}): {cu}"


def worker_prompt(segment: str, previous_cu: str, question: str, template: str = WORKER_TEMPLATE) -> str:
    """A worker's prompt: segment first (reusable prefix), then the previous CU, then the question."""
    return template.format(segment=segment, previous_cu=previous_cu, question=question)


def manager_prompt(cu: str, question: str, template: str = MANAGER_TEMPLATE) -> str:
    return template.format(cu=cu, question=question)


# ---------------------------------------------------------------------------------------------- clients
@runtime_checkable
class CompletionLike(Protocol):
    """What a completion result must expose (:class:`cp_memory.engine.CompletionResult` does)."""

    text: str
    ttft_s: float
    total_s: float
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int | None


class SyncCompletionClient(Protocol):
    """:class:`cp_memory.engine.EngineClient`'s ``complete``."""

    def complete(self, prompt: str, *, max_tokens: int = ..., temperature: float = ...,
                 request_id: str | None = ..., stop: str | Sequence[str] | None = ...) -> CompletionLike: ...


class AsyncCompletionClient(Protocol):
    """:class:`cp_memory.engine.AsyncEngineClient`'s ``complete``."""

    async def complete(self, prompt: str, *, max_tokens: int = ..., temperature: float = ...,
                       request_id: str | None = ...,
                       stop: str | Sequence[str] | None = ...) -> CompletionLike: ...


# ---------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class CallStats:
    """One engine call of a chain: a worker (``role="worker"``, ``step`` = segment position) or the manager.

    ``predicted_cached_tokens`` is what the router's cache model expected the engine to reuse (segment
    tokens only, estimated); ``cached_tokens``/``prompt_tokens`` are what the engine reported.
    """

    role: str
    step: int
    worker: int
    worker_name: str
    route: str
    request_id: str
    block_ids: tuple[Hashable, ...]
    segment_tokens: int
    predicted_cached_tokens: int
    ttft_s: float
    total_s: float
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int | None
    output: str


@dataclass(frozen=True)
class CoAResult:
    """A question's answer, its CU trace (one CU per worker, chain order) and every engine call."""

    question: str
    answer: str
    cus: tuple[str, ...]
    calls: tuple[CallStats, ...]
    segments: tuple[Segment, ...]
    wall_s: float
    conversation_id: Hashable | None = None
    turn: int | None = None
    duplicates: tuple[Hashable, ...] = ()
    annotations: tuple[str, ...] = ()
    tag: Hashable | None = None

    @property
    def worker_calls(self) -> tuple[CallStats, ...]:
        return tuple(c for c in self.calls if c.role == "worker")

    @property
    def manager_call(self) -> CallStats:
        return next(c for c in self.calls if c.role == "manager")

    @property
    def prompt_tokens(self) -> int:
        return sum(c.prompt_tokens or 0 for c in self.calls)

    @property
    def cached_tokens(self) -> int:
        return sum(c.cached_tokens or 0 for c in self.calls)


@dataclass(frozen=True)
class CoAQuery:
    """One question for :meth:`ChainOfAgents.answer_many`; ``tag`` is copied to the result or error."""

    question: str
    blocks: tuple[ContextBlock, ...]
    conversation_id: Hashable | None = None
    tag: Hashable | None = None


class ChainOfAgentsError(RuntimeError):
    """A chain failed: which question, which call (worker step or manager) on which worker, and why.

    The underlying exception (e.g. :class:`cp_memory.engine.EngineError`, raised after the client's
    bounded retries) is ``__cause__``.
    """

    def __init__(self, message: str, *, question: str, role: str, step: int, worker_name: str,
                 tag: Hashable | None = None) -> None:
        super().__init__(message)
        self.question = question
        self.role = role
        self.step = step
        self.worker_name = worker_name
        self.tag = tag


@dataclass(frozen=True)
class CoAPlan:
    """What a chain will run: segments in chain order and the text the first worker gets as its
    "previous" summary (in a conversation: earlier turns' CUs and location annotations)."""

    question: str
    segments: tuple[Segment, ...]
    first_cu: str
    conversation_id: Hashable | None
    turn: int | None
    duplicates: tuple[Hashable, ...]
    annotations: tuple[str, ...]
    tag: Hashable | None


# ---------------------------------------------------------------------------------------------- chain
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
    """

    def __init__(self, router: AgentRouter[Any], *, segment_tokens: int = 1024,
                 segmenter: Segmenter | None = None, manager: Any | None = None,
                 worker_max_tokens: int = 128, manager_max_tokens: int = 32,
                 manager_stop: Sequence[str] | None = None, temperature: float = 0.0, chat: bool = False,
                 dedup: Deduplicator | None = None, max_conversations: int = 10_000,
                 worker_template: str = WORKER_TEMPLATE, manager_template: str = MANAGER_TEMPLATE) -> None:
        if not isinstance(router, AgentRouter):
            raise TypeError(f"router must be an AgentRouter, got {type(router).__name__}")
        for name, v in (("worker_max_tokens", worker_max_tokens), ("manager_max_tokens", manager_max_tokens)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        for field in ("{segment}", "{previous_cu}", "{question}"):
            if field not in worker_template:
                raise ValueError(f"worker_template must contain {field}")
        if not worker_template.startswith("{segment}"):
            raise ValueError("worker_template must start with {segment}: the segment is the reusable prefix")
        self.router = router
        self.segmenter = segmenter if segmenter is not None else Segmenter(segment_tokens)
        self.manager = manager
        self.worker_max_tokens = worker_max_tokens
        self.manager_max_tokens = manager_max_tokens
        self.manager_stop = list(manager_stop) if manager_stop else None
        self.temperature = temperature
        self.chat = chat
        self.dedup = dedup if dedup is not None else Deduplicator(max_conversations=max_conversations)
        self.max_conversations = max_conversations
        self.worker_template = worker_template
        self.manager_template = manager_template
        self._turn_cus: collections.OrderedDict[Hashable, dict[int, str]] = collections.OrderedDict()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ planning (no I/O)
    def plan(self, question: str, blocks: Sequence[ContextBlock], *,
             conversation_id: Hashable | None = None, tag: Hashable | None = None) -> CoAPlan:
        """Dedup (in a conversation) and segment a question's blocks. Registers the turn."""
        if not isinstance(question, str):
            raise TypeError(f"question must be str, got {type(question).__name__}")
        if blocks is None or isinstance(blocks, (str, bytes)) or not isinstance(blocks, Sequence):
            raise TypeError(f"blocks must be a list or tuple of ContextBlock, got {type(blocks).__name__}")
        blocks = list(blocks)
        turn = None
        duplicates: tuple[Hashable, ...] = ()
        annotations: tuple[str, ...] = ()
        first_cu = ""
        if conversation_id is not None:
            res = self.dedup.dedup(conversation_id, blocks)
            turn = res.turn
            duplicates = res.duplicates
            tmpl = self.segmenter.label_template
            notes = []
            for loc in res.locations:
                template = SAME_TURN_TEMPLATE if loc.turn == turn else LOCATION_TEMPLATE
                notes.append(location_annotation(loc.block_id, label=block_label(loc.block_id, tmpl),
                                                 turn=loc.turn, template=template))
            annotations = tuple(dict.fromkeys(notes))
            blocks = list(res.blocks)
            earlier = sorted({loc.turn for loc in res.locations if loc.turn != turn})
            with self._lock:
                cus = self._turn_cus.get(conversation_id, {})
                prior = [PRIOR_TURN_TEMPLATE.format(turn=t, cu=cus[t]) for t in earlier if cus.get(t)]
            first_cu = "\n".join([*prior, *annotations])
        segments = self.segmenter.split(blocks)
        return CoAPlan(question, segments, first_cu, conversation_id, turn, duplicates, annotations, tag)

    def _remember_turn(self, plan: CoAPlan, final_cu: str) -> None:
        if plan.conversation_id is None or plan.turn is None:
            return
        with self._lock:
            cus = self._turn_cus.get(plan.conversation_id)
            if cus is None:
                cus = self._turn_cus[plan.conversation_id] = {}
                while len(self._turn_cus) > self.max_conversations:
                    self._turn_cus.popitem(last=False)
            else:
                self._turn_cus.move_to_end(plan.conversation_id)
            cus[plan.turn] = final_cu

    def forget(self, conversation_id: Hashable) -> bool:
        """Drop a conversation's dedup record and CUs."""
        with self._lock:
            had = self._turn_cus.pop(conversation_id, None) is not None
        return self.dedup.forget(conversation_id) or had

    # ------------------------------------------------------------------ shared helpers
    def _manager_route(self) -> Route | None:
        return None if self.manager is not None else self.router.route(())

    def _manager_client(self, route: Route | None) -> Any:
        return self.manager if route is None else self.router.client(route.worker)

    def _fail(self, plan: CoAPlan, role: str, step: int, name: str, exc: Exception) -> ChainOfAgentsError:
        what = f"worker step {step + 1}/{len(plan.segments)}" if role == "worker" else "manager"
        msg = (f"Chain-of-Agents failed for question {plan.question[:80]!r} at the {what} on {name}: "
               f"{type(exc).__name__}: {exc}")
        logger.warning("%s", msg)
        return ChainOfAgentsError(msg, question=plan.question, role=role, step=step, worker_name=name,
                                  tag=plan.tag)

    @staticmethod
    def _stats(role: str, step: int, route: Route | None, seg: Segment | None, res: Any,
               manager_name: str) -> CallStats:
        return CallStats(
            role=role, step=step,
            worker=route.worker if route is not None else -1,
            worker_name=route.worker_name if route is not None else manager_name,
            route=route.reason if route is not None else "dedicated",
            request_id=route.request_id if route is not None else str(getattr(res, "request_id", "") or ""),
            block_ids=seg.ids if seg is not None else (),
            segment_tokens=seg.tokens if seg is not None else 0,
            predicted_cached_tokens=route.matched_tokens if route is not None else 0,
            ttft_s=float(res.ttft_s), total_s=float(res.total_s), prompt_tokens=res.prompt_tokens,
            cached_tokens=res.cached_tokens, completion_tokens=res.completion_tokens, output=res.text,
        )

    def _result(self, plan: CoAPlan, answer: str, cus: list[str], calls: list[CallStats],
                t0: float) -> CoAResult:
        final_cu = cus[-1] if cus else plan.first_cu
        self._remember_turn(plan, final_cu)
        return CoAResult(plan.question, answer.strip(), tuple(cus), tuple(calls), plan.segments,
                         time.perf_counter() - t0, plan.conversation_id, plan.turn, plan.duplicates,
                         plan.annotations, plan.tag)

    def _call(self, client: Any) -> Any:
        return client.chat if self.chat else client.complete

    def _payload(self, prompt: str) -> Any:
        return [{"role": "user", "content": prompt}] if self.chat else prompt

    def _check_sync(self, client: Any, who: str) -> None:
        if inspect.iscoroutinefunction(getattr(client, "chat" if self.chat else "complete", None)):
            raise TypeError(f"{who} has an async client; use aanswer()/aanswer_many() with async clients")

    def _check_async(self, client: Any, who: str) -> None:
        if not inspect.iscoroutinefunction(getattr(client, "chat" if self.chat else "complete", None)):
            raise TypeError(f"{who} has a sync client; use answer()/answer_many() with sync clients")

    # ------------------------------------------------------------------ sync
    def answer(self, question: str, blocks: Sequence[ContextBlock], *,
               conversation_id: Hashable | None = None, tag: Hashable | None = None) -> CoAResult:
        """Run the chain for one question with sync clients. Raises :class:`ChainOfAgentsError`."""
        t0 = time.perf_counter()
        plan = self.plan(question, blocks, conversation_id=conversation_id, tag=tag)
        cu = plan.first_cu
        cus: list[str] = []
        calls: list[CallStats] = []
        for seg in plan.segments:
            route = self.router.route(seg.keys, seg.token_lens)
            client = self.router.client(route.worker)
            try:
                self._check_sync(client, route.worker_name)
                res = self._call(client)(
                    self._payload(worker_prompt(seg.text, cu, question, self.worker_template)),
                    max_tokens=self.worker_max_tokens, temperature=self.temperature,
                    request_id=route.request_id)
            except Exception as exc:
                self.router.release(route, ok=False)
                raise self._fail(plan, "worker", seg.position, route.worker_name, exc) from exc
            except BaseException:  # cancelled, interrupted: free the worker, propagate as is
                self.router.release(route, ok=False)
                raise
            self.router.release(route, ok=True)
            cu = res.text.strip()
            cus.append(cu)
            calls.append(self._stats("worker", seg.position, route, seg, res, ""))
        mroute = self._manager_route()
        client = self._manager_client(mroute)
        name = mroute.worker_name if mroute is not None else "manager"
        try:
            self._check_sync(client, name)
            res = self._call(client)(
                self._payload(manager_prompt(cu, question, self.manager_template)),
                max_tokens=self.manager_max_tokens, temperature=self.temperature,
                request_id=mroute.request_id if mroute is not None else None, stop=self.manager_stop)
        except Exception as exc:
            if mroute is not None:
                self.router.release(mroute, ok=False)
            raise self._fail(plan, "manager", len(plan.segments), name, exc) from exc
        except BaseException:
            if mroute is not None:
                self.router.release(mroute, ok=False)
            raise
        if mroute is not None:
            self.router.release(mroute, ok=True)
        calls.append(self._stats("manager", len(plan.segments), mroute, None, res, "manager"))
        return self._result(plan, res.text, cus, calls, t0)

    def answer_many(self, queries: Sequence[CoAQuery], *, max_concurrency: int = 4
                    ) -> list[CoAResult | ChainOfAgentsError]:
        """Answer many questions concurrently (threads); a failed question yields its error in place."""
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")

        def one(q: CoAQuery) -> CoAResult | ChainOfAgentsError:
            try:
                return self.answer(q.question, q.blocks, conversation_id=q.conversation_id, tag=q.tag)
            except ChainOfAgentsError as exc:
                return exc

        with ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="coa") as pool:
            return list(pool.map(one, queries))

    # ------------------------------------------------------------------ async
    async def aanswer(self, question: str, blocks: Sequence[ContextBlock], *,
                      conversation_id: Hashable | None = None, tag: Hashable | None = None) -> CoAResult:
        """Async twin of :meth:`answer` (async clients)."""
        t0 = time.perf_counter()
        plan = self.plan(question, blocks, conversation_id=conversation_id, tag=tag)
        cu = plan.first_cu
        cus: list[str] = []
        calls: list[CallStats] = []
        for seg in plan.segments:
            route = self.router.route(seg.keys, seg.token_lens)
            client = self.router.client(route.worker)
            try:
                self._check_async(client, route.worker_name)
                res = await self._call(client)(
                    self._payload(worker_prompt(seg.text, cu, question, self.worker_template)),
                    max_tokens=self.worker_max_tokens, temperature=self.temperature,
                    request_id=route.request_id)
            except Exception as exc:
                self.router.release(route, ok=False)
                raise self._fail(plan, "worker", seg.position, route.worker_name, exc) from exc
            except BaseException:  # cancelled, interrupted: free the worker, propagate as is
                self.router.release(route, ok=False)
                raise
            self.router.release(route, ok=True)
            cu = res.text.strip()
            cus.append(cu)
            calls.append(self._stats("worker", seg.position, route, seg, res, ""))
        mroute = self._manager_route()
        client = self._manager_client(mroute)
        name = mroute.worker_name if mroute is not None else "manager"
        try:
            self._check_async(client, name)
            res = await self._call(client)(
                self._payload(manager_prompt(cu, question, self.manager_template)),
                max_tokens=self.manager_max_tokens, temperature=self.temperature,
                request_id=mroute.request_id if mroute is not None else None, stop=self.manager_stop)
        except Exception as exc:
            if mroute is not None:
                self.router.release(mroute, ok=False)
            raise self._fail(plan, "manager", len(plan.segments), name, exc) from exc
        except BaseException:
            if mroute is not None:
                self.router.release(mroute, ok=False)
            raise
        if mroute is not None:
            self.router.release(mroute, ok=True)
        calls.append(self._stats("manager", len(plan.segments), mroute, None, res, "manager"))
        return self._result(plan, res.text, cus, calls, t0)

    async def aanswer_many(self, queries: Sequence[CoAQuery], *, max_concurrency: int = 4
                           ) -> list[CoAResult | ChainOfAgentsError]:
        """Async twin of :meth:`answer_many` (at most ``max_concurrency`` chains at a time)."""
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        sem = asyncio.Semaphore(max_concurrency)

        async def one(q: CoAQuery) -> CoAResult | ChainOfAgentsError:
            async with sem:
                try:
                    return await self.aanswer(q.question, q.blocks, conversation_id=q.conversation_id,
                                              tag=q.tag)
                except ChainOfAgentsError as exc:
                    return exc

        return list(await asyncio.gather(*(one(q) for q in queries)))
