"""Core speed and cache-reuse figures for cp_memory's context index.

    python -m benchmarks.index_bench speed          # online insert latency at N=1K/10K/100K, batch build
    python -m benchmarks.index_bench locomo         # prefix-cache hit ratio on a LoCoMo memory stream
    python -m benchmarks.index_bench spans          # what span-level dedup saves (off by default)
    python -m benchmarks.index_bench                # speed and locomo

Hit ratios come from :class:`benchmarks.common.cache_model.BlockPrefixCache` (vLLM-style chained 16-token blocks,
LRU, regex tokens): machine-independent, so orderings compare exactly. Results: markdown on stdout, JSON and
markdown under --out (``index_bench-<date>``), the JSON also at ``--json FILE`` (e.g. docs/results/).
"""

from __future__ import annotations

import argparse
import gc
import logging
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.common.config import JsonOptions, LocomoOptions, OutOptions, VerboseOptions, parse_config
from benchmarks.common.harness import add_json, add_locomo, add_out, add_verbose, envelope, setup_logging, write_outputs
from cp_memory.core.blocks import ContextBlock
from cp_memory.core.dedup import Deduplicator
from cp_memory.core.index import ContextIndex
from cp_memory.core.render import render_context

from .index_workload import locomo_conversations, p95_ms, serve, zipf_contexts

log = logging.getLogger("index_bench")

Chat = list[list[ContextBlock]]  # one chat: the blocks of each turn


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_speed(sizes: Sequence[int] = (1_000, 10_000, 100_000), probes: int = 2_000) -> dict[str, Any]:
    largest = max(sizes)
    contexts = zipf_contexts(largest + probes, seed=1)
    stream, probe = contexts[:largest], contexts[largest:]
    index = ContextIndex()
    rows = []
    done = 0
    for size in sorted(sizes):
        t0 = time.perf_counter()
        for ctx in stream[done:size]:
            index.insert(ctx)
        fill_s = time.perf_counter() - t0
        done = size
        lat = []
        for ctx in probe:
            a = time.perf_counter()
            p = index.insert(ctx)
            lat.append(time.perf_counter() - a)
            index.evict(p.request_id)
        median_ms = statistics.median(lat) * 1e3
        row = {"indexed": size, "median_ms": median_ms, "p95_ms": p95_ms(lat), "fill_s": fill_s}
        rows.append({**row, "nodes": index.node_count, "max_rss_mib": rss_mib()})
        log.info("online insert with %d indexed: median %.4f ms, p95 %.4f ms", size, median_ms, row["p95_ms"])
    del index
    gc.collect()
    ctxs = zipf_contexts(2_000, seed=2)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        ContextIndex().build(ctxs)
        times.append(time.perf_counter() - t0)
    log.info("batch build of %d contexts: best %.3f s", len(ctxs), min(times))
    return {
        "online": rows,
        "build": [{"contexts": len(ctxs), "best_s": min(times), "median_s": statistics.median(times)}],
    }


MODES: dict[str, dict[str, Any] | None] = {
    "baseline": None,
    "aligned (paper: retrieval-order tail)": {"tail_order": "retrieval"},
    "aligned (frequency tail, default)": {"tail_order": "frequency"},
    "aligned + superset 0.10": {"tail_order": "frequency", "extra_budget": 0.10},
    "aligned + superset 0.25": {"tail_order": "frequency", "extra_budget": 0.25},
}


def bench_locomo(locomo: str | None, ks: Sequence[int] = (20, 100), capacity: int = 65_536) -> dict[str, Any]:
    convs = locomo_conversations(locomo)
    results = []
    for k in ks:
        retrieved = [conv.retrieve(k) for conv in convs]
        for mode, opts in MODES.items():
            s = serve(convs, retrieved, opts, capacity)
            row = {"k": k, "mode": mode, "hit_ratio": s.cache.ratio, "prompt_tokens": s.prompt_tokens}
            row["prefill_tokens"] = s.prefill_tokens
            row["extra_blocks_per_request"] = s.extra / s.requests
            row["align_ms_median"] = statistics.median(s.align_s) * 1e3 if s.align_s else 0.0
            results.append(row)
            log.info("k=%d %-40s hit ratio %.3f", k, mode, s.cache.ratio)
    return {"capacity_tokens": capacity, "requests": sum(len(c.questions) for c in convs), "rows": results}


CLAUSES = [
    "This agreement is governed by the laws of the State of New York.",
    "Any dispute shall be settled by binding arbitration in New York City.",
    "Either party may terminate this agreement with thirty days written notice.",
    "The supplier shall maintain insurance covering all goods in transit.",
    "Payment is due within forty-five days of the invoice date.",
    "Neither party shall disclose confidential information to third parties.",
    "The customer may audit the supplier's records once per calendar year.",
    "Force majeure events suspend obligations for their duration.",
]


def _sent(turns: Chat, spans: bool) -> tuple[int, int]:
    """(block text characters, characters of everything the prompts carry) over one chat's turns.

    Everything = the rendered context of each turn: ``[Doc i]`` lines of the kept (possibly trimmed)
    blocks plus the location annotations of dropped blocks and the span notes of trimmed ones."""
    dedup = Deduplicator(spans=spans)
    text = rendered = 0
    for blocks in turns:
        result = dedup.dedup("conv", blocks)
        notes = [d.annotation for d in result.dropped] + [t.annotation for t in result.trims]
        text += sum(len(b.text) for b in result.blocks)
        rendered += len(render_context(list(result.blocks), location_annotations=notes))
    return text, rendered


def bench_spans(locomo: str | None, k: int = 20, turns_per_chat: int = 5, seed: int = 0) -> dict[str, Any]:
    """What multi-turn chats send, whole-block dedup alone vs. with span dedup: block text only, and
    everything the prompts carry (labels, location annotations, span notes)."""
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(200):
        clauses = rng.choice(len(CLAUSES), size=4, replace=False)
        docs.append(
            ContextBlock(
                f"contract-{i}",
                f"Contract {i} between party {i} and party {i + 1}, "
                f"effective on day {i % 28 + 1}. Its subject is item {i * 7 % 101}. "
                + " ".join(CLAUSES[c] for c in clauses),
            )
        )
    contracts = [
        [[docs[j] for j in rng.choice(len(docs), size=5, replace=False)] for _ in range(turns_per_chat)]
        for _ in range(40)
    ]
    chats: list[Chat] = []
    for conv in locomo_conversations(locomo):
        blocks = {i: ContextBlock(i, t) for i, t in conv.texts.items()}
        turns = [[blocks[i] for i in ids] for ids in conv.retrieve(k)]
        chats += [turns[start : start + turns_per_chat] for start in range(0, len(turns), turns_per_chat)]
    rows = []
    for name, work in [
        ("templated contracts (200 docs, 4 of 8 standard clauses each), 40 chats x 5 turns x 5 docs", contracts),
        (f"LoCoMo observations, top-{k}, chats of {turns_per_chat} questions", chats),
    ]:
        off = [_sent(c, False) for c in work]
        on = [_sent(c, True) for c in work]
        row = {
            "workload": name,
            "chars_block_dedup": sum(a for a, _ in off),
            "chars_with_spans": sum(a for a, _ in on),
            "prompt_chars_block_dedup": sum(b for _, b in off),
            "prompt_chars_with_spans": sum(b for _, b in on),
        }
        rows.append(row)
        log.info(
            "%s: block text %d -> %d chars, everything sent %d -> %d chars",
            name,
            row["chars_block_dedup"],
            row["chars_with_spans"],
            row["prompt_chars_block_dedup"],
            row["prompt_chars_with_spans"],
        )
    return {"rows": rows}


def markdown(speed: dict[str, Any] | None, hits: dict[str, Any] | None, spans: dict[str, Any] | None = None) -> str:
    out = []
    if speed:
        out += [
            "| contexts indexed | median insert (ms) | p95 (ms) | trie nodes | max RSS (MiB) |",
            "|---:|---:|---:|---:|---:|",
        ]
        out += [
            f"| {r['indexed']:,} | {r['median_ms']:.4f} | {r['p95_ms']:.4f} | {r['nodes']:,} | {r['max_rss_mib']:.0f} |"
            for r in speed["online"]
        ]
        out += ["", "| batch build | best (s) | median (s) |", "|---:|---:|---:|"]
        out += [f"| {b['contexts']:,} contexts | {b['best_s']:.3f} | {b['median_s']:.3f} |" for b in speed["build"]]
        out.append("")
    if hits:
        out += [
            (
                f"LoCoMo, {hits['requests']} questions (categories 1-4), TF-IDF top-k over each conversation's "
                f"observations, one prefix cache of {hits['capacity_tokens']:,} tokens:"
            ),
            "",
            (
                "| k | mode | prefix-cache hit ratio | tokens to prefill vs baseline | extra blocks / request "
                "| align median (ms) |"
            ),
            "|---:|---|---:|---:|---:|---:|",
        ]
        base = {r["k"]: r["prefill_tokens"] for r in hits["rows"] if r["mode"] == "baseline"}
        out += [
            f"| {r['k']} | {r['mode']} | {r['hit_ratio']:.3f} | {r['prefill_tokens'] / base[r['k']]:.2f}x | "
            f"{r['extra_blocks_per_request']:.2f} | {r['align_ms_median']:.3f} |"
            for r in hits["rows"]
        ]
    if spans:
        out += [
            "",
            ("| workload | everything sent, whole-block dedup | with span dedup | saved | block text only: saved |"),
            "|---|---:|---:|---:|---:|",
        ]
        out += [
            f"| {r['workload']} | {r['prompt_chars_block_dedup']:,} chars | {r['prompt_chars_with_spans']:,} chars | "
            f"{100 * (1 - r['prompt_chars_with_spans'] / r['prompt_chars_block_dedup']):.1f}% | "
            f"{100 * (1 - r['chars_with_spans'] / r['chars_block_dedup']):.1f}% |"
            for r in spans["rows"]
        ]
    return "\n".join(out)


@dataclass(frozen=True, kw_only=True)
class IndexBenchConfig(LocomoOptions, OutOptions, JsonOptions, VerboseOptions):
    """The run's options (:func:`parse_args`): ``what`` to measure and the indexed ``sizes`` of ``speed``."""

    what: str
    sizes: str


def parse_args(argv: list[str] | None) -> IndexBenchConfig:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.index_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("what", nargs="?", choices=["speed", "locomo", "spans", "all"], default="all")
    ap.add_argument("--sizes", default="1000,10000,100000", help="speed: comma list of indexed sizes")
    add_locomo(ap)
    add_out(ap)
    add_json(ap)
    add_verbose(ap)
    return parse_config(ap, IndexBenchConfig, argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.verbose)
    speed = bench_speed(tuple(int(s) for s in args.sizes.split(","))) if args.what in ("speed", "all") else None
    hits = bench_locomo(args.locomo) if args.what in ("locomo", "all") else None
    spans = bench_spans(args.locomo) if args.what == "spans" else None
    table = markdown(speed, hits, spans)
    sys.stdout.write(table + "\n")
    payload = envelope("benchmarks.index_bench", argv, speed=speed, locomo=hits, spans=spans)
    write_outputs(
        args.out, f"index_bench-{time.strftime('%Y%m%d-%H%M%S')}", payload, markdown=table, also_json=args.json
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
