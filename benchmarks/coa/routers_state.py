"""``python -m benchmarks.coa.routers_state``: one Chain-of-Agents router, two with their own state, two sharing
Redis — do two router processes behind a load balancer route as one?

The CoA workload of :mod:`benchmarks.coa` (LoCoMo sessions as recurring documents, each question's top-``k``
sessions by TF-IDF) runs through :class:`~cp_memory.agents.ChainOfAgents` on ``--workers`` workers. Each
worker is the deterministic engine cache model (:class:`benchmarks.common.cache_model.BlockPrefixCache`:
vLLM's 16-token blocks, LRU over ``--cache-tokens``), so every figure is machine-independent. Arms:

``one``        one router (today's reference);
``two_local``  two routers, each with its own state (``state_store=None``): question *i* through router
               ``i % 2``, as two application processes behind round-robin;
``two_redis``  the same two routers with ``state_store="redis://..."`` (a private redis-server this command
               starts on a free loopback port, or ``--redis-url``).

Reported per arm: the engines' hit ratio and prefilled tokens, and how often a document's worker call went
to the worker that served that document last (``home`` routes) vs elsewhere (``strayed``: that engine
prefills it again). Questions run one at a time, so the runs are exactly repeatable.

    timeout 600 .venv/bin/python -m benchmarks.coa.routers_state --conversations 0-3 --questions 20 --k 4
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.common.cache_model import BlockPrefixCache
from benchmarks.common.config import LocomoOptions, parse_config, split_commas
from benchmarks.common.locomo import load_locomo
from benchmarks.common.locomo_select import select_conversations
from benchmarks.workers_state import given_redis, private_redis
from cp_memory.agents import AgentRouter, ChainOfAgents, CoAResult, RouterStateConfig
from cp_memory.engine import CompletionResult

from .workload import Item, build_workload

logger = logging.getLogger("benchmarks.coa.routers_state")

__all__ = ["ARMS", "ModelEngine", "RouterRun", "main", "run_arm"]

ARMS = ("one", "two_local", "two_redis")


class ModelEngine:
    """A worker: the cache model of one engine (its prefix cache), answering a fixed text."""

    def __init__(self, capacity_tokens: int) -> None:
        self.cache = BlockPrefixCache(capacity_tokens, block_size=16)

    def complete(
        self,
        prompt: str,
        *,
        max_tokens: int = 16,
        temperature: float = 0.0,
        request_id: str | None = None,
        stop: Any = None,
    ) -> CompletionResult:
        served = self.cache.serve(prompt, generated=max_tokens)
        return CompletionResult("noted", 0.0, 0.0, served.prompt, served.cached, max_tokens, request_id, "stop")


@dataclass
class RouterRun:
    """One arm's figures (all machine-independent counts)."""

    arm: str
    questions: int
    worker_calls: int = 0
    home: int = 0  # a document's call went to the worker that served it last
    strayed: int = 0  # ... to another worker
    prompt_tokens: int = 0
    cached_tokens: int = 0

    @property
    def hit_ratio(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def prefilled_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    def count(self, result: CoAResult, last: dict[Any, int]) -> None:
        for call in result.calls:
            if call.role != "worker" or not call.block_ids:
                continue
            self.worker_calls += 1
            before = last.get(call.block_ids[0])
            if before is not None:
                self.home += before == call.worker
                self.strayed += before != call.worker
            last[call.block_ids[0]] = call.worker


def run_arm(arm: str, items: Sequence[Item], *, workers: int, cache_tokens: int, url: str | None) -> RouterRun:
    """Every question through the arm's routers (question i through router i mod the routers' count)."""
    engines = [ModelEngine(cache_tokens) for _ in range(workers)]
    n_routers = 1 if arm == "one" else 2
    store = RouterStateConfig(url, name="coa-bench") if arm == "two_redis" and url is not None else None
    routers = [AgentRouter(engines, capacity_tokens=cache_tokens, state_store=store) for _ in range(n_routers)]
    chains = [ChainOfAgents(r) for r in routers]
    run, last = RouterRun(arm, len(items)), dict[Any, int]()
    try:
        for i, it in enumerate(items):
            run.count(chains[i % n_routers].answer(it.question, it.blocks, tag=i), last)
    finally:
        for r in routers:
            r.close()
    for e in engines:
        stats = e.cache.stats
        run.prompt_tokens += stats.prompt_tokens
        run.cached_tokens += stats.cached_tokens
    return run


def markdown(runs: Sequence[RouterRun], header: str) -> str:
    lines = [
        header,
        "",
        "| arm | questions | worker calls | to the document's last worker | elsewhere | hit ratio | prefilled tokens |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r.arm} | {r.questions} | {r.worker_calls} | {r.home} | {r.strayed} | {r.hit_ratio:.1%} "
            f"| {r.prefilled_tokens:,} |"
        )
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, kw_only=True)
class RoutersStateConfig(LocomoOptions):
    """The run's options (:func:`parse_args`)."""

    conversations: str
    questions: int
    k: int
    workers: int
    cache_tokens: int
    arms: str
    redis_url: str | None
    out: str | None

    @property
    def arm_names(self) -> tuple[str, ...]:
        """``--arms`` as a list."""
        return split_commas(self.arms)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.arm_names) - set(ARMS))
        if unknown:
            raise ValueError(f"unknown arms {unknown}; choose from {', '.join(ARMS)}")


def parse_args(argv: Sequence[str] | None) -> RoutersStateConfig:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.coa.routers_state", description=__doc__.split("\n")[0])
    ap.add_argument("--conversations", default="0-3", help="LoCoMo conversations (indexes or ranges)")
    ap.add_argument("--questions", type=int, default=20, help="questions per conversation")
    ap.add_argument("--k", type=int, default=4, help="sessions retrieved per question")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--cache-tokens", type=int, default=32_768, help="each worker's prefix cache (tokens)")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--redis-url", default=None, help="a Redis to use (default: a private redis-server)")
    ap.add_argument("--locomo", default=None, help="locomo10.json (default: the usual places)")
    ap.add_argument("--out", default=None, help="write routers_state.{json,md} into this folder")
    return parse_config(ap, RoutersStateConfig, argv)


@contextmanager
def _redis(a: RoutersStateConfig, arms: Sequence[str]) -> Iterator[str | None]:
    if "two_redis" not in arms:
        yield None
    else:
        with given_redis(a.redis_url) if a.redis_url else private_redis() as url:
            yield url


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    a = parse_args(argv)
    arms = a.arm_names
    convs = [c for _, c in select_conversations(a.conversations, load_locomo(a.locomo))]
    items = build_workload(convs, questions_per_conversation=a.questions, k=a.k)
    with _redis(a, arms) as url:
        runs = [run_arm(arm, items, workers=a.workers, cache_tokens=a.cache_tokens, url=url) for arm in arms]
    header = (
        f"CoA routers' state: {len(items)} questions, top-{a.k} sessions, {a.workers} workers "
        f"(block cache model, {a.cache_tokens:,} tokens each)"
    )
    text = markdown(runs, header)
    logger.info("%s", text)
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        doc = {"settings": asdict(a), "runs": [{**asdict(r), "hit_ratio": r.hit_ratio} for r in runs]}
        (out / "routers_state.json").write_text(json.dumps(doc, indent=1) + "\n")
        (out / "routers_state.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
