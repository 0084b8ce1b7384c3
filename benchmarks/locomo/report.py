"""Summaries, the markdown table, the PNG plot and the results folder of a LoCoMo run."""
from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import subprocess
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from .metrics import mean, percentile
from .runner import RequestRecord

logger = logging.getLogger(__name__)

__all__ = [
    "PAPER_ROWS",
    "Summary",
    "load_records",
    "machine_info",
    "markdown_table",
    "paper_table",
    "plot",
    "summarize",
    "write_results",
]

#: The paper's Mem0 + LoCoMo numbers (Qwen3-4B, SGLang, H100, GPT-4.1 judge), for side-by-side tables.
PAPER_ROWS: tuple[dict[str, Any], ...] = (
    {"k": "20", "mode": "baseline", "ttft_s": 0.038, "judge": 0.440},
    {"k": "20", "mode": "ContextPilot", "ttft_s": 0.031, "judge": 0.460, "speedup": 1.23},
    {"k": "100", "mode": "baseline", "ttft_s": 0.101, "judge": 0.437},
    {"k": "100", "mode": "ContextPilot", "ttft_s": 0.055, "judge": 0.420, "speedup": 1.83},
)


@dataclass(frozen=True)
class Summary:
    """One (k, mode) row."""

    k: str
    mode: str
    requests: int               # all recorded requests
    measured: int               # in the TTFT / hit statistics: not a first turn, answered in every mode of this k
    errors: int
    ttft_mean_s: float | None
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    speedup_mean: float | None  # baseline mean TTFT / this mode's (same k)
    speedup_p50: float | None
    speedup_paired: float | None  # median over questions of baseline TTFT / this mode's TTFT (same question)
    hit_ratio: float | None     # engine-reported cached / prompt tokens, measured requests
    prompt_tokens_mean: float | None
    f1: float | None            # questions answered in every mode of this k (first turns included)
    judge: float | None
    extra_mean: float
    duplicates_mean: float
    build_ms_p50: float | None
    server_prefill_ms_mean: float | None = None   # engine-reported prefill (llama.cpp), measured requests


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def summarize(records: Sequence[RequestRecord]) -> list[Summary]:
    """Rows in first-seen k order, then mode order as given in the records' settings."""
    keys: list[tuple[str, str]] = []
    for r in records:
        if (r.k, r.mode) not in keys:
            keys.append((r.k, r.mode))
    mode_rank = {m: i for i, m in enumerate(("baseline", "aligned", "aligned+superset", "dedup"))}
    k_order = list(dict.fromkeys(r.k for r in records))
    keys.sort(key=lambda km: (k_order.index(km[0]), mode_rank.get(km[1], 99), km[1]))
    # fairness: a question counts only where every mode of that k answered it (an engine error in one
    # mode, e.g. a context overflow, drops that question from all modes' statistics)
    measured_in_all: dict[str, set[tuple[str, int]]] = {}
    answered_in_all: dict[str, set[tuple[str, int]]] = {}
    for k in k_order:
        modes_k = [m for kk, m in keys if kk == k]
        measured_in_all[k] = set.intersection(*[{(r.sample_id, r.turn) for r in records
                                                 if r.k == k and r.mode == m and r.measured} for m in modes_k])
        answered_in_all[k] = set.intersection(*[{(r.sample_id, r.turn) for r in records
                                                 if r.k == k and r.mode == m and r.error is None} for m in modes_k])
    rows: list[Summary] = []
    for k, mode in keys:
        rs = [r for r in records if r.k == k and r.mode == mode]
        meas = [r for r in rs if r.measured and (r.sample_id, r.turn) in measured_in_all[k]]
        ttft = [r.ttft_s for r in meas if r.ttft_s is not None]
        toks = [(r.cached_tokens, r.prompt_tokens) for r in meas
                if r.cached_tokens is not None and r.prompt_tokens]
        hit = sum(c for c, _ in toks) / sum(p for _, p in toks) if toks else None
        answered = [r for r in rs if (r.sample_id, r.turn) in answered_in_all[k]]
        f1 = [r.f1 for r in answered if r.f1 is not None]
        judge = [r.judge for r in answered if r.judge is not None]
        prompt_tokens = [float(p) for _, p in toks] or [float(r.prompt_tokens) for r in meas
                                                          if r.prompt_tokens is not None]
        rows.append(Summary(
            k=k, mode=mode, requests=len(rs), measured=len(meas), errors=sum(r.error is not None for r in rs),
            ttft_mean_s=mean(ttft), ttft_p50_s=percentile(ttft, 50), ttft_p90_s=percentile(ttft, 90),
            speedup_mean=None, speedup_p50=None, speedup_paired=None,
            hit_ratio=hit, prompt_tokens_mean=mean(prompt_tokens), f1=mean(f1), judge=mean(judge),
            extra_mean=mean([float(r.extra) for r in rs]) or 0.0,
            duplicates_mean=mean([float(r.duplicates) for r in rs]) or 0.0,
            build_ms_p50=percentile([r.build_ms for r in rs], 50),
            server_prefill_ms_mean=mean([r.server_prompt_ms for r in meas if r.server_prompt_ms is not None])))
    base = {s.k: (s.ttft_mean_s, s.ttft_p50_s) for s in rows if s.mode == "baseline"}
    base_ttft = {(r.k, r.sample_id, r.turn): r.ttft_s for r in records
                 if r.mode == "baseline" and r.measured and r.ttft_s}
    out = []
    for s in rows:
        b_mean, b_p50 = base.get(s.k, (None, None))
        ratios = [base_ttft[(r.k, r.sample_id, r.turn)] / r.ttft_s for r in records
                  if r.k == s.k and r.mode == s.mode and r.ttft_s and (r.k, r.sample_id, r.turn) in base_ttft
                  and (r.sample_id, r.turn) in measured_in_all[s.k]]
        out.append(replace(s, speedup_mean=_ratio(b_mean, s.ttft_mean_s), speedup_p50=_ratio(b_p50, s.ttft_p50_s),
                           speedup_paired=percentile(ratios, 50)))
    return out


def _f(value: float | None, fmt: str, na: str = "n/a") -> str:
    return na if value is None else format(value, fmt)


def markdown_table(summaries: Sequence[Summary], meta: Mapping[str, Any]) -> str:
    """The per-k, per-mode table with a header saying what produced the numbers."""
    eng = meta.get("engine", {})
    per_user = ", ".join(map(str, meta.get("memories_per_user", []))) or "?"
    how = (f"chats with history (a new chat every {meta.get('chat_turns')} questions)" if meta.get("chat")
           else "one-shot prompts")
    lines = [
        f"**LoCoMo TTFT benchmark** — engine: **{eng.get('kind', '?')}**, model: **{eng.get('model', '?')}**",
        "",
        f"- machine: {meta.get('machine', {}).get('summary', '?')}",
        (f"- conversations: {meta.get('conversations_label', '?')}; questions: {meta.get('questions_label', '?')} "
         f"(categories 1-4); memories: {meta.get('memories', '?')} ({per_user} per user)"),
        (f"- {how}; max_tokens {meta.get('max_tokens')}; cache made cold before every mode by: "
         f"{meta.get('flush', '?')}; {meta.get('warmup', 0)} warm-up request(s) and the first question of each "
         "run left out of TTFT/hit"),
        ("- speedup (mean) = baseline mean TTFT / mode mean TTFT; speedup (paired) = median over questions of "
         "baseline TTFT / mode TTFT for the same question (robust to load spikes on a shared machine)"),
    ]
    if eng.get("random_weights"):
        lines.append("- **random-weight model**: TTFT is a real llama.cpp prefill of this small architecture "
                     "(SmolLM2 tokenizer); its answers are noise, so F1 means nothing here")
    if not eng.get("measures_ttft", True):
        policy = eng.get("policy", "radix")
        shape = (f"{eng.get('block_tokens', 16)}-token blocks, LRU over {eng.get('capacity_tokens', '?')} tokens"
                 if policy == "radix" else "one slot + host prompt cache")
        lines.append(f"- **no LLM ran**: hit ratios come from cp_memory.cache_model ({policy}: regex tokens, "
                     f"{shape}); TTFT, answers and F1 are n/a")
    lines += ["", ("| k | mode | n | mean TTFT (s) | p50 TTFT (s) | speedup (mean) | speedup (paired) | "
                   "engine hit ratio | prompt tokens | F1 | judge | extra/req | build p50 (ms) | errors |"),
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in summaries:
        lines.append(
            f"| {s.k} | {s.mode} | {s.measured} | {_f(s.ttft_mean_s, '.4f')} | {_f(s.ttft_p50_s, '.4f')} | "
            f"{_f(s.speedup_mean, '.2f')}{'x' if s.speedup_mean else ''} | "
            f"{_f(s.speedup_paired, '.2f')}{'x' if s.speedup_paired else ''} | {_f(s.hit_ratio, '.3f')} | "
            f"{_f(s.prompt_tokens_mean, '.0f')} | {_f(s.f1, '.3f')} | {_f(s.judge, '.3f', '-')} | "
            f"{s.extra_mean:.2f} | {_f(s.build_ms_p50, '.1f')} | {s.errors} |")
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
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20, check=False)
            gpu = "; ".join(line.strip() for line in out.stdout.splitlines() if line.strip()) or None
        except (OSError, subprocess.TimeoutExpired):
            gpu = None
    mem_gib = None
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        pass
    summary = f"{cpu}, {cores} cores" + (f", {mem_gib:.0f} GiB RAM" if mem_gib else "") + (f", GPU {gpu}" if gpu
                                                                                          else ", no GPU")
    return {"cpu": cpu, "cores": cores, "gpu": gpu, "memory_gib": mem_gib, "python": platform.python_version(),
            "platform": platform.platform(), "summary": summary}


def plot(summaries: Sequence[Summary], path: Path, title: str, ttft: bool = True) -> Path | None:
    """Grouped bars: mean TTFT (or hit ratio when TTFT is n/a) by k and mode, p50 as a black tick."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib not installed (pip install 'cp-memory[bench]'); no plot written")
        return None
    ks = list(dict.fromkeys(s.k for s in summaries))
    modes = list(dict.fromkeys(s.mode for s in summaries))
    by = {(s.k, s.mode): s for s in summaries}
    width = 0.8 / max(1, len(modes))
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(ks), 3.8))
    for i, mode in enumerate(modes):
        points = []  # (x, height, p50 height, speedup)
        for j, k in enumerate(ks):
            s = by.get((k, mode))
            value = None if s is None else (s.ttft_mean_s if ttft else s.hit_ratio)
            if s is None or value is None:
                continue
            x = j + (i - (len(modes) - 1) / 2) * width
            p50 = s.ttft_p50_s * 1000 if ttft and s.ttft_p50_s is not None else None
            points.append((x, value * (1000 if ttft else 1), p50, s.speedup_mean if ttft else None))
        ax.bar([p[0] for p in points], [p[1] for p in points], width * 0.95, label=mode)
        for x, height, p50, speedup in points:
            if p50 is not None:
                ax.plot([x - width * 0.4, x + width * 0.4], [p50, p50], color="black", linewidth=1)
            if speedup and mode != "baseline":
                ax.annotate(f"{speedup:.2f}x", (x, height), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(ks)))
    ax.set_xticklabels([f"k={k}" for k in ks])
    ax.set_ylabel("mean TTFT (ms); tick = p50" if ttft else "prefix-cache hit ratio (model)")
    ax.set_title("\n".join(textwrap.wrap(title, 70)), fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def write_results(folder: Path, records: Sequence[RequestRecord], summaries: Sequence[Summary],
                  meta: Mapping[str, Any], table: str) -> dict[str, Path]:
    """``results.json`` (meta, summary, every request), ``table.md``, ``ttft.png``."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {"json": folder / "results.json", "table": folder / "table.md"}
    payload = {"meta": dict(meta), "summary": [asdict(s) for s in summaries],
               "requests": [asdict(r) for r in records]}
    out["json"].write_text(json.dumps(payload, indent=1, default=str) + "\n", encoding="utf-8")
    out["table"].write_text(table + "\n\nPaper (Mem0 + LoCoMo, Qwen3-4B, SGLang, H100):\n\n" + paper_table()
                            + "\n", encoding="utf-8")
    eng = meta.get("engine", {})
    png = plot(summaries, folder / ("ttft.png" if eng.get("measures_ttft", True) else "hit_ratio.png"),
               f"LoCoMo {meta.get('conversations_label', '')} — {eng.get('kind', '?')} / {eng.get('model', '?')}",
               ttft=bool(eng.get("measures_ttft", True)))
    if png is not None:
        out["plot"] = png
    return out


def load_records(path: str | Path) -> tuple[list[RequestRecord], dict[str, Any]]:
    """Records and meta of an earlier run's ``results.json`` (a folder or the file)."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    data = json.loads(p.read_text(encoding="utf-8"))
    fields = set(RequestRecord.__dataclass_fields__)
    records = [RequestRecord(**{k: v for k, v in r.items() if k in fields}) for r in data["requests"]]
    return records, data["meta"]
