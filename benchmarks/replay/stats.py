"""Per (k, mode) statistics of replayed requests, with the LoCoMo benchmark's fairness rules.

* a question counts only where every mode of that k measured it (first turns and errors drop it
  everywhere);
* hit ratio = Σ cached / Σ prompt tokens; prefilled vs baseline = Σ (prompt - cached) / baseline's;
* speedup (mean) = baseline mean TTFT / mode mean TTFT; speedup (paired) = median over questions of
  baseline TTFT / mode TTFT for the same question, with its interquartile range; the same pairing on
  the engine-reported prefill time where the engine reports one (llama.cpp), which excludes HTTP.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.common.metrics import mean, percentile

__all__ = ["markdown", "summarize"]

Record = Mapping[str, Any]


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _paired(meas: Sequence[Record], baseline: Mapping[tuple[str, int], Record], key: str) -> list[float]:
    """Baseline's ``key`` / this mode's, per question where both have one."""
    pairs = []
    for r in meas:
        b = baseline.get((r["sample_id"], r["turn"]))
        if b is not None and b.get(key) and r.get(key):
            pairs.append(float(b[key]) / float(r[key]))
    return pairs


def _row(
    k: str, mode: str, meas: Sequence[Record], errors: int, baseline: Mapping[tuple[str, int], Record]
) -> dict[str, Any]:
    ttft = [float(r["ttft_s"]) for r in meas if r.get("ttft_s") is not None]
    toks = [
        (int(r["cached_tokens"]), int(r["prompt_tokens"]))
        for r in meas
        if r.get("cached_tokens") is not None and r.get("prompt_tokens")
    ]
    server = [float(r["server_prompt_ms"]) for r in meas if r.get("server_prompt_ms") is not None]
    pairs, server_pairs = _paired(meas, baseline, "ttft_s"), _paired(meas, baseline, "server_prompt_ms")
    return {
        "k": k,
        "mode": mode,
        "n": len(meas),
        "errors": errors,
        "ttft_mean_s": mean(ttft),
        "ttft_p50_s": percentile(ttft, 50),
        "speedup_paired": percentile(pairs, 50),
        "speedup_paired_p25": percentile(pairs, 25),
        "speedup_paired_p75": percentile(pairs, 75),
        "server_prefill_ms_mean": mean(server),
        "server_speedup_paired": percentile(server_pairs, 50),
        "hit_ratio": sum(c for c, _ in toks) / sum(p for _, p in toks) if toks else None,
        "prompt_tokens_mean": mean([float(p) for _, p in toks]),
        "prompt_tokens": sum(p for _, p in toks),
        "prefill_tokens": sum(p - c for c, p in toks),
    }


def summarize(records: Sequence[Record]) -> list[dict[str, Any]]:
    """One row per (k, mode), k in first-seen order, modes in first-seen order with baseline first."""
    keys = list(dict.fromkeys((r["k"], r["mode"]) for r in records))
    ks = list(dict.fromkeys(k for k, _ in keys))
    keys.sort(key=lambda km: (ks.index(km[0]), km[1] != "baseline"))
    done: dict[tuple[str, str], set[tuple[str, int]]] = {key: set() for key in keys}
    for r in records:
        if r["measured"] and not r.get("error"):
            done[(r["k"], r["mode"])].add((r["sample_id"], r["turn"]))
    # a question counts where every mode of its k measured it
    common = {k: set.intersection(*(done[km] for km in keys if km[0] == k)) for k in ks}
    rows = []
    for k, mode in keys:
        mine = [r for r in records if r["k"] == k and r["mode"] == mode]
        baseline = {(r["sample_id"], r["turn"]): r for r in records if r["k"] == k and r["mode"] == "baseline"}
        meas = [r for r in mine if (r["sample_id"], r["turn"]) in common[k]]
        rows.append(_row(k, mode, meas, sum(1 for r in mine if r.get("error")), baseline))
    base = {row["k"]: row for row in rows if row["mode"] == "baseline"}
    for row in rows:
        b = base.get(row["k"])
        row["speedup_mean"] = _ratio(b["ttft_mean_s"], row["ttft_mean_s"]) if b else None
        row["prefill_vs_baseline"] = _ratio(float(row["prefill_tokens"]), float(b["prefill_tokens"])) if b else None
        row["length_vs_baseline"] = _ratio(float(row["prompt_tokens"]), float(b["prompt_tokens"])) if b else None
    return rows


def _f(value: Any, fmt: str, suffix: str = "") -> str:
    return "n/a" if value is None else format(value, fmt) + suffix


def markdown(rows: Sequence[Mapping[str, Any]], header: Sequence[str] = ()) -> str:
    lines = list(header) + [
        "",
        (
            "| k | mode | n | mean TTFT (s) | p50 TTFT (s) | speedup (mean) | "
            "speedup (paired, IQR) | server prefill (ms) | server speedup (paired) | "
            "engine hit ratio | prompt tokens | prefilled vs baseline | errors |"
        ),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        iqr = (
            f" ({r['speedup_paired_p25']:.2f}-{r['speedup_paired_p75']:.2f})"
            if r.get("speedup_paired_p25") is not None
            else ""
        )
        lines.append(
            f"| {r['k']} | {r['mode']} | {r['n']} | {_f(r['ttft_mean_s'], '.4f')} | {_f(r['ttft_p50_s'], '.4f')} | "
            f"{_f(r['speedup_mean'], '.2f', 'x')} | {_f(r['speedup_paired'], '.2f', 'x')}{iqr} | "
            f"{_f(r['server_prefill_ms_mean'], '.1f')} | {_f(r['server_speedup_paired'], '.2f', 'x')} | "
            f"{_f(r['hit_ratio'], '.3f')} | {_f(r['prompt_tokens_mean'], '.0f')} | "
            f"{_f(r['prefill_vs_baseline'], '.2f', 'x')} | {r['errors']} |"
        )
    return "\n".join(lines)
