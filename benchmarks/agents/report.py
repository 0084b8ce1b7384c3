"""The replay's figures: per arm, over requests, from the engine's own counts; the markdown table and the PNG.

Per arm (:func:`summarise_arm`): prompt tokens sent, prefilled (uncached) tokens, cache read / write tokens
(total, mean and P99 over requests), the modelled input cost (Anthropic's price ratios: uncached 1, read 0.1,
5-minute write 1.25, for an Anthropic trace; GPT-5's, read 0.1 and writes free, for an OpenAI one; in
input-token units), the time to first byte (per request the median over the rounds;
the arm's mean, and the paired difference to passthrough: median over requests, with the min-max of the
rounds' means), and the byte-stability verdicts (requests whose upstream bytes changed a prefix the arm had sent
before; ``added``: those where passthrough, i.e. the client's own re-rendering, kept the bytes or broke them
elsewhere). At the recorded concurrency also how many requests the arm had in flight at once (round 1's
``in_flight``: max, and mean over the replay's span) and, over several rounds, the rounds' spread of the token
totals and cost (``rounds_spread``: min and max), since the order in which concurrent requests reach the cache
can move hits between runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.agents.replay import Sent
from benchmarks.agents.trace import in_flight
from benchmarks.common.metrics import percentile

__all__ = ["PAPER", "change", "markdown", "plot", "summarise_arm"]

#: the paper's Table 4 (OpenClaw through ContextPilot on SGLang, document analysis): changes vs. no proxy
PAPER = {"prompt_mean": -24.4, "prompt_p99": -52.7, "prefill": -63.6}


def _stats(values: Sequence[float]) -> dict[str, float | None]:
    return {
        "total": round(sum(values), 1),
        "mean": round(statistics.fmean(values), 1) if values else None,
        "p99": round(p, 1) if (p := percentile(values, 99)) is not None else None,
    }


def change(new: float | None, base: float | None) -> float | None:
    """``new`` vs ``base`` in percent (None without a base)."""
    if new is None or not base:
        return None
    return round(100.0 * (new - base) / base, 1)


def _medians(rounds: Sequence[Sequence[Sent]]) -> list[float]:
    """Per request, the median time to first byte over the rounds (0 where no round saw one)."""
    out = []
    for i in range(len(rounds[0])):
        seen = [t for r in rounds if (t := r[i].ttft_s) is not None]
        out.append(statistics.median(seen) if seen else 0.0)
    return out


def _ttft(rounds: Sequence[Sequence[Sent]], base: Sequence[Sequence[Sent]] | None) -> dict[str, Any]:
    per_request = _medians(rounds)
    out: dict[str, Any] = {"mean_ms": round(1000 * statistics.fmean(per_request), 1), "rounds": len(rounds)}
    if base is not None:
        base_request = [
            statistics.median(t for r in base if (t := r[i].ttft_s) is not None) for i in range(len(base[0]))
        ]
        paired = [a - b for a, b in zip(per_request, base_request, strict=True)]
        means = [
            statistics.fmean((a.ttft_s or 0) - (b.ttft_s or 0) for a, b in zip(ra, rb, strict=True))
            for ra, rb in zip(rounds, base, strict=False)
        ]
        out["paired_median_ms"] = round(1000 * statistics.median(paired), 1)
        out["paired_round_means_ms"] = {"min": round(1000 * min(means), 1), "max": round(1000 * max(means), 1)}
    return out


def summarise_arm(
    rounds: Sequence[Sequence[Sent]], base: Sequence[Sequence[Sent]] | None, modelled: bool
) -> dict[str, Any]:
    """The figures of one arm from its rounds (the token counts of round 1; TTFT over every round)."""
    rows = rounds[0]
    breaks = [r.seq for r in rows if r.breaks_at is not None]
    base_breaks = {r.seq: r.breaks_at for r in base[0]} if base is not None else {}
    out: dict[str, Any] = {
        "requests": len(rows),
        "errors": sum(1 for r in rows if r.status >= 400),
        "prompt_tokens": _stats([r.prompt_tokens for r in rows]),
        "prefilled_tokens": _stats([r.prefilled_tokens for r in rows]),
        "cache_read_tokens": _stats([r.cache_read_tokens for r in rows]),
        "cache_write_tokens": _stats([r.cache_write_tokens for r in rows]),
        "byte_stability": {
            "breaks": breaks,
            "added": [r.seq for r in rows if r.breaks_at not in (None, base_breaks.get(r.seq))] if base else [],
            "stable": len(rows) - len(breaks),
        },
    }
    if modelled:
        out["cost_modelled"] = _stats([r.cost for r in rows])
    else:
        out["ttft"] = _ttft(rounds, base)
    spans = [(r.sent_s, r.answered_s) for r in rows if r.sent_s is not None and r.answered_s is not None]
    if spans:
        out["in_flight"] = in_flight(spans)
    if len(rounds) > 1:
        out["rounds_spread"] = _spread(rounds)
    return out


def _spread(rounds: Sequence[Sequence[Sent]]) -> dict[str, dict[str, float]]:
    """Per token figure and the cost: the smallest and largest total over the rounds."""
    out: dict[str, dict[str, float]] = {}
    for name in ("prompt_tokens", "prefilled_tokens", "cache_read_tokens", "cache_write_tokens", "cost"):
        totals = [round(sum(float(getattr(r, name)) for r in rows), 1) for rows in rounds]
        out[name] = {"min": min(totals), "max": max(totals)}
    return out


def _vs(arm: Mapping[str, Any], base: Mapping[str, Any], field: str, stat: str) -> str:
    value = change(arm.get(field, {}).get(stat), base.get(field, {}).get(stat))
    return "" if value is None else f" ({value:+.1f} %)"


def _row(
    name: str,
    arm: Mapping[str, Any],
    base: Mapping[str, Any],
    own: str = "the client's own re-rendering",
    concurrent: bool = False,
) -> str:
    if "unavailable" in arm:
        return f"| {name} | not run: {arm['unavailable']} |" + " |" * (7 if concurrent else 6)
    cells = [
        f"{arm['prompt_tokens']['mean']:,.0f}{_vs(arm, base, 'prompt_tokens', 'mean')}",
        f"{arm['prompt_tokens']['p99']:,.0f}{_vs(arm, base, 'prompt_tokens', 'p99')}",
        f"{arm['prefilled_tokens']['total']:,.0f}{_vs(arm, base, 'prefilled_tokens', 'total')}",
        f"{arm['cache_read_tokens']['total']:,.0f} / {arm['cache_write_tokens']['total']:,.0f}",
    ]
    if "cost_modelled" in arm:
        cells.append(f"{arm['cost_modelled']['total']:,.0f}{_vs(arm, base, 'cost_modelled', 'total')}")
    else:
        ttft = arm["ttft"]
        paired = ttft.get("paired_median_ms")
        spread = ttft.get("paired_round_means_ms")
        extra = f" ({paired:+.0f}; {spread['min']:+.0f}..{spread['max']:+.0f})" if paired is not None else ""
        cells.append(f"{ttft['mean_ms']:,.0f}{extra}")
    stab = arm["byte_stability"]
    added = f", added by the arm: {stab['added']}" if stab["added"] else ""
    if name == "passthrough" and stab["breaks"]:
        added = f", {own}: {stab['breaks']}"
    cells.append(f"{stab['stable']}/{arm['requests']}{added}" + (f"; {arm['errors']} errors" if arm["errors"] else ""))
    if concurrent:
        cells.append(_in_flight_cell(arm))
    return f"| {name} | " + " | ".join(cells) + " |"


def _in_flight_cell(arm: Mapping[str, Any]) -> str:
    """``max / mean`` in flight, and the rounds' spread of prefilled tokens where it moved."""
    flight = arm.get("in_flight") or {}
    cell = f"{flight.get('max', 0)} / {flight.get('mean', 0.0):.2f}"
    spread = (arm.get("rounds_spread") or {}).get("prefilled_tokens")
    if spread is not None:
        cell += f"; prefilled over rounds {spread['min']:,.0f}..{spread['max']:,.0f}"
    return cell


def _repetition_line(run: Mapping[str, Any]) -> str:
    """What the trace repeats (:mod:`benchmarks.agents.repetition`) beside what the gateway removed."""
    rep = run.get("repetition")
    if not rep or not rep.get("prompt_chars"):
        return ""
    share = rep.get("repeated_share_of_tool_results") or 0.0
    line = (
        f"Repeated content: {share:.1%} of the tool results' {rep['tool_result_chars']:,} characters "
        f"({rep['reread_chars']:,} whole re-reads, {rep['repeated_line_chars']:,} in repeated lines of new results), "
        f"{rep['prompt_share']:.1%} of every request's prompt characters summed"
    )
    gateway, base = run["arms"].get("gateway") or {}, run["arms"].get("passthrough") or {}
    removed = change((gateway.get("prompt_tokens") or {}).get("mean"), (base.get("prompt_tokens") or {}).get("mean"))
    if removed is not None:
        line += f"; the gateway's prompts are {removed:+.1f} % vs passthrough"
    return line + ".\n"


def _concurrency_line(run: Mapping[str, Any]) -> str:
    """How the run sent its requests: at the recorded concurrency (with the recording's own in-flight figures)
    or one at a time (and why, where the trace allowed nothing else)."""
    mode = run.get("concurrency") or {"mode": "serial"}
    if mode["mode"] == "recorded":
        rec = mode["recorded_in_flight"]
        return (
            f"{run['requests']} requests at the recorded concurrency (sessions side by side; in flight at once "
            f"when recorded: max {rec['max']}, mean {rec['mean']:.2f}). Changes in parentheses are vs passthrough.\n"
        )
    why = f" ({mode['reason']})" if mode.get("reason") else ""
    return f"{run['requests']} requests in recorded order{why}. Changes in parentheses are vs passthrough.\n"


def _own(run: Mapping[str, Any]) -> str:
    """What passthrough's breaks are: the client's re-rendering, or (with memories) mem0's pattern too."""
    if "memories" in run:
        return "the client's own re-rendering, or its copy without the memories mem0's pattern put in"
    return "the client's own re-rendering"


def _memories_title(run: Mapping[str, Any]) -> str:
    if "memories" not in run:
        return ""
    return f", with {run['memories']['user']}'s mem0 memories"


def _memories_lines(run: Mapping[str, Any]) -> list[str]:
    """With memories: whose they are and what reached the engine (the other tenant's must be 0)."""
    if "memories" not in run:
        return []
    m = run["memories"]
    seen = "; ".join(
        f"{arm}: {s['requests_with_memories']} requests carried them, {s['own_memories_seen']} distinct memories, "
        f"{s['foreign_memories_seen']} of the other tenant's"
        for arm, s in m["seen_upstream"].items()
    )
    return [
        f"Memories: {m['memories']} LoCoMo observations of {m['user']} (another tenant holds "
        f"{m['other_tenant_memories']} under the same user name), top {m['top_k']} per search; passthrough = "
        f"mem0's proxy pattern, placed in requests {m['requests_searched_mem0_pattern']}; gateway = "
        f"`--mem0 embedded`. Upstream: {seen}.\n",
    ]


def markdown(result: Mapping[str, Any]) -> str:
    """One table per (trace, engine) run."""
    lines = [f"# Agent traces replayed through each arm\n\n`{result['command']}`\n"]
    for run in result["runs"]:
        arms = run["arms"]
        base = arms.get("passthrough", {})
        last = "modelled input cost" if run["modelled"] else "TTFT ms (paired vs passthrough; rounds' spread)"
        concurrent = (run.get("concurrency") or {}).get("mode") == "recorded"
        flight = " in flight, max / mean |" if concurrent else ""
        lines += [
            f"## {run['trace']} on {run['engine_label']}{_memories_title(run)}\n",
            _concurrency_line(run),
            _repetition_line(run),
            *_memories_lines(run),
            f"| arm | prompt tokens, mean | P99 | prefilled, total | read / written | {last} | byte-stable |{flight}",
            "|---|---:|---:|---:|---:|---:|---|" + ("---|" if concurrent else ""),
            *[_row(name, arm, base, _own(run), concurrent) for name, arm in arms.items()],
            "",
        ]
    return "\n".join(lines)


def plot(result: Mapping[str, Any], path: Path) -> Path | None:
    """Prefilled tokens per arm, one group per run (None where matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    runs = result["runs"]
    fig, axes = plt.subplots(1, max(1, len(runs)), figsize=(5 * max(1, len(runs)), 4), squeeze=False)
    for ax, run in zip(axes[0], runs, strict=False):
        names = [n for n, a in run["arms"].items() if "unavailable" not in a]
        ax.bar(names, [run["arms"][n]["prefilled_tokens"]["total"] for n in names], color="#4c72b0")
        ax.set_title(f"{run['trace'].split('_')[0]} / {run['engine']}", fontsize=9)
        ax.set_ylabel("prefilled tokens (total)")
        ax.tick_params(axis="x", rotation=30, labelsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
