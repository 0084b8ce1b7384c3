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

from .evidence import position_bucket
from .metrics import mean, percentile
from .modes import mode_sort_key
from .runner import RequestRecord

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
    prefill_tokens_mean: float | None = None      # prompt - cached tokens, measured requests
    prefill_vs_baseline: float | None = None      # Σ prefilled tokens / baseline's (same k, same questions)
    length_vs_baseline: float | None = None       # Σ prompt tokens / baseline's
    dropped_mean: float = 0.0                     # swap: retrieved memories left out per request
    evidence_recall: float | None = None          # mean over questions of hit / coverable evidence ids
    evidence_recall_micro: float | None = None    # Σ hit / Σ coverable
    evidence_uncoverable: float | None = None     # share of evidence ids no memory of the user carries
    evidence_quarters: tuple[float, ...] = ()     # share of evidence hits in each quarter of the prompt
    evidence_rank_quarters: tuple[float, ...] = ()  # retrieved evidence by quarter of mem0's top-k ranking


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def summarize(records: Sequence[RequestRecord]) -> list[Summary]:
    """Rows in first-seen k order, then mode order as given in the records' settings."""
    keys: list[tuple[str, str]] = []
    for r in records:
        if (r.k, r.mode) not in keys:
            keys.append((r.k, r.mode))
    k_order = list(dict.fromkeys(r.k for r in records))
    keys.sort(key=lambda km: (k_order.index(km[0]), mode_sort_key(km[1])))
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
            server_prefill_ms_mean=mean([r.server_prompt_ms for r in meas if r.server_prompt_ms is not None]),
            prefill_tokens_mean=mean([float(p - c) for c, p in toks]),
            dropped_mean=mean([float(r.dropped) for r in rs]) or 0.0,
            **_evidence(answered)))
    base = {s.k: (s.ttft_mean_s, s.ttft_p50_s) for s in rows if s.mode == "baseline"}
    tokens = {(r.k, r.mode): (0, 0) for r in records}
    for r in records:
        if (r.measured and (r.sample_id, r.turn) in measured_in_all[r.k] and r.prompt_tokens
                and r.cached_tokens is not None):
            p, c = tokens[(r.k, r.mode)]
            tokens[(r.k, r.mode)] = (p + r.prompt_tokens, c + r.prompt_tokens - r.cached_tokens)
    base_ttft = {(r.k, r.sample_id, r.turn): r.ttft_s for r in records
                 if r.mode == "baseline" and r.measured and r.ttft_s}
    out = []
    for s in rows:
        b_mean, b_p50 = base.get(s.k, (None, None))
        ratios = [base_ttft[(r.k, r.sample_id, r.turn)] / r.ttft_s for r in records
                  if r.k == s.k and r.mode == s.mode and r.ttft_s and (r.k, r.sample_id, r.turn) in base_ttft
                  and (r.sample_id, r.turn) in measured_in_all[s.k]]
        (p_mode, f_mode), (p_base, f_base) = tokens[(s.k, s.mode)], tokens.get((s.k, "baseline"), (0, 0))
        out.append(replace(s, speedup_mean=_ratio(b_mean, s.ttft_mean_s), speedup_p50=_ratio(b_p50, s.ttft_p50_s),
                           speedup_paired=percentile(ratios, 50),
                           prefill_vs_baseline=_ratio(float(f_mode), float(f_base)) if p_mode else None,
                           length_vs_baseline=_ratio(float(p_mode), float(p_base)) if p_mode else None))
    return out


def _evidence(rs: Sequence[RequestRecord]) -> dict[str, Any]:
    """Evidence-recall fields of a Summary over ``rs`` (see benchmarks.locomo.evidence)."""
    scored = [r for r in rs if r.evidence_coverable]
    total = sum(r.evidence for r in rs)
    hits = [p for r in scored for p in _quarters(r.evidence_positions, r.blocks + r.duplicates)]
    ranks = [q for r in scored for q in _quarters(r.evidence_ranks, r.retrieved)]
    return {
        "evidence_recall": mean([r.evidence_hit / r.evidence_coverable for r in scored]),
        "evidence_recall_micro": _ratio(float(sum(r.evidence_hit for r in scored)),
                                        float(sum(r.evidence_coverable for r in scored))),
        "evidence_uncoverable": (1 - sum(r.evidence_coverable for r in rs) / total) if total else None,
        "evidence_quarters": tuple(hits.count(i) / len(hits) for i in range(4)) if hits else (),
        "evidence_rank_quarters": tuple(ranks.count(i) / len(ranks) for i in range(4)) if ranks else (),
    }


def _quarters(positions: Sequence[int], n: int) -> list[int]:
    return [position_bucket(min(p, n), n) for p in positions] if n > 0 else []


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
                   "engine hit ratio | prompt tokens | prefilled vs baseline | evidence recall | F1 | judge | "
                   "extra/req | build p50 (ms) | errors |"),
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in summaries:
        lines.append(
            f"| {s.k} | {s.mode} | {s.measured} | {_f(s.ttft_mean_s, '.4f')} | {_f(s.ttft_p50_s, '.4f')} | "
            f"{_f(s.speedup_mean, '.2f')}{'x' if s.speedup_mean else ''} | "
            f"{_f(s.speedup_paired, '.2f')}{'x' if s.speedup_paired else ''} | {_f(s.hit_ratio, '.3f')} | "
            f"{_f(s.prompt_tokens_mean, '.0f')} | {_f(s.prefill_vs_baseline, '.2f')}"
            f"{'x' if s.prefill_vs_baseline else ''} | {_f(s.evidence_recall, '.3f')} | {_f(s.f1, '.3f')} | "
            f"{_f(s.judge, '.3f', '-')} | {s.extra_mean:.2f} | {_f(s.build_ms_p50, '.1f')} | {s.errors} |")
    return "\n".join(lines + ["", evidence_table(summaries)])


def _quarters_text(shares: Sequence[float]) -> str:
    return " / ".join(f"{100 * x:.0f}" for x in shares) if shares else "n/a"


def evidence_table(summaries: Sequence[Summary]) -> str:
    """Evidence recall per (k, mode) with where the evidence sits, next to the prefill it costs."""
    unc = [s.evidence_uncoverable for s in summaries if s.evidence_uncoverable is not None]
    head = ("Evidence recall = mean over questions of (evidence ids covered by a memory in the prompt / "
            "evidence ids some memory of the user covers)"
            + (f"; {100 * max(unc):.1f}% of the questions' evidence ids are covered by no memory and left out"
               if unc else "") + ". Where the hits sit: % in each quarter of the prompt's blocks (1st/2nd/3rd/4th); "
            "where the retrieved evidence sits in mem0's ranking: % in each quarter of the top-k.")
    lines = [head, "", ("| k | mode | evidence recall | micro | hits by prompt quarter (%) | "
                        "evidence by mem0 rank quarter (%) | prefilled vs baseline | prompt length vs baseline | "
                        "extra/req | dropped/req |"), "|---|---|---:|---:|---|---|---:|---:|---:|---:|"]
    for s in summaries:
        lines.append(
            f"| {s.k} | {s.mode} | {_f(s.evidence_recall, '.3f')} | {_f(s.evidence_recall_micro, '.3f')} | "
            f"{_quarters_text(s.evidence_quarters)} | {_quarters_text(s.evidence_rank_quarters)} | "
            f"{_f(s.prefill_vs_baseline, '.2f')} | {_f(s.length_vs_baseline, '.2f')} | {s.extra_mean:.2f} | "
            f"{s.dropped_mean:.2f} |")
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
    fig, axes = plt.subplots(1, 2 if recall else 1, figsize=((3.2 if recall else 1.8) + 2.6 * len(ks), 3.8),
                             squeeze=False)
    if ttft:
        _bars(axes[0][0], summaries, lambda s: None if s.ttft_mean_s is None else s.ttft_mean_s * 1000,
              "mean TTFT (ms); tick = p50", ttft=True)
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


def pareto_plot(summaries: Sequence[Summary], path: Path, title: str) -> Path | None:
    """Prefilled tokens (vs baseline) against evidence recall, one panel per k, one point per mode."""
    pts = [s for s in summaries if s.prefill_vs_baseline is not None and s.evidence_recall is not None]
    ks = list(dict.fromkeys(s.k for s in pts))
    plt = _pyplot()
    if plt is None or not ks or len(pts) < 2:
        return None
    fig, axes = plt.subplots(1, len(ks), figsize=(0.6 + 4.2 * len(ks), 4.0), squeeze=False)
    for ax, k in zip(axes[0], ks):
        for s in (p for p in pts if p.k == k):
            assert s.prefill_vs_baseline is not None and s.evidence_recall is not None
            ax.scatter([s.prefill_vs_baseline], [s.evidence_recall], s=22)
            ax.annotate(s.mode.replace("aligned+", ""), (s.prefill_vs_baseline, s.evidence_recall),
                        fontsize=6, xytext=(3, 3), textcoords="offset points")
        ax.set_title(f"k={k}", fontsize=9)
        ax.set_xlabel("prefilled tokens vs baseline (lower is better)", fontsize=8)
        ax.set_ylabel("evidence recall of the prompt", fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle("\n".join(textwrap.wrap(title, 90)), fontsize=8)
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
    front = pareto_plot(summaries, folder / "pareto.png",
                        f"LoCoMo {meta.get('conversations_label', '')} — prefill vs evidence recall "
                        f"({eng.get('kind', '?')})")
    if front is not None:
        out["pareto"] = front
    return out


def write_summary_json(path: str | Path, summaries: Sequence[Summary], meta: Mapping[str, Any], *,
                       source: str | None = None) -> Path:
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
