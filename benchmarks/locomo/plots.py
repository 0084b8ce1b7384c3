"""The PNGs of a LoCoMo run: TTFT (or hit ratio) and evidence recall by k and mode; the Pareto front of
prefilled tokens against evidence recall."""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .summary import Summary

logger = logging.getLogger(__name__)

__all__ = ["pareto_plot", "plot"]


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib not installed (pip install 'cp-memory[bench]'); no plot written")
        return None
    return plt


def _bars(ax: Any, summaries: Sequence[Summary], value: Any, ylabel: str, *, ttft: bool = False) -> None:
    """Grouped bars of ``value(summary)`` by k and mode (TTFT: p50 as a black tick, speedups on top)."""
    ks = list(dict.fromkeys(s.k for s in summaries))
    modes = list(dict.fromkeys(s.mode for s in summaries))
    by = {(s.k, s.mode): s for s in summaries}
    width = 0.8 / max(1, len(modes))
    for i, mode in enumerate(modes):
        points = []  # (x, height, p50 height, speedup)
        for j, k in enumerate(ks):
            s = by.get((k, mode))
            v = None if s is None else value(s)
            if s is None or v is None:
                continue
            x = j + (i - (len(modes) - 1) / 2) * width
            p50 = s.ttft_p50_s * 1000 if ttft and s.ttft_p50_s is not None else None
            points.append((x, v, p50, s.speedup_mean if ttft else None))
        ax.bar([p[0] for p in points], [p[1] for p in points], width * 0.95, label=mode)
        for x, height, p50, speedup in points:
            if p50 is not None:
                ax.plot([x - width * 0.4, x + width * 0.4], [p50, p50], color="black", linewidth=1)
            if speedup and mode != "baseline":
                ax.annotate(f"{speedup:.2f}x", (x, height), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(ks)))
    ax.set_xticklabels([f"k={k}" for k in ks])
    ax.set_ylabel(ylabel, fontsize=8)


def plot(summaries: Sequence[Summary], path: Path, title: str, ttft: bool = True) -> Path | None:
    """Two panels: mean TTFT (or the hit ratio when TTFT is n/a) and evidence recall, by k and mode."""
    plt = _pyplot()
    if plt is None:
        return None
    ks = list(dict.fromkeys(s.k for s in summaries))
    recall = any(s.evidence_recall is not None for s in summaries)
    fig, axes = plt.subplots(
        1, 2 if recall else 1, figsize=((3.2 if recall else 1.8) + 2.6 * len(ks), 3.8), squeeze=False
    )
    if ttft:
        _bars(
            axes[0][0],
            summaries,
            lambda s: None if s.ttft_mean_s is None else s.ttft_mean_s * 1000,
            "mean TTFT (ms); tick = p50",
            ttft=True,
        )
    else:
        _bars(axes[0][0], summaries, lambda s: s.hit_ratio, "prefix-cache hit ratio (model)")
    axes[0][0].legend(fontsize=7)
    if recall:
        _bars(axes[0][1], summaries, lambda s: s.evidence_recall, "evidence recall of the prompt")
        axes[0][1].set_ylim(0, 1)
    fig.suptitle("\n".join(textwrap.wrap(title, 90)), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def pareto_plot(
    summaries: Sequence[Summary], path: Path, title: str, *, aim_prefill: float = 0.5, aim_recall_drop: float = 0.01
) -> Path | None:
    """Prefilled tokens (vs baseline) against evidence recall, one panel per k, one point per mode.

    Modes at the same point share one label; hollow markers: the prompt is longer than the baseline's. The
    shaded box is swap alignment's aim (prefill <= ``aim_prefill`` x baseline, recall within
    ``aim_recall_drop`` of the baseline's)."""
    pts = [s for s in summaries if s.prefill_vs_baseline is not None and s.evidence_recall is not None]
    ks = list(dict.fromkeys(s.k for s in pts))
    plt = _pyplot()
    if plt is None or not ks or len(pts) < 2:
        return None
    fig, axes = plt.subplots(1, len(ks), figsize=(0.6 + 4.6 * len(ks), 4.2), squeeze=False)
    for ax, k in zip(axes[0], ks):
        groups: dict[tuple[float, float], list[Summary]] = {}
        for s in (p for p in pts if p.k == k):
            assert s.prefill_vs_baseline is not None and s.evidence_recall is not None
            groups.setdefault((round(s.prefill_vs_baseline, 3), round(s.evidence_recall, 3)), []).append(s)
        for (x, y), same in groups.items():
            longer = (same[0].length_vs_baseline or 1.0) > 1.0 + 1e-9
            ax.scatter([x], [y], s=26, facecolors="none" if longer else None, edgecolors="C0", color="C0")
            label = " = ".join(s.mode.replace("aligned+", "") for s in same)
            ax.annotate(label, (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
        base = next((s for s in pts if s.k == k and s.mode == "baseline"), None)
        if base is not None and base.evidence_recall is not None:
            lo, hi = ax.get_ylim()
            ax.fill_between(
                [ax.get_xlim()[0], aim_prefill],
                base.evidence_recall - aim_recall_drop,
                hi,
                color="green",
                alpha=0.08,
                label="aim: <= 0.5x prefill, recall within 1 pt",
            )
            ax.set_ylim(lo, hi)
            ax.legend(fontsize=6, loc="lower right")
        ax.set_title(f"k={k} (hollow: prompt longer than baseline)", fontsize=8)
        ax.set_xlabel("prefilled tokens vs baseline (lower is better)", fontsize=8)
        ax.set_ylabel("evidence recall of the prompt", fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle("\n".join(textwrap.wrap(title, 90)), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
