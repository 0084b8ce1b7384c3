"""The markdown tables, machine description and results folder of a LoCoMo run (statistics in
:mod:`.summary`, plots in :mod:`.plots`)."""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .plots import pareto_plot, plot
from .runner import RequestRecord
from .summary import Summary, summarize

logger = logging.getLogger(__name__)

__all__ = [
    "PAPER_ROWS",
    "Summary",
    "evidence_table",
    "load_records",
    "machine_info",
    "markdown_table",
    "paper_table",
    "pareto_plot",
    "plot",
    "summarize",
    "write_results",
    "write_summary_json",
]

#: The paper's Mem0 + LoCoMo numbers (Qwen3-4B, SGLang, H100, GPT-4.1 judge), for side-by-side tables.
PAPER_ROWS: tuple[dict[str, Any], ...] = (
    {"k": "20", "mode": "baseline", "ttft_s": 0.038, "judge": 0.440},
    {"k": "20", "mode": "ContextPilot", "ttft_s": 0.031, "judge": 0.460, "speedup": 1.23},
    {"k": "100", "mode": "baseline", "ttft_s": 0.101, "judge": 0.437},
    {"k": "100", "mode": "ContextPilot", "ttft_s": 0.055, "judge": 0.420, "speedup": 1.83},
)


def _f(value: float | None, fmt: str, na: str = "n/a") -> str:
    return na if value is None else format(value, fmt)


def markdown_table(summaries: Sequence[Summary], meta: Mapping[str, Any]) -> str:
    """The per-k, per-mode table with a header saying what produced the numbers."""
    eng = meta.get("engine", {})
    per_user = ", ".join(map(str, meta.get("memories_per_user", []))) or "?"
    how = (
        f"chats with history (a new chat every {meta.get('chat_turns')} questions)"
        if meta.get("chat")
        else "one-shot prompts"
    )
    lines = [
        f"**LoCoMo TTFT benchmark** — engine: **{eng.get('kind', '?')}**, model: **{eng.get('model', '?')}**",
        "",
        f"- machine: {meta.get('machine', {}).get('summary', '?')}",
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
    if eng.get("random_weights"):
        lines.append(
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
        lines.append(
            f"- **no LLM ran**: hit ratios come from benchmarks.common.cache_model ({policy}: regex tokens, "
            f"{shape}); TTFT, answers and F1 are n/a"
        )
    lines += [
        "",
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


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        cores = os.cpu_count() or 0
    gpu = None
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            )
            gpu = "; ".join(line.strip() for line in out.stdout.splitlines() if line.strip()) or None
        except (OSError, subprocess.TimeoutExpired):
            gpu = None
    mem_gib = None
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        pass
    summary = (
        f"{cpu}, {cores} cores"
        + (f", {mem_gib:.0f} GiB RAM" if mem_gib else "")
        + (f", GPU {gpu}" if gpu else ", no GPU")
    )
    return {
        "cpu": cpu,
        "cores": cores,
        "gpu": gpu,
        "memory_gib": mem_gib,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "summary": summary,
    }


def write_results(
    folder: Path, records: Sequence[RequestRecord], summaries: Sequence[Summary], meta: Mapping[str, Any], table: str
) -> dict[str, Path]:
    """``results.json`` (meta, summary, every request), ``table.md``, ``ttft.png``."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {"json": folder / "results.json", "table": folder / "table.md"}
    payload = {"meta": dict(meta), "summary": [asdict(s) for s in summaries], "requests": [asdict(r) for r in records]}
    out["json"].write_text(json.dumps(payload, indent=1, default=str) + "\n", encoding="utf-8")
    out["table"].write_text(
        table + "\n\nPaper (Mem0 + LoCoMo, Qwen3-4B, SGLang, H100):\n\n" + paper_table() + "\n", encoding="utf-8"
    )
    eng = meta.get("engine", {})
    png = plot(
        summaries,
        folder / ("ttft.png" if eng.get("measures_ttft", True) else "hit_ratio.png"),
        f"LoCoMo {meta.get('conversations_label', '')} — {eng.get('kind', '?')} / {eng.get('model', '?')}",
        ttft=bool(eng.get("measures_ttft", True)),
    )
    if png is not None:
        out["plot"] = png
    front = pareto_plot(
        summaries,
        folder / "pareto.png",
        f"LoCoMo {meta.get('conversations_label', '')} — prefill vs evidence recall ({eng.get('kind', '?')})",
    )
    if front is not None:
        out["pareto"] = front
    return out


def write_summary_json(
    path: str | Path, summaries: Sequence[Summary], meta: Mapping[str, Any], *, source: str | None = None
) -> Path:
    """Meta and the per-(k, mode) summary only (no request texts): the committed JSON behind a table."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    keep = {k: v for k, v in meta.items() if k not in ("prompt_template",)}
    command = "python -m benchmarks.locomo " + " ".join(str(a) for a in meta.get("argv", []))
    payload = {"command": command, "source": source, "meta": keep, "summary": [asdict(s) for s in summaries]}
    p.write_text(json.dumps(payload, indent=1, default=str) + "\n", encoding="utf-8")
    return p


def load_records(path: str | Path) -> tuple[list[RequestRecord], dict[str, Any]]:
    """Records and meta of an earlier run's ``results.json`` (a folder or the file)."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    data = json.loads(p.read_text(encoding="utf-8"))
    fields = set(RequestRecord.__dataclass_fields__)
    records = [RequestRecord(**{k: v for k, v in r.items() if k in fields}) for r in data["requests"]]
    return records, data["meta"]
