"""Summaries, markdown and the PNG of ``python -m benchmarks.frameworks`` (pure functions of the records)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.locomo.metrics import percentile

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


def summarize(records: Sequence[dict[str, Any]], turns: int) -> list[dict[str, Any]]:
    """Per (framework, answers, cp arm): prefilled tokens per turn of both arms, the ratio at the last turn,
    and the TTFT / server-prefill ratios mem0 / cp (paired by chat and turn: median and quartiles; and the
    ratio of the sums)."""
    by: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by[(r["framework"], r["answers"], r["arm"])].append(r)
    out = []
    for (fw, answers, arm), rows in sorted(by.items()):
        if arm == "mem0":
            continue
        base = {(r["chat"], r["turn"]): r for r in by.get((fw, answers, "mem0"), [])}
        ours = {(r["chat"], r["turn"]): r for r in rows}
        pairs = [(base[k], ours[k]) for k in sorted(ours) if k in base]

        def per_turn(table: dict[tuple[int, int], dict[str, Any]], key: str) -> list[float | None]:
            return [_mean(r[key] for (c, t), r in table.items() if t == turn) for turn in range(1, turns + 1)]

        def ratios(key: str, pairs: list[tuple[dict[str, Any], dict[str, Any]]] = pairs) -> dict[str, Any]:
            rs = [b[key] / o[key] for b, o in pairs if b[key] and o[key]]
            sb = sum(b[key] for b, o in pairs if b[key] and o[key])
            so = sum(o[key] for b, o in pairs if b[key] and o[key])
            q = _quartiles(rs)
            return {
                "n": len(rs),
                "ratio_of_sums": sb / so if so else None,
                "median": q[1] if q else None,
                "q1": q[0] if q else None,
                "q3": q[2] if q else None,
            }

        pre_b, pre_o = per_turn(base, "prefilled"), per_turn(ours, "prefilled")
        last_b, last_o = pre_b[-1], pre_o[-1]
        first_b, first_o = pre_b[0], pre_o[0]
        total_b = sum(b["prefilled"] or 0 for b, _ in pairs)
        total_o = sum(o["prefilled"] or 0 for _, o in pairs)
        out.append(
            {
                "framework": fw,
                "answers": answers,
                "arm": arm,
                "chats": len({c for c, _ in ours}),
                "prefilled_per_turn": {"mem0": pre_b, arm: pre_o},
                "prompt_tokens_per_turn": {
                    "mem0": per_turn(base, "prompt_tokens"),
                    arm: per_turn(ours, "prompt_tokens"),
                },
                "memories_per_turn": {"mem0": per_turn(base, "memories"), arm: per_turn(ours, "memories")},
                "pointers_per_turn": per_turn(ours, "pointers"),
                "prefill_ratio_turn1": (first_b / first_o) if first_b and first_o else None,
                "prefill_ratio_last_turn": (last_b / last_o) if last_b and last_o else None,
                "prefill_ratio_chat": (total_b / total_o) if total_b and total_o else None,
                "prefilled_total": {"mem0": total_b, arm: total_o},
                "prompt_tokens_total": {
                    "mem0": sum(b["prompt_tokens"] or 0 for b, _ in pairs),
                    arm: sum(o["prompt_tokens"] or 0 for _, o in pairs),
                },
                "ttft_ratio": ratios("ttft_s"),
                "server_prompt_ratio": ratios("server_prompt_ms"),
            }
        )
    return out


def _fmt(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def markdown(summary: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    turns = meta["turns"]
    lines = [
        f"# Framework integrations: mem0's documented pattern vs cp_memory ({meta['model']})",
        "",
        (
            f"LoCoMo conversation {meta['conversation']}, {meta['chats']} chats x {turns} turns, "
            f"top_k={meta['top_k']}, "
            f"llama-server ({meta['engine']}), one server per arm, chats alternating between arms. "
            f"Answers: `model` = the model's own (max {meta['max_tokens']} tokens); `fixed` = replaced in the "
            "history by a fixed ~120-word answer. Prefilled = prompt tokens - cached tokens, as the engine reports "
            "them. TTFT measured on the client at the HTTP layer; machine: "
            f"{meta['machine']}."
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


def plot(summary: Sequence[dict[str, Any]], records: Sequence[dict[str, Any]], path: Path, turns: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frameworks = sorted({s["framework"] for s in summary})
    modes = sorted({s["answers"] for s in summary})
    fig, axes = plt.subplots(
        len(modes), len(frameworks), figsize=(4.6 * len(frameworks), 3.4 * len(modes)), squeeze=False, sharex=True
    )
    styles = {
        "mem0": ("tab:red", "o"),
        "cp-append": ("tab:blue", "s"),
        "cp-late": ("tab:green", "^"),
        "cp": ("tab:blue", "s"),
    }
    xs = list(range(1, turns + 1))
    for i, mode in enumerate(modes):
        for j, fw in enumerate(frameworks):
            ax = axes[i][j]
            arms = sorted(
                {r["arm"] for r in records if r["framework"] == fw and r["answers"] == mode},
                key=lambda a: (a != "mem0", a),
            )
            for arm in arms:
                ys = [
                    _mean(
                        r["prefilled"]
                        for r in records
                        if r["framework"] == fw and r["answers"] == mode and r["arm"] == arm and r["turn"] == t
                    )
                    for t in xs
                ]
                color, marker = styles.get(arm, ("gray", "x"))
                label = "mem0 guide" if arm == "mem0" else f"cp_memory ({arm})"
                ax.plot(xs, [y if y is not None else float("nan") for y in ys], marker=marker, color=color, label=label)
            ratios = [
                f"{s['arm']}: turn 1 {_fmt(_ratio(s, 0), 2)}x, last {_fmt(_ratio(s, -1), 2)}x, "
                f"chat {_fmt(s.get('prefill_ratio_chat'), 2)}x"
                for s in summary
                if s["framework"] == fw and s["answers"] == mode
            ]
            ax.set_title(f"{fw} — {mode} answers", fontsize=10)
            ax.text(
                0.02, 0.98, "mem0 / cp prefilled\n" + "\n".join(ratios), transform=ax.transAxes, fontsize=7, va="top"
            )
            ax.set_xlabel("turn")
            ax.set_ylabel("prefilled tokens (mean over chats)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
