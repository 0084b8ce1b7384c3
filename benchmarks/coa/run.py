"""Run one arm on one workload: the questions through ChainOfAgents on fresh workers, then the numbers.

Single-turn workloads run every question independently (``answer_many``, ``concurrency`` in flight).
Multi-turn workloads run each chat's turns in order with ``conversation_id`` (de-duplication on), and
``concurrency`` chats at a time.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.workers import WorkerSpec, requests_served, worker_metrics
from cp_memory.agents import ChainConfig, ChainOfAgents, ChainOfAgentsError, CoAQuery, CoAResult

from ..common.metrics import token_f1
from .arms import Arm, Pool, entry_clients, pool
from .foreign import ForeignStats, ForeignTraffic
from .workload import Item

logger = logging.getLogger("benchmarks.coa")

__all__ = ["Run", "RunSettings", "first_line", "run_arm"]

Result = CoAResult | ChainOfAgentsError


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """What every arm runs with: ``workers`` cold workers of ``spec``, AgentRouter's per-worker cache
    model, the chain (an arm may add ``model_tails`` / ``manager_affinity``), questions or chats in flight,
    and other applications' one-off prompts (:mod:`benchmarks.coa.foreign`; 0 = none)."""

    spec: WorkerSpec
    workers: int
    capacity_tokens: int | None
    chain: ChainConfig
    concurrency: int
    log_dir: Path | None = None
    foreign_rate: float = 0.0
    foreign_words: int = 400


@dataclass(frozen=True)
class Run:
    arm: str
    workload: str
    rep: int
    questions: int
    failed: int
    wall_s: float
    throughput_qps: float
    worker_calls: int
    manager_calls: int
    mean_worker_ttft_ms: float
    median_worker_ttft_ms: float
    prompt_tokens: int  # all calls, as the engines reported them
    cached_tokens: int
    prefilled_tokens: int  # prompt - cached, all calls (what the engines computed)
    worker_prompt_tokens: int
    worker_cached_tokens: int
    engine_hit_ratio: float  # worker calls: cached / prompt
    engine_prefilled_tokens: int  # the engines' own counters (llamacpp:prompt_tokens_total)
    engine_prompt_s: float  # the engines' own prefill time (llamacpp:prompt_seconds_total)
    predicted_cached_tokens: int  # AgentRouter's cache model (0 for sglang arms)
    duplicates_dropped: int  # multi-turn: blocks replaced by location annotations
    mean_f1: float
    calls_per_worker: tuple[int, ...]
    prefilled_per_worker: tuple[int, ...]
    reasons: dict[str, int]
    foreign_requests: int = 0  # other applications' requests served meanwhile (not in the numbers above,
    foreign_prefilled_tokens: int = 0  # except engine_prefilled_tokens / engine_prompt_s: the engines' totals)
    feed: dict[str, int] | None = None  # feed arms: the KV-event feeds' counters (Pool.feed_stats)


def first_line(answer: str) -> str:
    """The answer scored by F1: its first non-empty line (models keep talking after the answer)."""
    return next((line.strip() for line in answer.splitlines() if line.strip()), "")


def _chats(coa: ChainOfAgents, items: Sequence[Item], concurrency: int) -> list[Result]:
    """Each chat's turns in order (conversation_id = chat), ``concurrency`` chats at a time."""
    by_chat: dict[str, list[int]] = defaultdict(list)
    for i, it in enumerate(items):
        by_chat[it.chat or f"q{i}"].append(i)
    out: list[Result | None] = [None] * len(items)

    def chat(name: str) -> None:
        for i in sorted(by_chat[name], key=lambda j: items[j].turn):
            it = items[i]
            try:
                out[i] = coa.answer(it.question, it.blocks, conversation_id=name, tag=i)
            except ChainOfAgentsError as exc:
                out[i] = exc

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="chat") as ex:
        list(ex.map(chat, by_chat))
    assert all(r is not None for r in out)
    return [r for r in out if r is not None]


def _ask(
    coa: ChainOfAgents, p: Pool, items: Sequence[Item], s: RunSettings, rep: int
) -> tuple[list[Result], float, ForeignStats]:
    """Every question (multi-turn: chats in order), timed, with the foreign traffic alongside: it enters
    where any client does, through the gateway when there is one, else straight to the workers (not
    through this process's AgentRouter); returns the results, the wall time and the foreign totals."""
    targets = entry_clients(p.workers, p.sglang) if s.foreign_rate > 0 else []
    try:
        with ForeignTraffic(targets, rate=s.foreign_rate, words=s.foreign_words, seed=rep) as foreign:
            t0 = time.perf_counter()
            if any(it.chat is not None for it in items):
                results = _chats(coa, items, s.concurrency)
            else:
                queries = [CoAQuery(it.question, it.blocks, tag=i) for i, it in enumerate(items)]
                results = coa.answer_many(queries, max_concurrency=s.concurrency)
            wall = time.perf_counter() - t0
    finally:
        for c in targets:
            c.close()
    return results, wall, foreign.stats()


def run_arm(
    arm: Arm, workload: str, rep: int, items: Sequence[Item], s: RunSettings
) -> tuple[Run, list[dict[str, Any]]]:
    """One arm on one workload on fresh workers: the run's numbers and one record per answered question."""
    with pool(arm, s.spec, workers=s.workers, capacity_tokens=s.capacity_tokens, log_dir=s.log_dir) as p:
        coa = ChainOfAgents(p.router, config=replace(s.chain, **arm.coa))
        results, wall, other = _ask(coa, p, items, s, rep)
        metrics = [worker_metrics(w) for w in p.workers]
        if arm.kind == "sglang":  # the gateway chose: what each engine served
            per_worker = tuple(requests_served(w) for w in p.workers)
        else:
            per_worker = tuple(w.routed for w in p.router.stats().workers)
        feed = p.feed_stats()
    ok = [r for r in results if isinstance(r, CoAResult)]
    failed = [r for r in results if isinstance(r, ChainOfAgentsError)]
    for e in failed:
        logger.error("%s", e)
    measured = _Measured(ok, len(failed), wall, metrics, per_worker, other)
    run = replace(_run(arm, workload, rep, items, measured), feed=feed)
    logger.info(
        "%s / %s rep %d: %.3f q/s, hit %.1f%%, prefilled %d tokens (engines: %d), %d failed%s",
        workload,
        arm.name,
        rep,
        run.throughput_qps,
        100 * run.engine_hit_ratio,
        run.prefilled_tokens,
        run.engine_prefilled_tokens,
        run.failed,
        f"; {other.requests} foreign requests ({other.prefilled_tokens} tokens prefilled, {other.failed} failed)"
        if other.requests
        else "",
    )
    if feed is not None:
        logger.info("%s / %s rep %d: KV-event feeds %s", workload, arm.name, rep, feed)
    return run, [_record(arm, workload, rep, items[int(str(r.tag))], r) for r in ok]


@dataclass(frozen=True)
class _Measured:
    """What one arm's run left: the answered questions, how many failed, the wall time, the engines' counters
    (``metrics``), the calls each worker served (``per_worker``) and the foreign traffic (``other``)."""

    ok: Sequence[CoAResult]
    failed: int
    wall: float
    metrics: Sequence[dict[str, float]]
    per_worker: tuple[int, ...]
    other: ForeignStats


def _run(arm: Arm, workload: str, rep: int, items: Sequence[Item], m: _Measured) -> Run:
    """The run's numbers: the chain's own calls, the engines' counters, the calls each worker served and
    the routes."""
    ok, wall, metrics, other = m.ok, m.wall, m.metrics, m.other
    calls = [c for r in ok for c in r.calls]
    wcalls = [c for c in calls if c.role == "worker"]
    prompt = sum(c.prompt_tokens or 0 for c in calls)
    cached = sum(c.cached_tokens or 0 for c in calls)
    wprompt = sum(c.prompt_tokens or 0 for c in wcalls)
    wcached = sum(c.cached_tokens or 0 for c in wcalls)
    f1s = [token_f1(first_line(r.answer), items[int(str(r.tag))].answer) for r in ok]
    return Run(
        arm=arm.name,
        workload=workload,
        rep=rep,
        questions=len(ok),
        failed=m.failed,
        wall_s=wall,
        throughput_qps=len(ok) / wall if wall > 0 else 0.0,
        worker_calls=len(wcalls),
        manager_calls=len(calls) - len(wcalls),
        mean_worker_ttft_ms=1000 * statistics.fmean(c.ttft_s for c in wcalls) if wcalls else 0.0,
        median_worker_ttft_ms=1000 * statistics.median(c.ttft_s for c in wcalls) if wcalls else 0.0,
        prompt_tokens=prompt,
        cached_tokens=cached,
        prefilled_tokens=prompt - cached,
        worker_prompt_tokens=wprompt,
        worker_cached_tokens=wcached,
        engine_hit_ratio=wcached / wprompt if wprompt else 0.0,
        engine_prefilled_tokens=int(sum(m.get("prompt_tokens_total", 0) for m in metrics)),
        engine_prompt_s=sum(m.get("prompt_seconds_total", 0.0) for m in metrics),
        predicted_cached_tokens=sum(c.predicted_cached_tokens for c in wcalls),
        duplicates_dropped=sum(len(r.duplicates) for r in ok),
        mean_f1=statistics.fmean(f1s) if f1s else 0.0,
        calls_per_worker=m.per_worker,
        prefilled_per_worker=tuple(int(m.get("prompt_tokens_total", 0)) for m in metrics),
        reasons=dict(Counter(c.route.value for c in calls)) if arm.kind == "agent" else {},
        foreign_requests=other.requests,
        foreign_prefilled_tokens=other.prefilled_tokens,
    )


def _record(arm: Arm, workload: str, rep: int, item: Item, r: CoAResult) -> dict[str, Any]:
    """One answered question with its calls (LoCoMo text still in: ``__main__`` digests it)."""
    return {
        "arm": arm.name,
        "workload": workload,
        "rep": rep,
        "question": r.question,
        "chat": item.chat,
        "turn": r.turn,
        "answer": r.answer,
        "gold": item.answer,
        "wall_s": r.wall_s,
        "calls": [asdict(c) for c in r.calls],
    }
