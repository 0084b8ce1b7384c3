"""``python -m benchmarks.agents record``: record real harness sessions against the scripted model server.

    python -m benchmarks.agents record --harness claude,codex --task docs,code --sessions 2 --out DIR
    python -m benchmarks.agents record --harness claude --via-gateway --gateway-args "--upstream-kind anthropic"
    python -m benchmarks.agents record --harness openclaw,claude,codex --suite claw --pick 12 --parallel --workers 4

For each harness one scripted server (:mod:`benchmarks.agents.scripted`) records every request into
``DIR/<harness>_<version>_<tasks>.jsonl.xz`` (keys scrubbed); each session runs one task in its own scratch folder
``--workdir/<harness>/<task>-<n>`` (made afresh: the same folder gives the same traffic) with its own scratch
``HOME``; a task of several turns sends them one by one to the same session (the harness resumes it).
``--suite claw|gen-docs`` takes the tasks from a document suite (:mod:`benchmarks.agents.documents`; ``--pick N``:
N of its tasks spread evenly over it, ``--claw-tasks PATH``: where claw-tasks is) and names the trace after the
suite. ``--parallel`` runs a harness's sessions at once (several users interleaved); every record holds when
its request arrived and when its reply was written (``t_sent``, ``t_answered``), so the replay can send it at the
recorded concurrency (``--workers N``: at most N sessions at once). ``--answer-delay S`` has the server answer
each generation request after ``S`` seconds (a model's modelled time to answer; 0: at once). ``--suffix`` names
the trace file apart from an earlier one. A harness that is not installed is reported and skipped.
``DIR/index.json`` lists every trace with its harness version and :func:`benchmarks.agents.trace.summarise`.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.agents.documents import SUITES, suite
from benchmarks.agents.harnesses import (
    HarnessRun,
    harness_binary,
    harness_version,
    run_claude,
    run_codex,
    run_openclaw,
)
from benchmarks.agents.processes import gateway_process
from benchmarks.agents.scripted import ScriptedServer
from benchmarks.agents.tasks import TASKS, Task, prompt_for
from benchmarks.agents.trace import load_trace, summarise

__all__ = ["HARNESSES", "main", "record"]

log = logging.getLogger(__name__)

Runner = Callable[..., HarnessRun]
#: harness name -> (binary, runner, trace-file prefix)
HARNESSES: dict[str, tuple[str, Runner, str]] = {
    "claude": ("claude", run_claude, "claude_code"),
    "codex": ("codex", run_codex, "codex"),
    "openclaw": ("openclaw", run_openclaw, "openclaw"),
}
DEFAULT_WORKDIR = Path("/tmp/cp_memory_agents")


def _version_tag(harness: str) -> str:
    version = harness_version(HARNESSES[harness][0]) or "unknown"
    if harness == "openclaw":  # "OpenClaw 2026.9.6 (eb377ac)"
        words = version.split()
        return words[1] if len(words) > 1 else words[0]
    return version.split()[0] if harness == "claude" else version.split()[-1]


def _session(harness: str, task: Task, n: int, url: str, workdir: Path, timeout: float) -> dict[str, Any]:
    folder = workdir / harness / f"{task.name}-{n}"
    home = workdir / harness / f"home-{task.name}-{n}"
    for path in (folder, home):
        shutil.rmtree(path, ignore_errors=True)
    task.materialise(folder)
    runner = HARNESSES[harness][1]
    turns = 0
    for turn in range(len(task.turns)):
        run = runner(prompt_for(task, folder, turn), folder, url, home, timeout=timeout, resume=turn > 0)
        if not run.ok:
            log.warning(
                "%s %s-%d turn %d failed (%d): %s",
                harness,
                task.name,
                n,
                turn + 1,
                run.returncode,
                (run.stderr or run.stdout)[-500:],
            )
            return {"task": task.name, "session": n, "ok": False, "returncode": run.returncode, "turns": turns}
        turns += 1
    return {"task": task.name, "session": n, "ok": True, "returncode": 0, "turns": turns}


def pick(book: dict[str, Task], n: int | None) -> list[str]:
    """``n`` task names spread evenly over ``book`` (its order), or all of them (``n`` None or >= its size)."""
    names = list(book)
    if n is None or n >= len(names):
        return names
    if n < 1:
        raise ValueError(f"--pick must be >= 1, got {n}")
    return [names[(i * len(names)) // n] for i in range(n)]


def record(
    harness: str,
    tasks: Sequence[str],
    sessions: int,
    out: Path,
    *,
    workdir: Path = DEFAULT_WORKDIR,
    via_gateway: bool = False,
    gateway_args: Sequence[str] = (),
    parallel: bool = False,
    timeout: float = 300,
    answer_delay: float = 0.0,
    suffix: str = "",
    book: dict[str, Task] | None = None,
    label: str | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    """Record ``sessions`` runs of every task of ``tasks`` by ``harness``; returns its index entry. ``book``: the
    tasks by name (default :data:`TASKS`); ``label``: the trace's name part for the tasks (default: their names);
    ``workers``: at most that many sessions at once with ``parallel`` (default: all)."""
    if harness_binary(HARNESSES[harness][0]) is None:
        return {"harness": harness, "skipped": f"{harness} not installed: run scripts/setup_harnesses.sh"}
    book = TASKS if book is None else book
    unknown = [t for t in tasks if t not in book]
    if unknown:
        raise ValueError(f"unknown task(s) {', '.join(unknown)} (have: {', '.join(book)})")
    version = _version_tag(harness)
    what = label or "_".join(tasks)
    name = f"{HARNESSES[harness][2]}_{version}_{what}{'_gateway' if via_gateway else ''}{suffix}"
    trace = out / f"{name}.jsonl.xz"
    jobs = [(book[task], n) for n in range(sessions) for task in tasks]
    width = (workers or len(jobs)) if parallel else 1
    with ScriptedServer(trace=trace, answer_delay=answer_delay, tasks=book) as server:
        gateway = gateway_process(server.url, *gateway_args).start() if via_gateway else None
        try:
            url = gateway.url if gateway is not None else server.url
            with ThreadPoolExecutor(max_workers=max(1, width)) as pool:
                runs = list(pool.map(lambda job: _session(harness, job[0], job[1], url, workdir, timeout), jobs))
        finally:
            if gateway is not None:
                gateway.stop()
    return {
        "harness": harness,
        "version": version,
        "file": trace.name,
        "bytes": trace.stat().st_size,
        "via_gateway": via_gateway,
        "parallel": parallel,
        "workers": width,
        "answer_delay_s": answer_delay,
        "tasks": list(tasks),
        "runs": runs,
        "summary": summarise(load_trace(trace)),
    }


def _update_index(out: Path, entries: list[dict[str, Any]]) -> Path:
    index = out / "index.json"
    old = json.loads(index.read_text(encoding="utf-8")) if index.exists() else {"traces": []}
    files = {e.get("file") for e in entries}
    kept = [e for e in old.get("traces", []) if e.get("file") not in files]
    index.write_text(json.dumps({"traces": kept + entries}, indent=1) + "\n", encoding="utf-8")
    return index


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.agents record", description=__doc__.split("\n\n")[0])
    ap.add_argument("--harness", default="claude,codex", help="comma-separated of " + ", ".join(HARNESSES))
    ap.add_argument("--task", default="docs", help="comma-separated of " + ", ".join(TASKS))
    ap.add_argument("--sessions", type=int, default=1, help="sessions per task (1)")
    ap.add_argument("--out", default="results/agents", help="folder of the traces and index.json")
    ap.add_argument("--workdir", default=str(DEFAULT_WORKDIR), help="scratch folders and homes of the sessions")
    ap.add_argument("--via-gateway", action="store_true", help="the cp_memory gateway between harness and server")
    ap.add_argument("--gateway-args", default="", help="extra arguments of the gateway's CLI (one string)")
    ap.add_argument("--parallel", action="store_true", help="a harness's sessions at once")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per harness run (300)")
    ap.add_argument("--answer-delay", type=float, default=0.0, help="seconds before each scripted reply (0)")
    ap.add_argument("--suffix", default="", help="appended to the trace file's name (e.g. _concurrent)")
    ap.add_argument("--suite", choices=SUITES, help="the tasks of a document suite (then --task all by default)")
    ap.add_argument("--pick", type=int, help="with --suite: this many of its tasks, spread evenly over it")
    ap.add_argument("--claw-tasks", help="the claw-tasks folder (default: $CP_MEMORY_CLAW_TASKS, ../shared/data)")
    ap.add_argument("--workers", type=int, help="with --parallel: at most this many sessions at once (all)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    book: dict[str, Task] | None = None
    label = None
    tasks = [t for t in args.task.split(",") if t]
    if args.suite:
        book = suite(args.suite, args.claw_tasks)
        chosen = pick(book, args.pick)
        tasks = chosen if args.task in ("docs", "all") else tasks
        label = f"{args.suite}{len(tasks)}"
    entries = [
        record(
            h,
            tasks,
            args.sessions,
            out,
            workdir=Path(args.workdir),
            via_gateway=args.via_gateway,
            gateway_args=args.gateway_args.split(),
            parallel=args.parallel,
            timeout=args.timeout,
            answer_delay=args.answer_delay,
            suffix=args.suffix,
            book=book,
            label=label,
            workers=args.workers,
        )
        for h in args.harness.split(",")
        if h
    ]
    _update_index(out, entries)
    sys.stdout.write(json.dumps(entries, indent=1) + "\n")
    return entries
