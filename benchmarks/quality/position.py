"""The controlled position test: does a model answer worse when its one evidence memory moves from first to
the middle or the end of k memories, and does the order annotation win it back?

For a question with exactly one evidence memory (one dialogue id, covered by exactly one memory of the user),
the prompt holds that memory and the k-1 best other memories mem0 retrieved for the question, in mem0's order;
only the evidence memory moves: first, middle (position k//2 + 1) or last. The ranking the annotation restores
puts the evidence first (as a perfect retriever would), then the others in mem0's order; the annotation is the
library's default one (:func:`~cp_memory.core.annotations.owed_order_annotation`, top five, then "the rest").
With the evidence first the prompt's order already says the ranking and no annotation is owed, so the
variants are ``first``, ``middle``, ``middle+ann``, ``last``, ``last+ann``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from benchmarks.common.locomo import QA
from benchmarks.locomo.evidence import EvidenceIndex
from cp_memory.core.annotations import DEFAULT_ANNOTATE_TOP, doc_label, owed_order_annotation
from cp_memory.core.render import render_context

__all__ = ["POSITIONS", "VARIANTS", "position_prompts", "single_evidence"]

POSITIONS = ("first", "middle", "last")
VARIANTS = ("first", "middle", "middle+ann", "last", "last+ann")


def single_evidence(qa: QA, evidence: EvidenceIndex) -> str | None:
    """The one memory holding the question's one evidence id, or None when there is not exactly one."""
    ids = qa.evidence_ids
    if len(ids) != 1:
        return None
    holders = [mid for mid, covered in evidence.by_memory.items() if ids[0] in covered]
    return holders[0] if len(holders) == 1 else None


def _slot(position: str, k: int) -> int:
    return {"first": 0, "middle": k // 2, "last": k - 1}[position]


def position_prompts(
    qa: QA, evidence: EvidenceIndex, ranked: Sequence[str], texts: Mapping[str, str], k: int
) -> list[tuple[str, str]]:
    """``(variant, context)`` for each of :data:`VARIANTS` (empty when the question does not qualify)."""
    target = single_evidence(qa, evidence)
    if target is None or target not in texts:
        return []
    others = [m for m in ranked if m != target and m in texts][: k - 1]
    ranking = [target, *others]
    n = len(ranking)
    out = []
    for variant in VARIANTS:
        where, annotated = variant.removesuffix("+ann"), variant.endswith("+ann")
        order = list(others)
        order.insert(_slot(where, n), target)
        labels: dict[Hashable, str] = {m: doc_label(i) for i, m in enumerate(order, start=1)}
        note = owed_order_annotation(order, ranking, labels, top=DEFAULT_ANNOTATE_TOP) if annotated else ""
        out.append((variant, render_context([texts[m] for m in order], order_annotation=note or None)))
    return out
