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
import json
import logging
import os
import sys
from dataclasses import asdict
from pathlib import Path

from benchmarks import workers as engines
from benchmarks.common.locomo import load_locomo
from benchmarks.locomo.cli import select_conversations
from benchmarks.locomo.ingest import ingest, make_memory
from benchmarks.locomo.modes import CachedSearch, parse_top_k
from benchmarks.locomo.runner import select_questions
from cp_memory.engine.router import SGLangRouter

from .dispatch import ROUTERS, make_dispatcher, replicas
from .report import markdown, plot, summarize
from .run import Request, User, serve_users

logger = logging.getLogger("benchmarks.scale")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.scale", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--routers", default=",".join(ROUTERS), help=f"comma-separated, from {', '.join(ROUTERS)}")
    ap.add_argument("--modes", default="baseline,aligned")
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
    ap.add_argument("--model", choices=("random", "smollm2"), default="random")
    ap.add_argument("--engine", choices=engines.ENGINES, default="llama", help="the replicas: llama-server or vLLM")
    ap.add_argument("--vllm-args", default="", help="vllm: more api_server arguments, e.g. --vllm-args=--enforce-eager")
    ap.add_argument("--threads", type=int, default=1, help="threads per replica")
    ap.add_argument("--cache-mib", type=int, default=256, help="per-replica host prompt cache (--cache-ram)")
    ap.add_argument("--ctx-size", type=int, default=4096)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--balance-abs", type=int, default=8, help="affinity: load safeguard absolute threshold")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--mem0-dir", default=None, help="persistent mem0 store (ingest once, reuse)")
    ap.add_argument("--locomo", default=None)
    ap.add_argument("--out", default="results")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    a.routers = [r.strip() for r in a.routers.split(",") if r.strip()]
    if not a.routers or any(r not in ROUTERS for r in a.routers):
        ap.error(f"--routers takes {', '.join(ROUTERS)}")
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if not a.modes or any(m not in ("baseline", "aligned") for m in a.modes):
        ap.error("--modes takes baseline and/or aligned")
    if a.replicas < 1:
        ap.error("--replicas must be >= 1")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if a.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("httpx", "httpcore", "cp_memory", "mem0", "benchmarks.locomo"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if a.locomo:
        os.environ["CP_MEMORY_LOCOMO"] = a.locomo
    if "sglang-router" in a.routers:
        SGLangRouter(["http://127.0.0.1:1"])  # argument check only; start() says if the extra is missing
    (k,) = parse_top_k(a.k)
    convs = [c for _, c in select_conversations(a.conversations, load_locomo())]
    memory = make_memory(store_dir=a.mem0_dir)
    ingested = ingest(memory, convs, "observations", max_memories=a.max_memories, progress=False)
    search = CachedSearch(memory)
    users = [
        User(ing.user_id, conv.sample_id, tuple(select_questions(conv, a.questions)))
        for ing, conv in zip(ingested, convs)
    ]
    for u in users:  # every mode and router then sees the same mem0 results
        for qa in u.questions:
            search.search(qa.question, top_k=k.n, filters={"user_id": u.user_id}, threshold=0.0)
    model = engines.model_path(a.engine, a.model)
    capacity = engines.capacity_tokens(a.engine, a.model, a.cache_mib, a.ctx_size)
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
    load_start = [round(x, 1) for x in os.getloadavg()]
    for rep in range(a.reps):
        shift = rep % len(a.routers)
        for router in a.routers[shift:] + a.routers[:shift]:
            for mode in a.modes if rep % 2 == 0 else list(reversed(a.modes)):
                with replicas(
                    a.replicas,
                    model=model,
                    threads=a.threads,
                    cache_mib=a.cache_mib,
                    ctx_size=a.ctx_size,
                    engine=a.engine,
                    kv_bytes_per_token=engines.kv_bytes_per_token(a.engine, a.model),
                    vllm_args=a.vllm_args.split(),
                ) as servers:
                    dispatcher = make_dispatcher(
                        router, servers, capacity_tokens=capacity, balance_abs_threshold=a.balance_abs
                    )
                    try:
                        out, wall = serve_users(
                            dispatcher, mode, rep, users, search, k, concurrency=concurrency, max_tokens=a.max_tokens
                        )
                    finally:
                        dispatcher.close()
                reqs += out
                walls[(router, mode, rep)] = wall
                ok = [r for r in out if r.error is None]
                logger.info(
                    "%s / %s rep %d: %d requests in %.1f s, hit %.1f%%",
                    router,
                    mode,
                    rep,
                    len(ok),
                    wall,
                    100 * sum(r.cached_tokens or 0 for r in ok) / max(1, sum(r.prompt_tokens or 0 for r in ok)),
                )
    summary = summarize(reqs, walls)
    env = {
        "cpus": os.cpu_count(),
        "loadavg": [load_start, [round(x, 1) for x in os.getloadavg()]],
        "sglang_router": SGLangRouter.version(),
        "engine": a.engine,
        "capacity_tokens_per_replica": capacity,
        "machine": "shared with other engineers' jobs",
    }
    cap = f", first {a.max_memories} memories each" if a.max_memories else ""
    replica_kind = "vLLM" if a.engine == "vllm" else "llama-server"
    header = (
        f"{len(users)} LoCoMo users x {a.questions} questions (k={k.label}, mem0 observations{cap}), all users "
        f"concurrent, over {a.replicas} {replica_kind} replicas ({a.model} model, {a.threads} thread, "
        f"{a.cache_mib} MiB prompt cache each, cold per run); {a.reps} repetition(s); each user's first "
        f"question excluded (cold everywhere). Machine: {env['cpus']} CPUs shared with other jobs (load "
        f"{env['loadavg'][0]} -> {env['loadavg'][1]}): hit ratio and prefilled tokens are machine-"
        f"independent, times are not."
    )
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    md = markdown(summary, header)
    (out_dir / "scale.md").write_text(md)
    (out_dir / "scale.json").write_text(
        json.dumps(
            {
                "command": "python -m benchmarks.scale " + " ".join(sys.argv[1:] if argv is None else argv),
                "config": {k_: v for k_, v in vars(a).items()},
                "env": env,
                "summary": summary,
                "requests": [asdict(r) for r in reqs],
            },
            indent=1,
            default=str,
        )
    )
    plot(summary, out_dir / "scale.png")
    sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
