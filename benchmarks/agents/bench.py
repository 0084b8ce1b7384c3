"""``python -m benchmarks.agents replay``: recorded agent traces replayed through every arm, on a real prefix
cache and on the modelled provider rules.

    python -m benchmarks.agents replay --engine vllm,modelled --requests 20 --rounds 2 --out docs/results
    python -m benchmarks.agents replay --engine llama --arms passthrough,gateway --requests 5 --out /tmp/x
    python -m benchmarks.agents replay --engine modelled --trace T.jsonl.xz --concurrency recorded --rounds 3

For each trace (default: the committed Claude Code and Codex traces in tests/gateway/traces) and engine
(:mod:`benchmarks.agents.engines`), every arm (:mod:`benchmarks.agents.arms`) replays the trace's first
``--requests`` requests on an emptied cache (:mod:`benchmarks.agents.replay`), ``--rounds`` times on a real engine
with the arms' order rotated each round (TTFT pairs: the median of the rounds). ``--concurrency recorded`` (the
default for a trace whose records carry their timing) replays the sessions side by side as they ran
(:mod:`benchmarks.agents.schedule`; on the modelled engine too ``--rounds`` times, since the order in which
concurrent requests reach a cache can move hits between runs: the rounds' spread is reported); ``serial``, and any
trace recorded without timing (the result says so), sends one request at a time in recorded order. On the modelled
engine an Anthropic trace meets Anthropic's documented cache rules and an OpenAI Responses trace (Codex) OpenAI's
(the gateway told ``--upstream-kind openai``), priced by :func:`benchmarks.agents.replay.prices_for`. Writes
``agents_replay.json`` / ``.md`` / ``.png`` into ``--out`` (``agents_replay_concurrent.*`` when a run was at the
recorded concurrency; ``--name _documents`` puts ``_documents`` after ``agents_replay``;
:mod:`benchmarks.agents.report`). ``--context`` sets a real engine's context (the document traces need 65536).
"""

from __future__ import annotations

import argparse
import logging
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.agents.arms import ARMS, ArmUnavailable, start_arm
from benchmarks.agents.engines import CONTEXT, ENGINES, Engine, start_engine
from benchmarks.agents.memories import (
    SECRET,
    TOP_K,
    MemorySetup,
    gateway_mem0_args,
    leaks,
    mem0_records,
    prepare_memories,
)
from benchmarks.agents.repetition import repetition
from benchmarks.agents.replay import (
    MODELLED_OPENAI_MODEL,
    Attribution,
    Sent,
    edit_body,
    replay_arm,
    stability,
)
from benchmarks.agents.report import PAPER, markdown, plot, summarise_arm
from benchmarks.agents.schedule import Concurrency
from benchmarks.agents.tap import Tap
from benchmarks.agents.trace import has_timings, in_flight, load_trace
from benchmarks.common.config import LocomoOptions, OutOptions, VerboseOptions, parse_config
from benchmarks.common.harness import add_locomo, add_out, add_verbose, envelope, setup_logging, write_outputs
from cp_memory.gateway.config import GATEWAY_SECRET_ENV

__all__ = ["CONCURRENT_TRACES", "TRACES", "AgentReplayConfig", "concurrency_for", "main", "parse_args", "run_trace"]

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
TRACES = (
    ROOT / "tests" / "gateway" / "traces" / "claude_code_2.1.328_docs_code.jsonl.xz",
    ROOT / "tests" / "gateway" / "traces" / "codex_0.169.0_docs_code.jsonl.xz",
)
#: the same harnesses and tasks recorded with each request's send and answer times (``--concurrency recorded``)
CONCURRENT_TRACES = (
    ROOT / "tests" / "gateway" / "traces" / "claude_code_2.1.328_docs_code_concurrent.jsonl.xz",
    ROOT / "tests" / "gateway" / "traces" / "codex_0.169.0_docs_code_concurrent.jsonl.xz",
)
METHOD = (
    "each arm replays the trace's requests on an emptied engine cache, one at a time in recorded order (serial) or "
    "at the recorded concurrency (sessions side by side; each request no earlier than its recorded offset from the "
    "first, and after its own session's requests answered before it in the recording, plus the recorded think "
    "time; upstream calls matched to requests by time and session); body = "
    "the client's recorded body with the engine's model and a small output cap (the same for every arm); token "
    "counts are the engine's own usage, read on a recording tap between the arm and the engine; prefilled = "
    "prompt - cache read; byte-stable = the JSON the arm sent upstream keeps (marks aside) the head and items it "
    "sent for the previous request of the same conversation"
)


def _generation_records(path: Path, requests: int) -> list[dict[str, Any]]:
    out = [
        r
        for r in load_trace(path)
        if r.get("method", "POST") == "POST" and r.get("protocol") and isinstance(r.get("body"), dict)
    ]
    return out[:requests]


def _one_arm(
    name: str,
    engine: Engine,
    tap: Tap,
    records: Sequence[Mapping[str, Any]],
    run: str,
    opts: AgentReplayConfig,
    setup: MemorySetup | None = None,
    concurrency: Concurrency = Concurrency.SERIAL,
) -> tuple[list[Sent], list[Any], Attribution]:
    anthropic = records[0].get("protocol") == "anthropic"
    workdir = Path(opts.workdir) / run
    kind = "openai" if engine.modelled and not anthropic else engine.kind
    args = gateway_mem0_args(setup) if setup is not None else []
    env = {GATEWAY_SECRET_ENV: SECRET} if setup is not None else None
    sending = mem0_records(records, setup, name) if setup is not None else records
    with start_arm(
        name, tap.url, kind=kind, workdir=workdir, anthropic=anthropic, gateway_args=args, gateway_env=env
    ) as arm:
        engine.flush(run)
        tap.headers = dict(engine.headers)
        edit = partial(edit_body, model=engine.model, max_tokens=opts.max_tokens)
        rows, sent, how = replay_arm(arm, sending, tap, edit=edit, concurrency=concurrency, speed=opts.speed)
    verdicts = stability(records, sent)
    return [replace(r, breaks_at=v) for r, v in zip(rows, verdicts, strict=True)], sent, how


def concurrency_for(records: Sequence[Mapping[str, Any]], asked: str | None) -> tuple[Concurrency, dict[str, Any]]:
    """The replay's mode for ``records`` (``asked``: the option, None: recorded where the trace allows) and how
    the result describes it."""
    timed = has_timings(records)
    if asked == Concurrency.SERIAL.value:
        return Concurrency.SERIAL, {"mode": "serial", "asked": asked}
    if not timed:
        reason = "the trace holds no send/answer times (recorded before they were stored): one request at a time"
        return Concurrency.SERIAL, {"mode": "serial", "asked": asked or "default", "reason": reason}
    recorded = in_flight((float(r["t_sent"]), float(r["t_answered"])) for r in records)
    return Concurrency.RECORDED, {"mode": "recorded", "asked": asked or "default", "recorded_in_flight": recorded}


def _described(records: Sequence[Mapping[str, Any]], opts: AgentReplayConfig) -> tuple[Concurrency, dict[str, Any]]:
    concurrency, described = concurrency_for(records, opts.concurrency)
    if concurrency is Concurrency.RECORDED:
        described["speed"] = opts.speed
    return concurrency, described


def run_trace(
    engine: Engine, path: Path, arms: Sequence[str], opts: AgentReplayConfig, setup: MemorySetup | None = None
) -> dict[str, Any]:
    """Replay one trace through every arm on ``engine`` (``setup``: with mem0 memories,
    :mod:`benchmarks.agents.memories`); the run's figures (see the module docstring)."""
    records = _generation_records(path, opts.requests)
    concurrency, described = _described(records, opts)
    label = engine.label
    if engine.modelled and records and records[0].get("protocol") != "anthropic":
        label = f"modelled OpenAI prompt cache (documented rules, local server; {MODELLED_OPENAI_MODEL} price ratios)"
    head = {"trace": path.name, "engine": engine.name, "engine_label": label, "requests": len(records)}
    head["concurrency"] = described
    head["repetition"] = repetition(records).as_dict()
    rounds: dict[str, list[list[Sent]]] = {}
    bodies: dict[str, list[Any]] = {}
    unavailable: dict[str, str] = {}
    matching: dict[str, list[Attribution]] = {}
    once = engine.modelled and concurrency is Concurrency.SERIAL  # the modelled rules are deterministic then
    with Tap(engine.url, headers=engine.headers) as tap:
        for k in range(1 if once else opts.rounds):
            for name in [*arms[k % len(arms) :], *arms[: k % len(arms)]]:
                if name in unavailable:
                    continue
                log.info("%s on %s: %s, round %d", path.name, engine.name, name, k + 1)
                try:
                    run = f"{name}-{k}" + ("-mem0" if setup is not None else "")  # a fresh modelled cache
                    rows, sent, how = _one_arm(name, engine, tap, records, run, opts, setup, concurrency)
                    rounds.setdefault(name, []).append(rows)
                    matching.setdefault(name, []).append(how)
                    bodies.setdefault(name, sent)
                except ArmUnavailable as exc:
                    log.warning("%s", exc)
                    unavailable[name] = str(exc)
    base = rounds.get("passthrough")
    summary: dict[str, Any] = {}
    for name in arms:
        if name in unavailable:
            summary[name] = {"unavailable": unavailable[name]}
        elif name in rounds:
            summary[name] = summarise_arm(rounds[name], None if name == "passthrough" else base, engine.modelled)
            summary[name]["matching"] = {
                "ambiguous": sum(a.ambiguous for a in matching[name]),
                "unmatched": sum(a.unmatched for a in matching[name]),
            }
    per_request = {n: [asdict(s) for s in r[0]] for n, r in rounds.items()}
    if setup is not None:
        head["memories"] = _memories_head(setup, {n: leaks(b, setup) for n, b in bodies.items()})
    return head | {"modelled": engine.modelled, "arms": summary, "per_request": per_request}


def _memories_head(setup: MemorySetup, seen: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "user": setup.user,
        "memories": len(setup.own),
        "other_tenant_memories": len(setup.foreign),
        "top_k": TOP_K,
        "requests_searched_mem0_pattern": sorted(setup.found),
        "seen_upstream": dict(seen),
    }


def _memory_runs(engine: Engine, path: Path, arms: Sequence[str], opts: AgentReplayConfig) -> list[dict[str, Any]]:
    """Without memories, then with the LoCoMo user's memories (passthrough: mem0's pattern; gateway: --mem0)."""
    store = Path(opts.workdir) / f"mem0-{engine.name}-{path.name.split('.')[0]}"
    shutil.rmtree(store, ignore_errors=True)
    records = _generation_records(path, opts.requests)
    setup = prepare_memories(
        records, store, locomo=opts.locomo, conv=opts.mem0_conv, other=opts.mem0_other, count=opts.mem0_memories
    )
    return [run_trace(engine, path, arms, opts), run_trace(engine, path, arms, opts, setup)]


@dataclass(frozen=True, kw_only=True)
class AgentReplayConfig(LocomoOptions, OutOptions, VerboseOptions):
    """The replay's options (:func:`parse_args`)."""

    trace: list[str] | None
    engine: str
    arms: str
    requests: int
    rounds: int
    max_tokens: int
    context: int
    name: str
    block_size: int
    workdir: str
    mem0: bool
    mem0_conv: int
    mem0_other: int
    mem0_memories: int
    concurrency: str | None
    speed: float


def parse_args(argv: Sequence[str] | None) -> AgentReplayConfig:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.agents replay", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--trace", action="append", default=None, help="a trace file (repeatable; default: the two serial ones)"
    )
    ap.add_argument("--engine", default="vllm,modelled", help="comma-separated of " + ", ".join(ENGINES))
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated of " + ", ".join(ARMS))
    ap.add_argument("--requests", type=int, default=20, help="the first N requests of each trace (20)")
    ap.add_argument("--rounds", type=int, default=2, help="replays per arm on a real engine, order rotated (2)")
    ap.add_argument("--max-tokens", type=int, default=4, help="output cap of every replayed request (4)")
    ap.add_argument("--block-size", type=int, default=32, help="vLLM's prefix-cache block (32)")
    ap.add_argument("--context", type=int, default=CONTEXT, help=f"a real engine's context, tokens ({CONTEXT})")
    ap.add_argument("--name", default="", help="appended to the output files' stem (e.g. _documents)")
    ap.add_argument("--workdir", default="/tmp/cp_memory_replay", help="scratch folders of the peer proxies")
    ap.add_argument("--mem0", action="store_true", help="also replay with a LoCoMo user's mem0 memories")
    ap.add_argument("--mem0-conv", type=int, default=0, help="--mem0: the harness user's LoCoMo conversation (0)")
    ap.add_argument("--mem0-other", type=int, default=1, help="--mem0: another tenant's conversation (1)")
    ap.add_argument("--mem0-memories", type=int, default=60, help="--mem0: first N observations of each (60)")
    ap.add_argument(
        "--concurrency",
        choices=[c.value for c in Concurrency],
        default=None,
        help="recorded: sessions side by side as recorded (default where the trace has timings); serial",
    )
    ap.add_argument("--speed", type=float, default=1.0, help="recorded: offsets and think times divided by this (1)")
    add_locomo(ap)
    add_out(ap, "results/agents")
    add_verbose(ap)
    return parse_config(ap, AgentReplayConfig, argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    opts = parse_args(argv)
    setup_logging(opts.verbose)
    arms = [a for a in opts.arms.split(",") if a]
    traces = [Path(t) for t in (opts.trace or TRACES)]
    runs = []
    for name in [e for e in opts.engine.split(",") if e]:
        with start_engine(name, block_size=opts.block_size, context=opts.context) as engine:
            for path in traces:
                runs += _memory_runs(engine, path, arms, opts) if opts.mem0 else [run_trace(engine, path, arms, opts)]
    done = [r for r in runs if "arms" in r]
    payload = envelope("benchmarks.agents", ["replay", *(argv or [])], method=METHOD, paper=PAPER, runs=done)
    payload["skipped"] = [{k: r[k] for k in ("trace", "engine", "skipped")} for r in runs if "skipped" in r]
    concurrent = any(r.get("concurrency", {}).get("mode") == "recorded" for r in done)
    stem = "agents_replay" + opts.name + ("_concurrent" if concurrent else "") + ("_mem0" if opts.mem0 else "")
    write_outputs(opts.out, stem, payload, markdown=markdown(payload), plot=partial(plot, payload))
    return payload
