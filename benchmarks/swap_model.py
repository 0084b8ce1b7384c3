"""Swap vs superset vs aligned on LoCoMo, on the in-repo prefix-cache model (the core check of swap alignment).

    python -m benchmarks.swap_model [--locomo PATH] [--out results] [--json docs/results/swap_model.json]

Same workload as ``benchmarks.index_bench locomo``: per LoCoMo conversation, every question (category
!= 5) retrieves its top-k observations with a TF-IDF retriever; one ContextIndex per conversation; all
prompts go through one :class:`~benchmarks.common.cache_model.BlockPrefixCache` (vLLM-style 16-token chained
blocks, 65,536 tokens, LRU, regex tokens). Machine-independent: hit ratio, prompt and prefilled tokens
(relative to the baseline = retrieval order), and evidence recall (share of a question's coverable
evidence dialogue ids carried by a memory in the prompt; uncoverable ids left out). Not the LoCoMo
benchmark (``python -m benchmarks.locomo``, with mem0 and engines): a quick model of the index alone.
Writes ``<out>/swap_model.{json,md}`` (and the JSON at ``--json FILE``, e.g. the committed copy).
"""

from __future__ import annotations

import argparse
import logging
import statistics
from dataclasses import dataclass
from typing import Any

from benchmarks.common.config import JsonOptions, LocomoOptions, OutOptions, VerboseOptions, parse_config
from benchmarks.common.harness import add_json, add_locomo, add_out, add_verbose, envelope, setup_logging, write_outputs

from .index_workload import locomo_conversations, serve

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
    """Every mode of :data:`MODES` at every k; the baseline (first) is the reference of the ratios."""
    convs = locomo_conversations(locomo)
    rows = []
    for k in ks:
        retrieved = [conv.retrieve(k) for conv in convs]
        served = {mode: serve(convs, retrieved, opts, capacity) for mode, opts in MODES.items()}
        base = served["baseline"]
        for mode, s in served.items():
            row = {
                "k": k,
                "mode": mode,
                "hit_ratio": round(s.cache.ratio, 4),
                "prompt_tokens": s.prompt_tokens,
                "prefill_tokens": s.prefill_tokens,
                "extra_per_request": round(s.extra / s.requests, 2),
                "dropped_per_request": round(s.dropped / s.requests, 2),
                "evidence_recall": round(statistics.fmean(s.recall), 4),
                "questions": s.requests,
                "prompt_vs_baseline": round(s.prompt_tokens / base.prompt_tokens, 3),
                "prefill_vs_baseline": round(s.prefill_tokens / base.prefill_tokens, 3),
            }
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
    return {"capacity_tokens": capacity, "cache": "BlockPrefixCache(block_size=16)", "retriever": "tfidf", "rows": rows}


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


@dataclass(frozen=True, kw_only=True)
class SwapModelConfig(LocomoOptions, OutOptions, JsonOptions, VerboseOptions):
    """The run's options (:func:`parse_args`)."""

    def __post_init__(self) -> None:
        if self.out.endswith(".json"):  # --out FILE before the harness: now the folder, the file is --json
            raise ValueError(f"--out is the results folder; for the JSON file give --json {self.out}")


def parse_args(argv: list[str] | None) -> SwapModelConfig:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.swap_model",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_locomo(ap)
    add_out(ap)
    add_json(ap)
    add_verbose(ap)
    return parse_config(ap, SwapModelConfig, argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.verbose)
    result = run(args.locomo)
    table = markdown(result)
    write_outputs(
        args.out, "swap_model", envelope("benchmarks.swap_model", argv, **result), markdown=table, also_json=args.json
    )
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
