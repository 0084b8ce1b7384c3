"""Per-(k, mode) statistics of a LoCoMo run: TTFT and paired speedups, hit ratio, prefilled tokens and
prompt length against the baseline, evidence recall and where the evidence sits."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from benchmarks.common.metrics import mean, percentile
from benchmarks.common.modes import mode_sort_key

from .evidence import position_bucket
from .runner import RequestRecord

__all__ = ["Summary", "summarize"]


@dataclass(frozen=True)
class Summary:
    """One (k, mode) row."""

    k: str
    mode: str
    requests: int  # all recorded requests
    measured: int  # in the TTFT / hit statistics: not a first turn, answered in every mode of this k
    errors: int
    ttft_mean_s: float | None
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    speedup_mean: float | None  # baseline mean TTFT / this mode's (same k)
    speedup_p50: float | None
    speedup_paired: float | None  # median over questions of baseline TTFT / this mode's TTFT (same question)
    hit_ratio: float | None  # engine-reported cached / prompt tokens, measured requests
    prompt_tokens_mean: float | None
    f1: float | None  # questions answered in every mode of this k (first turns included)
    judge: float | None
    extra_mean: float
    duplicates_mean: float
    build_ms_p50: float | None
    server_prefill_ms_mean: float | None = None  # engine-reported prefill (llama.cpp), measured requests
    prefill_tokens_mean: float | None = None  # prompt - cached tokens, measured requests
    prefill_vs_baseline: float | None = None  # Σ prefilled tokens / baseline's (same k, same questions)
    length_vs_baseline: float | None = None  # Σ prompt tokens / baseline's
    dropped_mean: float = 0.0  # swap: retrieved memories left out per request
    evidence_recall: float | None = None  # mean over questions of hit / coverable evidence ids
    evidence_recall_micro: float | None = None  # Σ hit / Σ coverable
    evidence_uncoverable: float | None = None  # share of evidence ids no memory of the user carries
    evidence_quarters: tuple[float, ...] = ()  # share of evidence hits in each quarter of the prompt
    evidence_rank_quarters: tuple[float, ...] = ()  # retrieved evidence by quarter of mem0's top-k ranking


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def summarize(records: Sequence[RequestRecord]) -> list[Summary]:
    """Rows in first-seen k order, then mode order as given in the records' settings."""
    keys = _keys(records)
    # fairness: a question counts only where every mode of that k answered it (an engine error in one
    # mode, e.g. a context overflow, drops that question from all modes' statistics)
    measured = _in_every_mode(records, keys, lambda r: r.measured)
    answered = _in_every_mode(records, keys, lambda r: r.error is None)
    rows = [
        _row(k, mode, [r for r in records if r.k == k and r.mode == mode], measured[k], answered[k]) for k, mode in keys
    ]
    return _against_baseline(rows, records, measured)


_Questions = set[tuple[str, int]]  # (sample id, turn)


def _keys(records: Sequence[RequestRecord]) -> list[tuple[str, str]]:
    k_order = list(dict.fromkeys(r.k for r in records))
    keys = dict.fromkeys((r.k, r.mode) for r in records)
    return sorted(keys, key=lambda km: (k_order.index(km[0]), mode_sort_key(km[1])))


def _in_every_mode(
    records: Sequence[RequestRecord], keys: Sequence[tuple[str, str]], ok: Callable[[RequestRecord], bool]
) -> dict[str, _Questions]:
    """Per k, the questions that every mode of that k has an ``ok`` record of."""
    out: dict[str, _Questions] = {}
    for k in dict.fromkeys(k for k, _ in keys):
        out[k] = set.intersection(
            *[
                {(r.sample_id, r.turn) for r in records if r.k == k and r.mode == m and ok(r)}
                for kk, m in keys
                if kk == k
            ]
        )
    return out


def _row(k: str, mode: str, rs: Sequence[RequestRecord], measured: _Questions, answered: _Questions) -> Summary:
    """One (k, mode) row from its records, before the comparison with the baseline."""
    meas = [r for r in rs if r.measured and (r.sample_id, r.turn) in measured]
    ttft = [r.ttft_s for r in meas if r.ttft_s is not None]
    toks = [(r.cached_tokens, r.prompt_tokens) for r in meas if r.cached_tokens is not None and r.prompt_tokens]
    common = [r for r in rs if (r.sample_id, r.turn) in answered]
    prompt_tokens = [float(p) for _, p in toks] or [float(r.prompt_tokens) for r in meas if r.prompt_tokens is not None]
    return Summary(
        k=k,
        mode=mode,
        requests=len(rs),
        measured=len(meas),
        errors=sum(r.error is not None for r in rs),
        ttft_mean_s=mean(ttft),
        ttft_p50_s=percentile(ttft, 50),
        ttft_p90_s=percentile(ttft, 90),
        speedup_mean=None,
        speedup_p50=None,
        speedup_paired=None,
        hit_ratio=sum(c for c, _ in toks) / sum(p for _, p in toks) if toks else None,
        prompt_tokens_mean=mean(prompt_tokens),
        f1=mean([r.f1 for r in common if r.f1 is not None]),
        judge=mean([r.judge for r in common if r.judge is not None]),
        extra_mean=mean([float(r.extra) for r in rs]) or 0.0,
        duplicates_mean=mean([float(r.duplicates) for r in rs]) or 0.0,
        build_ms_p50=percentile([r.build_ms for r in rs], 50),
        server_prefill_ms_mean=mean([r.server_prompt_ms for r in meas if r.server_prompt_ms is not None]),
        prefill_tokens_mean=mean([float(p - c) for c, p in toks]),
        dropped_mean=mean([float(r.dropped) for r in rs]) or 0.0,
        **_evidence(common),
    )


def _against_baseline(
    rows: Sequence[Summary], records: Sequence[RequestRecord], measured: Mapping[str, _Questions]
) -> list[Summary]:
    """Speedups (of means, of p50s, paired per question) and prefill / prompt length relative to the
    baseline of the same k, over the questions measured in every mode."""
    base = {s.k: (s.ttft_mean_s, s.ttft_p50_s) for s in rows if s.mode == "baseline"}
    tokens = {(r.k, r.mode): (0, 0) for r in records}  # (Σ prompt, Σ prefilled)
    for r in records:
        if r.measured and (r.sample_id, r.turn) in measured[r.k] and r.prompt_tokens and r.cached_tokens is not None:
            p, c = tokens[(r.k, r.mode)]
            tokens[(r.k, r.mode)] = (p + r.prompt_tokens, c + r.prompt_tokens - r.cached_tokens)
    base_ttft = {
        (r.k, r.sample_id, r.turn): r.ttft_s for r in records if r.mode == "baseline" and r.measured and r.ttft_s
    }
    out = []
    for s in rows:
        b_mean, b_p50 = base.get(s.k, (None, None))
        ratios = [
            base_ttft[(r.k, r.sample_id, r.turn)] / r.ttft_s
            for r in records
            if r.k == s.k
            and r.mode == s.mode
            and r.ttft_s
            and (r.k, r.sample_id, r.turn) in base_ttft
            and (r.sample_id, r.turn) in measured[s.k]
        ]
        (p_mode, f_mode), (p_base, f_base) = tokens[(s.k, s.mode)], tokens.get((s.k, "baseline"), (0, 0))
        out.append(
            replace(
                s,
                speedup_mean=_ratio(b_mean, s.ttft_mean_s),
                speedup_p50=_ratio(b_p50, s.ttft_p50_s),
                speedup_paired=percentile(ratios, 50),
                prefill_vs_baseline=_ratio(float(f_mode), float(f_base)) if p_mode else None,
                length_vs_baseline=_ratio(float(p_mode), float(p_base)) if p_mode else None,
            )
        )
    return out


def _evidence(rs: Sequence[RequestRecord]) -> dict[str, Any]:
    """Evidence-recall fields of a Summary over ``rs`` (see benchmarks.locomo.evidence)."""
    scored = [r for r in rs if r.evidence_coverable]
    total = sum(r.evidence for r in rs)
    hits = [p for r in scored for p in _quarters(r.evidence_positions, r.blocks + r.duplicates)]
    ranks = [q for r in scored for q in _quarters(r.evidence_ranks, r.retrieved)]
    return {
        "evidence_recall": mean([r.evidence_hit / r.evidence_coverable for r in scored]),
        "evidence_recall_micro": _ratio(
            float(sum(r.evidence_hit for r in scored)), float(sum(r.evidence_coverable for r in scored))
        ),
        "evidence_uncoverable": (1 - sum(r.evidence_coverable for r in rs) / total) if total else None,
        "evidence_quarters": tuple(hits.count(i) / len(hits) for i in range(4)) if hits else (),
        "evidence_rank_quarters": tuple(ranks.count(i) / len(ranks) for i in range(4)) if ranks else (),
    }


def _quarters(positions: Sequence[int], n: int) -> list[int]:
    return [position_bucket(min(p, n), n) for p in positions] if n > 0 else []
