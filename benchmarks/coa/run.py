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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cp_memory.agents import (
    ChainConfig,
    ChainOfAgents,
    ChainOfAgentsError,
    CoAQuery,
    CoAResult,
)

from .arms import Arm, engine_metrics, entry_clients, pool, requests_served
from .foreign import ForeignTraffic
from .workload import Item, f1_score

logger = logging.getLogger("benchmarks.coa")

__all__ = ["Run", "RunSettings", "first_line", "run_arm"]


@dataclass(frozen=True)
class RunSettings:
    model: Path
    workers: int
    threads: int
    cache_mib: int
    ctx_size: int
    capacity_tokens: int | None
    segment_tokens: int
    concurrency: int
    worker_max_tokens: int
    manager_max_tokens: int
    chat: bool
    log_dir: Path | None = None
    foreign_rate: float = 0.0  # requests/s of other applications' one-off prompts (benchmarks.coa.foreign)
    foreign_words: int = 400
    engine: str = "llama"  # llama | vllm (benchmarks.workers)
    kv_bytes_per_token: int = 0  # vllm: sizes each worker's KV cache like a llama-server replica's
    vllm_args: tuple[str, ...] = ()


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


def first_line(answer: str) -> str:
    """The answer scored by F1: its first non-empty line (models keep talking after the answer)."""
    return next((line.strip() for line in answer.splitlines() if line.strip()), "")


def _chats(coa: ChainOfAgents, items: Sequence[Item], concurrency: int) -> list[CoAResult | ChainOfAgentsError]:
    """Each chat's turns in order (conversation_id = chat), ``concurrency`` chats at a time."""
    by_chat: dict[str, list[int]] = defaultdict(list)
    for i, it in enumerate(items):
        by_chat[it.chat or f"q{i}"].append(i)
    out: list[CoAResult | ChainOfAgentsError | None] = [None] * len(items)

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


def run_arm(
    arm: Arm, workload: str, rep: int, items: Sequence[Item], s: RunSettings
) -> tuple[Run, list[dict[str, Any]]]:
    multi = any(it.chat is not None for it in items)
    with pool(
        arm,
        model=s.model,
        workers=s.workers,
        threads=s.threads,
        cache_mib=s.cache_mib,
        ctx_size=s.ctx_size,
        capacity_tokens=s.capacity_tokens,
        log_dir=s.log_dir,
        engine=s.engine,
        kv_bytes_per_token=s.kv_bytes_per_token,
        vllm_args=s.vllm_args,
    ) as p:
        coa = ChainOfAgents(
            p.router,
            config=ChainConfig(
                segment_tokens=s.segment_tokens,
                worker_max_tokens=s.worker_max_tokens,
                manager_max_tokens=s.manager_max_tokens,
                chat=s.chat,
                **arm.coa,
            ),
        )
        # other applications enter where any client does: through the gateway when there is one, else
        # straight to the workers (they do not go through this process's AgentRouter); own clients
        targets = entry_clients(p.workers, p.sglang) if s.foreign_rate > 0 else []
        try:
            with ForeignTraffic(targets, rate=s.foreign_rate, words=s.foreign_words, seed=rep) as foreign:
                t0 = time.perf_counter()
                if multi:
                    results = _chats(coa, items, s.concurrency)
                else:
                    results = coa.answer_many(
                        [CoAQuery(it.question, it.blocks, tag=i) for i, it in enumerate(items)],
                        max_concurrency=s.concurrency,
                    )
                wall = time.perf_counter() - t0
        finally:
            for c in targets:
                c.close()
        other = foreign.stats()
        metrics = [engine_metrics(w) for w in p.workers]
        served = [requests_served(w) for w in p.workers]
        stats = p.router.stats()
    ok = [r for r in results if isinstance(r, CoAResult)]
    failed = [r for r in results if isinstance(r, ChainOfAgentsError)]
    for e in failed:
        logger.error("%s", e)
    calls = [c for r in ok for c in r.calls]
    wcalls = [c for c in calls if c.role == "worker"]
    prompt = sum(c.prompt_tokens or 0 for c in calls)
    cached = sum(c.cached_tokens or 0 for c in calls)
    wprompt = sum(c.prompt_tokens or 0 for c in wcalls)
    wcached = sum(c.cached_tokens or 0 for c in wcalls)
    f1s = [f1_score(first_line(r.answer), items[int(str(r.tag))].answer) for r in ok]
    run = Run(
        arm=arm.name,
        workload=workload,
        rep=rep,
        questions=len(ok),
        failed=len(failed),
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
        calls_per_worker=tuple(served) if arm.kind == "sglang" else tuple(w.routed for w in stats.workers),
        prefilled_per_worker=tuple(int(m.get("prompt_tokens_total", 0)) for m in metrics),
        reasons=dict(Counter(c.route.value for c in calls)) if arm.kind == "agent" else {},
        foreign_requests=other.requests,
        foreign_prefilled_tokens=other.prefilled_tokens,
    )
    records = [
        {
            "arm": arm.name,
            "workload": workload,
            "rep": rep,
            "question": r.question,
            "chat": items[int(str(r.tag))].chat,
            "turn": r.turn,
            "answer": r.answer,
            "gold": items[int(str(r.tag))].answer,
            "wall_s": r.wall_s,
            "calls": [asdict(c) for c in r.calls],
        }
        for r in ok
    ]
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
    return run, records
