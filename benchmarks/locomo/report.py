"""The markdown tables and results folder of a LoCoMo run, and reading an earlier one back (statistics in
:mod:`.summary`, plots in :mod:`.plots`, the envelope and JSON writer from :mod:`benchmarks.common.harness`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from benchmarks.common import harness

from .plots import pareto_plot, plot
from .runner import RequestRecord
from .summary import Summary, summarize

__all__ = [
    "PAPER_ROWS",
    "Summary",
    "evidence_table",
    "load_run",
    "markdown_table",
    "paper_table",
    "summarize",
    "summary_payload",
    "write_results",
]

#: The paper's Mem0 + LoCoMo numbers (Qwen3-4B, SGLang, H100, GPT-4.1 judge), for side-by-side tables.
PAPER_ROWS: tuple[dict[str, Any], ...] = (
    {"k": "20", "mode": "baseline", "ttft_s": 0.038, "judge": 0.440},
    {"k": "20", "mode": "ContextPilot", "ttft_s": 0.031, "judge": 0.460, "speedup": 1.23},
    {"k": "100", "mode": "baseline", "ttft_s": 0.101, "judge": 0.437},
    {"k": "100", "mode": "ContextPilot", "ttft_s": 0.055, "judge": 0.420, "speedup": 1.83},
)
#: the harness envelope's fields, as every results file carries them
ENVELOPE = ("command", "machine", "git_commit")


def _f(value: float | None, fmt: str, na: str = "n/a") -> str:
    return na if value is None else format(value, fmt)


def markdown_table(summaries: Sequence[Summary], meta: Mapping[str, Any], machine: Mapping[str, Any] | None) -> str:
    """The per-k, per-mode table with a header saying what produced the numbers (``machine``: the envelope's)."""
    lines = [*_header(meta, machine), *_engine_notes(meta.get("engine", {})), ""]
    lines += [
        (
            "| k | mode | n | mean TTFT (s) | p50 TTFT (s) | speedup (mean) | speedup (paired) | "
            "engine hit ratio | prompt tokens | prefilled vs baseline | evidence recall | F1 | judge | "
            "extra/req | build p50 (ms) | errors |"
        ),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        lines.append(
            f"| {s.k} | {s.mode} | {s.measured} | {_f(s.ttft_mean_s, '.4f')} | {_f(s.ttft_p50_s, '.4f')} | "
            f"{_f(s.speedup_mean, '.2f')}{'x' if s.speedup_mean else ''} | "
            f"{_f(s.speedup_paired, '.2f')}{'x' if s.speedup_paired else ''} | {_f(s.hit_ratio, '.3f')} | "
            f"{_f(s.prompt_tokens_mean, '.0f')} | {_f(s.prefill_vs_baseline, '.2f')}"
            f"{'x' if s.prefill_vs_baseline else ''} | {_f(s.evidence_recall, '.3f')} | {_f(s.f1, '.3f')} | "
            f"{_f(s.judge, '.3f', '-')} | {s.extra_mean:.2f} | {_f(s.build_ms_p50, '.1f')} | {s.errors} |"
        )
    return "\n".join(lines + ["", evidence_table(summaries)])


def _header(meta: Mapping[str, Any], machine: Mapping[str, Any] | None) -> list[str]:
    eng = meta.get("engine", {})
    per_user = ", ".join(map(str, meta.get("memories_per_user", []))) or "?"
    how = (
        f"chats with history (a new chat every {meta.get('chat_turns')} questions)"
        if meta.get("chat")
        else "one-shot prompts"
    )
    return [
        f"**LoCoMo TTFT benchmark** — engine: **{eng.get('kind', '?')}**, model: **{eng.get('model', '?')}**",
        "",
        f"- machine: {(machine or {}).get('summary', '?')}",
        (
            f"- conversations: {meta.get('conversations_label', '?')}; questions: {meta.get('questions_label', '?')} "
            f"(categories 1-4); memories: {meta.get('memories', '?')} ({per_user} per user)"
        ),
        (
            f"- {how}; max_tokens {meta.get('max_tokens')}; cache made cold before every mode by: "
            f"{meta.get('flush', '?')}; {meta.get('warmup', 0)} warm-up request(s) and the first question of each "
            "run left out of TTFT/hit"
        ),
        (
            "- speedup (mean) = baseline mean TTFT / mode mean TTFT; speedup (paired) = median over questions of "
            "baseline TTFT / mode TTFT for the same question (robust to load spikes on a shared machine)"
        ),
    ]


def _engine_notes(eng: Mapping[str, Any]) -> list[str]:
    """What the engine's numbers mean: random weights (answers are noise), no LLM (hit ratios only)."""
    notes = []
    if eng.get("random_weights"):
        notes.append(
            "- **random-weight model**: TTFT is a real llama.cpp prefill of this small architecture "
            "(SmolLM2 tokenizer); its answers are noise, so F1 means nothing here"
        )
    if not eng.get("measures_ttft", True):
        policy = eng.get("policy", "radix")
        shape = (
            f"{eng.get('block_tokens', 16)}-token blocks, LRU over {eng.get('capacity_tokens', '?')} tokens"
            if policy == "radix"
            else "one slot + host prompt cache"
        )
        notes.append(
            f"- **no LLM ran**: hit ratios come from benchmarks.common.cache_model ({policy}: regex tokens, "
            f"{shape}); TTFT, answers and F1 are n/a"
        )
    return notes


def _quarters_text(shares: Sequence[float]) -> str:
    return " / ".join(f"{100 * x:.0f}" for x in shares) if shares else "n/a"


def evidence_table(summaries: Sequence[Summary]) -> str:
    """Evidence recall per (k, mode) with where the evidence sits, next to the prefill it costs."""
    unc = [s.evidence_uncoverable for s in summaries if s.evidence_uncoverable is not None]
    head = (
        "Evidence recall = mean over questions of (evidence ids covered by a memory in the prompt / "
        "evidence ids some memory of the user covers)"
        + (
            f"; {100 * max(unc):.1f}% of the questions' evidence ids are covered by no memory and left out"
            if unc
            else ""
        )
        + ". Where the hits sit: % in each quarter of the prompt's blocks (1st/2nd/3rd/4th); "
        "where the retrieved evidence sits in mem0's ranking: % in each quarter of the top-k."
    )
    lines = [
        head,
        "",
        (
            "| k | mode | evidence recall | micro | hits by prompt quarter (%) | "
            "evidence by mem0 rank quarter (%) | prefilled vs baseline | prompt length vs baseline | "
            "extra/req | dropped/req |"
        ),
        "|---|---|---:|---:|---|---|---:|---:|---:|---:|",
    ]
    for s in summaries:
        lines.append(
            f"| {s.k} | {s.mode} | {_f(s.evidence_recall, '.3f')} | {_f(s.evidence_recall_micro, '.3f')} | "
            f"{_quarters_text(s.evidence_quarters)} | {_quarters_text(s.evidence_rank_quarters)} | "
            f"{_f(s.prefill_vs_baseline, '.2f')} | {_f(s.length_vs_baseline, '.2f')} | {s.extra_mean:.2f} | "
            f"{s.dropped_mean:.2f} |"
        )
    return "\n".join(lines)


def paper_table() -> str:
    lines = ["| k | mode | TTFT (s) | speedup | judge (GPT-4.1) |", "|---|---|---:|---:|---:|"]
    for r in PAPER_ROWS:
        sp = f"{r['speedup']:.2f}x" if "speedup" in r else ""
        lines.append(f"| {r['k']} | {r['mode']} | {r['ttft_s']:.3f} | {sp} | {r['judge']:.3f} |")
    return "\n".join(lines)


def write_results(
    folder: Path, payload: Mapping[str, Any], summaries: Sequence[Summary], table: str
) -> dict[str, Path]:
    """``results.json`` (the envelope, meta, summary, every request), ``table.md`` (with the paper's rows),
    ``ttft.png`` (``hit_ratio.png`` where no TTFT was measured) and ``pareto.png``."""
    out = {"json": harness.write_json(folder / "results.json", payload), "table": folder / "table.md"}
    out["table"].write_text(
        table + "\n\nPaper (Mem0 + LoCoMo, Qwen3-4B, SGLang, H100):\n\n" + paper_table() + "\n", encoding="utf-8"
    )
    eng, label = payload["meta"].get("engine", {}), payload["meta"].get("conversations_label", "")
    ttft = bool(eng.get("measures_ttft", True))
    png = folder / ("ttft.png" if ttft else "hit_ratio.png")
    drawn = {
        "plot": plot(summaries, png, f"LoCoMo {label} — {eng.get('kind', '?')} / {eng.get('model', '?')}", ttft=ttft),
        "pareto": pareto_plot(
            summaries, folder / "pareto.png", f"LoCoMo {label} — prefill vs evidence recall ({eng.get('kind', '?')})"
        ),
    }
    return out | {kind: path for kind, path in drawn.items() if path is not None}


def summary_payload(payload: Mapping[str, Any], summaries: Sequence[Summary], source: str | None) -> dict[str, Any]:
    """The committed JSON behind a table (``--summary-json``): the envelope, meta without the prompt template
    and the per-(k, mode) summary; no request texts."""
    meta = {k: v for k, v in payload["meta"].items() if k != "prompt_template"}
    envelope = {k: payload.get(k) for k in ENVELOPE}
    return {**envelope, "source": source, "meta": meta, "summary": [asdict(s) for s in summaries]}


def load_run(path: str | Path) -> tuple[dict[str, Any], list[Summary]]:
    """An earlier run (its folder, ``results.json`` or a ``--summary-json`` file, from before the harness
    envelope too) as a payload with the envelope's fields, and its summary rows (computed afresh from the
    requests where the file has them)."""
    p = Path(path)
    data = json.loads((p / "results.json" if p.is_dir() else p).read_text(encoding="utf-8"))
    meta = dict(data["meta"])
    older = {k: meta.pop(k) for k in ("machine", "git_commit") if k in meta}  # meta held them before the envelope
    argv = meta.pop("argv", [])
    payload = {"command": harness.command("benchmarks.locomo", argv), **older, **data, "meta": meta}
    if "requests" in data:
        known = {f.name for f in fields(RequestRecord)}
        records = [RequestRecord(**{k: v for k, v in r.items() if k in known}) for r in data["requests"]]
        return payload, summarize(records)
    return payload, [_summary(row) for row in data["summary"]]


def _summary(row: Mapping[str, Any]) -> Summary:
    known = {f.name for f in fields(Summary)}
    kept: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in row.items() if k in known}
    return Summary(**kept)
