"""``python -m benchmarks.scale``: multi-replica mem0 serving — does the cache win survive scale-out?

Several LoCoMo users (one per conversation, memories in mem0 through the LoCoMo benchmark's ingestion)
ask their questions concurrently; their requests are spread over ``--replicas`` llama-server (or, with
``--engine vllm``, vLLM) replicas by
each router of ``--routers`` (round_robin, sglang-router, affinity; see benchmarks/scale/dispatch.py),
in two modes: ``baseline`` (mem0's order) and ``aligned`` (ContextPilotMemory's per-user index). Every
(router, mode) run starts on cold replicas; the routers' order rotates between repetitions. Reports the
engine-reported cache hit ratio, prefilled tokens, TTFT and the engines' own prefill time, and aligned
vs baseline per router. Writes ``<out>/scale.{json,md,png}``.

    python -m benchmarks.scale --replicas 3 --conversations 0-3 --questions 20 --k 20
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.common import harness
from benchmarks.common.config import LocomoOptions, OutOptions, VerboseOptions, parse_config, split_commas
from benchmarks.common.ingest import ingest, make_memory
from benchmarks.common.locomo import load_locomo
from benchmarks.common.locomo_select import select_conversations
from benchmarks.common.modes import CachedSearch, KSpec, parse_top_k
from benchmarks.locomo.runner import select_questions
from benchmarks.workers import WorkerOptions, WorkerSpec, pool_key
from cp_memory.engine import running
from cp_memory.engine.router import SGLangRouter

from .dispatch import ROUTERS, make_dispatcher
from .report import markdown, plot, summarize
from .run import Request, User, serve_users

logger = logging.getLogger("benchmarks.scale")

MODES = ("baseline", "aligned")


@dataclass(frozen=True, kw_only=True)
class ScaleConfig(WorkerOptions, LocomoOptions, OutOptions, VerboseOptions):
    """The run's options (:func:`parse_args`)."""

    replicas: int
    routers: tuple[str, ...]
    modes: tuple[str, ...]
    conversations: str
    questions: int
    k: str
    max_memories: int | None
    concurrency: int
    max_tokens: int
    balance_abs: int
    reps: int
    mem0_dir: str | None

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError("--replicas must be >= 1")


def _one_or_more(flag: str, choices: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    """The converter of ``--<flag>``: a comma list, one or more of ``choices``."""

    def convert(text: str) -> tuple[str, ...]:
        picked = split_commas(text)
        if not picked or any(x not in choices for x in picked):
            raise ValueError(f"--{flag} takes {', '.join(choices)}")
        return picked

    return convert


def parse_args(argv: list[str] | None) -> ScaleConfig:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.scale", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--routers", default=",".join(ROUTERS), help=f"comma-separated, from {', '.join(ROUTERS)}")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {', '.join(MODES)}")
    ap.add_argument("--conversations", default="0-3", help="LoCoMo conversations (one user each): all, 0-3, 0,5")
    ap.add_argument("--questions", type=int, default=20, help="questions per user (categories 1-4, in order)")
    ap.add_argument("--k", default="20", help="memories retrieved per question")
    ap.add_argument(
        "--max-memories",
        type=int,
        default=None,
        help="first N memories per user (the paper's regime: k close to a user's whole store)",
    )
    ap.add_argument("--concurrency", type=int, default=0, help="users served at once (0: all)")
    harness.add_model(ap)
    harness.add_engine(ap)
    harness.add_threads(ap, 1, "replica")
    ap.add_argument("--cache-mib", type=int, default=256, help="per-replica host prompt cache (--cache-ram)")
    ap.add_argument("--ctx-size", type=int, default=4096)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--balance-abs", type=int, default=8, help="affinity: load safeguard absolute threshold")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--mem0-dir", default=None, help="persistent mem0 store (ingest once, reuse)")
    harness.add_locomo(ap)
    harness.add_out(ap)
    harness.add_verbose(ap)
    return parse_config(
        ap, ScaleConfig, argv, routers=_one_or_more("routers", ROUTERS), modes=_one_or_more("modes", MODES)
    )


def _users(a: ScaleConfig, k: KSpec) -> tuple[list[User], CachedSearch]:
    """One user per conversation, its memories in mem0 (LoCoMo's observations), and the mem0 search every
    mode and router then shares (each question searched once here, so all see the same results)."""
    convs = [c for _, c in select_conversations(a.conversations, load_locomo(a.locomo))]
    memory = make_memory(store_dir=a.mem0_dir)
    ingested = ingest(memory, convs, "observations", max_memories=a.max_memories, progress=False)
    search = CachedSearch(memory)
    users = [User(ing.user_id, tuple(select_questions(conv, a.questions))) for ing, conv in zip(ingested, convs)]
    for u in users:
        for qa in u.questions:
            search.search(qa.question, top_k=k.n, filters={"user_id": u.user_id}, threshold=0.0)
    return users, search


def _serve(
    a: ScaleConfig, spec: WorkerSpec, users: list[User], search: CachedSearch, k: KSpec
) -> tuple[list[Request], dict[tuple[str, str, int], float]]:
    """Every (router, mode) run on cold replicas, the routers' order rotated between repetitions (and the
    modes' order reversed every other one); the requests and each run's wall time."""
    concurrency = a.concurrency or len(users)
    logger.info(
        "%d users x %d questions, k=%s, %d replicas, %d users at once",
        len(users),
        a.questions,
        k.label,
        a.replicas,
        concurrency,
    )
    reqs: list[Request] = []
    walls: dict[tuple[str, str, int], float] = {}
    for rep in range(a.reps):
        shift = rep % len(a.routers)
        for router in a.routers[shift:] + a.routers[:shift]:
            for mode in a.modes if rep % 2 == 0 else list(reversed(a.modes)):
                key = pool_key(spec)  # vLLM replicas behind sglang-router share one key
                with (
                    running([spec.worker(api_key=key) for _ in range(a.replicas)]) as servers,
                    contextlib.closing(
                        make_dispatcher(
                            router, servers, capacity_tokens=spec.capacity_tokens, balance_abs_threshold=a.balance_abs
                        )
                    ) as dispatcher,
                ):
                    out, wall = serve_users(
                        dispatcher, mode, rep, users, search, k, concurrency=concurrency, max_tokens=a.max_tokens
                    )
                reqs += out
                walls[(router, mode, rep)] = wall
                ok = [r for r in out if r.error is None]
                hit = sum(r.cached_tokens or 0 for r in ok) / max(1, sum(r.prompt_tokens or 0 for r in ok))
                logger.info(
                    "%s / %s rep %d: %d requests in %.1f s, hit %.1f%%", router, mode, rep, len(ok), wall, 100 * hit
                )
    return reqs, walls


def _header(a: ScaleConfig, users: int, k: KSpec, machine: str, loadavg: list[list[float]]) -> str:
    cap = f", first {a.max_memories} memories each" if a.max_memories else ""
    replica_kind = "vLLM" if a.engine == "vllm" else "llama-server"
    return (
        f"{users} LoCoMo users x {a.questions} questions (k={k.label}, mem0 observations{cap}), all users "
        f"concurrent, over {a.replicas} {replica_kind} replicas ({a.model} model, {a.threads} thread, "
        f"{a.cache_mib} MiB prompt cache each, cold per run); {a.reps} repetition(s); each user's first "
        f"question excluded (cold everywhere). Machine: {machine}, shared with other jobs (load "
        f"{loadavg[0]} -> {loadavg[1]}): hit ratio and prefilled tokens are machine-independent, times are not."
    )


def _load() -> list[float]:
    return [round(x, 1) for x in os.getloadavg()]


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    harness.setup_logging(a.verbose)
    quiet = ("httpx", "httpcore", "cp_memory", "mem0", "benchmarks.locomo", "benchmarks.common.ingest")
    for noisy in (*quiet, "benchmarks.common.modes"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if "sglang-router" in a.routers:
        SGLangRouter(["http://127.0.0.1:1"])  # argument check only; start() says if the extra is missing
    spec = WorkerSpec.from_options(a)
    (k,) = parse_top_k(a.k)
    users, search = _users(a, k)
    load_start = _load()
    reqs, walls = _serve(a, spec, users, search, k)
    summary = summarize(reqs, walls)
    env: dict[str, Any] = {
        "loadavg": [load_start, _load()],
        "sglang_router": SGLangRouter.version(),
        "engine": a.engine,
        "capacity_tokens_per_replica": spec.capacity_tokens,
    }
    payload = harness.envelope(
        "benchmarks.scale", argv, config=asdict(a), env=env, summary=summary, requests=[asdict(r) for r in reqs]
    )
    md = markdown(summary, _header(a, len(users), k, payload["machine"]["summary"], env["loadavg"]))
    harness.write_outputs(a.out, "scale", payload, markdown=md, plot=lambda path: plot(summary, path))
    sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
