"""Tables, summary and plot of a CoA routing benchmark run."""

from __future__ import annotations

import logging
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .arms import ARMS
from .run import Run

logger = logging.getLogger("benchmarks.coa")

__all__ = ["markdown", "plot", "summarize"]


def summarize(runs: Sequence[Run]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per workload, per arm: median throughput (and its range), mean hit ratio and prefilled tokens."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for r in runs:
        out.setdefault(r.workload, {}).setdefault(r.arm, {})
    for workload, arms in out.items():
        for arm in arms:
            rs = [r for r in runs if r.workload == workload and r.arm == arm]
            qps = [r.throughput_qps for r in rs]
            arms[arm] = {
                "reps": len(rs),
                "throughput_qps_median": statistics.median(qps),
                "throughput_qps_min": min(qps),
                "throughput_qps_max": max(qps),
                "engine_hit_ratio": statistics.fmean(r.engine_hit_ratio for r in rs),
                "prefilled_tokens": statistics.fmean(r.prefilled_tokens for r in rs),
                "engine_prefilled_tokens": statistics.fmean(r.engine_prefilled_tokens for r in rs),
                "engine_prompt_s": statistics.fmean(r.engine_prompt_s for r in rs),
                "mean_worker_ttft_ms": statistics.fmean(r.mean_worker_ttft_ms for r in rs),
                "failed": sum(r.failed for r in rs),
            }
        rr = arms.get("round_robin")
        if rr:
            for s in arms.values():
                s["throughput_vs_round_robin"] = s["throughput_qps_median"] / rr["throughput_qps_median"]
                s["prefilled_vs_round_robin"] = s["prefilled_tokens"] / rr["prefilled_tokens"]
    return out


def _routes(r: Run) -> str:
    if not r.reasons:
        return "(router)"
    return (
        f"{r.reasons.get('affinity', 0)} / {r.reasons.get('least_loaded', 0)} / {r.reasons.get('balance', 0)}"
        if "round_robin" not in r.reasons
        else "round-robin"
    )


def markdown(runs: Sequence[Run], summary: dict[str, dict[str, dict[str, Any]]], header: str) -> str:
    lines = [header, ""]
    for workload, arms in summary.items():
        lines += [
            f"### {workload}",
            "",
            (
                "| arm | questions/s, median (range) | vs round-robin | engine hit (worker calls) | "
                "prefilled tokens (all calls) | engine prefill s | mean worker TTFT ms |"
            ),
            "|---|---|---|---|---|---|---|",
        ]
        for arm, s in arms.items():
            lines.append(
                f"| {arm} | {s['throughput_qps_median']:.3f} ({s['throughput_qps_min']:.3f}–"
                f"{s['throughput_qps_max']:.3f}) | {_ratio(s.get('throughput_vs_round_robin'))} | "
                f"{100 * s['engine_hit_ratio']:.1f}% | {s['prefilled_tokens']:,.0f} | {s['engine_prompt_s']:.1f} | "
                f"{s['mean_worker_ttft_ms']:.0f} |"
            )
        lines += [
            "",
            (
                "| arm | rep | questions/s | wall s | prefilled tokens (client / engines) | cached / prompt "
                "(worker calls) | calls per worker | prefilled per worker | routes: affinity / least-loaded / "
                "balance | failed |"
            ),
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in runs:
            if r.workload != workload:
                continue
            lines.append(
                f"| {r.arm} | {r.rep} | {r.throughput_qps:.3f} | {r.wall_s:.1f} | {r.prefilled_tokens:,} / "
                f"{r.engine_prefilled_tokens:,} | {r.worker_cached_tokens:,} / {r.worker_prompt_tokens:,} "
                f"({100 * r.engine_hit_ratio:.1f}%) | {'/'.join(map(str, r.calls_per_worker))} | "
                f"{'/'.join(f'{x / 1000:.1f}k' for x in r.prefilled_per_worker)} | {_routes(r)} | {r.failed} |"
            )
        lines.append("")
    return "\n".join(lines) + "\n"


def plot(runs: Sequence[Run], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed; no plot (pip install 'cp-memory[agents]')")
        return None
    workloads = list(dict.fromkeys(r.workload for r in runs))
    arms = list(dict.fromkeys(r.arm for r in runs))
    metrics = [
        ("throughput_qps", "questions / s", 1.0),
        ("prefilled_tokens", "prefilled tokens (k)", 1e-3),
        ("engine_hit_ratio", "engine cache hit, worker calls (%)", 100.0),
    ]
    fig, axes = plt.subplots(len(workloads), 3, figsize=(13, 3.4 * len(workloads)), squeeze=False)
    for row, workload in enumerate(workloads):
        for ax, (key, title, scale) in zip(axes[row], metrics):
            for i, arm in enumerate(arms):
                vals = [getattr(r, key) * scale for r in runs if r.workload == workload and r.arm == arm]
                if not vals:
                    continue
                color = ARMS[arm].color if arm in ARMS else "#888888"
                ax.bar(i, statistics.median(vals), color=color, width=0.6)
                ax.scatter([i] * len(vals), vals, color="black", s=10, zorder=3)
            ax.set_xticks(range(len(arms)), [a.replace("_", "\n") for a in arms], fontsize=7)
            ax.set_title(f"{workload}: {title}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _ratio(x: float | None) -> str:
    """``1.23x``, or a dash when the run had no round-robin arm to compare with."""
    return "—" if x is None or x != x else f"{x:.2f}x"
