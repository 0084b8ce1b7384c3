"""Chain-of-Agents on LoCoMo: round-robin vs SGLang's router vs agent-aware routing, in one run.

Every arm runs the same questions on fresh (cold) llama-server workers, one per worker, each with one
slot and a host prompt cache (``--cache-ram``) of ``--cache-mib`` MiB: the worker's prefix cache,
deliberately smaller than the documents' working set (as a GPU's KV memory is in the paper's setting).
``--engine vllm``: vLLM workers instead (CPU build; automatic prefix caching over all requests), each
with a KV cache of one ``--ctx-size`` context plus ``--cache-mib`` (:mod:`benchmarks.workers`).
Arms (``--arms``): ``round_robin``; ``sglang_cache_aware`` — ``sglang-router --policy cache_aware`` with
its defaults in front of the same workers; ``sglang_cache_aware_tuned`` — the same with the thresholds
of ``--sglang-tuned``; ``agent_aware`` — :class:`~cp_memory.agents.AgentRouter` (ContextPilot's routing);
ablations ``agent_aware_abs2`` and ``agent_aware_global``. The arms' order rotates between repetitions.

Workloads (``--workloads``): ``single`` — independent questions; ``multi`` — the same questions as
chats of ``--turns`` follow-ups with de-duplication (``conversation_id``).

The default model is the random-weight llama GGUF: its prefill cost is that of its architecture, its
text is noise (F1 meaningless). Writes ``<out>/coa_routing.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import platform
import re
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from benchmarks import workers as engines
from benchmarks.common.locomo import load_locomo
from cp_memory.core.blocks import ContextBlock
from cp_memory.engine import (
    EngineClient,
    LlamaServer,
    random_model_path,
    smollm2_model_path,
)
from cp_memory.engine.router import SGLangRouter

from .arms import ARMS, Arm, parse_arm, parse_overrides
from .report import markdown, plot, summarize
from .run import Run, RunSettings, run_arm
from .workload import Item, build_multiturn, build_workload

logger = logging.getLogger("benchmarks.coa")

WORKER_NAMES = {"llama": "llama-server", "vllm": "vLLM"}


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
        out.append(replace(it, blocks=tuple(blocks)))
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.coa", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--locomo", default=None, help="path to locomo10.json (default: $CP_MEMORY_LOCOMO)")
    ap.add_argument("--model", choices=("random", "smollm2"), default="random")
    ap.add_argument("--engine", choices=engines.ENGINES, default="llama", help="the workers: llama-server or vLLM")
    ap.add_argument("--vllm-args", default="", help="vllm: more api_server arguments, e.g. --vllm-args=--enforce-eager")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="threads per worker")
    ap.add_argument("--cache-mib", type=int, default=24, help="per-worker prompt cache (--cache-ram)")
    ap.add_argument(
        "--capacity-tokens",
        type=int,
        default=None,
        help="AgentRouter's per-worker cache model (default: the --cache-mib in tokens; vllm: its KV cache)",
    )
    ap.add_argument("--conversations", type=int, default=2, help="first N LoCoMo conversations")
    ap.add_argument("--questions", type=int, default=40, help="questions per conversation")
    ap.add_argument("--k", type=int, default=3, help="sessions retrieved per question")
    ap.add_argument("--turns", type=int, default=5, help="multi-turn workload: questions per chat")
    ap.add_argument("--segment-tokens", type=int, default=1024)
    ap.add_argument("--concurrency", type=int, default=6, help="questions (single) or chats (multi) in flight")
    ap.add_argument("--worker-max-tokens", type=int, default=48, help="CU length")
    ap.add_argument("--manager-max-tokens", type=int, default=16)
    ap.add_argument("--reps", type=int, default=2, help="repetitions; the arms' order rotates")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ctx-size", type=int, default=4096)
    ap.add_argument("--chat", action="store_true", help="send prompts as chat messages (instruct models)")
    ap.add_argument(
        "--arms",
        default="round_robin,sglang_cache_aware,sglang_cache_aware_tuned,agent_aware",
        help=f"comma-separated, from {', '.join(ARMS)}",
    )
    ap.add_argument("--workloads", default="single,multi", help="comma-separated: single, multi")
    ap.add_argument("--agent-args", default="", help="AgentRouter overrides for the agent_aware arm, k=v,...")
    ap.add_argument(
        "--sglang-tuned",
        default="",
        help="sglang-router settings for sglang_cache_aware_tuned, e.g. balance_abs_threshold=8",
    )
    ap.add_argument(
        "--foreign-rate",
        type=float,
        default=0.0,
        help="other applications' one-off requests per second sharing the engines (through the gateway "
        "for sglang arms, straight to the workers for agent arms); 0 = none",
    )
    ap.add_argument("--foreign-words", type=int, default=400, help="words per foreign prompt")
    ap.add_argument("--out", default="results")
    ap.add_argument("--keep-logs", action="store_true", help="keep the workers' and router's logs in <out>/logs")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    arms = [x.strip() for x in re.split(r",(?![^\[]*\])", a.arms) if x.strip()]
    try:
        for x in arms:
            parse_arm(x)
    except ValueError as exc:
        ap.error(str(exc))
    if not arms:
        ap.error("no arms")
    workloads = [x.strip() for x in a.workloads.split(",") if x.strip()]
    if not workloads or any(w not in ("single", "multi") for w in workloads):
        ap.error("--workloads takes single and/or multi")
    a.arms, a.workloads = arms, workloads
    return a


def text_id(text: Any) -> str:
    """A stable stand-in for a LoCoMo text in committed results (pairs questions across arms)."""
    return "sha1:" + hashlib.sha1(str(text).encode("utf-8")).hexdigest()[:12]


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if a.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("httpx", "httpcore", "cp_memory.engine"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if a.locomo:
        os.environ["CP_MEMORY_LOCOMO"] = a.locomo
    arms: dict[str, Arm] = {**ARMS, **{x: parse_arm(x) for x in a.arms}}
    if a.agent_args:
        arms["agent_aware"] = replace(
            arms["agent_aware"], agent={**arms["agent_aware"].agent, **parse_overrides(a.agent_args)}
        )
    if a.sglang_tuned:
        arms["sglang_cache_aware_tuned"] = replace(
            arms["sglang_cache_aware_tuned"], router={"policy": "cache_aware", **parse_overrides(a.sglang_tuned)}
        )
    model = random_model_path() if a.model == "random" else smollm2_model_path()
    convs = load_locomo()[: a.conversations]
    work: dict[str, list[Item]] = {}
    if "single" in a.workloads:
        work["single"] = build_workload(convs, questions_per_conversation=a.questions, k=a.k, seed=a.seed)
    if "multi" in a.workloads:
        work["multi"] = build_multiturn(
            convs, questions_per_conversation=a.questions, k=a.k, turns=a.turns, seed=a.seed
        )
    with (
        LlamaServer(model, slots=1, ctx_size=a.ctx_size, threads=a.threads, cache_ram_mib=0) as tok_server,
        EngineClient(tok_server.base_url) as tok,
    ):
        work = {name: with_tokens(items, tok) for name, items in work.items()}
        version = tok_server.version()
    capacity = a.capacity_tokens or engines.capacity_tokens(a.engine, a.model, a.cache_mib, a.ctx_size)
    log_dir = Path(a.out) / "logs" if a.keep_logs else None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
    settings = RunSettings(
        engines.model_path(a.engine, a.model),
        a.workers,
        a.threads,
        a.cache_mib,
        a.ctx_size,
        capacity,
        a.segment_tokens,
        a.concurrency,
        a.worker_max_tokens,
        a.manager_max_tokens,
        a.chat,
        log_dir,
        foreign_rate=a.foreign_rate,
        foreign_words=a.foreign_words,
        engine=a.engine,
        kv_bytes_per_token=engines.kv_bytes_per_token(a.engine, a.model),
        vllm_args=tuple(a.vllm_args.split()),
    )
    docs = {b.key: b.tokens for items in work.values() for it in items for b in it.blocks}
    env = {
        "cpus": os.cpu_count(),
        "loadavg_start": [round(x, 1) for x in os.getloadavg()],
        "python": platform.python_version(),
        "llama_server": version,
        "sglang_router": SGLangRouter.version(),
        "distinct_documents": len(docs),
        "document_tokens": sum(v or 0 for v in docs.values()),
        "engine": a.engine,
        "kv_bytes_per_token": engines.kv_bytes_per_token(a.engine, a.model),
        "capacity_tokens_per_worker": capacity,
        "machine": "shared with other engineers' jobs",
    }
    logger.info(
        "%s; %d distinct sessions (%d tokens); per-worker cache ~%d tokens",
        ", ".join(f"{k}: {len(v)} questions" for k, v in work.items()),
        env["distinct_documents"],
        env["document_tokens"],
        capacity,
    )
    runs: list[Run] = []
    records: list[dict[str, Any]] = []
    for rep in range(a.reps):
        for name, items in work.items():
            shift = rep % len(a.arms)
            for arm_name in a.arms[shift:] + a.arms[:shift]:
                run, recs = run_arm(arms[arm_name], name, rep, items, settings)
                runs.append(run)
                records += recs
    runs.sort(key=lambda r: (r.workload, a.arms.index(r.arm), r.rep))
    summary = summarize(runs)
    env["loadavg_end"] = [round(x, 1) for x in os.getloadavg()]
    header = (
        f"Chain-of-Agents on LoCoMo: {a.conversations} conversations x {a.questions} questions, top-{a.k} "
        f"sessions, segment budget {a.segment_tokens}, {a.workers} {WORKER_NAMES[a.engine]} workers ({a.model} "
        f"model, {a.threads} thread, {a.cache_mib} MiB prompt cache each), {a.concurrency} in flight, CU "
        f"{a.worker_max_tokens} tokens, answer {a.manager_max_tokens}; multi-turn: chats of {a.turns}. "
        + (
            f"Foreign traffic: {a.foreign_rate:g} one-off requests/s of {a.foreign_words} words from other "
            "applications (through the gateway for sglang arms, straight to the workers for agent arms); the "
            "engines' counts include it, the chain's prefilled tokens do not. "
            if a.foreign_rate > 0
            else ""
        )
        + "Arms: "
        + "; ".join(f"{n} = {arms[n].describe()}" for n in a.arms)
        + f". Machine: {env['cpus']} CPUs shared with other jobs (load {env['loadavg_start']} -> "
        f"{env['loadavg_end']}): throughput is the median of {a.reps} alternating repetitions."
    )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    md = markdown(runs, summary, header)
    (out / "coa_routing.md").write_text(md)
    cfg = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()}
    for rec in records:  # LoCoMo (CC BY-NC) is never copied into results: questions and gold answers by digest
        rec["question"] = text_id(rec["question"])
        rec["gold"] = text_id(rec["gold"])
    if a.model == "random":  # its text is noise: keep the per-call numbers, not the generated text
        for rec in records:
            rec.pop("answer", None)
            for call in rec["calls"]:
                call.pop("output", None)
                call.pop("request_id", None)
    (out / "coa_routing.json").write_text(
        json.dumps(
            {
                "command": "python -m benchmarks.coa " + " ".join(sys.argv[1:] if argv is None else argv),
                "config": cfg,
                "arms": {n: asdict(arms[n]) for n in a.arms},
                "env": env,
                "summary": summary,
                "runs": [asdict(r) for r in runs],
                "questions": records,
            },
            separators=(",", ":"),
            default=str,
        )
    )
    plotted = plot(runs, out / "coa_routing.png")
    sys.stdout.write(md)
    logger.info("wrote %s/coa_routing.{md,json%s}", out, ",png" if plotted else "")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
