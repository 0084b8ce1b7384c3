"""``python -m benchmarks.frameworks``: mem0's documented framework patterns vs the cp_memory integrations.

For each framework (LangGraph, LlamaIndex, OpenAI Agents SDK) and each answer mode, every arm gets its own
llama-server (one slot, host prompt cache), started together; the chats alternate between the arms (the
arm order rotates per chat) so a busy machine slows them alike. Per turn the framework's own OpenAI client
records, through an httpx probe, what the engine received and reported: prompt tokens, cached tokens,
server prefill time and TTFT. Writes JSON, markdown and a PNG.

    .venv/bin/python -m benchmarks.frameworks                 # 5 chats x 8 turns, random-weight model
    .venv/bin/python -m benchmarks.frameworks --model smollm2 # SmolLM2-135M-Instruct (real answers, slower)
    .venv/bin/python -m benchmarks.frameworks --quick         # 1 chat x 3 turns
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.common import harness
from benchmarks.common.config import JsonOptions, LocomoOptions, ModelOptions, OutOptions, VerboseOptions, parse_config

from .arms import FrameworkRunner
from .probe import EngineProbe
from .report import markdown, plot, summarize
from .workload import ANSWER_MODES, Chat, load_workload

logger = logging.getLogger("benchmarks.frameworks")

#: framework -> (module, runner class) in this package (imported when run: each needs its own extra)
RUNNERS = {
    "langgraph": ("run_langgraph", "LangGraphRunner"),
    "llamaindex": ("run_llamaindex", "LlamaIndexRunner"),
    "openai-agents": ("run_agents", "AgentsRunner"),
}
FRAMEWORKS = tuple(RUNNERS)
QUIET = ("httpx", "openai", "mem0", "httpcore", "LiteLLM")
DOC_PAGES = {
    "langgraph": "https://docs.mem0.ai/integrations/langgraph",
    "llamaindex": "https://docs.mem0.ai/integrations/llama-index",
    "openai-agents": "https://docs.mem0.ai/integrations/openai-agents-sdk",
}
NOTES = [
    (
        "both arms search the same top_k; the store is read-only (the guides' mem0.add of each "
        "exchange is left out in both arms)"
    ),
    (
        "openai-agents: the first step of each run is scripted (search_memory with the user's message), "
        "the answer step is the real model; both arms keep the conversation across runs"
    ),
    "fixed answers: the model's answer is replaced in the history after each turn by a fixed ~120-word answer",
]


def _runner(name: str) -> type[FrameworkRunner]:
    if name not in RUNNERS:
        raise ValueError(f"unknown framework {name!r}; choose from {FRAMEWORKS}")
    module, cls = RUNNERS[name]
    runner: type[FrameworkRunner] = getattr(importlib.import_module(f".{module}", __package__), cls)
    return runner


@dataclass(frozen=True, kw_only=True)
class FrameworksConfig(LocomoOptions, ModelOptions, OutOptions, JsonOptions, VerboseOptions):
    """The run's options (:func:`parse_args`)."""

    frameworks: str
    answers: str
    chats: int
    turns: int
    top_k: int
    max_tokens: int
    overfetch: int
    conversation: int
    ctx_size: int
    quick: bool
    png: str | None
    report: str | None


def parse_args(argv: Sequence[str] | None) -> FrameworksConfig:
    """The options; ``--quick``: 1 chat x 3 turns on the random model."""
    args = parse_config(build_parser(), FrameworksConfig, argv)
    return replace(args, chats=1, turns=3, model="random") if args.quick else args


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.frameworks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--frameworks", default=",".join(FRAMEWORKS), help="comma-separated subset of %(default)s")
    p.add_argument(
        "--answers",
        default=",".join(ANSWER_MODES),
        help="model (the model's own answers), fixed (a fixed ~120-word answer injected into the history), or both",
    )
    p.add_argument("--chats", type=int, default=5)
    p.add_argument("--turns", type=int, default=8)
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--max-tokens", type=int, default=32, help="answer length cap of the model")
    p.add_argument(
        "--overfetch",
        type=int,
        default=0,
        help="max_overfetch of the cp arms' ContextPilotMemory (0: paper-style dedup, as the integrations)",
    )
    p.add_argument("--conversation", type=int, default=0, help="LoCoMo conversation index")
    harness.add_locomo(p)
    harness.add_model(p, "random")
    p.add_argument("--ctx-size", type=int, default=8192)
    p.add_argument("--quick", action="store_true", help="1 chat x 3 turns on the random model (a smoke run)")
    harness.add_out(p, "results/frameworks")
    harness.add_json(p)
    p.add_argument("--png", default=None, help="also write the PNG here (e.g. docs/frameworks.png)")
    p.add_argument(
        "--report",
        default=None,
        metavar="JSON",
        help="only re-render the markdown and PNG of an earlier run's JSON into --out",
    )
    harness.add_verbose(p)
    return p


def _warm(server: Any) -> None:
    import httpx

    httpx.post(
        f"{server.base_url}/v1/chat/completions",
        timeout=120,
        json={"messages": [{"role": "user", "content": "warm-up: say ok"}], "max_tokens": 2},
    )


def _block(
    runner: FrameworkRunner, mode: str, chats: Sequence[Chat], model: Path, ctx_size: int
) -> tuple[str, list[dict[str, Any]]]:
    """One (framework, answers) block: a fresh llama-server per arm, the chats alternating between the arms;
    returns (the engine's version, the turns' records)."""
    from cp_memory.engine import LlamaServer

    runner.new_block()
    servers = {arm: LlamaServer(model, slots=1, ctx_size=ctx_size, cache_ram_mib=256) for arm in runner.arms}
    records: list[dict[str, Any]] = []
    try:
        for s in servers.values():
            s.start()
            _warm(s)
        for chat in chats:
            k = chat.index % len(runner.arms)
            for arm in runner.arms[k:] + runner.arms[:k]:
                turns = runner.chat(arm, servers[arm].base_url, EngineProbe(), chat, mode)
                records += [t.to_dict() for t in turns]
                prefilled = [t.prefilled for t in turns]
                logger.info("%s %s %s chat %d: prefilled %s", runner.name, mode, arm, chat.index, prefilled)
        return next(iter(servers.values())).version(), records
    finally:
        for s in servers.values():
            s.stop()


def run(args: FrameworksConfig, partial: Path | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Every framework x answer mode; returns the benchmark's ``meta`` and the turns' records."""
    from benchmarks.common.ingest import ingest
    from cp_memory.embedded import default_memory, set_offline_env

    set_offline_env()
    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    modes = [m.strip() for m in args.answers.split(",") if m.strip()]
    for m in modes:
        if m not in ANSWER_MODES:
            raise ValueError(f"--answers: unknown mode {m!r}; choose from {ANSWER_MODES}")
    conv, chats = load_workload(args.locomo, args.conversation, args.chats, args.turns)
    store = default_memory()
    (ingested,) = ingest(store, [conv], "observations", progress=False)
    logger.info("%d memories for %s; %d chats x %d turns", ingested.memories, ingested.user_id, len(chats), args.turns)
    model = harness.resolve_model(args.model)
    meta: dict[str, Any] = {
        "model": model.name,
        "engine": None,
        "conversation": args.conversation,
        "locomo_sample": conv.sample_id,
        "memories": ingested.memories,
        "chats": args.chats,
        "turns": args.turns,
        "top_k": args.top_k,
        "max_tokens": args.max_tokens,
        "overfetch": args.overfetch,
        "frameworks": frameworks,
        "answers": modes,
        "seconds": None,
        "date": None,
        "doc_pages": DOC_PAGES,
        "notes": NOTES,
    }
    records: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    for fw in frameworks:
        runner = _runner(fw)(
            store, ingested.user_id, top_k=args.top_k, max_tokens=args.max_tokens, overfetch=args.overfetch
        )
        for mode in modes:
            engine, block = _block(runner, mode, chats, model, args.ctx_size)
            meta["engine"], records = meta["engine"] or engine, records + block
            if partial is not None:  # a crash later keeps what was measured (--report re-renders it)
                partial.write_text(
                    json.dumps({"meta": {**meta, "partial": True}, "records": records}), encoding="utf-8"
                )
    meta.update(seconds=round(time.perf_counter() - t_start, 1), date=time.strftime("%Y-%m-%d %H:%M:%S"))
    return meta, records


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    turns = args.turns
    harness.setup_logging(args.verbose)
    for noisy in QUIET:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    out = Path(args.out)
    if args.report:  # an earlier run's JSON, envelope and all
        payload = json.loads(Path(args.report).read_text(encoding="utf-8"))
        turns = payload["meta"].get("turns", max(r["turn"] for r in payload["records"]))
    else:
        out.mkdir(parents=True, exist_ok=True)
        meta, records = run(args, out / "frameworks.partial.json")
        payload = harness.envelope("benchmarks.frameworks", argv, meta=meta, summary=[], records=records)
    summary = payload["summary"] = summarize(payload["records"], turns)
    table = markdown(summary, {**payload, **payload["meta"]})  # older results: command, machine in meta

    harness.write_outputs(
        out, "frameworks", payload, markdown=table, plot=lambda path: plot(summary, path), also_json=args.json
    )
    if args.png:
        plot(summary, Path(args.png))
    print(table)
    return 0
