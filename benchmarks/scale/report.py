"""Summary, Markdown table and plot of the scale-out benchmark."""

from __future__ import annotations

import logging
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.metrics import percentile

from .run import Request

logger = logging.getLogger("benchmarks.scale")

__all__ = ["markdown", "plot", "summarize"]


def _stats(reqs: Sequence[Request]) -> dict[str, Any]:
    ok = [r for r in reqs if r.error is None and r.turn > 1]  # a user's first turn is cold everywhere
    prompt = sum(r.prompt_tokens or 0 for r in ok)
    cached = sum(r.cached_tokens or 0 for r in ok)
    ttft = [1000 * r.ttft_s for r in ok if r.ttft_s is not None]
    server = [r.server_prompt_ms for r in ok if r.server_prompt_ms is not None]
    return {
        "requests": len(ok),
        "failed": sum(1 for r in reqs if r.error is not None),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "prefilled_tokens": prompt - cached,
        "hit_ratio": cached / prompt if prompt else 0.0,
        "ttft_ms_median": statistics.median(ttft) if ttft else None,
        "ttft_ms_p90": percentile(ttft, 90),
        "server_prompt_ms_median": statistics.median(server) if server else None,
        "server_prompt_ms_mean": statistics.fmean(server) if server else None,
    }


def summarize(reqs: Sequence[Request], walls: dict[tuple[str, str, int], float]) -> dict[str, dict[str, Any]]:
    """Per router: per mode the pooled statistics over reps, and aligned vs baseline."""
    out: dict[str, dict[str, Any]] = {}
    for router in dict.fromkeys(r.router for r in reqs):
        modes: dict[str, Any] = {}
        for mode in dict.fromkeys(r.mode for r in reqs if r.router == router):
            sel = [r for r in reqs if r.router == router and r.mode == mode]
            s = _stats(sel)
            s["wall_s"] = [w for (ro, mo, _), w in sorted(walls.items()) if ro == router and mo == mode]
            s["per_replica"] = dict(
                sorted((str(i), sum(1 for r in sel if r.replica == i)) for i in {r.replica for r in sel})
            )
            modes[mode] = s
        b, a = modes.get("baseline"), modes.get("aligned")
        if b and a and b["server_prompt_ms_median"] and a["server_prompt_ms_median"]:
            modes["aligned_vs_baseline"] = {
                "hit_ratio": (b["hit_ratio"], a["hit_ratio"]),
                "prefilled_tokens_ratio": b["prefilled_tokens"] / max(1, a["prefilled_tokens"]),
                "ttft_median_ratio": (b["ttft_ms_median"] or 0) / max(1e-9, a["ttft_ms_median"] or 0),
                "server_prompt_ms_ratio": b["server_prompt_ms_mean"] / max(1e-9, a["server_prompt_ms_mean"]),
            }
        out[router] = modes
    return out


def markdown(summary: dict[str, dict[str, Any]], header: str) -> str:
    lines = [
        header,
        "",
        (
            "| router | mode | engine hit ratio | prefilled tokens | median TTFT ms | p90 TTFT ms | "
            "mean engine prefill ms | requests per replica |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for router, modes in summary.items():
        for mode, s in modes.items():
            if mode == "aligned_vs_baseline":
                continue
            lines.append(
                f"| {router} | {mode} | {100 * s['hit_ratio']:.1f}% | {s['prefilled_tokens']:,} | "
                f"{s['ttft_ms_median']:.0f} | {s['ttft_ms_p90']:.0f} | {s['server_prompt_ms_mean']:.1f} | "
                f"{per_replica(s)} |"
            )
    lines += [
        "",
        (
            "| router | hit ratio baseline -> aligned | prefilled tokens baseline / aligned | "
            "median TTFT baseline / aligned | engine prefill time baseline / aligned |"
        ),
        "|---|---|---|---|---|",
    ]
    for router, modes in summary.items():
        c = modes.get("aligned_vs_baseline")
        if c:
            lines.append(
                f"| {router} | {100 * c['hit_ratio'][0]:.1f}% -> {100 * c['hit_ratio'][1]:.1f}% | "
                f"{c['prefilled_tokens_ratio']:.2f}x | {c['ttft_median_ratio']:.2f}x | "
                f"{c['server_prompt_ms_ratio']:.2f}x |"
            )
    return "\n".join(lines) + "\n"


def plot(summary: dict[str, dict[str, Any]], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed; no plot")
        return None
    routers = list(summary)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    width = 0.38
    for j, (mode, color) in enumerate((("baseline", "#9e9e9e"), ("aligned", "#1f77b4"))):
        xs = [i + (j - 0.5) * width for i in range(len(routers))]
        hit = [100 * summary[r].get(mode, {}).get("hit_ratio", 0.0) for r in routers]
        pre = [summary[r].get(mode, {}).get("server_prompt_ms_mean") or 0.0 for r in routers]
        axes[0].bar(xs, hit, width=width, color=color, label=mode)
        axes[1].bar(xs, pre, width=width, color=color, label=mode)
    for ax, title in zip(axes, ("engine cache hit ratio (%)", "mean engine prefill time per request (ms)")):
        ax.set_xticks(range(len(routers)), routers)
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def per_replica(summary: dict[str, Any]) -> str:
    """Requests per replica ('a/b/c'), or '(router)' when the router chose and no split is known."""
    split = summary["per_replica"]
    return "(router)" if "-1" in split else "/".join(str(v) for v in split.values())
