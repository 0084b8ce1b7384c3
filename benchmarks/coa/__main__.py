"""Chain-of-Agents on LoCoMo: round-robin vs agent-aware routing over N llama-server workers.

Each policy runs the same questions on fresh (cold) llama-server instances, one per worker, each with
one slot and a host prompt cache (``--cache-ram``) of ``--cache-mib`` MiB — the worker's prefix cache.
The cache is deliberately smaller than the documents' working set, as a GPU's KV memory is in the paper's
setting: round-robin makes every worker cache every document, agent-aware routing partitions the
documents over the workers so the pool's caches add up.

The default model is the random-weight llama GGUF (cp_memory.engine.random_model_path): its prefill cost
is that of its architecture — weights do not change the cost of a forward pass — but its text is noise,
so its answer F1 is meaningless (reported anyway). ``--model smollm2`` runs SmolLM2-135M-Instruct for
real answers (slow on CPU: use few questions).

Writes results/coa_routing.{json,md,png} and prints the Markdown table.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cp_memory.agents import AgentRouter, ChainOfAgents, ChainOfAgentsError, CoAQuery, CoAResult, Segmenter
from cp_memory.blocks import ContextBlock
from cp_memory.engine import (
    EngineClient,
    LlamaServer,
    RandomModelSpec,
    random_model_path,
    smollm2_model_path,
)
from cp_memory.locomo import load_locomo

from .workload import Item, build_workload, f1_score

logger = logging.getLogger("benchmarks.coa")

#: benchmark policy -> AgentRouter arguments
POLICIES = {
    "round_robin": {"policy": "round_robin"},
    "affinity": {"policy": "affinity", "balance_scope": "target"},
    "affinity_global": {"policy": "affinity", "balance_scope": "global"},  # SGLang's exact safeguard
}
COLORS = {"round_robin": "#9e9e9e", "affinity": "#1f77b4", "affinity_global": "#aec7e8"}


@dataclass(frozen=True)
class Config:
    model: str
    workers: int
    threads: int
    cache_mib: int
    conversations: int
    questions: int
    k: int
    segment_tokens: int
    concurrency: int
    worker_max_tokens: int
    manager_max_tokens: int
    reps: int
    seed: int
    ctx_size: int
    balance_abs: int
    chat: bool
    policies: tuple[str, ...]
    out: str


@dataclass(frozen=True)
class Run:
    policy: str
    rep: int
    questions: int
    failed: int
    wall_s: float
    throughput_qps: float
    worker_calls: int
    mean_worker_ttft_ms: float
    median_worker_ttft_ms: float
    mean_manager_ttft_ms: float
    worker_prompt_tokens: int
    worker_cached_tokens: int
    predicted_cached_tokens: int
    engine_hit_ratio: float
    mean_f1: float
    calls_per_worker: tuple[int, ...]
    reasons: dict[str, int]


def first_line(answer: str) -> str:
    """The answer scored by F1: its first non-empty line (models keep talking after the answer)."""
    return next((line.strip() for line in answer.splitlines() if line.strip()), "")


def kv_bytes_per_token(model: str) -> int:
    """f16 K and V per token: layers x kv heads x head dim x 2 (K, V) x 2 bytes."""
    if model == "random":
        spec = RandomModelSpec()
        return spec.n_layer * spec.n_head_kv * spec.head_dim * 2 * 2
    return 30 * 3 * 64 * 2 * 2  # SmolLM2-135M: 30 layers, 3 KV heads of 64


def model_path(model: str) -> Path:
    return random_model_path() if model == "random" else smollm2_model_path()


def with_tokens(items: list[Item], client: EngineClient) -> list[Item]:
    """Set every block's ``tokens`` with the engine's tokenizer (one call per distinct document)."""
    lens: dict[Any, int] = {}
    out = []
    for it in items:
        blocks = []
        for b in it.blocks:
            if b.key not in lens:
                lens[b.key] = len(client.tokenize(b.text) or ()) or max(1, len(b.text) // 4)
            blocks.append(ContextBlock(b.id, b.text, tokens=lens[b.key]))
        out.append(Item(it.conversation, it.question, it.answer, it.category, tuple(blocks)))
    return out


def run_policy(policy: str, rep: int, items: list[Item], cfg: Config) -> tuple[Run, list[dict[str, Any]]]:
    path = model_path(cfg.model)
    servers = [LlamaServer(path, slots=1, ctx_size=cfg.ctx_size, threads=cfg.threads,
                           cache_ram_mib=cfg.cache_mib) for _ in range(cfg.workers)]
    clients: list[EngineClient] = []
    try:
        for s in servers:
            s.start()
        clients = [EngineClient(s.base_url, timeout=600, max_retries=2) for s in servers]
        capacity = cfg.cache_mib * 2**20 // kv_bytes_per_token(cfg.model)
        router = AgentRouter(clients, capacity_tokens=capacity, balance_abs_threshold=cfg.balance_abs,
                             **POLICIES[policy])
        coa = ChainOfAgents(router, segmenter=Segmenter(cfg.segment_tokens),
                            worker_max_tokens=cfg.worker_max_tokens, manager_max_tokens=cfg.manager_max_tokens,
                            chat=cfg.chat)
        queries = [CoAQuery(it.question, it.blocks, tag=i) for i, it in enumerate(items)]
        t0 = time.perf_counter()
        results = coa.answer_many(queries, max_concurrency=cfg.concurrency)
        wall = time.perf_counter() - t0
        stats = router.stats()
    finally:
        for c in clients:
            c.close()
        for s in servers:
            s.stop()
    ok = [r for r in results if isinstance(r, CoAResult)]
    failed = [r for r in results if isinstance(r, ChainOfAgentsError)]
    for e in failed:
        logger.error("%s", e)
    wcalls = [c for r in ok for c in r.worker_calls]
    mcalls = [r.manager_call for r in ok]
    prompt = sum(c.prompt_tokens or 0 for c in wcalls)
    cached = sum(c.cached_tokens or 0 for c in wcalls)
    f1s = [f1_score(first_line(r.answer), items[r.tag].answer) for r in ok]
    reasons = Counter(c.route for r in ok for c in r.calls)
    run = Run(
        policy=policy, rep=rep, questions=len(ok), failed=len(failed), wall_s=wall,
        throughput_qps=len(ok) / wall if wall > 0 else 0.0, worker_calls=len(wcalls),
        mean_worker_ttft_ms=1000 * statistics.fmean(c.ttft_s for c in wcalls) if wcalls else 0.0,
        median_worker_ttft_ms=1000 * statistics.median(c.ttft_s for c in wcalls) if wcalls else 0.0,
        mean_manager_ttft_ms=1000 * statistics.fmean(c.ttft_s for c in mcalls) if mcalls else 0.0,
        worker_prompt_tokens=prompt, worker_cached_tokens=cached,
        predicted_cached_tokens=sum(c.predicted_cached_tokens for c in wcalls),
        engine_hit_ratio=cached / prompt if prompt else 0.0,
        mean_f1=statistics.fmean(f1s) if f1s else 0.0,
        calls_per_worker=tuple(w.routed for w in stats.workers), reasons=dict(reasons),
    )
    records = [{"policy": policy, "rep": rep, "question": r.question, "gold": items[r.tag].answer,
                "answer": r.answer, "f1": f1_score(first_line(r.answer), items[r.tag].answer), "wall_s": r.wall_s,
                "calls": [asdict(c) for c in r.calls]} for r in ok]
    logger.info("%s rep %d: %.3f q/s, worker TTFT %.0f ms, engine hit %.1f%%, %d failed", policy, rep,
                run.throughput_qps, run.mean_worker_ttft_ms, 100 * run.engine_hit_ratio, run.failed)
    return run, records


def summarize(runs: list[Run], policies: tuple[str, ...]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for p in policies:
        rs = [r for r in runs if r.policy == p]
        if not rs:
            continue
        out[p] = {
            "throughput_qps": statistics.fmean(r.throughput_qps for r in rs),
            "mean_worker_ttft_ms": statistics.fmean(r.mean_worker_ttft_ms for r in rs),
            "engine_hit_ratio": statistics.fmean(r.engine_hit_ratio for r in rs),
            "mean_f1": statistics.fmean(r.mean_f1 for r in rs),
        }
    return out


def markdown(runs: list[Run], summary: dict[str, dict[str, float]], cfg: Config, env: dict[str, Any]) -> str:
    lines = [
        f"Chain-of-Agents on LoCoMo ({cfg.conversations} conversations, {cfg.questions} questions each, "
        f"top-{cfg.k} sessions, segment budget {cfg.segment_tokens} tokens), {cfg.workers} llama-server "
        f"workers ({cfg.model} model, {cfg.threads} thread(s) and a {cfg.cache_mib} MiB prompt cache each), "
        f"{cfg.concurrency} questions in flight, load safeguard abs threshold {cfg.balance_abs}, relative "
        f"1.5; CU {cfg.worker_max_tokens} tokens, answer "
        f"{cfg.manager_max_tokens}{' (chat messages)' if cfg.chat else ''}; F1 on the answer's first line. "
        f"Machine: {env['cpus']} CPUs (shared; load average at start "
        f"{env['loadavg_start']}).",
        "",
        "| policy | rep | questions/s | wall s | mean worker TTFT ms | median worker TTFT ms | "
        "engine cached / prompt tokens (workers) | router-predicted cached | answer F1 | calls per worker | "
        "routes: affinity / least-loaded / balance |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r.policy} | {r.rep} | {r.throughput_qps:.3f} | {r.wall_s:.1f} | {r.mean_worker_ttft_ms:.0f} | "
            f"{r.median_worker_ttft_ms:.0f} | {r.worker_cached_tokens:,} / {r.worker_prompt_tokens:,} "
            f"({100 * r.engine_hit_ratio:.1f}%) | {r.predicted_cached_tokens:,} | {r.mean_f1:.3f} | "
            f"{'/'.join(map(str, r.calls_per_worker))} | "
            + ("round-robin" if r.policy == "round_robin" else
               f"{r.reasons.get('affinity', 0)} / {r.reasons.get('least_loaded', 0)} / {r.reasons.get('balance', 0)}")
            + " |")
    rr = summary.get("round_robin")
    for name, af in summary.items():
        if rr is None or name == "round_robin":
            continue
        lines += [
            "",
            f"{name} vs round_robin (mean over reps): throughput "
            f"**{af['throughput_qps'] / rr['throughput_qps']:.2f}x** "
            f"({rr['throughput_qps']:.3f} -> {af['throughput_qps']:.3f} questions/s), mean worker TTFT "
            f"{rr['mean_worker_ttft_ms']:.0f} -> {af['mean_worker_ttft_ms']:.0f} ms "
            f"(round-robin / this = {rr['mean_worker_ttft_ms'] / max(af['mean_worker_ttft_ms'], 1e-9):.2f}), engine cache "
            f"hit {100 * rr['engine_hit_ratio']:.1f}% -> {100 * af['engine_hit_ratio']:.1f}%, F1 "
            f"{rr['mean_f1']:.3f} -> {af['mean_f1']:.3f}.",
        ]
    return "\n".join(lines) + "\n"


def plot(runs: list[Run], path: Path, policies: tuple[str, ...]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed; no plot (pip install 'cp-memory[agents]')")
        return False
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.6))
    metrics = [("throughput_qps", "questions / s", 1.0), ("mean_worker_ttft_ms", "mean worker TTFT (ms)", 1.0),
               ("engine_hit_ratio", "engine cache hit (%)", 100.0)]
    for ax, (key, title, scale) in zip(axes, metrics):
        for i, p in enumerate(policies):
            vals = [getattr(r, key) * scale for r in runs if r.policy == p]
            if not vals:
                continue
            ax.bar(i, statistics.fmean(vals), color=COLORS[p], width=0.6)
            ax.scatter([i] * len(vals), vals, color="black", s=10, zorder=3)
        ax.set_xticks(range(len(policies)), [p.replace("_", "-") for p in policies], fontsize=8)
        ax.set_title(title)
    ax = axes[3]
    n = max(len(r.calls_per_worker) for r in runs)
    width = 0.8 / len(policies)
    for j, p in enumerate(policies):
        rs = [r for r in runs if r.policy == p]
        if not rs:
            continue
        per = [statistics.fmean(r.calls_per_worker[w] for r in rs) for w in range(n)]
        ax.bar([w + j * width for w in range(n)], per, width=width, color=COLORS[p], label=p.replace("_", "-"))
    ax.set_xticks([w + width * (len(policies) - 1) / 2 for w in range(n)], [f"w{w}" for w in range(n)])
    ax.set_title("calls per worker")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def parse_args(argv: list[str] | None) -> Config:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.coa", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--locomo", default=None, help="path to locomo10.json (default: $CP_MEMORY_LOCOMO, ../shared/data)")
    ap.add_argument("--model", choices=("random", "smollm2"), default="random")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="threads per llama-server")
    ap.add_argument("--cache-mib", type=int, default=24, help="per-worker prompt cache (--cache-ram)")
    ap.add_argument("--conversations", type=int, default=2, help="first N LoCoMo conversations")
    ap.add_argument("--questions", type=int, default=40, help="questions per conversation")
    ap.add_argument("--k", type=int, default=3, help="sessions retrieved per question")
    ap.add_argument("--segment-tokens", type=int, default=1024)
    ap.add_argument("--concurrency", type=int, default=6, help="questions in flight")
    ap.add_argument("--worker-max-tokens", type=int, default=48, help="CU length")
    ap.add_argument("--manager-max-tokens", type=int, default=16)
    ap.add_argument("--reps", type=int, default=2, help="runs per policy (alternating)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ctx-size", type=int, default=4096)
    ap.add_argument("--balance-abs", type=int, default=2, help="load safeguard: absolute threshold")
    ap.add_argument("--chat", action="store_true", help="send prompts as chat messages (instruct models)")
    ap.add_argument("--policies", default="round_robin,affinity",
                    help=f"comma-separated, from {', '.join(POLICIES)}")
    ap.add_argument("--out", default="results")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if a.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "httpcore", "cp_memory.engine"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    policies = tuple(p.strip() for p in a.policies.split(",") if p.strip())
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        ap.error(f"unknown policies {unknown}; choose from {', '.join(POLICIES)}")
    cfg = Config(a.model, a.workers, a.threads, a.cache_mib, a.conversations, a.questions, a.k,
                 a.segment_tokens, a.concurrency, a.worker_max_tokens, a.manager_max_tokens, a.reps, a.seed,
                 a.ctx_size, a.balance_abs, a.chat, policies, a.out)
    if a.locomo:
        os.environ["CP_MEMORY_LOCOMO"] = a.locomo
    return cfg


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    convs = load_locomo()[: cfg.conversations]
    items = build_workload(convs, questions_per_conversation=cfg.questions, k=cfg.k, seed=cfg.seed)
    with LlamaServer(model_path(cfg.model), slots=1, ctx_size=cfg.ctx_size, threads=cfg.threads,
                     cache_ram_mib=0) as tok_server, EngineClient(tok_server.base_url) as tok:
        items = with_tokens(items, tok)
        version = tok_server.version()
    docs = {b.key: b.tokens for it in items for b in it.blocks}
    env = {"cpus": os.cpu_count(), "loadavg_start": ", ".join(f"{x:.1f}" for x in os.getloadavg()),
           "python": platform.python_version(), "llama_server": version,
           "distinct_documents": len(docs), "document_tokens": sum(v or 0 for v in docs.values()),
           "kv_bytes_per_token": kv_bytes_per_token(cfg.model),
           "cache_tokens_per_worker": cfg.cache_mib * 2**20 // kv_bytes_per_token(cfg.model)}
    logger.info("workload: %d questions over %d distinct sessions (%d tokens); per-worker cache ~%d tokens",
                len(items), env["distinct_documents"], env["document_tokens"], env["cache_tokens_per_worker"])
    runs: list[Run] = []
    records: list[dict[str, Any]] = []
    for rep in range(cfg.reps):
        order = cfg.policies if rep % 2 == 0 else tuple(reversed(cfg.policies))
        for policy in order:
            run, recs = run_policy(policy, rep, items, cfg)
            runs.append(run)
            records += recs
    runs.sort(key=lambda r: (cfg.policies.index(r.policy), r.rep))
    summary = summarize(runs, cfg.policies)
    env["loadavg_end"] = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    md = markdown(runs, summary, cfg, env)
    (out / "coa_routing.md").write_text(md)
    (out / "coa_routing.json").write_text(json.dumps(
        {"config": asdict(cfg), "env": env, "runs": [asdict(r) for r in runs], "summary": summary,
         "questions": records}, indent=1, default=str))
    plotted = plot(runs, out / "coa_routing.png", cfg.policies)
    sys.stdout.write(md)
    logger.info("wrote %s/coa_routing.{md,json%s}", out, ",png" if plotted else "")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
