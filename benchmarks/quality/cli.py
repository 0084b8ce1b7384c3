"""``python -m benchmarks.quality``: LoCoMo answer quality per arm with a real model on llama-server.

    python -m benchmarks.quality --questions 20=300,100=100 --position 60       # SmolLM2-135M (CI model)
    python -m benchmarks.common.model_fetch qwen2.5-1.5b                        # once: ~1.1 GB, SHA-256 pinned
    python -m benchmarks.quality --model qwen2.5-1.5b --questions 20=100,100=30 --position 30
    python -m benchmarks.quality --report-only                                  # tables from the answer caches

Answers are cached per (model, k, arm, question) in ``<out>/quality_answers/<model>.jsonl``: a run resumes
where the last one stopped; the JSON / markdown / PNG cover every model in that folder (docs/quality.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import harness
from benchmarks.common.config import LocomoOptions, OutOptions, ThreadsOptions, VerboseOptions, parse_config
from benchmarks.locomo.engines import BenchEngine

from .arms import parse_arms
from .cache import AnswerCache
from .report import counts, harness_speed, markdown, plot_position, summarize
from .stats import BOOTSTRAP, SEED
from .timing import read_runs

logger = logging.getLogger("benchmarks.quality")

__all__ = ["QualityConfig", "main", "parse_args", "parse_questions", "resolve"]

#: models this benchmark names beyond the harness's (fetched by benchmarks.common.model_fetch)
FETCHED = ("qwen2.5-1.5b",)


def parse_questions(text: str) -> dict[int, int]:
    """``"20=300,100=100"`` -> {20: 300, 100: 100}: per k, the questions (over all conversations)."""
    out: dict[int, int] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        k, sep, n = part.partition("=")
        if not sep or not k.isdigit() or not n.isdigit() or int(k) < 1:
            raise ValueError(f"bad --questions part {part!r}: use K=N, e.g. 20=300,100=100")
        out[int(k)] = int(n)
    if not out:
        raise ValueError("--questions names no k")
    return out


def resolve(name: str) -> Path:
    """A GGUF: the fetched models by name (clear error with the fetch command), else the harness's names."""
    if name in FETCHED:
        from benchmarks.common.model_fetch import model_path

        return model_path(name)
    return harness.resolve_model(name, "llama")


@dataclass(frozen=True, kw_only=True)
class QualityConfig(LocomoOptions, ThreadsOptions, OutOptions, VerboseOptions):
    """The run's options (:func:`parse_args`)."""

    model: str
    conversations: str
    questions: str
    position: int
    position_k: int
    rounds: int
    arms: str
    chat_turns: int
    chat_max_k: int
    max_tokens: int
    ctx_size: int
    engine: str
    vllm_args: str
    mem0_dir: str | None
    stem: str
    report_only: bool
    no_report: bool


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.quality", description=__doc__.split("\n")[0])
    harness.add_locomo(ap)
    ap.add_argument("--model", default="smollm2", help=f"smollm2 (default), {', '.join(FETCHED)} or a GGUF path")
    ap.add_argument("--conversations", default="all", help="all, 0, 0,3, 0-4 or sample ids (default all)")
    ap.add_argument("--questions", default="20=500,100=150", help="K=N per k over all conversations")
    ap.add_argument("--position", type=int, default=60, help="questions in the position test (0: none)")
    ap.add_argument("--position-k", type=int, default=20, help="memories per position-test prompt")
    ap.add_argument("--rounds", type=int, default=6, help="passes, each a share further (balanced partial runs)")
    ap.add_argument(
        "--arms", default="decisive", help="decisive (default: the arms users get), all, or names (pairs are added)"
    )
    ap.add_argument("--chat-turns", type=int, default=5, help="questions per chat in the chat arms")
    ap.add_argument("--chat-max-k", type=int, default=20, help="chat arms only up to this k (context length)")
    ap.add_argument("--max-tokens", type=int, default=24, help="generated tokens per answer (greedy)")
    ap.add_argument("--ctx-size", type=int, default=8192, help="llama-server context")
    ap.add_argument(
        "--engine",
        choices=("llama", "vllm", "torch"),
        default="llama",
        help="llama (default), vllm, "
        "or torch: transformers in-process, answers only (benchmarks/quality/torch_engine.py)",
    )
    ap.add_argument("--vllm-args", default="", help="extra arguments for vLLM's api_server (one string)")
    harness.add_threads(ap)
    ap.add_argument(
        "--mem0-dir",
        default="auto",
        help="the embedded mem0 store: auto (default: kept in the cache folder, later runs skip ingestion), "
        "none (a fresh temporary one) or a folder",
    )
    harness.add_out(ap, "docs/results")
    ap.add_argument("--stem", default="quality", help="file stem of the JSON / markdown / PNG (default quality)")
    ap.add_argument("--report-only", action="store_true", help="write the report from the caches; run nothing")
    ap.add_argument("--no-report", action="store_true", help="run, but leave the report to a later --report-only")
    harness.add_verbose(ap)
    return ap


def parse_args(argv: Sequence[str] | None) -> QualityConfig:
    return parse_config(_parser(), QualityConfig, argv)


def _measure(args: QualityConfig, argv: Sequence[str] | None) -> None:
    from benchmarks.common.ingest import close_memory, ingest, make_memory
    from benchmarks.common.locomo import load_locomo
    from benchmarks.common.locomo_select import select_conversations
    from benchmarks.common.modes import CachedSearch

    from .run import QualityRun, default_cache, plan_questions, run_all
    from .timing import HarnessClock, write_run

    arms, per_k = parse_arms(args.arms), parse_questions(args.questions)
    engine = _engine(args)  # a missing model fails before minutes of ingestion
    convs = [c for _, c in select_conversations(args.conversations, load_locomo(args.locomo))]
    name = label(args.model, args.engine)
    cache_path = default_cache(args.out, name)
    clock = HarnessClock()
    memory = make_memory(store_dir=mem0_dir(args.mem0_dir))
    run: QualityRun | None = None
    try:
        with clock.phase("ingest"):
            engine.start()
            users = ingest(memory, convs, "observations", progress=False)
        search = CachedSearch(memory)
        run = QualityRun(name, engine, search, AnswerCache(cache_path), args.max_tokens, args.chat_turns, clock=clock)
        by_sid = {u.sample_id: u for u in users}
        plan = plan_questions(convs, per_k, args.position, args.position_k, lambda c: run.evidence(by_sid[c.sample_id]))
        run_all(run, convs, users, plan, arms, args.chat_max_k, args.rounds, progress=lambda s: logger.info("%s", s))
        logger.info("done: %d asked, %d from the cache, %d engine errors", run.asked, run.reused, run.errors)
    finally:
        if run is not None and run.asked:
            stats = {"argv": list(argv or sys.argv[1:]), "reused": run.reused, "errors": run.errors}
            write_run(cache_path, {**stats, **clock.summary(run.asked)})
            logger.info("harness: %s", clock.summary(run.asked))
        engine.close()
        close_memory(memory)


def mem0_dir(option: str | None) -> str | None:
    """``--mem0-dir``: ``auto`` (default) keeps the embedded store in the cache folder, so a resumed run skips
    ingestion (the same ids: the store is what the answers were asked over); ``none``: a fresh temporary one."""
    if option is None or option == "none":
        return None
    if option == "auto":
        root = Path(os.environ.get("CP_MEMORY_CACHE") or Path.home() / ".cache" / "cp_memory")
        return str(root / "quality-mem0")
    return option


def label(model: str, engine: str) -> str:
    """The model's name in the cache and the report: ``smollm2``, ``qwen2.5-1.5b``; ``@vllm`` on vLLM (the same
    weights on another engine answer a little differently: never mixed in one cache)."""
    name = Path(model).name.removesuffix(".gguf") if ("/" in model or model.endswith(".gguf")) else model
    return name if engine == "llama" else f"{name}@{engine}"


def _engine(args: QualityConfig) -> BenchEngine:
    from benchmarks.locomo.http_engines import LlamaEngine, VLLMEngine

    if args.engine == "torch":
        from .torch_engine import TorchEngine

        path = resolve(args.model) if args.model in FETCHED else harness.resolve_model(args.model, "vllm")
        return TorchEngine(path, threads=args.threads)
    if args.engine == "vllm":
        path = harness.resolve_model(args.model, "vllm")
        return VLLMEngine(str(path), max_model_len=args.ctx_size, block_size=None, extra_args=args.vllm_args.split())
    return LlamaEngine(resolve(args.model), ctx_size=args.ctx_size, threads=args.threads, cache_ram_mib=2048)


def write_report(out: str, stem: str, argv: Sequence[str] | None) -> dict[str, Any]:
    """Summaries of every model cached under ``out`` -> ``<stem>.json`` / ``.md`` / ``.png``."""
    folder = Path(out) / "quality_answers"
    caches = sorted(folder.glob("*.jsonl"))  # runs/ (the harness's own records) is one level down
    models = {p.stem: summarize(AnswerCache(p).rows()) for p in caches}
    speed = {p.stem: harness_speed(read_runs(p)) for p in caches}
    payload = harness.envelope(
        "benchmarks.quality",
        argv,
        counts=counts(models),
        bootstrap={"resamples": BOOTSTRAP, "seed": SEED},
        harness_speed=speed,
        models=models,
    )
    text = markdown(models, speed=speed)
    harness.write_outputs(out, stem, payload, markdown=text, plot=lambda p: plot_position(models, p))
    return payload


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    harness.setup_logging(args.verbose)
    try:
        if not args.report_only:
            _measure(args, argv)
    except (FileNotFoundError, ValueError) as exc:
        logger.error("%s", exc)
        return 2
    except KeyboardInterrupt:
        logger.warning("interrupted: the answers so far are in the cache")
    if not args.no_report:
        payload = write_report(args.out, args.stem, argv)
        logger.info("questions reached: %s", payload["counts"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
