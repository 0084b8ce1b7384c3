"""The per-question answer cache that makes a run resumable: one JSON line per answered request, keyed by
(model, part, k, arm, conversation, question). A later run over the same cache sends only what is missing
(contexts are rebuilt in order, so an aligned arm's index and a chat's dedup log reach the same state), and
the report is computed from the cache alone (``--report-only``), so a run stopped at any point still has a
table of what it reached."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["AnswerCache", "Answer", "prompt_sha"]


def prompt_sha(messages: Sequence[Mapping[str, Any]]) -> str:
    """A short hash of the exact chat request (roles and contents)."""
    text = json.dumps([[m["role"], m["content"]] for m in messages], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Answer:
    """One answered request: what was asked, what came back, how it scored."""

    model: str
    part: str  # "arms" or "position"
    k: int
    arm: str  # an arm name, or for the position test "<first|middle|last>[+ann]"
    sample_id: str
    q_index: int  # index of the question in the conversation's QA list
    category: int
    answer: str  # the scored answer (no LoCoMo text is stored: questions and gold answers stay in the data)
    f1: float
    em: float
    prompt_sha: str
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    evidence_hit: int = 0  # evidence ids covered by a memory in the prompt (or pointed back to)
    evidence_coverable: int = 0

    @property
    def key(self) -> tuple[str, str, int, str, str, int]:
        return (self.model, self.part, self.k, self.arm, self.sample_id, self.q_index)


class AnswerCache:
    """Answers in a JSONL file, appended as they come (a killed run loses at most the request in flight)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._rows: dict[tuple[str, str, int, str, str, int], Answer] = {}
        self._by_sha: dict[tuple[str, str], Answer] = {}  # (model, prompt_sha) -> an answer to that request
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        bad = 0
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                row = Answer(**json.loads(line))
            except (ValueError, TypeError):
                bad += 1  # a line cut short by a kill
                continue
            self._keep(row)
        if bad:
            logger.warning("%s: %d unreadable line(s) skipped", self.path, bad)
        logger.info("%s: %d cached answers", self.path, len(self._rows))

    def get(self, key: tuple[str, str, int, str, str, int], sha: str) -> Answer | None:
        """The cached answer of ``key`` if it was asked with the same request (``sha``)."""
        row = self._rows.get(key)
        if row is not None and row.prompt_sha != sha:
            logger.warning("cached answer for %s was asked with another prompt: asking again", key)
            return None
        return row

    def by_sha(self, model: str, sha: str) -> Answer | None:
        """A cached answer of ``model`` to the identical request, under any key (one dict look-up)."""
        return self._by_sha.get((model, sha))

    def _keep(self, row: Answer) -> None:
        self._rows[row.key] = row
        self._by_sha.setdefault((row.model, row.prompt_sha), row)

    def add(self, row: Answer) -> None:
        self._keep(row)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(row), ensure_ascii=False) + "\n")

    def rows(self, model: str | None = None) -> Iterator[Answer]:
        return (r for r in self._rows.values() if model is None or r.model == model)

    def __len__(self) -> int:
        return len(self._rows)
