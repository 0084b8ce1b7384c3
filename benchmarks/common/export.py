"""``--export-prompts FILE``: the exact prompt sequence of a LoCoMo run, for replay on another engine.

The file holds, per (conversation, k, mode) run in execution order (mode rotation included): the cache
flush that starts it, the warm-up requests, and every request's prompt text in order. Replaying it
(``python -m benchmarks.replay FILE --engine-url URL``) sends the same bytes in the same order under the
same fairness rules, on a machine that needs neither mem0 nor cp_memory.

Format (``"format": "cp_memory.locomo.prompts/1"``), compact JSON (gzip when FILE ends in ``.gz``)::

    {"format": ..., "meta": {max_tokens, warmup_prompt, chat, system, prompt_template, argv, ...},
     "lines": ["Memories:", "[Doc 1] [8 May 2023] Caroline ...", ...],          # every distinct line once
     "runs": [{"conversation": 0, "sample_id": "conv-26", "k": "20", "mode": "baseline", "position": 0,
               "flush": true, "warmup": 2,
               "requests": [{"turn": 1, "measured": false, "prompt": [0, 1, ...]}, ...]}]}

A prompt is ``"\\n".join(lines[i] for i in prompt)``. Chat runs store the new user message (``user``)
and ``new_chat`` where the history starts again; the replay keeps its own history (its engine's answers).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "PromptExport", "join_lines", "load_prompts"]

FORMAT = "cp_memory.locomo.prompts/1"


class PromptExport:
    """Collects the prompts of a run as the runner sends them; :meth:`write` saves the file."""

    def __init__(self, meta: Mapping[str, Any] | None = None) -> None:
        self.meta: dict[str, Any] = dict(meta or {})
        self.runs: list[dict[str, Any]] = []
        self._ids: dict[str, int] = {}
        self._lines: list[str] = []

    def _encode(self, text: str) -> list[int]:
        out = []
        for line in text.split("\n"):
            i = self._ids.get(line)
            if i is None:
                i = self._ids[line] = len(self._lines)
                self._lines.append(line)
            out.append(i)
        return out

    def start_run(self, *, conversation: int, sample_id: str, k: str, mode: str, position: int, warmup: int) -> None:
        """A (conversation, k, mode) run starts: the engine cache is flushed, then ``warmup`` requests."""
        self.runs.append(
            {
                "conversation": conversation,
                "sample_id": sample_id,
                "k": k,
                "mode": mode,
                "position": position,
                "flush": True,
                "warmup": warmup,
                "requests": [],
            }
        )

    def add(
        self, *, turn: int, measured: bool, prompt: str | None = None, user: str | None = None, new_chat: bool = False
    ) -> None:
        """One request of the current run: a completion ``prompt`` or a chat's new ``user`` message."""
        if not self.runs:
            raise RuntimeError("PromptExport.add before start_run")
        if (prompt is None) == (user is None):
            raise ValueError("give exactly one of prompt (completion) or user (chat)")
        item: dict[str, Any] = {"turn": turn, "measured": measured}
        if prompt is not None:
            item["prompt"] = self._encode(prompt)
        else:
            item["user"] = self._encode(user or "")
            item["new_chat"] = new_chat
        self.runs[-1]["requests"].append(item)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "meta": self.meta, "lines": self._lines, "runs": self.runs}

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        if p.suffix == ".gz":
            data = gzip.compress(data, compresslevel=9, mtime=0)
        p.write_bytes(data)
        return p


def join_lines(lines: Sequence[str], ids: Sequence[int]) -> str:
    """The text of an encoded prompt."""
    return "\n".join(lines[i] for i in ids)


def load_prompts(path: str | Path) -> dict[str, Any]:
    """Read an export (plain or gzip JSON); checks the format tag."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    data = json.loads(raw.decode("utf-8"))
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(
            f"{path}: not a prompt export ({FORMAT!r} expected, got {data.get('format')!r})"
            if isinstance(data, dict)
            else f"{path}: not a prompt export"
        )
    return data
