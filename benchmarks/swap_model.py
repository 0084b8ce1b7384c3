"""Swap vs superset vs aligned on LoCoMo, on the in-repo prefix-cache model (the core check of swap alignment).

    python -m benchmarks.swap_model [--locomo PATH] [--out docs/results/swap_model.json]

Same workload as ``benchmarks.index_bench locomo``: per LoCoMo conversation, every question (category
!= 5) retrieves its top-k observations with a TF-IDF retriever; one ContextIndex per conversation; all
prompts go through one :class:`~benchmarks.common.cache_model.BlockPrefixCache` (vLLM-style 16-token chained
blocks, 65,536 tokens, LRU, regex tokens). Machine-independent: hit ratio, prompt and prefilled tokens
(relative to the baseline = retrieval order), and evidence recall (share of a question's coverable
evidence dialogue ids carried by a memory in the prompt; uncoverable ids left out). Not the LoCoMo
benchmark (``python -m benchmarks.locomo``, with mem0 and engines): a quick model of the index alone.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
from pathlib import Path
from typing import Any

from benchmarks.common.cache_model import BlockPrefixCache
from benchmarks.common.locomo import load_locomo
from cp_memory.core.index import ContextIndex

from .index_bench import render
from .retrieval import TfidfRetriever

log = logging.getLogger("swap_model")

MODES: dict[str, dict[str, Any] | None] = {
    "baseline": None,
    "aligned": {},
    "superset 0.10": {"extra_budget": 0.10},
    "superset 0.25": {"extra_budget": 0.25},
    "swap 0.10 / protect 0.5": {"swap_budget": 0.10, "protect": 0.5},
    "swap 0.25 / protect 0.5": {"swap_budget": 0.25, "protect": 0.5},
    "swap 0.25 / protect 0.75": {"swap_budget": 0.25, "protect": 0.75},
    "swap 0.50 / protect 0.5": {"swap_budget": 0.50, "protect": 0.5},
}


def run(locomo: str | None, ks: tuple[int, ...] = (20, 100), capacity: int = 65_536) -> dict[str, Any]:
    convs = load_locomo(locomo)
    work = []
    for conv in convs:
        texts = {o.id: o.text for o in conv.observations}
        ids = [o.id for o in conv.observations]
        covers = {o.id: set(o.evidence_ids) for o in conv.observations}
        coverable = set().union(*covers.values())
        retriever = TfidfRetriever([o.text for o in conv.observations])
        qs = [(q.question, set(q.evidence_ids) & coverable) for q in conv.qa if q.category != 5]
        work.append((texts, ids, covers, retriever, qs))
    rows = []
    for k in ks:
        retrieved = [[[ids[i] for i in retriever.search(q, k)] for q, _ in qs] for _, ids, _, retriever, qs in work]
        base: dict[str, float] = {}
        for mode, opts in MODES.items():
            cache = BlockPrefixCache(capacity)
            prompt = prefill = extra = dropped = requests = 0
            recall: list[float] = []
            for (texts, _, covers, _, qs), originals in zip(work, retrieved):
                index = ContextIndex(**opts) if opts is not None else None
                for (q, evidence), original in zip(qs, originals):
                    order, left_out = list(original), ()
                    if index is not None:
                        p = index.insert(original)
                        order, left_out = list(p.order), p.dropped
                        extra += len(p.extra)
                        dropped += len(p.dropped)
                    kept = [b for b in original if b not in set(left_out)]
                    served = cache.serve(render(order, texts, kept, q))
                    prompt += served.prompt
                    prefill += served.prompt - served.cached
                    requests += 1
                    if evidence:
                        shown = set().union(*(covers[b] for b in order))
                        recall.append(len(evidence & shown) / len(evidence))
            row = {
                "k": k,
                "mode": mode,
                "hit_ratio": round(cache.ratio, 4),
                "prompt_tokens": prompt,
                "prefill_tokens": prefill,
                "extra_per_request": round(extra / requests, 2),
                "dropped_per_request": round(dropped / requests, 2),
                "evidence_recall": round(statistics.fmean(recall), 4),
                "questions": requests,
            }
            if mode == "baseline":
                base = {"prompt": prompt, "prefill": prefill}
            row["prompt_vs_baseline"] = round(prompt / base["prompt"], 3)
            row["prefill_vs_baseline"] = round(prefill / base["prefill"], 3)
            rows.append(row)
            log.info(
                "k=%d %-26s hit %.3f prefill x%.3f prompt x%.3f recall %.4f",
                k,
                mode,
                row["hit_ratio"],
                row["prefill_vs_baseline"],
                row["prompt_vs_baseline"],
                row["evidence_recall"],
            )
    return {
        "capacity_tokens": capacity,
        "cache": "BlockPrefixCache(block_size=16)",
        "retriever": "tfidf",
        "command": "python -m benchmarks.swap_model",
        "rows": rows,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| k | mode | hit ratio | prefilled vs baseline | prompt vs baseline | evidence recall | extra / dropped |",
        "|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['k']} | {r['mode']} | {r['hit_ratio']:.3f} | {r['prefill_vs_baseline']:.3f} | "
            f"{r['prompt_vs_baseline']:.3f} | {r['evidence_recall']:.4f} | "
            f"{r['extra_per_request']} / {r['dropped_per_request']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--locomo", help="path to locomo10.json (default ../shared/data/locomo10.json)")
    ap.add_argument("--out", default="docs/results/swap_model.json")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = run(args.locomo)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
