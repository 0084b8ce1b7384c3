"""``python -m benchmarks.replay FILE``: send an exported LoCoMo prompt sequence to an engine, fairly.

    python -m benchmarks.replay prompts.json.gz --engine-url http://127.0.0.1:30000       # SGLang, vLLM, ...
    python -m benchmarks.replay prompts.json.gz --llama-server BIN --model GGUF -ngl 99   # restarted per run

Fairness as in the LoCoMo benchmark: the runs come in the export's order (modes rotated per conversation
and k); each run starts on a cold cache (a launched llama-server is restarted; SGLang ``/flush_cache``;
vLLM ``/reset_prefix_cache``; an external llama.cpp only gets its slots erased, which the output says),
then the warm-up requests, then the prompts in order. Statistics: :mod:`benchmarks.replay.stats`.
Standard library only (plus this repository's stdlib-only ``benchmarks.common.export/metrics/config``).
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common.config import OutOptions, VerboseOptions, parse_config
from benchmarks.common.export import join_lines, load_prompts
from benchmarks.common.harness import envelope

from .client import Reply, StreamingClient
from .server import LaunchedLlamaServer
from .stats import markdown, summarize

logger = logging.getLogger("benchmarks.replay")

__all__ = ["ReplayConfig", "build_parser", "group_by_mode", "main", "parse_args", "replay", "select_runs"]


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


#: a record's fields from its run, and from the engine's reply
RUN_FIELDS = ("conversation", "sample_id", "k", "mode")
REPLY_FIELDS = ("ttft_s", "total_s", "prompt_tokens", "cached_tokens", "completion_tokens", "server_prompt_ms", "error")


def _cold(client: StreamingClient, server: LaunchedLlamaServer | None, kind: str) -> tuple[StreamingClient, str]:
    """A cold cache: a launched server restarted (and a new client on it), else the engine's HTTP flush."""
    if server is None:
        return client, client.flush(kind)
    how = server.restart()
    client.close()
    return StreamingClient(server.base_url, model=client.model), how


def _send(
    client: StreamingClient, run: dict[str, Any], data: dict[str, Any], tokens: int, requests_per_run: int | None
) -> Iterator[tuple[dict[str, Any], Reply]]:
    """One run: its warm-up requests, then its requests in order, each with its reply (a chat run keeps its
    own history: this engine's answers)."""
    meta, lines = data["meta"], data["lines"]
    for _ in range(int(run.get("warmup", 0))):
        warm = client.complete(str(meta.get("warmup_prompt", "Hello")), max_tokens=2)
        if warm.error:
            logger.warning("warm-up request failed: %s", warm.error)
    history: list[dict[str, str]] = []
    system = meta.get("system")
    for req in run["requests"][:requests_per_run]:
        if "prompt" in req:
            yield req, client.complete(join_lines(lines, req["prompt"]), max_tokens=tokens)
            continue
        if req.get("new_chat"):
            history = []
        user = {"role": "user", "content": join_lines(lines, req["user"])}
        messages = ([{"role": "system", "content": system}] if system else []) + history + [user]
        reply = client.chat(messages, max_tokens=tokens)
        history += [user, {"role": "assistant", "content": reply.text}]
        yield req, reply


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
    tokens = max_tokens if max_tokens is not None else int(data["meta"].get("max_tokens", 16))
    records: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    how = "none"
    for i, run in enumerate(runs):
        if run.get("flush", True):
            if deadline_s is not None and time.perf_counter() - t0 > deadline_s:
                logger.warning("deadline of %.0f s reached: %d of %d runs replayed", deadline_s, i, len(runs))
                break
            client, how = _cold(client, server, kind)
        sent = list(_send(client, run, data, tokens, requests_per_run))
        for req, reply in sent:
            records.append(
                {
                    **{key: run[key] for key in RUN_FIELDS},
                    "run": i,
                    "run_position": run.get("position"),
                    "flush": how,
                    "turn": req["turn"],
                    "measured": bool(req["measured"]) and reply.error is None,
                    **{key: getattr(reply, key) for key in REPLY_FIELDS},
                }
            )
        logger.info(
            "run %d/%d %s k=%s %s: %d requests (%s)",
            i + 1,
            len(runs),
            run["sample_id"],
            run["k"],
            run["mode"],
            len(sent),
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


@dataclass(frozen=True, kw_only=True)
class ReplayConfig(OutOptions, VerboseOptions):
    """The replay's options (:func:`parse_args`)."""

    prompts: str
    engine_url: str | None
    llama_server: str | None
    model: str | None
    model_name: str | None
    api_key: str | None
    ctx_size: int
    threads: int | None
    cache_ram_mib: int
    gpu_layers: int | None
    server_args: str
    server_log: str | None
    modes: str
    top_k: str
    conversations: str
    requests_per_run: int | None
    max_tokens: int | None
    flush: str
    deadline_s: float | None
    label: str


def parse_args(argv: Sequence[str] | None) -> ReplayConfig:
    return parse_config(build_parser(), ReplayConfig, argv)


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _engine(args: ReplayConfig) -> tuple[StreamingClient, str, LaunchedLlamaServer | None]:
    """(client, engine kind, the launched llama-server or None) from ``--llama-server`` / ``--engine-url``."""
    if not args.llama_server:
        assert args.engine_url, "main checks that one engine is given"
        client = StreamingClient(args.engine_url, model=args.model_name, api_key=args.api_key)
        return client, client.probe(), None
    assert args.model, "main checks that --llama-server has its --model"
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
    return StreamingClient(server.base_url), "llama.cpp (launched, restarted per run)", server


def _run(args: ReplayConfig) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Load, select, replay: (the export, the runs, the records, the engine's description)."""
    data = load_prompts(args.prompts)
    conversations = [int(c) for c in _split(args.conversations)]
    runs = select_runs(data, modes=_split(args.modes), top_k=_split(args.top_k), conversations=conversations)
    if args.flush == "per-mode":
        runs = group_by_mode(runs)
    client, kind, server = _engine(args)
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
    engine: dict[str, Any] = {"kind": kind, "url": args.engine_url, "model": client.model or args.model}
    engine["command"] = server.command() if server else None
    engine["restarts"] = server.restarts if server else 0
    engine["start_s_mean"] = (sum(server.start_s) / len(server.start_s)) if server and server.start_s else None
    return data, runs, records, engine


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
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
        data, runs, records, engine = _run(args)
    except (OSError, ValueError, RuntimeError) as exc:
        logger.error("%s", exc)
        return 1
    done = len({r["run"] for r in records})
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "export": data["meta"],
        "engine": engine,
        "runs": len(runs),
        "runs_replayed": done,
        "requests": len(records),
        "flush": args.flush,
        "stopped_early": done < len(runs),
        "wall_s": round(time.perf_counter() - t_start, 1),
    }
    rows = summarize(records)
    payload = envelope("benchmarks.replay", argv, meta=meta, summary=rows, requests=records)
    header = [
        f"**LoCoMo prompt replay** — engine: **{engine['kind']}**, model: **{engine['model']}**",
        "",
        f"- machine: {(payload['machine'] or {}).get('summary', 'not described (bare Python)')}",
        (
            f"- {done} of {len(runs)} runs, {len(records)} requests, wall {meta['wall_s']} s; cache made cold "
            f"before every {'run' if args.flush == 'per-run' else '(k, mode) group'}; warm-ups and first turns "
            "left out" + ("; STOPPED EARLY at the deadline" if done < len(runs) else "")
        ),
        f"- prompts: {args.prompts} (exported by: {' '.join(data['meta'].get('argv', []))})",
    ]
    table = markdown(rows, header)
    folder = Path(args.out) / f"replay-{time.strftime('%Y%m%d-%H%M%S')}{'-' + args.label if args.label else ''}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(payload, indent=1, default=str) + "\n", encoding="utf-8")
    (folder / "table.md").write_text(table + "\n", encoding="utf-8")
    sys.stdout.write(table + f"\n\nresults: {folder}\n")
    return 0
