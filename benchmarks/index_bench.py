"""Core speed and cache-reuse figures for cp_memory's context index.

    python -m benchmarks.index_bench speed          # online insert latency at N=1K/10K/100K, batch build
    python -m benchmarks.index_bench locomo         # prefix-cache hit ratio on a LoCoMo memory stream
    python -m benchmarks.index_bench spans          # what span-level dedup saves (off by default)
    python -m benchmarks.index_bench                # speed and locomo

Hit ratios come from :class:`benchmarks.common.cache_model.BlockPrefixCache` (vLLM-style chained 16-token blocks,
LRU, regex tokens): machine-independent, so orderings compare exactly. Results: markdown on stdout, JSON under results/.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common.cache_model import BlockPrefixCache
from benchmarks.common.locomo import load_locomo
from benchmarks.locomo.metrics import percentile
from cp_memory.core.annotations import doc_label, order_annotation
from cp_memory.core.blocks import ContextBlock
from cp_memory.core.dedup import Deduplicator
from cp_memory.core.index import ContextIndex
from cp_memory.core.render import render_context

from .retrieval import TfidfRetriever

log = logging.getLogger("index_bench")

SYSTEM = "You are a helpful assistant. Answer the question using the memories below.\n\n"


def zipf_contexts(n: int, k: int = 15, vocab: int = 5000, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, vocab + 1)
    weights /= weights.sum()
    draws = rng.choice(vocab, size=(n, 3 * k), p=weights)
    out = []
    for row in draws:
        ctx = list(dict.fromkeys(row.tolist()))[:k]
        while len(ctx) < k:
            b = int(rng.integers(vocab))
            if b not in ctx:
                ctx.append(b)
        out.append(ctx)
    return out


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_speed(sizes=(1_000, 10_000, 100_000), probes: int = 2_000) -> dict:
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
        rows.append(
            {
                "indexed": size,
                "median_ms": statistics.median(lat) * 1e3,
                "p95_ms": percentile(lat, 95) * 1e3,
                "fill_s": fill_s,
                "nodes": index.node_count,
                "max_rss_mib": rss_mib(),
            }
        )
        log.info(
            "online insert with %d indexed: median %.4f ms, p95 %.4f ms",
            size,
            rows[-1]["median_ms"],
            rows[-1]["p95_ms"],
        )
    del index
    gc.collect()
    build = []
    for n in (2_000,):
        ctxs = zipf_contexts(n, seed=2)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            ContextIndex().build(ctxs)
            times.append(time.perf_counter() - t0)
        build.append({"contexts": n, "best_s": min(times), "median_s": statistics.median(times)})
        log.info("batch build of %d contexts: best %.3f s", n, min(times))
    return {"online": rows, "build": build}


def render(order, texts: dict, original, question: str) -> str:
    labels = {b: doc_label(i + 1) for i, b in enumerate(order)}
    context = render_context(
        [texts[b] for b in order], order_annotation=order_annotation(original, order, label=labels)
    )
    return SYSTEM + context + "\nQuestion: " + question


MODES = {
    "baseline": None,
    "aligned (paper: retrieval-order tail)": {"tail_order": "retrieval"},
    "aligned (frequency tail, default)": {"tail_order": "frequency"},
    "aligned + superset 0.10": {"tail_order": "frequency", "extra_budget": 0.10},
    "aligned + superset 0.25": {"tail_order": "frequency", "extra_budget": 0.25},
}


def bench_locomo(locomo: str | None, ks=(20, 100), capacity: int = 65_536) -> dict:
    convs = load_locomo(locomo)
    requests = []  # per conversation: (texts, [(question, retrieved ids)])
    for conv in convs:
        texts = {o.id: o.text for o in conv.observations}
        ids = [o.id for o in conv.observations]
        retriever = TfidfRetriever([o.text for o in conv.observations])
        qs = [q.question for q in conv.qa if q.category != 5]
        requests.append((texts, ids, retriever, qs))
    results = []
    for k in ks:
        for mode, opts in MODES.items():
            cache = BlockPrefixCache(capacity)
            extra_blocks = prompt_tokens = computed = 0
            t_align = []
            for texts, ids, retriever, qs in requests:
                index = ContextIndex(**opts) if opts is not None else None
                for q in qs:
                    original = [ids[i] for i in retriever.search(q, k)]
                    order = original
                    if index is not None:
                        a = time.perf_counter()
                        p = index.insert(original)
                        t_align.append(time.perf_counter() - a)
                        order = list(p.order)
                        extra_blocks += len(p.extra)
                    served = cache.serve(render(order, texts, original, q))
                    prompt_tokens += served.prompt
                    computed += served.prompt - served.cached
            row = {
                "k": k,
                "mode": mode,
                "hit_ratio": cache.ratio,
                "prompt_tokens": prompt_tokens,
                "prefill_tokens": computed,
                "extra_blocks_per_request": extra_blocks / sum(len(r[3]) for r in requests),
                "align_ms_median": statistics.median(t_align) * 1e3 if t_align else 0.0,
            }
            results.append(row)
            log.info("k=%d %-40s hit ratio %.3f", k, mode, cache.ratio)
    return {"capacity_tokens": capacity, "requests": sum(len(r[3]) for r in requests), "rows": results}


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


def _sent(turns: list[list[ContextBlock]], spans: bool) -> tuple[int, int]:
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


def bench_spans(locomo: str | None, k: int = 20, turns_per_chat: int = 5, seed: int = 0) -> dict:
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
    workloads = [
        (
            "templated contracts (200 docs, 4 of 8 standard clauses each), 40 chats x 5 turns x 5 docs",
            [[list(rng.choice(docs, size=5, replace=False)) for _ in range(turns_per_chat)] for _ in range(40)],
        )
    ]
    chats = []
    for conv in load_locomo(locomo):
        blocks = [ContextBlock(o.id, o.text) for o in conv.observations]
        retriever = TfidfRetriever([b.text for b in blocks])
        qs = [q.question for q in conv.qa if q.category != 5]
        chats += [
            [[blocks[i] for i in retriever.search(q, k)] for q in qs[start : start + turns_per_chat]]
            for start in range(0, len(qs), turns_per_chat)
        ]
    workloads.append((f"LoCoMo observations, top-{k}, chats of {turns_per_chat} questions", chats))
    rows = []
    for name, work in workloads:
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


def markdown(speed: dict | None, hits: dict | None, spans: dict | None = None) -> str:
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="?", choices=["speed", "locomo", "spans", "all"], default="all")
    ap.add_argument("--locomo", help="path to locomo10.json (default ../shared/data/locomo10.json)")
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--out", default="results")
    ap.add_argument("--json", metavar="FILE", help="also write the numbers here (e.g. docs/results/index_spans.json)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    speed = bench_speed(tuple(int(s) for s in args.sizes.split(","))) if args.what in ("speed", "all") else None
    hits = bench_locomo(args.locomo) if args.what in ("locomo", "all") else None
    spans = bench_spans(args.locomo) if args.what == "spans" else None
    table = markdown(speed, hits, spans)
    sys.stdout.write(table + "\n")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (out / f"index_bench-{stamp}.json").write_text(
        json.dumps({"speed": speed, "locomo": hits, "spans": spans}, indent=2)
    )
    (out / f"index_bench-{stamp}.md").write_text(table + "\n")
    if args.json:
        payload = {
            "command": "python -m benchmarks.index_bench " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "git_commit": _git_commit(),
            "machine": _machine(),
            "speed": speed,
            "locomo": hits,
            "spans": spans,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(payload, indent=1) + "\n")
    return 0


def _git_commit() -> str | None:
    import subprocess

    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parent,
    )
    return out.stdout.strip() or None


def _machine() -> str:
    import os
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {len(os.sched_getaffinity(0))} cores (shared with other jobs), Python {platform.python_version()}"


if __name__ == "__main__":
    raise SystemExit(main())
