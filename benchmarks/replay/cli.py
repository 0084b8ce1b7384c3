"""``python -m benchmarks.replay FILE``: send an exported LoCoMo prompt sequence to an engine, fairly.

    python -m benchmarks.replay prompts.json.gz --engine-url http://127.0.0.1:30000       # SGLang, vLLM, ...
    python -m benchmarks.replay prompts.json.gz --llama-server BIN --model GGUF -ngl 99   # restarted per run

Fairness as in the LoCoMo benchmark: the runs come in the export's order (modes rotated per conversation
and k); each run starts on a cold cache (a launched llama-server is restarted; SGLang ``/flush_cache``;
vLLM ``/reset_prefix_cache``; an external llama.cpp only gets its slots erased, which the output says),
then the warm-up requests, then the prompts in order. Statistics: :mod:`benchmarks.replay.stats`.
Standard library only (plus this repository's stdlib-only ``benchmarks.locomo.export/metrics``).
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.locomo.export import join_lines, load_prompts

from .client import StreamingClient
from .server import LaunchedLlamaServer
from .stats import markdown, summarize

logger = logging.getLogger("benchmarks.replay")

__all__ = ["group_by_mode", "main", "replay", "select_runs"]


def select_runs(
    data: dict[str, Any], *, modes: Sequence[str] = (), top_k: Sequence[str] = (), conversations: Sequence[int] = ()
) -> list[dict[str, Any]]:
    """The export's runs (in order; with ``top_k``, in its k order) restricted to the given modes, k labels and
    conversation indices."""
    runs = [
        r
        for r in data["runs"]
        if (not modes or r["mode"] in modes)
        and (not top_k or r["k"] in top_k)
        and (not conversations or r["conversation"] in conversations)
    ]
    if top_k:  # the k given first is replayed first (what matters most, ahead of a --deadline-s)
        runs.sort(key=lambda r: list(top_k).index(r["k"]))
    if not runs:
        raise ValueError("no run of the export matches the --modes/--top-k/--conversations given")
    return runs


def _machine() -> dict[str, Any]:
    gpu = None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        gpu = out.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        pass
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    import os

    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), "gpu": gpu, "python": platform.python_version()}


def group_by_mode(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``--flush per-mode``: the runs of one (k, mode) back to back (conversations in order), k in the
    export's order, the order of modes rotating from one k to the next; a flush starts each group only."""
    ks = list(dict.fromkeys(r["k"] for r in runs))
    modes = list(dict.fromkeys(r["mode"] for r in runs))
    out = []
    for j, k in enumerate(ks):
        for mode in modes[j % len(modes) :] + modes[: j % len(modes)]:
            group = [r for r in runs if r["k"] == k and r["mode"] == mode]
            out += [{**r, "flush": i == 0, "warmup": r.get("warmup", 0) if i == 0 else 0} for i, r in enumerate(group)]
    return out


def replay(
    data: dict[str, Any],
    runs: Sequence[dict[str, Any]],
    *,
    client: StreamingClient,
    kind: str,
    server: LaunchedLlamaServer | None = None,
    max_tokens: int | None = None,
    requests_per_run: int | None = None,
    deadline_s: float | None = None,
) -> list[dict[str, Any]]:
    """Replay ``runs``; one record per request (the keys :func:`benchmarks.replay.stats.summarize` reads).

    A run whose ``flush`` is false continues on the previous run's cache (``--flush per-mode``). With
    ``deadline_s``, no further flush group starts once that many seconds have passed."""
    meta, lines = data["meta"], data["lines"]
    tokens = max_tokens if max_tokens is not None else int(meta.get("max_tokens", 16))
    records: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    how = "none"
    for i, run in enumerate(runs):
        if run.get("flush", True):
            if deadline_s is not None and time.perf_counter() - t0 > deadline_s:
                logger.warning("deadline of %.0f s reached: %d of %d runs replayed", deadline_s, i, len(runs))
                break
            if server is not None:
                how = server.restart()
                client.close()
                client = StreamingClient(server.base_url, model=client.model)
            else:
                how = client.flush(kind)
        for _ in range(int(run.get("warmup", 0))):
            warm = client.complete(str(meta.get("warmup_prompt", "Hello")), max_tokens=2)
            if warm.error:
                logger.warning("warm-up request failed: %s", warm.error)
        history: list[dict[str, str]] = []
        system = meta.get("system")
        for req in run["requests"][:requests_per_run]:
            if "prompt" in req:
                reply = client.complete(join_lines(lines, req["prompt"]), max_tokens=tokens)
            else:
                if req.get("new_chat"):
                    history = []
                user = {"role": "user", "content": join_lines(lines, req["user"])}
                messages = ([{"role": "system", "content": system}] if system else []) + history + [user]
                reply = client.chat(messages, max_tokens=tokens)
                history += [user, {"role": "assistant", "content": reply.text}]
            records.append(
                {
                    "conversation": run["conversation"],
                    "sample_id": run["sample_id"],
                    "k": run["k"],
                    "mode": run["mode"],
                    "run": i,
                    "run_position": run.get("position"),
                    "flush": how,
                    "turn": req["turn"],
                    "measured": bool(req["measured"]) and reply.error is None,
                    "ttft_s": reply.ttft_s,
                    "total_s": reply.total_s,
                    "prompt_tokens": reply.prompt_tokens,
                    "cached_tokens": reply.cached_tokens,
                    "completion_tokens": reply.completion_tokens,
                    "server_prompt_ms": reply.server_prompt_ms,
                    "error": reply.error,
                }
            )
        logger.info(
            "run %d/%d %s k=%s %s: %d requests (%s)",
            i + 1,
            len(runs),
            run["sample_id"],
            run["k"],
            run["mode"],
            len(run["requests"][:requests_per_run]),
            how,
        )
    client.close()
    return records


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.replay", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("prompts", help="file written by python -m benchmarks.locomo ... --export-prompts FILE")
    e = ap.add_argument_group("engine (one of)")
    e.add_argument("--engine-url", metavar="URL", help="a running OpenAI-compatible server")
    e.add_argument("--llama-server", metavar="BIN", help="launch this llama-server (restarted before every run)")
    e.add_argument("--model", metavar="GGUF", help="with --llama-server: the model file")
    e.add_argument("--model-name", help="with --engine-url: the served model name (default: the first listed)")
    e.add_argument("--api-key")
    e.add_argument("--ctx-size", type=int, default=8192)
    e.add_argument("--threads", type=int, default=None)
    e.add_argument("--cache-ram-mib", type=int, default=2048)
    e.add_argument("-ngl", "--gpu-layers", type=int, default=None, help="llama-server -ngl (GPU offload)")
    e.add_argument("--server-args", default="", help="more llama-server arguments (one string)")
    e.add_argument("--server-log", metavar="FILE", help="append llama-server's output here")
    s = ap.add_argument_group("what to replay")
    s.add_argument("--modes", default="", help="comma list (default: all in the file)")
    s.add_argument(
        "--top-k", default="", help="comma list of k labels, replayed in this order (default: all, as exported)"
    )
    s.add_argument("--conversations", default="", help="comma list of conversation indices (default: all)")
    s.add_argument("--requests-per-run", type=int, default=None, metavar="N", help="first N requests of each run")
    s.add_argument("--max-tokens", type=int, default=None, help="default: the export's")
    s.add_argument(
        "--flush",
        choices=("per-run", "per-mode"),
        default="per-run",
        help="per-run (default): a cold cache for every (conversation, k, mode) run, as exported; "
        "per-mode: the runs of one (k, mode) back to back after one flush (mode order rotated "
        "per k) - far fewer server restarts where a restart is slow (a large model on a GPU)",
    )
    s.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help="start no further flush group after this many seconds (the results say so)",
    )
    ap.add_argument("--out", default="results", help="parent folder of the results folder")
    ap.add_argument("--label", default="", help="a word for the results folder name (e.g. h200)")
    ap.add_argument("-v", "--verbose", action="store_true")
    return ap


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    if bool(args.engine_url) == bool(args.llama_server):
        logger.error("give exactly one of --engine-url URL or --llama-server BIN --model GGUF")
        return 2
    if args.llama_server and not args.model:
        logger.error("--llama-server needs --model GGUF")
        return 2
    t_start = time.perf_counter()
    try:
        data = load_prompts(args.prompts)
        runs = select_runs(
            data,
            modes=_split(args.modes),
            top_k=_split(args.top_k),
            conversations=[int(c) for c in _split(args.conversations)],
        )
        if args.flush == "per-mode":
            runs = group_by_mode(runs)
        server = None
        if args.llama_server:
            server = LaunchedLlamaServer(
                args.llama_server,
                args.model,
                ctx_size=args.ctx_size,
                threads=args.threads,
                cache_ram_mib=args.cache_ram_mib,
                gpu_layers=args.gpu_layers,
                extra_args=shlex.split(args.server_args),
                log_path=args.server_log,
            )
            server.start()
            client = StreamingClient(server.base_url)
            kind = "llama.cpp (launched, restarted per run)"
        else:
            client = StreamingClient(args.engine_url, model=args.model_name, api_key=args.api_key)
            kind = client.probe()
        try:
            records = replay(
                data,
                runs,
                client=client,
                kind=kind,
                server=server,
                max_tokens=args.max_tokens,
                requests_per_run=args.requests_per_run,
                deadline_s=args.deadline_s,
            )
        finally:
            if server is not None:
                server.stop()
    except (OSError, ValueError, RuntimeError) as exc:
        logger.error("%s", exc)
        return 1
    rows = summarize(records)
    engine = {
        "kind": kind,
        "url": args.engine_url,
        "model": client.model or args.model,
        "command": server.command() if server else None,
        "restarts": server.restarts if server else 0,
        "start_s_mean": (sum(server.start_s) / len(server.start_s)) if server and server.start_s else None,
    }
    done = len({r["run"] for r in records})
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "argv": argv,
        "export": data["meta"],
        "engine": engine,
        "machine": _machine(),
        "runs": len(runs),
        "runs_replayed": done,
        "requests": len(records),
        "flush": args.flush,
        "stopped_early": done < len(runs),
        "wall_s": round(time.perf_counter() - t_start, 1),
    }
    header = [
        f"**LoCoMo prompt replay** — engine: **{kind}**, model: **{engine['model']}**",
        "",
        f"- machine: {meta['machine']}",
        (
            f"- {done} of {len(runs)} runs, {len(records)} requests, wall {meta['wall_s']} s; cache made cold "
            f"before every {'run' if args.flush == 'per-run' else '(k, mode) group'}; warm-ups and first turns "
            "left out" + ("; STOPPED EARLY at the deadline" if done < len(runs) else "")
        ),
        f"- prompts: {args.prompts} (exported by: {' '.join(data['meta'].get('argv', []))})",
    ]
    table = markdown(rows, header)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder = Path(args.out) / f"replay-{stamp}{'-' + args.label if args.label else ''}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(
        json.dumps({"meta": meta, "summary": rows, "requests": records}, indent=1) + "\n", encoding="utf-8"
    )
    (folder / "table.md").write_text(table + "\n", encoding="utf-8")
    sys.stdout.write(table + f"\n\nresults: {folder}\n")
    return 0
