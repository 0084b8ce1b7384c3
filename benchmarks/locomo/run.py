"""One LoCoMo benchmark run as a function: :func:`run_benchmark` (ingest, measure every (conversation, k,
mode), judge, write the results folder), with its configuration :class:`BenchConfig`."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from benchmarks.common import harness
from benchmarks.common.export import PromptExport
from benchmarks.common.ingest import MEMORY_SOURCES, Ingested, close_memory, ingest, make_memory
from benchmarks.common.locomo import QA, Conversation, load_locomo
from benchmarks.common.locomo_select import select_conversations
from benchmarks.common.modes import BUDGET, CHAT_MODES, MODES, CachedSearch, parse_top_k
from cp_memory.core.alignment_mode import DEFAULT_PROTECT
from cp_memory.engine import LlamaServer

from .engines import WARMUP_PROMPT, BenchEngine, library_default, slug
from .http_engines import LlamaEngine, SGLangEngine, UrlEngine, VLLMEngine
from .judge import Judge
from .model_cache import CACHE_BLOCK, CACHE_TOKENS, ModelCacheEngine
from .report import Summary, markdown_table, summarize, write_results
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

__all__ = ["QUICK_QUESTIONS", "BenchConfig", "BenchResult", "make_engine", "run_benchmark", "select_conversations"]

QUICK_QUESTIONS = 20
#: context per request of the engines launched here: llama-server's own default; chats need the history too
LLAMA_CTX: int = library_default(LlamaServer, "ctx_size")
CHAT_CTX = 32_768
_SECRETS = ("argv", "api_key", "llm_api_key", "judge_api_key")  # never in the results' config echo


@dataclass(frozen=True)
class BenchConfig:
    """Everything a run depends on (the CLI's options, whose defaults these are)."""

    locomo: str | None = None
    conversations: str = "0"  # "all", "0", "0,3", "0-4"
    questions: int | None = None  # per conversation; None = all (categories 1-4)
    top_k: str = "20,100,5x10"
    modes: tuple[str, ...] | None = None  # None: MODES (+ dedup with chat)
    extra_budget: float = BUDGET
    swap_budget: float = BUDGET
    protect: float = DEFAULT_PROTECT
    chat: bool = False
    chat_turns: int = 5
    memories: str = "observations"
    max_memories: int | None = None  # first N memories per conversation (test slices)
    mem0_config: str | None = None
    mem0_dir: str | None = None
    llm_url: str | None = None
    llm_model: str | None = None
    llm_api_key: str | None = None
    engine: str = "llama"  # llama | vllm | sglang | model-cache
    engine_url: str | None = None
    model: str | None = None  # llama/vllm: harness.resolve_model's names or a path; sglang/url: model name/path
    api_key: str | None = None
    ctx_size: int | None = None
    threads: int | None = None
    cache_ram_mib: int = library_default(LlamaServer, "cache_ram_mib")
    sglang_args: tuple[str, ...] = ()
    vllm_args: tuple[str, ...] = ()
    block_size: int | None = None  # vllm: prefix-cache block (None: vLLM's default)
    max_tokens: int = 16
    warmup: int = 2
    threshold: float = 0.0
    judge_url: str | None = None
    judge_model: str | None = None
    judge_api_key: str | None = None
    cache_policy: str = "radix"  # model-cache: radix (SGLang/vLLM blocks) | llama.cpp
    cache_block: int = CACHE_BLOCK
    cache_tokens: int = CACHE_TOKENS
    out: str = "results"
    export_prompts: str | None = None  # write the exact prompt sequence here (benchmarks.replay)
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
    payload: dict[str, Any]  # results.json: the harness envelope, meta, summary, requests

    @property
    def meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = self.payload["meta"]
        return meta


@dataclass
class _Measured:
    """What the measuring step leaves: the records and what the results' meta says about them."""

    records: list[RequestRecord]
    users: list[Ingested]
    search: CachedSearch
    engine_info: dict[str, Any]
    export: PromptExport | None
    interrupted: bool


# ------------------------------------------------------------------------------------------ helpers
def make_engine(cfg: BenchConfig) -> BenchEngine:
    if cfg.engine_url:
        return UrlEngine(cfg.engine_url, cfg.model, api_key=cfg.api_key)
    if cfg.engine == "model-cache":
        return ModelCacheEngine(capacity_tokens=cfg.cache_tokens, policy=cfg.cache_policy, block_size=cfg.cache_block)
    if cfg.engine == "sglang":
        if not cfg.model:
            raise ValueError("--engine sglang needs --model (a Hugging Face id or a local model folder)")
        return SGLangEngine(cfg.model, context_length=cfg.ctx_size, extra_args=cfg.sglang_args)
    if cfg.engine not in harness.ENGINES:
        raise ValueError(f"unknown engine {cfg.engine!r}: llama, vllm, sglang, model-cache (or --engine-url URL)")
    model = harness.resolve_model(cfg.model or ("tiny" if cfg.quick else "smollm2"), cfg.engine)
    ctx = cfg.ctx_size or (CHAT_CTX if cfg.chat else LLAMA_CTX)
    if cfg.engine == "vllm":
        return VLLMEngine(str(model), max_model_len=ctx, block_size=cfg.block_size, extra_args=cfg.vllm_args)
    return LlamaEngine(model, ctx_size=ctx, threads=cfg.threads, cache_ram_mib=cfg.cache_ram_mib)


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
    settings = _settings(cfg, memory_given=memory is not None)
    convs = load_locomo(cfg.locomo)
    picked = select_conversations(cfg.conversations, convs)
    questions = [select_questions(c, cfg.questions) for _, c in picked]
    eng = engine if engine is not None else make_engine(cfg)
    done = _measure(cfg, settings, eng, picked, questions, memory, own_engine=engine is None)
    records = _judge(done.records, cfg) if cfg.judge_url and done.records and not done.interrupted else done.records
    meta = _meta(cfg, settings, convs, picked, questions, done)
    meta["wall_s"] = round(time.perf_counter() - t_start, 1)
    summaries = summarize(records)
    payload = harness.envelope(
        "benchmarks.locomo",
        cfg.argv,
        meta=meta,
        summary=[asdict(s) for s in summaries],
        requests=[asdict(r) for r in records],
    )
    table = markdown_table(summaries, meta, payload["machine"])
    folder = _results_folder(cfg.out, eng)
    files = write_results(folder, payload, summaries, table)
    if done.export is not None and cfg.export_prompts:
        files["prompts"] = done.export.write(cfg.export_prompts)
        logger.info("prompts of %d runs written to %s", len(done.export.runs), files["prompts"])
    logger.info("results in %s", folder)
    return BenchResult(folder, files, table, tuple(summaries), tuple(records), payload)


def _settings(cfg: BenchConfig, *, memory_given: bool) -> RunSettings:
    """The checked run settings: bad options and unknown modes fail here, before the engine starts."""
    if cfg.memories not in MEMORY_SOURCES:
        raise ValueError(f"--memories must be one of {MEMORY_SOURCES}")
    if cfg.memories == "extract" and not cfg.llm_url and not memory_given and not cfg.mem0_config:
        raise ValueError(
            "--memories extract needs an LLM for mem0: --llm-url URL (OpenAI-compatible) "
            "or an llm section in --mem0-config"
        )
    modes = cfg.modes or (CHAT_MODES if cfg.chat else MODES)
    if "aligned+superset" in modes and cfg.extra_budget <= 0:
        modes = tuple(m for m in modes if m != "aligned+superset")
        logger.info("--extra-budget 0: aligned+superset left out")
    same = {f.name: getattr(cfg, f.name) for f in fields(RunSettings) if hasattr(cfg, f.name)}
    settings = RunSettings(**{**same, "modes": tuple(modes), "top_k": tuple(parse_top_k(cfg.top_k))})
    mode_specs(settings)
    return settings


def _measure(
    cfg: BenchConfig,
    settings: RunSettings,
    eng: BenchEngine,
    picked: Sequence[tuple[int, Conversation]],
    questions: Sequence[Sequence[QA]],
    memory: Any,
    *,
    own_engine: bool,
) -> _Measured:
    """Start the engine first (a missing binary, an absent GPU or a wrong URL fails before minutes of
    ingestion), ingest, send every request; Ctrl-C keeps the requests recorded so far."""
    own_memory = memory is None
    records: list[RequestRecord] = []
    try:
        eng.start()
        if own_memory:
            memory = make_memory(
                config_file=cfg.mem0_config,
                store_dir=cfg.mem0_dir,
                llm_url=cfg.llm_url,
                llm_model=cfg.llm_model,
                llm_api_key=cfg.llm_api_key,
            )
        users = ingest(
            memory, [c for _, c in picked], cfg.memories, max_memories=cfg.max_memories, progress=cfg.progress
        )
        search = CachedSearch(memory)
        export = PromptExport(_export_meta(cfg, settings, picked)) if cfg.export_prompts else None
        interrupted = False
        try:
            run_requests(
                eng,
                search,
                picked,
                users,
                questions,
                settings,
                progress=cfg.progress,
                on_record=records.append,
                export=export,
            )
        except KeyboardInterrupt:
            interrupted = True
            logger.warning("interrupted: writing the %d requests recorded so far", len(records))
        return _Measured(records, users, search, eng.describe(), export, interrupted)
    finally:
        if own_engine:
            eng.close()
        if own_memory and memory is not None:
            close_memory(memory)


def _described(cfg: BenchConfig, settings: RunSettings, picked: Sequence[tuple[int, Conversation]]) -> dict[str, Any]:
    """What the results' meta and the prompt export both say about the run."""
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "conversations": [{"index": i, "sample_id": c.sample_id} for i, c in picked],
        "modes": list(settings.modes),
        "top_k": [k.label for k in settings.top_k],
    }


def _meta(
    cfg: BenchConfig,
    settings: RunSettings,
    convs: Sequence[Conversation],
    picked: Sequence[tuple[int, Conversation]],
    questions: Sequence[Sequence[QA]],
    done: _Measured,
) -> dict[str, Any]:
    """The results' ``meta`` (the harness envelope carries command, machine and git commit)."""
    n_q = [len(q) for q in questions]
    labels = ", ".join(f"#{i} {c.sample_id}" for i, c in picked)
    return {
        **_described(cfg, settings, picked),
        "config": {k: v for k, v in asdict(cfg).items() if k not in _SECRETS},
        "engine": done.engine_info,
        "conversations_label": "all 10 conversations"
        if len(picked) == len(convs)
        else f"{len(picked)} conversation(s): {labels}",
        "questions_per_conversation": n_q,
        "questions_label": f"{sum(n_q)} ({'first ' + str(cfg.questions) if cfg.questions else 'all'} per conversation)",
        "memories": cfg.memories + (f" (first {cfg.max_memories})" if cfg.max_memories else ""),
        "memories_per_user": [u.memories for u in done.users],
        "ingest": [asdict(u) for u in done.users],
        **{k: getattr(cfg, k) for k in ("extra_budget", "swap_budget", "protect", "chat", "max_tokens", "warmup")},
        "chat_turns": cfg.chat_turns if cfg.chat else None,
        "threshold": cfg.threshold,
        "flush": ", ".join(f"{how} x{n}" for how, n in done.engine_info.get("flushes", {}).items()) or "none",
        "prompt_template": SYSTEM_PROMPT if cfg.chat else PROMPT_TEMPLATE,
        "search_cache": {"calls": done.search.calls, "hits": done.search.hits},
        "interrupted": done.interrupted,
    }


def _export_meta(cfg: BenchConfig, settings: RunSettings, picked: Sequence[tuple[int, Conversation]]) -> dict[str, Any]:
    return {
        "argv": list(cfg.argv),
        "git_commit": harness.git_commit(),
        **_described(cfg, settings, picked),
        "max_tokens": settings.max_tokens,
        "warmup": settings.warmup,
        "warmup_prompt": WARMUP_PROMPT,
        "chat": settings.chat,
        "system": SYSTEM_PROMPT if settings.chat else None,
        "prompt_template": None if settings.chat else PROMPT_TEMPLATE,
        "exclude_first_turn": settings.exclude_first_turn,
        "memories": cfg.memories,
        "max_memories": cfg.max_memories,
    }


def _judge(records: list[RequestRecord], cfg: BenchConfig) -> list[RequestRecord]:
    from tqdm import tqdm

    judge = Judge(cfg.judge_url or "", model=cfg.judge_model, api_key=cfg.judge_api_key)
    todo = [i for i, r in enumerate(records) if r.error is None]
    bar = tqdm(total=len(todo), desc="judge", unit="ans", disable=not cfg.progress)
    try:
        scores = judge.score_many(
            [(records[i].question, records[i].answer, records[i].gold) for i in todo], tick=lambda: bar.update(1)
        )
    finally:
        bar.close()
        judge.close()
    out = list(records)
    for i, s in zip(todo, scores):
        out[i] = replace(out[i], judge=s)
    return out
