"""Pointer correctness: the caller's side of a conversation, as a chat app keeps it (each sent turn under
the number ``commit`` returned), and a check of every pointer a new turn makes against that history.

A pointer (``sent``: memory ``m`` is ``[Doc p]`` of turn ``t``) is right when the caller's turn ``t`` showed
``m`` (or a memory with the same text: content dedup) at position ``p``, and turn ``t`` is one turn of the
history, not two (a number given twice makes every pointer to it ambiguous: counted wrong).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from cp_memory.core.blocks import normalize_text

__all__ = ["History", "turn"]


@dataclass
class History:
    turns: dict[int, list[tuple[str, str]]] = field(default_factory=dict)  # turn -> [(id, text)] by position
    numbers: Counter[int] = field(default_factory=Counter)
    pointers: int = 0
    wrong: list[str] = field(default_factory=list)
    unrecorded: int = 0

    def check(self, response: Any) -> None:
        """Check every pointer of a search response against the turns sent so far."""
        for s in response["context_pilot"]["sent"]:
            self.pointers += 1
            shown = self.turns.get(s["turn"])
            pos = s["position"] - 1
            if shown is None or self.numbers[s["turn"]] != 1 or not 0 <= pos < len(shown):
                self.wrong.append(f"{s['label']} of turn {s['turn']}: no such turn in the history")
                continue
            sid, text = shown[pos]
            if sid != s["id"] and normalize_text(text) != normalize_text(s["text"]):
                self.wrong.append(f"{s['label']} of turn {s['turn']} = {s['id']}; the history shows {sid} there")

    def sent(self, response: Any, turn: int | None) -> None:
        """The response's prompt was sent and committed as ``turn`` (None: not recorded)."""
        if turn is None:
            self.unrecorded += 1
            return
        self.numbers[turn] += 1
        self.turns[turn] = [(b["id"], b["text"]) for b in response["context_pilot"]["blocks"]]


def turn(cp: Any, history: History, query: str, filters: dict[str, str], conversation: str, top_k: int = 6) -> Any:
    """One turn of the caller: search, check its pointers, send (commit), remember what was shown."""
    response = cp.search(query, filters=filters, top_k=top_k, conversation_id=conversation)
    history.check(response)
    history.sent(response, cp.commit(response))
    return response
