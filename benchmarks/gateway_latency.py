"""The gateway's own added latency, side by side with LiteLLM's proxy doing passthrough, on one machine in one
run.

    python -m benchmarks.gateway_latency                                   # 1,000 requests per workload
    python -m benchmarks.gateway_latency --requests 20 --arms direct,gateway --out /tmp/x   # a smoke run

A fast local upstream (a fixed-reply HTTP/1.1 keep-alive server in its own process: the same bytes for every
request, streamed or not) answers three workloads: ``chat`` (OpenAI Chat Completions, ~2 KB, not streamed),
``chat-stream`` (the same, streamed) and ``messages-stream`` (Anthropic Messages, streamed, the body of a
recorded Claude Code request: ~50 KB, 3 system blocks, 12 tools, 3 marks). Arms: ``direct`` (the upstream
itself), ``gateway`` (``python -m cp_memory.gateway --upstream URL --port 0``) and ``litellm`` (LiteLLM's proxy,
``litellm[proxy]`` from scripts/setup_harnesses.sh's virtualenv, model ``*`` passed through to the upstream;
OpenAI workloads only: it would translate Anthropic requests, not pass them through).

One client (httpx, keep-alive) sends request *i* through every arm back to back, the order of the arms rotated
with *i*; latency is the time to the last byte. An arm's added latency for request *i* is its time minus the
direct time of the same *i*. The requests are cut into ``--rounds`` consecutive rounds: the p50 and p99 of the
added latency are reported as the median over the rounds with their min-max spread (and over all requests).
After ``--warmup`` requests per arm that are not counted. Beside the wall-clock figures, the CPU time each proxy
process (and its children) used per request (``/proc``), which a loaded machine's scheduling does not blur; on
the ``direct`` row, the fixed-reply upstream's own CPU per request (it answers every arm): a yardstick that moves
with the machine's speed (a shared host's other tenants change the CPU time of the same work by up to 2x).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from benchmarks.agents.processes import ServerProcess, gateway_process, litellm_binary, litellm_process
from benchmarks.agents.scripted import reply
from benchmarks.agents.trace import load_trace
from benchmarks.agents.wire import Protocol, sse
from benchmarks.common.config import JsonOptions, OutOptions, VerboseOptions, parse_config
from benchmarks.common.harness import add_json, add_out, envelope, setup_logging, write_outputs
from benchmarks.common.metrics import percentile

__all__ = ["ARMS", "WORKLOADS", "Workload", "main", "measure", "summarise"]

log = logging.getLogger(__name__)

ARMS = ("direct", "gateway", "litellm")
ROOT = Path(__file__).resolve().parents[1]
#: the recorded Claude Code trace whose first request is the ``messages-stream`` body
CLAUDE_TRACE = ROOT / "tests" / "gateway" / "traces" / "claude_code_2.1.328_docs_code.jsonl.xz"
METHOD = (
    "one keep-alive client; request i goes through every arm back to back, arm order rotated with i; time to "
    "the last byte; added = arm time - direct time of the same i; p50/p99 per round, median over rounds "
    "(min-max spread); warm-up requests not counted"
)


@dataclass(frozen=True)
class Workload:
    """One kind of request: its ``path``, ``body``, headers, and whether LiteLLM can pass it through."""

    name: str
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    openai: bool


def _chat_body(stream: bool) -> dict[str, Any]:
    history = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"Turn {i}: " + "river stone garden " * 12}
        for i in range(8)
    ]
    body: dict[str, Any] = {
        "model": "scripted",
        "messages": [{"role": "system", "content": "You are a careful assistant. " * 10}, *history],
        "max_tokens": 16,
    }
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return body


def _claude_body(trace: Path) -> dict[str, Any] | None:
    if not trace.exists():
        return None
    for record in load_trace(trace):
        if record.get("protocol") == "anthropic" and isinstance(record.get("body"), dict):
            return dict(record["body"])
    return None


def workloads(trace: Path = CLAUDE_TRACE) -> dict[str, Workload]:
    """The workloads by name (``messages-stream`` only where the Claude Code trace is there)."""
    bearer = {"authorization": "Bearer sk-latency-placeholder", "content-type": "application/json"}
    out = {
        "chat": Workload("chat", "/v1/chat/completions", _chat_body(False), bearer, True),
        "chat-stream": Workload("chat-stream", "/v1/chat/completions", _chat_body(True), bearer, True),
    }
    claude = _claude_body(trace)
    if claude is not None:
        headers = {
            "x-api-key": "sk-ant-latency-placeholder",
            "anthropic-version": "2023-06-01",
            "content-type": "application/json",
            "x-claude-code-session-id": "latency-session",
        }
        out["messages-stream"] = Workload("messages-stream", "/v1/messages?beta=true", claude, headers, False)
    return out


WORKLOADS = ("chat", "chat-stream", "messages-stream")


# --- the fixed-reply upstream (its own process) ----------------------------------------------------------


def _fixed_replies() -> dict[tuple[str, bool], tuple[str, bytes]]:
    """(path kind, streamed) -> (content type, the bytes answered every time)."""
    out: dict[tuple[str, bool], tuple[str, bytes]] = {}
    for kind, protocol in (
        ("chat", Protocol.CHAT),
        ("messages", Protocol.ANTHROPIC),
        ("responses", Protocol.RESPONSES),
    ):
        whole, events = reply(protocol, {"model": "scripted", "stream_options": {"include_usage": True}})
        out[kind, False] = ("application/json", json.dumps(whole).encode())
        out[kind, True] = ("text/event-stream", sse(events, done=protocol is Protocol.CHAT))
    models = {"object": "list", "data": [{"id": "scripted", "object": "model", "created": 0, "owned_by": "bench"}]}
    out["models", False] = ("application/json", json.dumps(models).encode())
    return out


class _FixedHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms delayed-ACK stall
    replies = _fixed_replies()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
        return

    def _answer(self, kind: str, stream: bool) -> None:
        ctype, data = self.replies.get((kind, stream), ("application/json", b'{"error": "no route"}'))
        self.send_response(200 if (kind, stream) in self.replies else 404)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self._answer("models" if self.path.rstrip("/").endswith("/models") else "-", False)

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        stream = b'"stream": true' in raw or b'"stream":true' in raw
        protocol = Protocol.of(self.path)
        kind = (
            {Protocol.CHAT: "chat", Protocol.ANTHROPIC: "messages", Protocol.RESPONSES: "responses"}.get(protocol, "-")
            if protocol
            else "-"
        )
        self._answer(kind, stream)


def serve_upstream(port: int) -> None:
    """Serve the fixed replies on 127.0.0.1:``port`` until killed (prints its URL first)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", port), _FixedHandler)
    httpd.daemon_threads = True
    print(f"upstream listening on http://127.0.0.1:{httpd.server_address[1]}", flush=True)  # noqa: T201
    httpd.serve_forever()


def upstream_process() -> ServerProcess:
    """The fixed-reply upstream in its own process, on a free port."""
    args = [sys.executable, "-m", "benchmarks.gateway_latency", "--serve-upstream", "0"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return ServerProcess(args, env=env, cwd=ROOT, timeout=60)


# --- measuring --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arm:
    """Where an arm sends its requests and the headers it adds (LiteLLM's key)."""

    name: str
    url: str
    headers: Mapping[str, str]
    process: ServerProcess | None = None


def _send(client: httpx.Client, arm: Arm, workload: Workload, data: bytes) -> float:
    headers = {**workload.headers, **arm.headers}
    t0 = time.perf_counter()
    response = client.post(arm.url + workload.path, content=data, headers=headers)
    elapsed = time.perf_counter() - t0
    if response.status_code != 200:
        raise RuntimeError(f"{arm.name} answered {response.status_code}: {response.text[:300]}")
    return elapsed


def measure(arms: Sequence[Arm], workload: Workload, requests: int, warmup: int) -> dict[str, list[float]]:
    """Seconds to the last byte of ``requests`` requests through every arm, request *i* through all arms back
    to back in an order rotated with *i* (after ``warmup`` uncounted ones per arm)."""
    data = json.dumps(workload.body).encode()
    clients = {a.name: httpx.Client(timeout=60) for a in arms}
    samples: dict[str, list[float]] = {a.name: [] for a in arms}
    try:
        for i in range(warmup + requests):
            k = i % len(arms)
            for arm in [*arms[k:], *arms[:k]]:
                elapsed = _send(clients[arm.name], arm, workload, data)
                if i >= warmup:
                    samples[arm.name].append(elapsed)
    finally:
        for client in clients.values():
            client.close()
    return samples


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 3)


def summarise(samples: Mapping[str, Sequence[float]], rounds: int, base: str = "direct") -> dict[str, Any]:
    """Per arm: latency p50/p99 over all requests; for every arm but ``base``, the added latency (arm - base,
    paired by request) p50/p99 overall and per round (median over the rounds, min-max spread). In ms."""
    out: dict[str, Any] = {}
    direct = list(samples[base])
    for name, values in samples.items():
        row: dict[str, Any] = {"requests": len(values)}
        row["latency_ms"] = {"p50": _ms(percentile(values, 50)), "p99": _ms(percentile(values, 99))}
        if name != base:
            added = [a - d for a, d in zip(values, direct, strict=True)]
            size = max(1, len(added) // max(1, rounds))
            chunks = [added[i : i + size] for i in range(0, len(added), size)][: max(1, rounds)]
            row["added_ms"] = {"p50": _ms(percentile(added, 50)), "p99": _ms(percentile(added, 99))}
            for q in (50, 99):
                per_round = [v for v in (percentile(c, q) for c in chunks) if v is not None]
                row["added_ms"][f"p{q}_rounds"] = {
                    "median": _ms(statistics.median(per_round)),
                    "min": _ms(min(per_round)),
                    "max": _ms(max(per_round)),
                    "rounds": len(per_round),
                }
        out[name] = row
    return out


def _markdown(results: Mapping[str, Any], skipped: Mapping[str, str]) -> str:
    lines = [
        "# Gateway added latency (fast local upstream)",
        "",
        "| workload | arm | requests | latency p50 ms | latency p99 ms | added p50 ms (rounds: median [min-max]) "
        "| added p99 ms (rounds: median [min-max]) | CPU ms/request (the proxy; direct: the upstream) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for wname, per_arm in results.items():
        for arm, row in per_arm.items():
            added = row.get("added_ms")
            cells = ["-", "-"]
            if added:
                cells = [
                    f"{added[f'p{q}']} ({added[f'p{q}_rounds']['median']} "
                    f"[{added[f'p{q}_rounds']['min']}-{added[f'p{q}_rounds']['max']}])"
                    for q in (50, 99)
                ]
            lat, cpu = row["latency_ms"], row.get("cpu_ms_per_request", "-")
            lines.append(
                f"| {wname} | {arm} | {row['requests']} | {lat['p50']} | {lat['p99']} | {cells[0]} | {cells[1]} "
                f"| {cpu} |"
            )
    if skipped:
        lines += ["", *[f"- not measured: {k}: {v}" for k, v in skipped.items()]]
    return "\n".join(lines) + "\n"


# --- the run -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class LatencyConfig(OutOptions, JsonOptions, VerboseOptions):
    """The run's options (:func:`parse_args`); ``serve_upstream``: this process is the fixed upstream."""

    requests: int
    warmup: int
    rounds: int
    workloads: str
    arms: str
    gateway_args: str
    litellm_port: int
    claude_trace: str
    name: str
    serve_upstream: int | None


def parse_args(argv: Sequence[str] | None) -> LatencyConfig:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gateway_latency", description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1000, help="counted requests per workload and arm (1000)")
    ap.add_argument("--warmup", type=int, default=50, help="uncounted requests per workload and arm first (50)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds the requests are cut into for the spread (5)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated of {', '.join(WORKLOADS)}")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated of {', '.join(ARMS)} (direct always)")
    ap.add_argument("--gateway-args", default="", help="extra arguments of the gateway's CLI (one string)")
    ap.add_argument("--litellm-port", type=int, default=4011, help="LiteLLM's port (its CLI needs one)")
    ap.add_argument(
        "--claude-trace", default=str(CLAUDE_TRACE), help="trace whose first request is messages-stream's body"
    )
    ap.add_argument(
        "--name", default="gateway_latency", help="the output files' name (gateway_latency.json / .md by default)"
    )
    ap.add_argument("--serve-upstream", type=int, default=None, metavar="PORT", help=argparse.SUPPRESS)
    add_out(ap, "results")
    add_json(ap)
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parse_config(ap, LatencyConfig, argv)


def _start_arms(
    names: Sequence[str], upstream: str, args: LatencyConfig, stack: list[ServerProcess]
) -> tuple[list[Arm], dict[str, str]]:
    arms, skipped = [Arm("direct", upstream, {})], {}
    if "gateway" in names:
        gw = gateway_process(upstream, *args.gateway_args.split())
        stack.append(gw.start())
        arms.append(Arm("gateway", gw.url, {}, gw))
    if "litellm" in names:
        if litellm_binary() is None:
            skipped["litellm"] = "not installed (scripts/setup_harnesses.sh makes ~/.cache/cp_memory/litellm-venv)"
        else:
            ll = litellm_process(upstream, args.litellm_port, Path(tempfile.mkdtemp(prefix="cp_memory_litellm_")))
            stack.append(ll.start())
            arms.append(Arm("litellm", ll.url, ll.headers, ll))
    return arms, skipped


def run(args: LatencyConfig) -> tuple[dict[str, Any], dict[str, str]]:
    """Start the upstream and the arms, measure every workload, stop them all; (results, skipped)."""
    names = [a for a in args.arms.split(",") if a]
    available = workloads(Path(args.claude_trace))
    results: dict[str, Any] = {}
    stack: list[ServerProcess] = []
    try:
        up = upstream_process().start()
        stack.append(up)
        arms, skipped = _start_arms(names, up.url, args, stack)
        for wname in [w for w in args.workloads.split(",") if w]:
            if wname not in available:
                skipped[wname] = f"no body: the Claude Code trace {args.claude_trace} is missing"
                continue
            workload = available[wname]
            usable = [a for a in arms if workload.openai or a.name != "litellm"]
            log.info("%s: %d requests through %s", wname, args.requests, ", ".join(a.name for a in usable))
            cpu_before = {a.name: a.process.cpu_seconds() for a in usable if a.process is not None}
            up_before = up.cpu_seconds()
            samples = measure(usable, workload, args.requests, args.warmup)
            results[wname] = summarise(samples, args.rounds)
            up_after = up.cpu_seconds()
            if up_before is not None and up_after is not None:  # the yardstick: the upstream serves every arm
                served = len(usable) * (args.requests + args.warmup)
                results[wname]["direct"]["cpu_ms_per_request"] = round((up_after - up_before) / served * 1000, 3)
            for arm in usable:  # the proxy's own CPU per request: what the machine's load does not blur
                before = cpu_before.get(arm.name)
                after = arm.process.cpu_seconds() if arm.process is not None else None
                if before is not None and after is not None:
                    per = (after - before) / (args.requests + args.warmup)
                    results[wname][arm.name]["cpu_ms_per_request"] = round(per * 1000, 3)
        if "litellm" in names and "litellm" not in skipped:
            skipped["litellm on messages-stream"] = "LiteLLM translates Anthropic requests (no passthrough arm)"
    finally:
        for proc in reversed(stack):
            proc.stop()
    return results, skipped


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.serve_upstream is not None:
        serve_upstream(args.serve_upstream)
        return {}
    setup_logging(args.verbose)
    logging.getLogger("httpx").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    load_start = [round(x, 2) for x in os.getloadavg()]
    results, skipped = run(args)
    config = {k: v for k, v in asdict(args).items() if k != "serve_upstream"}
    payload = envelope(
        "benchmarks.gateway_latency",
        argv,
        config=config,
        method=METHOD,
        versions=_versions(),
        load_average={"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]},
        results=results,
        skipped=skipped,
    )
    write_outputs(Path(args.out), args.name, payload, markdown=_markdown(results, skipped), also_json=args.json)
    sys.stdout.write(_markdown(results, skipped))
    return payload


def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("cp-memory", "httpx", "uvicorn", "starlette"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    binary = litellm_binary()
    if binary is not None:
        done = subprocess.run(
            [str(binary.parent / "python"), "-c", "from importlib.metadata import version; print(version('litellm'))"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        out["litellm"] = done.stdout.strip() or None
    return out


if __name__ == "__main__":
    main()
