"""Scores and paired statistics: exact match beside LoCoMo's token F1 (:mod:`benchmarks.common.metrics`), and a
paired bootstrap confidence interval of an arm's mean difference from its pair (numpy, fixed seed)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.common.metrics import normalize_answer

__all__ = ["BOOTSTRAP", "SEED", "Diff", "by_category", "exact_match", "mean_points", "paired_diff"]

#: bootstrap resamples and the generator's seed (every committed CI is reproducible from the cache)
BOOTSTRAP = 2000
SEED = 20261201


def exact_match(prediction: str, gold: str, category: int) -> float:
    """1.0 when the normalized answer equals the normalized gold (category 3: the gold before ``;``)."""
    if category == 3:
        gold = gold.split(";")[0]
    return float(normalize_answer(prediction) == normalize_answer(gold))


@dataclass(frozen=True)
class Diff:
    """Mean of ``arm - pair`` over the paired questions with its 95 % bootstrap interval (in points: x100)."""

    n: int
    mean: float
    lo: float
    hi: float

    @property
    def significant(self) -> bool:
        """The interval excludes zero."""
        return self.lo > 0 or self.hi < 0

    def as_dict(self) -> dict[str, float | int | bool]:
        return {"n": self.n, "mean": self.mean, "lo": self.lo, "hi": self.hi, "significant": self.significant}


def paired_diff(
    arm: Mapping[Any, float], pair: Mapping[Any, float], *, resamples: int = BOOTSTRAP, seed: int = SEED
) -> Diff | None:
    """Paired difference over the keys both have (None when none): the mean and the 2.5 / 97.5 percentiles of
    ``resamples`` bootstrap means (questions resampled with replacement)."""
    keys = sorted(set(arm) & set(pair), key=repr)
    if not keys:
        return None
    d = np.array([arm[k] - pair[k] for k in keys], dtype=float) * 100
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(resamples, len(d)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return Diff(len(d), round(float(d.mean()), 2), round(float(lo), 2), round(float(hi), 2))


def mean_points(values: Iterable[float]) -> float | None:
    xs = list(values)
    return round(100 * sum(xs) / len(xs), 2) if xs else None


def by_category(rows: Sequence[tuple[int, float, float]]) -> dict[str, dict[str, float | int | None]]:
    """``(category, f1, em)`` rows -> per category 1-4: n, F1 and EM in points."""
    out: dict[str, dict[str, float | int | None]] = {}
    for cat in (1, 2, 3, 4):
        sel = [r for r in rows if r[0] == cat]
        out[str(cat)] = {"n": len(sel), "f1": mean_points(r[1] for r in sel), "em": mean_points(r[2] for r in sel)}
    return out
