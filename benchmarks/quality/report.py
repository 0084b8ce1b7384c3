"""The quality report, computed from the answer cache alone: per model, per k and arm the mean F1 and exact
match (in points), per category 1-4, and the paired difference from the arm's pair (baseline; chat+dedup:
chat) with its 95 % bootstrap interval; the position test's curve against ``first``. Markdown and a PNG."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .arms import ARMS, DECISIVE
from .cache import Answer
from .position import VARIANTS
from .stats import by_category, mean_points, paired_diff

__all__ = ["counts", "harness_speed", "markdown", "plot_position", "summarize"]

Q = tuple[str, int]


def _index(rows: Iterable[Answer]) -> dict[tuple[str, int, str], dict[Q, Answer]]:
    out: dict[tuple[str, int, str], dict[Q, Answer]] = defaultdict(dict)
    for r in rows:
        out[(r.part, r.k, r.arm)][(r.sample_id, r.q_index)] = r
    return out


def _cell(rows: Mapping[Q, Answer], pair: Mapping[Q, Answer] | None) -> dict[str, Any]:
    vals = list(rows.values())
    cover = sum(r.evidence_coverable for r in vals)
    cell: dict[str, Any] = {
        "n": len(vals),
        "f1": mean_points(r.f1 for r in vals),
        "em": mean_points(r.em for r in vals),
        "evidence_recall": round(100 * sum(r.evidence_hit for r in vals) / cover, 1) if cover else None,
        "prompt_tokens": round(sum(toks) / len(toks))
        if (toks := [r.prompt_tokens for r in vals if r.prompt_tokens])
        else None,
        "categories": by_category([(r.category, r.f1, r.em) for r in vals]),
    }
    for metric in ("f1", "em"):  # the same keys in every cell: None where the arm is its own reference
        d = (
            paired_diff(
                {q: getattr(r, metric) for q, r in rows.items()}, {q: getattr(r, metric) for q, r in pair.items()}
            )
            if pair is not None
            else None
        )
        cell[f"d_{metric}"] = d.as_dict() if d else None
    return cell


def summarize(rows: Iterable[Answer]) -> dict[str, Any]:
    """One model's rows -> ``{"arms": {k: {arm: cell}}, "position": {k: {variant: cell}}}``."""
    idx = _index(rows)
    arms: dict[str, dict[str, Any]] = defaultdict(dict)
    position: dict[str, dict[str, Any]] = defaultdict(dict)
    for (part, k, name), cells in sorted(idx.items(), key=lambda kv: (kv[0][0], kv[0][1], _order(kv[0][2]))):
        if part == "arms":
            pair_name = ARMS[name].pair if name in ARMS else "baseline"
            pair = idx.get(("arms", k, pair_name)) if pair_name != name else None
            arms[str(k)][name] = {"pair": pair_name if pair is not None else None, **_cell(cells, pair)}
        else:
            first = idx.get(("position", k, "first")) if name != "first" else None
            position[str(k)][name] = _cell(cells, first)
    return {"arms": dict(arms), "position": dict(position)}


def _order(name: str) -> int:
    names = list(ARMS) + list(VARIANTS)
    return names.index(name) if name in names else len(names)


def harness_speed(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The harness's own records (:mod:`.timing`, one per run) summed: answers asked a minute overall and
    per k, where the time went (the engine's prefill vs the rest), and each run's figures with its load."""
    if not runs:
        return None
    answers = sum(int(r.get("answers", 0)) for r in runs)
    measured = sum(float(r.get("measured_s", 0.0)) for r in runs)
    phases: dict[str, float] = defaultdict(float)
    by_k: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for r in runs:
        for name, sec in (r.get("seconds") or {}).items():
            phases[name] += float(sec)
        for k, cell in (r.get("by_k") or {}).items():
            by_k[k][0] += cell["answers"]
            by_k[k][1] += cell["seconds"]
    prefill = sum(float(r.get("server_prefill_s", 0.0)) for r in runs)
    prefilled = sum(int(r.get("prefilled_tokens", 0)) for r in runs)
    prompt = sum(int(r.get("prompt_tokens", 0)) for r in runs)
    return {
        "runs": len(runs),
        "answers": answers,
        "measured_s": round(measured, 1),
        "answers_per_minute": _per_minute(answers, measured),
        "by_k": {
            k: {"answers": int(n), "seconds": round(sec, 1), "answers_per_minute": _per_minute(n, sec)}
            for k, (n, sec) in sorted(by_k.items(), key=lambda kv: int(kv[0]))
        },
        "seconds": {name: round(sec, 1) for name, sec in phases.items()},
        "server_prefill_s": round(prefill, 1),
        "prompt_tokens_per_answer": round(prompt / answers) if answers else None,
        "prefilled_tokens_per_answer": round(prefilled / answers) if answers else None,
        "prefill_tokens_per_s": round(prefilled / prefill, 1) if prefill else None,
        "each": [
            {
                "answers": r.get("answers"),
                "answers_per_minute": r.get("answers_per_minute"),
                "by_k": {k: c["answers_per_minute"] for k, c in (r.get("by_k") or {}).items()},
                "prefill_tokens_per_s": r.get("prefill_tokens_per_s"),
                "load_average": r.get("load_average"),
            }
            for r in runs
        ],
    }


def _per_minute(answers: float, seconds: float) -> float | None:
    return round(60 * answers / seconds, 1) if seconds > 0 and answers else None


def _speed_rows(model: str, speed: Mapping[str, Any]) -> list[str]:
    ks = ", ".join(f"k={k}: {c['answers_per_minute']}/min ({c['answers']})" for k, c in speed["by_k"].items())
    sec = speed["seconds"]
    rest = speed["measured_s"] - sec.get("engine", 0.0)
    return [
        f"- **{model}**: {speed['answers']} answers asked in {speed['measured_s']:.0f} s over {speed['runs']} run(s),"
        f" {speed['answers_per_minute']}/min ({ks}); the engine {sec.get('engine', 0.0):.0f} s (its prefill"
        f" {speed['server_prefill_s']:.0f} s, {speed['prefilled_tokens_per_answer']} of"
        f" {speed['prompt_tokens_per_answer']} prompt tokens prefilled per answer at"
        f" {speed['prefill_tokens_per_s']} tok/s), everything else {rest:.0f} s"
        f" (mem0 {sec.get('mem0', 0.0):.0f} s, context build {sec.get('build', 0.0):.0f} s).",
    ]


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


def _diff(d: Mapping[str, Any] | None) -> str:
    if not d:
        return ""
    star = " *" if d["significant"] else ""
    return f"{d['mean']:+.1f} [{d['lo']:+.1f}, {d['hi']:+.1f}]{star}"


def _arm_rows(cells: Mapping[str, Mapping[str, Any]]) -> list[str]:
    out = [
        "| arm | n | F1 | EM | ΔF1 vs pair [95% CI] | ΔEM [95% CI] | F1 cat 1 / 2 / 3 / 4 | evidence recall | tokens |",
        "|---|---:|---:|---:|---|---|---|---:|---:|",
    ]
    for name, c in cells.items():
        cats = " / ".join(_fmt(c["categories"][str(i)]["f1"]) for i in (1, 2, 3, 4))
        pair = f" (vs {c['pair']})" if c.get("pair") and c["pair"] != "baseline" else ""
        out.append(
            f"| {name} | {c['n']} | {_fmt(c['f1'])} | {_fmt(c['em'])} | {_diff(c.get('d_f1'))}{pair} | "
            f"{_diff(c.get('d_em'))} | {cats} | {_fmt(c['evidence_recall'])} | {c['prompt_tokens'] or '–'} |"
        )
    return out


def markdown(
    models: Mapping[str, Mapping[str, Any]],
    title: str = "LoCoMo answer quality per arm",
    *,
    speed: Mapping[str, Mapping[str, Any] | None] | None = None,
) -> str:
    """Tables of every model: arms per k, then the position curve; the harness's speed first where recorded."""
    lines = [
        f"# {title}",
        "",
        "F1 / EM in points (x100); Δ = paired mean difference from the pair arm (baseline;",
        "chat arms: chat) with its 95 % bootstrap interval, * = the interval excludes 0.",
        "",
    ]
    recorded = {m: s for m, s in (speed or {}).items() if s}
    if recorded:
        lines += ["## Harness speed", ""]
        for model, s in recorded.items():
            lines += _speed_rows(model, s)
        lines.append("")
    for model, summary in models.items():
        for k, cells in summary["arms"].items():
            lines += [f"## {model}, k={k}", "", *_arm_rows(cells), ""]
        for k, cells in summary["position"].items():
            lines += [
                f"## {model}, position test, k={k} (Δ vs evidence first)",
                "",
                "| evidence at | n | F1 | EM | ΔF1 vs first [95% CI] | ΔEM [95% CI] |",
                "|---|---:|---:|---:|---|---|",
            ]
            for name, c in cells.items():
                lines.append(
                    f"| {name} | {c['n']} | {_fmt(c['f1'])} | {_fmt(c['em'])} | "
                    f"{_diff(c.get('d_f1'))} | {_diff(c.get('d_em'))} |"
                )
            lines.append("")
    return "\n".join(lines)


def plot_position(models: Mapping[str, Mapping[str, Any]], path: Path) -> Path | None:
    """F1 by evidence position, with and without the annotation, one panel per model (None without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    shown = [(m, k, cells) for m, s in models.items() for k, cells in s["position"].items()]
    if not shown:
        return None
    fig, axes = plt.subplots(1, len(shown), figsize=(4.5 * len(shown), 3.6), squeeze=False)
    for ax, (model, k, cells) in zip(axes[0], shown):
        for label, names in (
            ("no annotation", ("first", "middle", "last")),
            ("order annotation", ("first", "middle+ann", "last+ann")),
        ):
            ys = [cells.get(n, {}).get("f1") for n in names]
            ax.plot(
                ["first", "middle", "last"], [y if y is not None else float("nan") for y in ys], marker="o", label=label
            )
        n = cells.get("first", {}).get("n", 0)
        ax.set_title(f"{model}, k={k} ({n} questions)")
        ax.set_ylabel("token F1 (points)")
        ax.set_xlabel("position of the one evidence memory")
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def counts(models: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Questions every decisive arm run reached (any arm where none ran), per model and k (the headline counts
    of a partial run; the extra arms' own counts are in their rows)."""
    out: dict[str, dict[str, int]] = {}
    for model, s in models.items():
        row = {}
        for k, cells in s["arms"].items():
            decisive = [c["n"] for name, c in cells.items() if name in DECISIVE]
            row[f"k={k}"] = min(decisive or [c["n"] for c in cells.values()], default=0)
        row.update({f"position k={k}": cells.get("first", {}).get("n", 0) for k, cells in s["position"].items()})
        out[model] = row
    return out
