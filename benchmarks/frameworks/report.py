"""Summaries, markdown and the PNG of ``python -m benchmarks.frameworks`` (pure functions of the records)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.metrics import percentile

__all__ = ["markdown", "plot", "summarize"]


def _mean(xs: Iterable[float | None]) -> float | None:
    vals = [float(x) for x in xs if x is not None]
    return statistics.fmean(vals) if vals else None


def _quartiles(xs: Sequence[float]) -> tuple[float, float, float] | None:
    if not xs:
        return None
    q1, q2, q3 = (percentile(xs, q) for q in (25, 50, 75))  # the project's one percentile convention
    assert q1 is not None and q2 is not None and q3 is not None
    return q1, q2, q3


Table = dict[tuple[int, int], dict[str, Any]]  # (chat, turn) -> record


def _per_turn(table: Table, key: str, turns: int) -> list[float | None]:
    return [_mean(r[key] for (_, t), r in table.items() if t == turn) for turn in range(1, turns + 1)]


def _ratios(pairs: Sequence[tuple[dict[str, Any], dict[str, Any]]], key: str) -> dict[str, Any]:
    """mem0 / cp of ``key`` over the (mem0, cp) pairs where both have it: ratio of the sums, median, quartiles."""
    both = [(b[key], o[key]) for b, o in pairs if b[key] and o[key]]
    so = sum(o for _, o in both)
    q = _quartiles([b / o for b, o in both])
    return {
        "n": len(both),
        "ratio_of_sums": sum(b for b, _ in both) / so if so else None,
        "median": q[1] if q else None,
        "q1": q[0] if q else None,
        "q3": q[2] if q else None,
    }


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _compare(fw: str, answers: str, arm: str, base: Table, ours: Table, turns: int) -> dict[str, Any]:
    """One summary row: the cp arm ``arm`` against mem0's pattern, paired by (chat, turn)."""
    pairs = [(base[k], ours[k]) for k in sorted(ours) if k in base]
    pre_b, pre_o = _per_turn(base, "prefilled", turns), _per_turn(ours, "prefilled", turns)
    total_b = sum(b["prefilled"] or 0 for b, _ in pairs)
    total_o = sum(o["prefilled"] or 0 for _, o in pairs)
    return {
        "framework": fw,
        "answers": answers,
        "arm": arm,
        "chats": len({c for c, _ in ours}),
        "prefilled_per_turn": {"mem0": pre_b, arm: pre_o},
        "prompt_tokens_per_turn": {
            "mem0": _per_turn(base, "prompt_tokens", turns),
            arm: _per_turn(ours, "prompt_tokens", turns),
        },
        "memories_per_turn": {"mem0": _per_turn(base, "memories", turns), arm: _per_turn(ours, "memories", turns)},
        "pointers_per_turn": _per_turn(ours, "pointers", turns),
        "prefill_ratio_turn1": _div(pre_b[0], pre_o[0]),
        "prefill_ratio_last_turn": _div(pre_b[-1], pre_o[-1]),
        "prefill_ratio_chat": _div(total_b, total_o),
        "prefilled_total": {"mem0": total_b, arm: total_o},
        "prompt_tokens_total": {
            "mem0": sum(b["prompt_tokens"] or 0 for b, _ in pairs),
            arm: sum(o["prompt_tokens"] or 0 for _, o in pairs),
        },
        "ttft_ratio": _ratios(pairs, "ttft_s"),
        "server_prompt_ratio": _ratios(pairs, "server_prompt_ms"),
    }


def summarize(records: Sequence[dict[str, Any]], turns: int) -> list[dict[str, Any]]:
    """Per (framework, answers, cp arm): prefilled tokens per turn of both arms, the ratio at the last turn,
    and the TTFT / server-prefill ratios mem0 / cp (paired by chat and turn: median and quartiles; and the
    ratio of the sums)."""
    by: dict[tuple[str, str, str], Table] = defaultdict(dict)
    for r in records:
        by[(r["framework"], r["answers"], r["arm"])][(r["chat"], r["turn"])] = r
    return [
        _compare(fw, answers, arm, by.get((fw, answers, "mem0"), {}), ours, turns)
        for (fw, answers, arm), ours in sorted(by.items())
        if arm != "mem0"
    ]


def _fmt(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def markdown(summary: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The table; ``meta`` is the run's, with the envelope's ``machine`` (a description, or its one line)."""
    turns, machine = meta["turns"], meta.get("machine", "?")
    if isinstance(machine, dict):
        machine = f"{machine['summary']}, shared by several processes (timings are noisy; token counts are not)"
    lines = [
        f"# Framework integrations: mem0's documented pattern vs cp_memory ({meta['model']})",
        "",
        (
            f"LoCoMo conversation {meta['conversation']}, {meta['chats']} chats x {turns} turns, "
            f"top_k={meta['top_k']}, "
            f"llama-server ({meta['engine']}), one server per arm, chats alternating between arms. "
            f"Answers: `model` = the model's own (max {meta['max_tokens']} tokens); `fixed` = replaced in the "
            "history by a fixed ~120-word answer. Prefilled = prompt tokens - cached tokens, as the engine reports "
            f"them. TTFT measured on the client at the HTTP layer; machine: {machine}."
        ),
        "",
        (
            f"| framework | answers | cp arm | prefilled turn 1: mem0 / cp (ratio) | prefilled turn {turns}: "
            "mem0 / cp (ratio) | prefilled whole chat: mem0 / cp (ratio) | prompt tokens whole chat: mem0 / cp | "
            "TTFT ratio mem0/cp (loaded machine): sums, median [q1, q3] | server prefill ratio: sums, median |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        arm = s["arm"]
        fb, fo = s["prefilled_per_turn"]["mem0"][0], s["prefilled_per_turn"][arm][0]
        pb, po = s["prefilled_per_turn"]["mem0"][-1], s["prefilled_per_turn"][arm][-1]
        tb, to = s["prefilled_total"]["mem0"], s["prefilled_total"][arm]
        prompts = s.get("prompt_tokens_total") or {}
        tt, sp = s["ttft_ratio"], s["server_prompt_ratio"]
        lines.append(
            f"| {s['framework']} | {s['answers']} | {arm} | {_fmt(fb, 0)} / {_fmt(fo, 0)} "
            f"({_fmt(fb / fo if fb and fo else None, 2)}x) | {_fmt(pb, 0)} / {_fmt(po, 0)} "
            f"({_fmt(s['prefill_ratio_last_turn'], 2)}x) | {tb:,} / {to:,} ({_fmt(tb / to if to else None, 2)}x) | "
            f"{_fmt(prompts.get('mem0'), 0)} / {_fmt(prompts.get(arm), 0)} | "
            f"{_fmt(tt['ratio_of_sums'], 2)}x, {_fmt(tt['median'], 2)}x [{_fmt(tt['q1'], 2)}, {_fmt(tt['q3'], 2)}] | "
            f"{_fmt(sp['ratio_of_sums'], 2)}x, {_fmt(sp['median'], 2)}x |"
        )
    lines += ["", f"Mean prefilled tokens per turn (turn 1 .. {turns}):", ""]
    for s in summary:
        for arm, values in s["prefilled_per_turn"].items():
            lines.append(f"- {s['framework']} / {s['answers']} / {arm}: " + ", ".join(_fmt(v, 0) for v in values))
    return "\n".join(lines) + "\n"


def _ratio(s: dict[str, Any], turn: int) -> float | None:
    b, o = s["prefilled_per_turn"]["mem0"][turn], s["prefilled_per_turn"][s["arm"]][turn]
    return b / o if b and o else None


STYLES = {
    "mem0": ("tab:red", "o"),
    "cp-append": ("tab:blue", "s"),
    "cp-late": ("tab:green", "^"),
    "cp": ("tab:blue", "s"),
}


def _panel(ax: Any, title: str, rows: Sequence[dict[str, Any]]) -> None:
    """Mean prefilled tokens per turn of mem0's pattern and of each cp arm, with their ratios."""
    lines = {
        "mem0": rows[0]["prefilled_per_turn"]["mem0"],
        **{s["arm"]: s["prefilled_per_turn"][s["arm"]] for s in rows},
    }
    for arm in sorted(lines, key=lambda a: (a != "mem0", a)):
        color, marker = STYLES.get(arm, ("gray", "x"))
        label = "mem0 guide" if arm == "mem0" else f"cp_memory ({arm})"
        ys = [y if y is not None else float("nan") for y in lines[arm]]
        ax.plot(range(1, len(ys) + 1), ys, marker=marker, color=color, label=label)
    ratios = [
        f"{s['arm']}: turn 1 {_fmt(_ratio(s, 0), 2)}x, last {_fmt(_ratio(s, -1), 2)}x, "
        f"chat {_fmt(s.get('prefill_ratio_chat'), 2)}x"
        for s in rows
    ]
    ax.set_title(title, fontsize=10)
    ax.text(0.02, 0.98, "mem0 / cp prefilled\n" + "\n".join(ratios), transform=ax.transAxes, fontsize=7, va="top")
    ax.set_xlabel("turn")
    ax.set_ylabel("prefilled tokens (mean over chats)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")


def plot(summary: Sequence[dict[str, Any]], path: Path) -> Path:
    """One panel per (answers, framework) of the summary's prefilled tokens per turn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frameworks = sorted({s["framework"] for s in summary})
    modes = sorted({s["answers"] for s in summary})
    fig, axes = plt.subplots(
        len(modes), len(frameworks), figsize=(4.6 * len(frameworks), 3.4 * len(modes)), squeeze=False, sharex=True
    )
    for i, mode in enumerate(modes):
        for j, fw in enumerate(frameworks):
            rows = [s for s in summary if s["framework"] == fw and s["answers"] == mode]
            _panel(axes[i][j], f"{fw} — {mode} answers", rows)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
