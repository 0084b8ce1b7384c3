"""Answer quality and latency statistics for the LoCoMo benchmark.

* :func:`normalize_answer` / :func:`token_f1` — SQuAD-style: lower-case, drop punctuation and the
  articles a/an/the, split on whitespace, F1 over the token multisets.
* :func:`locomo_f1` — LoCoMo's per-category rule on top of it: multi-hop answers (category 1) are
  comma-separated lists scored item by item (each gold item takes its best-matching predicted item,
  then the mean); open-domain answers (category 3) keep the part before the first ``;``.
* :func:`clean_answer` — what is scored: the generated text without a ``<think>`` block, first
  non-empty line, stripped.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Sequence

__all__ = ["QUALITY_CATEGORIES", "clean_answer", "locomo_f1", "mean", "normalize_answer", "percentile", "token_f1"]

#: LoCoMo QA categories scored: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop. Category 5
#: (adversarial, unanswerable) is left out, as in the Mem0 and LoCoMo papers' QA tables.
QUALITY_CATEGORIES: frozenset[int] = frozenset({1, 2, 3, 4})

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation + "‘’“”")
_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)


def normalize_answer(text: str) -> str:
    """SQuAD normalization: lower case, no punctuation, no articles, single spaces."""
    text = text.lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token F1 of two strings (1.0 when both normalize to nothing, 0.0 when only one does)."""
    pred = normalize_answer(prediction).split()
    ref = normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    common = Counter(pred) & Counter(ref)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred)
    recall = same / len(ref)
    return 2 * precision * recall / (precision + recall)


def locomo_f1(prediction: str, gold: str, category: int) -> float:
    """Token F1 with LoCoMo's category rules (see the module docstring)."""
    if category == 3:
        gold = gold.split(";")[0]
    if category == 1:
        golds = [g for g in (p.strip() for p in gold.split(",")) if g]
        preds = [p for p in (q.strip() for q in prediction.split(",")) if p] or [prediction]
        if not golds:
            return token_f1(prediction, gold)
        return sum(max(token_f1(p, g) for p in preds) for g in golds) / len(golds)
    return token_f1(prediction, gold)


def clean_answer(text: str) -> str:
    """The part of a generation that is scored: no ``<think>`` block, first non-empty line."""
    text = _THINK.sub("", text)
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def mean(values: Sequence[float]) -> float | None:
    """Arithmetic mean, ``None`` for no values."""
    return sum(values) / len(values) if values else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolation percentile (``q`` in [0, 100]) like numpy's default; ``None`` for no values."""
    if not values:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)
