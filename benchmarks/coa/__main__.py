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
import logging
import os
import re
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.common import harness
from benchmarks.common.config import LocomoOptions, OutOptions, VerboseOptions, parse_config, split_commas
from benchmarks.common.locomo import load_locomo
from benchmarks.workers import WorkerOptions, WorkerSpec
from cp_memory.agents import ChainConfig
from cp_memory.core.blocks import ContextBlock
from cp_memory.engine import EngineClient, LlamaServer
from cp_memory.engine.router import SGLangRouter

from .arms import ARMS, Arm, parse_arm, parse_overrides
from .report import markdown, plot, summarize
from .run import Run, RunSettings, run_arm
from .workload import Item, build_multiturn, build_workload

logger = logging.getLogger("benchmarks.coa")

WORKER_NAMES = {"llama": "llama-server", "vllm": "vLLM"}
WORKLOADS = ("single", "multi")
#: the options that are ChainConfig's fields of the same name
CHAIN_OPTIONS = ("segment_tokens", "worker_max_tokens", "manager_max_tokens", "chat")
#: models whose text is noise: their answers and outputs are left out of the results
RANDOM_WEIGHTS = ("random", "tiny", "smollm2-random")


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


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.coa", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    harness.add_locomo(ap)
    harness.add_model(ap)
    harness.add_engine(ap)
    ap.add_argument("--workers", type=int, default=3)
    harness.add_threads(ap, 1, "worker")
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
    harness.add_out(ap)
    ap.add_argument("--keep-logs", action="store_true", help="keep the workers' and router's logs in <out>/logs")
    harness.add_verbose(ap)
    return ap


@dataclass(frozen=True, kw_only=True)
class CoaConfig(LocomoOptions, WorkerOptions, OutOptions, VerboseOptions):
    """The run's options (``_parser``): the workers', the workload's, the arms'."""

    workers: int
    capacity_tokens: int | None
    conversations: int
    questions: int
    k: int
    turns: int
    segment_tokens: int
    concurrency: int
    worker_max_tokens: int
    manager_max_tokens: int
    reps: int
    seed: int
    chat: bool
    arms: tuple[str, ...]
    workloads: tuple[str, ...]
    agent_args: str
    sglang_tuned: str
    foreign_rate: float
    foreign_words: int
    keep_logs: bool

    def __post_init__(self) -> None:
        for x in self.arms:
            parse_arm(x)
        if not self.arms:
            raise ValueError("no arms")
        if not self.workloads or any(w not in WORKLOADS for w in self.workloads):
            raise ValueError("--workloads takes single and/or multi")


def _arm_names(text: str) -> tuple[str, ...]:
    """``--arms``: a comma list whose items may hold commas in brackets (``agent_aware[a=1,b=2]``)."""
    return tuple(x.strip() for x in re.split(r",(?![^\[]*\])", text) if x.strip())


def parse_args(argv: list[str] | None) -> CoaConfig:
    return parse_config(_parser(), CoaConfig, argv, arms=_arm_names, workloads=split_commas)


def text_id(text: Any) -> str:
    """A stable stand-in for a LoCoMo text in committed results (pairs questions across arms)."""
    return "sha1:" + hashlib.sha1(str(text).encode("utf-8")).hexdigest()[:12]


def _arms(a: CoaConfig) -> dict[str, Arm]:
    """The known arms and those of ``--arms``, with ``--agent-args`` / ``--sglang-tuned`` applied."""
    arms: dict[str, Arm] = {**ARMS, **{x: parse_arm(x) for x in a.arms}}
    if a.agent_args:
        agent = arms["agent_aware"]
        arms["agent_aware"] = replace(agent, agent={**agent.agent, **parse_overrides(a.agent_args)})
    if a.sglang_tuned:
        router = {"policy": "cache_aware", **parse_overrides(a.sglang_tuned)}
        arms["sglang_cache_aware_tuned"] = replace(arms["sglang_cache_aware_tuned"], router=router)
    return arms


def _workloads(a: CoaConfig) -> tuple[dict[str, list[Item]], str]:
    """The workloads of ``--workloads``, every block sized by the model family's llama tokenizer; and the
    tokenizing llama-server's version."""
    convs = load_locomo(a.locomo)[: a.conversations]
    opts = {"questions_per_conversation": a.questions, "k": a.k, "seed": a.seed}
    work = {"single": build_workload(convs, **opts)} if "single" in a.workloads else {}
    if "multi" in a.workloads:
        work["multi"] = build_multiturn(convs, turns=a.turns, **opts)
    gguf = harness.resolve_model("smollm2" if a.model.startswith("smollm2") else "random")
    with (
        LlamaServer(gguf, slots=1, ctx_size=a.ctx_size, threads=a.threads, cache_ram_mib=0) as server,
        EngineClient(server.base_url) as tok,
    ):
        return {name: with_tokens(items, tok) for name, items in work.items()}, server.version()


def _settings(a: CoaConfig) -> RunSettings:
    spec = WorkerSpec.from_options(a)
    log_dir = Path(a.out) / "logs" if a.keep_logs else None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
    return RunSettings(
        spec=spec,
        workers=a.workers,
        capacity_tokens=a.capacity_tokens or spec.capacity_tokens,
        chain=ChainConfig(**{f: getattr(a, f) for f in CHAIN_OPTIONS}),
        concurrency=a.concurrency,
        log_dir=log_dir,
        foreign_rate=a.foreign_rate,
        foreign_words=a.foreign_words,
    )


def _load() -> list[float]:
    return [round(x, 1) for x in os.getloadavg()]


def _env(work: dict[str, list[Item]], llama_version: str, s: RunSettings) -> dict[str, Any]:
    """The engines, the documents and the cache sizes of the run (the machine is in the envelope)."""
    docs = {b.key: b.tokens for items in work.values() for it in items for b in it.blocks}
    env = {
        "loadavg_start": _load(),
        "llama_server": llama_version,
        "sglang_router": SGLangRouter.version(),
        "distinct_documents": len(docs),
        "document_tokens": sum(v or 0 for v in docs.values()),
        "engine": s.spec.engine,
        "kv_bytes_per_token": s.spec.kv_bytes_per_token,
        "capacity_tokens_per_worker": s.capacity_tokens,
    }
    logger.info(
        "%s; %d distinct sessions (%d tokens); per-worker cache ~%d tokens",
        ", ".join(f"{k}: {len(v)} questions" for k, v in work.items()),
        env["distinct_documents"],
        env["document_tokens"],
        s.capacity_tokens,
    )
    return env


def _run_all(
    a: CoaConfig, arms: dict[str, Arm], work: dict[str, list[Item]], s: RunSettings
) -> tuple[list[Run], list[dict[str, Any]]]:
    """Every workload on every arm, ``--reps`` times, the arms' order rotated between repetitions."""
    runs: list[Run] = []
    records: list[dict[str, Any]] = []
    for rep in range(a.reps):
        shift = rep % len(a.arms)
        for name, items in work.items():
            for arm_name in a.arms[shift:] + a.arms[:shift]:
                run, recs = run_arm(arms[arm_name], name, rep, items, s)
                runs.append(run)
                records += recs
    runs.sort(key=lambda r: (r.workload, a.arms.index(r.arm), r.rep))
    return runs, records


def _scrubbed(records: list[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    """LoCoMo (CC BY-NC) is never copied into results: questions and gold answers by digest; a
    random-weight model's text is noise: the per-call numbers stay, not the generated text."""
    for rec in records:
        rec["question"], rec["gold"] = text_id(rec["question"]), text_id(rec["gold"])
        if model in RANDOM_WEIGHTS:
            rec.pop("answer", None)
            for call in rec["calls"]:
                call.pop("output", None)
                call.pop("request_id", None)
    return records


def _header(a: CoaConfig, arms: dict[str, Arm], env: dict[str, Any], machine: str) -> str:
    foreign = (
        f"Foreign traffic: {a.foreign_rate:g} one-off requests/s of {a.foreign_words} words from other "
        "applications (through the gateway for sglang arms, straight to the workers for agent arms); the "
        "engines' counts include it, the chain's prefilled tokens do not. "
    )
    return (
        f"Chain-of-Agents on LoCoMo: {a.conversations} conversations x {a.questions} questions, top-{a.k} "
        f"sessions, segment budget {a.segment_tokens}, {a.workers} {WORKER_NAMES[a.engine]} workers ({a.model} "
        f"model, {a.threads} thread, {a.cache_mib} MiB prompt cache each), {a.concurrency} in flight, CU "
        f"{a.worker_max_tokens} tokens, answer {a.manager_max_tokens}; multi-turn: chats of {a.turns}. "
        + (foreign if a.foreign_rate > 0 else "")
        + "Arms: "
        + "; ".join(f"{n} = {arms[n].describe()}" for n in a.arms)
        + f". Machine: {machine}, shared with other jobs (load {env['loadavg_start']} -> "
        f"{env['loadavg_end']}): throughput is the median of {a.reps} alternating repetitions."
    )


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    harness.setup_logging(a.verbose)
    for noisy in ("httpx", "httpcore", "cp_memory.engine"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    arms = _arms(a)
    settings = _settings(a)
    work, llama_version = _workloads(a)
    env = _env(work, llama_version, settings)
    runs, records = _run_all(a, arms, work, settings)
    env["loadavg_end"] = _load()
    summary = summarize(runs)
    payload = harness.envelope(
        "benchmarks.coa",
        argv,
        config=asdict(a),
        arms={n: asdict(arms[n]) for n in a.arms},
        env=env,
        summary=summary,
        runs=[asdict(r) for r in runs],
        questions=_scrubbed(records, a.model),
    )
    md = markdown(runs, summary, _header(a, arms, env, payload["machine"]["summary"]))
    written = harness.write_outputs(a.out, "coa_routing", payload, markdown=md, plot=lambda path: plot(runs, path))
    sys.stdout.write(md)
    logger.info("wrote %s", ", ".join(map(str, written.values())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
