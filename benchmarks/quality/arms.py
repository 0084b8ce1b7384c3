"""The compared arms: each a LoCoMo mode (:mod:`benchmarks.common.modes`) plus the ContextPilotMemory options
that differ from the library's defaults, one-shot or as chats.

=====================  ============================================================================
``baseline``           mem0's order, no annotation (what a user without cp_memory sends)
``aligned-noann``      aligned order, no order annotation
``aligned``            aligned order, the library's default annotation (mem0's top five, then "the rest")
``aligned-full``       aligned order, the paper's full annotation (every retrieved memory ranked)
``swap@0.1/0.75``      length-neutral superset (the setting docs/locomo.md recommends), default annotation
``superset@0.25``      superset alignment (a few other cached memories shown), default annotation
``chat``               chats of ``chat_turns`` questions with history, mem0's order, no dedup: dedup's pair
``chat+dedup``         the same chats, aligned + multi-turn dedup: memories sent in an earlier turn of the
                       chat become "Please refer to [Doc 3] in the previous conversation (turn 1)."
=====================  ============================================================================

Every arm's prompt is the same chat request (:data:`benchmarks.locomo.runner.SYSTEM_PROMPT`, then the
user message :func:`cp_memory.core.render.build_messages` makes of the context and the question), so only the
context differs between one-shot arms, and ``chat`` and ``chat+dedup`` differ only by dedup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.common.modes import ModeSpec, parse_mode

__all__ = ["ARMS", "BASELINE", "CHAT_BASELINE", "Arm", "arms_for", "parse_arms"]

BASELINE = "baseline"
CHAT_BASELINE = "chat"


@dataclass(frozen=True)
class Arm:
    """One compared arm: a LoCoMo mode, ContextPilotMemory options over it, one-shot or chat."""

    name: str
    mode: str  # a benchmarks.common.modes name
    options: Mapping[str, Any] = field(default_factory=dict)
    chat: bool = False

    @property
    def spec(self) -> ModeSpec:
        return parse_mode(self.mode)

    @property
    def pair(self) -> str:
        """The arm this one is paired against: chats against the chat baseline, the rest against baseline."""
        return CHAT_BASELINE if self.chat else BASELINE


ARMS: dict[str, Arm] = {
    a.name: a
    for a in (
        Arm(BASELINE, "baseline"),
        Arm("aligned-noann", "aligned", {"annotate": False}),
        Arm("aligned", "aligned"),
        Arm("aligned-full", "aligned", {"annotate_top": None}),
        Arm("swap@0.1/0.75", "aligned+swap@0.1/0.75"),
        Arm("superset@0.25", "aligned+superset@0.25"),
        Arm(CHAT_BASELINE, "baseline", chat=True),
        Arm("chat+dedup", "dedup", chat=True),
    )
}


def parse_arms(text: str) -> tuple[Arm, ...]:
    """``"all"`` or comma-separated arm names; the pairs they need (baseline / chat) are added."""
    names = list(ARMS) if text.strip() == "all" else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in ARMS]
    if unknown or not names:
        raise ValueError(f"unknown arm(s) {unknown or text!r}: choose from {', '.join(ARMS)} or 'all'")
    wanted = set(names) | {ARMS[n].pair for n in names}
    return tuple(a for a in ARMS.values() if a.name in wanted)


def arms_for(arms: Sequence[Arm], k: int, chat_max_k: int) -> tuple[Arm, ...]:
    """The arms run at ``k``: chats only up to ``chat_max_k`` (their history must fit the model's context)."""
    return tuple(a for a in arms if not a.chat or k <= chat_max_k)
