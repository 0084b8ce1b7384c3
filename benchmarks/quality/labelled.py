"""The ``labelled`` arm's context: what a proxy would send if it aligned *labelled* blocks (``<document
index="2">``, ``[2]`` passages) by moving each block together with its label.

The caller numbered its blocks by rank (mem0's order: ``[Doc 1]`` is the best match). Alignment puts them in
the index's order, and each block keeps the number the caller gave it, so the prompt may read ``[Doc 3] ...``,
``[Doc 1] ...``, ``[Doc 7] ...``; the order annotation names the labels in rank order (``[Doc 1] > [Doc 2] >
... > the rest``, the library's top five) whenever the prompt does not already start with them in that order.
The same block texts as the ``default`` arm, in the same order; only the labels (and so the annotation) differ.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from cp_memory.core.annotations import DEFAULT_ANNOTATE_TOP, doc_label, owed_order_annotation
from cp_memory.core.prompt import rendered_context

__all__ = ["rank_labelled_context"]


def rank_labelled_context(
    order: Sequence[str], ranking: Sequence[str], texts: Mapping[str, str], *, top: int | None = DEFAULT_ANNOTATE_TOP
) -> str:
    """The blocks of ``order`` (the prompt's order) labelled ``[Doc r]`` with ``r`` their 1-based place in
    ``ranking`` (mem0's), then a blank line and the owed order annotation. ``order`` must be a permutation of
    ``ranking`` (exact alignment: nothing added or dropped); anything else is a ValueError naming the blocks."""
    if sorted(order) != sorted(ranking) or len(set(order)) != len(order):
        extra = sorted(set(order) - set(ranking))
        missing = sorted(set(ranking) - set(order))
        raise ValueError(f"labelled blocks must be a permutation of mem0's ranking: extra {extra}, missing {missing}")
    rank = {m: i for i, m in enumerate(ranking, start=1)}
    shown = rendered_context([texts[m] for m in order])  # one line per text, control tokens inert
    labels: dict[Hashable, str] = {m: doc_label(rank[m]) for m in order}
    lines = [f"{labels[m]} {block.text}" for m, block in zip(order, shown.blocks)]
    note = owed_order_annotation(list(order), list(ranking), labels, top=top)
    section = "\n".join(lines)
    return f"{section}\n\n{note}" if note else section
