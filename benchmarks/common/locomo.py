"""LoCoMo loader (Maharana et al. 2024; CC BY-NC 4.0) for tests and benchmarks.

The file is not shipped with cp_memory. Pass its path, set ``CP_MEMORY_LOCOMO``, or keep it at
``../shared/data/locomo10.json`` next to a checkout. Get it from https://github.com/snap-research/locomo
(``data/locomo10.json``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["QA", "Conversation", "LocomoNotFound", "Observation", "Turn", "evidence_ids", "find_locomo", "load_locomo"]

_DEFAULT_CANDIDATES = ("../shared/data/locomo10.json", "shared/data/locomo10.json")


class LocomoNotFound(FileNotFoundError):
    """The LoCoMo file is missing; the message says where to put it."""


_DIALOGUE_ID = re.compile(r"D:?(\d+):(\d+)")


def evidence_ids(*raw: str) -> tuple[str, ...]:
    """Dialogue ids (``D<session>:<turn>``) in LoCoMo evidence strings, normalized, in order, once each.

    LoCoMo mostly lists one id per string, but a few strings hold several (``"D8:6; D9:17"``,
    ``"D9:1 D4:4 D4:6"``), one is mistyped (``"D:11:26"``) and one is a bare ``"D"`` (no id).
    """
    out: dict[str, None] = {}
    for item in raw:
        if not isinstance(item, str):
            raise TypeError(f"evidence must be strings, got {type(item).__name__}")
        for m in _DIALOGUE_ID.finditer(item):
            out[f"D{int(m.group(1))}:{int(m.group(2))}"] = None
    return tuple(out)


@dataclass(frozen=True)
class Observation:
    """A fact-style memory LoCoMo extracted from one session (what a memory layer would store)."""

    id: str  # stable: "<sample_id>:obs:<session>:<n>"
    text: str
    speaker: str
    session: int
    evidence: str  # dialogue id, e.g. "D1:3"

    @property
    def evidence_ids(self) -> tuple[str, ...]:
        """The dialogue ids this fact was derived from, normalized (see :func:`evidence_ids`)."""
        return evidence_ids(self.evidence)


@dataclass(frozen=True)
class Turn:
    id: str  # dialogue id, e.g. "D1:3"
    speaker: str
    text: str
    session: int
    date_time: str


@dataclass(frozen=True)
class QA:
    question: str
    answer: str  # adversarial (category 5) questions carry their adversarial answer here
    category: int
    evidence: tuple[str, ...]

    @property
    def evidence_ids(self) -> tuple[str, ...]:
        """The dialogue ids that answer the question, normalized (see :func:`evidence_ids`)."""
        return evidence_ids(*self.evidence)


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    observations: tuple[Observation, ...]
    turns: tuple[Turn, ...]
    qa: tuple[QA, ...]


def find_locomo(path: str | os.PathLike[str] | None = None) -> Path:
    """Resolve the LoCoMo file: ``path``, else ``$CP_MEMORY_LOCOMO``, else ``../shared/data/locomo10.json``
    (relative to the working directory or to this checkout)."""
    tried = []
    candidates: list[Path] = []
    if path is not None:
        candidates.append(Path(path))
    elif os.environ.get("CP_MEMORY_LOCOMO"):
        candidates.append(Path(os.environ["CP_MEMORY_LOCOMO"]))
    else:
        repo = Path(__file__).resolve().parent.parent
        for rel in _DEFAULT_CANDIDATES:
            candidates += [Path.cwd() / rel, repo / rel]
    for c in candidates:
        tried.append(str(c))
        if c.is_file():
            return c
    raise LocomoNotFound(
        "LoCoMo data not found (tried: " + ", ".join(tried) + "). Download locomo10.json from "
        "https://github.com/snap-research/locomo (data/locomo10.json, CC BY-NC 4.0) and pass its path "
        "(--locomo PATH) or set CP_MEMORY_LOCOMO=/path/to/locomo10.json."
    )


def _session_no(key: str) -> int:
    m = re.search(r"session_(\d+)", key)
    return int(m.group(1)) if m else 0


def load_locomo(path: str | os.PathLike[str] | None = None) -> list[Conversation]:
    """Load all conversations of LoCoMo as frozen dataclasses."""
    file = find_locomo(path)
    with open(file, encoding="utf-8") as fh:
        raw = json.load(fh)
    if not isinstance(raw, list):
        raise ValueError(f"{file}: expected a list of conversations")
    out = []
    for conv in raw:
        sid = conv["sample_id"]
        talk = conv["conversation"]
        speakers = (talk.get("speaker_a", ""), talk.get("speaker_b", ""))
        obs = []
        for skey in sorted(conv.get("observation", {}), key=_session_no):
            sess = _session_no(skey)
            n = 0
            for speaker, facts in conv["observation"][skey].items():
                for fact in facts:
                    text, evidence = (fact[0], fact[1]) if isinstance(fact, list) else (str(fact), "")
                    n += 1
                    obs.append(
                        Observation(
                            f"{sid}:obs:{sess}:{n}",
                            text,
                            speaker,
                            sess,
                            evidence if isinstance(evidence, str) else ",".join(evidence),
                        )
                    )
        turns = []
        for key in sorted((k for k in talk if re.fullmatch(r"session_\d+", k)), key=_session_no):
            sess = _session_no(key)
            when = talk.get(f"{key}_date_time", "")
            for t in talk[key]:
                turns.append(Turn(t.get("dia_id", ""), t.get("speaker", ""), t.get("text", ""), sess, when))
        qa = tuple(
            QA(
                q["question"],
                str(q.get("answer", q.get("adversarial_answer", ""))),
                int(q["category"]),
                tuple(q.get("evidence", ())),
            )
            for q in conv["qa"]
        )
        out.append(Conversation(sid, speakers, tuple(obs), tuple(turns), qa))
    return out
