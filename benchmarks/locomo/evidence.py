"""Evidence recall: does a prompt still carry the memories that answer the question?

LoCoMo lists, for every question, the dialogue turns that answer it (``evidence``: ``D1:3``, ...), and
every observation names the turn(s) it was derived from. A memory *covers* an evidence id when it was
derived from that turn. For one prompt:

* ``evidence``     — the question's evidence ids (normalized: :func:`benchmarks.common.locomo.evidence_ids`);
* ``coverable``    — those that at least one of the user's memories covers (the rest cannot be in any
                     prompt: they are reported as the uncoverable share and left out of the denominator);
* ``hit``          — coverable ids covered by a memory the prompt carries (blocks shown, plus memories
                     that a dedup location annotation points back to);
* ``positions``    — for each hit, the 1-based position in the prompt of the first memory covering it;
* ``ranks``        — for each coverable id covered by the mem0 retrieval, the 1-based mem0 rank of the
                     first retrieved memory covering it (the same in every mode).

Recall of a question = hit / coverable; a mode's recall is the mean over questions with coverable > 0.
Baseline and aligned show the same set of memories, so their recall is identical (a test checks it);
superset adds memories (recall can only rise), swap drops some (it can fall).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.common.ingest import user_memories
from benchmarks.common.locomo import evidence_ids

logger = logging.getLogger(__name__)

__all__ = ["EvidenceIndex", "EvidenceScore", "position_bucket"]


def position_bucket(position: int, n: int) -> int:
    """0-3: the quarter of a list of ``n`` that 1-based ``position`` falls into."""
    if n <= 0 or not 1 <= position <= n:
        raise ValueError(f"position {position} outside 1..{n}")
    return min(3, (position - 1) * 4 // n)


@dataclass(frozen=True)
class EvidenceScore:
    """Evidence of one question against one prompt (see the module docstring)."""

    evidence: int
    coverable: int
    hit: int
    positions: tuple[int, ...]
    ranks: tuple[int, ...]

    @property
    def recall(self) -> float | None:
        return self.hit / self.coverable if self.coverable else None


@dataclass(frozen=True)
class EvidenceIndex:
    """Which dialogue ids each memory of one user covers."""

    by_memory: Mapping[str, tuple[str, ...]]

    @property
    def coverable(self) -> frozenset[str]:
        return frozenset(e for ids in self.by_memory.values() for e in ids)

    @classmethod
    def from_memories(cls, results: Sequence[Mapping[str, Any]]) -> EvidenceIndex:
        """From mem0 result dicts (``id`` and ``metadata.evidence``, as ingested by this benchmark)."""
        by: dict[str, tuple[str, ...]] = {}
        for r in results:
            meta = r.get("metadata") or {}
            raw = meta.get("evidence", "")
            by[str(r["id"])] = evidence_ids(*(raw if isinstance(raw, (list, tuple)) else [str(raw)]))
        return cls(by)

    @classmethod
    def of_user(cls, memory: Any, user_id: str) -> EvidenceIndex:
        """Every memory of ``user_id`` in a mem0 store."""
        results = user_memories(memory, user_id)
        index = cls.from_memories(results)
        if results and not index.coverable:
            logger.warning("no memory of %s carries LoCoMo evidence metadata: evidence recall is n/a", user_id)
        return index

    def score(
        self, question_evidence: Sequence[str], prompt_ids: Sequence[str], retrieval_ids: Sequence[str]
    ) -> EvidenceScore:
        """Score one prompt: ``prompt_ids`` in prompt order, ``retrieval_ids`` in mem0's rank order."""
        wanted = evidence_ids(*question_evidence)
        coverable = [e for e in wanted if e in self.coverable]
        first_pos = _first_cover(self.by_memory, prompt_ids)
        first_rank = _first_cover(self.by_memory, retrieval_ids)
        hits = [e for e in coverable if e in first_pos]
        return EvidenceScore(
            len(wanted),
            len(coverable),
            len(hits),
            tuple(first_pos[e] for e in hits),
            tuple(first_rank[e] for e in coverable if e in first_rank),
        )


def _first_cover(by_memory: Mapping[str, tuple[str, ...]], ids: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for pos, mid in enumerate(ids, start=1):
        for e in by_memory.get(mid, ()):
            out.setdefault(e, pos)
    return out
