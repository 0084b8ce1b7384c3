"""The compared arms: each a LoCoMo mode (:mod:`benchmarks.common.modes`) plus the ContextPilotMemory options
that differ from the library's defaults, one-shot or as chats.

The **decisive arms** (the default set, what users actually get):

=====================  ============================================================================
``baseline``           mem0's order, no annotation (what a user without cp_memory sends)
``default``            exactly what ``ContextPilotMemory(memory)`` does with no options: aligned order,
                       no order annotation since the k=20 result (``annotate=False``; docs/quality.md)
``aligned-noann``      aligned order, no order annotation (isolates the annotation; now the same prompt
                       as ``default``, answered once)
``swap@0.1/0.75``      the recommended swap (a few cached memories in, as many low-ranked ones out), no
                       annotation (the library default)
``labelled``           the gateway's question: blocks keep mem0's rank as their label (``[Doc 3]`` stays
                       ``[Doc 3]`` wherever alignment moves it), the top-five order annotation naming them
``chat``               chats of ``chat_turns`` questions with history, as the chat integrations lay them
                       out (``CHAT_CONFIG``: mem0's order, ``- text`` bullets), dedup off: dedup's pair
``chat+dedup``         ``CHAT_CONFIG`` itself: the same chats, memories sent in an earlier turn of the chat
                       become one pointer line ("Also relevant, shown before: turn 1 items 3, 7.")
=====================  ============================================================================

More, behind ``--arms all`` or by name: ``aligned`` (aligned + the top-five annotation: the library default
before the k=20 result, the name of the earlier runs), ``aligned-full`` (the paper's full annotation),
``swap+ann`` (swap with the top-five annotation, the earlier ``swap@0.1/0.75``), ``superset@0.25``, ``chat-doc`` /
``chat-doc+dedup`` (the earlier chat pair: ``[Doc i]`` labels, aligned + the paper's location annotations).

Every arm's prompt is the same chat request (:data:`benchmarks.locomo.runner.SYSTEM_PROMPT`, then the
user message :func:`cp_memory.core.render.build_messages` makes of the context and the question), so only the
context differs between one-shot arms, and each chat pair differs only by dedup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.common.modes import ModeSpec, parse_mode

__all__ = ["ARMS", "BASELINE", "CHAT_BASELINE", "DECISIVE", "Arm", "arms_for", "parse_arms"]

BASELINE = "baseline"
CHAT_BASELINE = "chat"
#: the chat integrations' layout (``cp_memory.integrations.chat.CHAT_CONFIG``: no alignment, bullets)
_CHAT = {"align": False, "labels": "bullet"}


@dataclass(frozen=True)
class Arm:
    """One compared arm: a LoCoMo mode, ContextPilotMemory options over it, one-shot or chat.

    ``library_defaults``: the wrapper is ``ContextPilotMemory(memory)`` with no option at all (``options``
    must be empty); ``rank_labels``: the prompt labels each block by its mem0 rank, not its position;
    ``pair``: the arm it is compared with (default: baseline, or the chat baseline for chats)."""

    name: str
    mode: str  # a benchmarks.common.modes name
    options: Mapping[str, Any] = field(default_factory=dict)
    chat: bool = False
    library_defaults: bool = False
    rank_labels: bool = False
    pair_name: str | None = None

    def __post_init__(self) -> None:
        if self.library_defaults and self.options:
            raise ValueError(f"arm {self.name!r}: library_defaults takes no options")

    @property
    def spec(self) -> ModeSpec:
        return parse_mode(self.mode)

    @property
    def pair(self) -> str:
        """The arm this one is paired against: chats against their chat baseline, the rest against baseline."""
        if self.pair_name is not None:
            return self.pair_name
        return CHAT_BASELINE if self.chat else BASELINE


ARMS: dict[str, Arm] = {
    a.name: a
    for a in (
        Arm(BASELINE, "baseline"),
        Arm("default", "aligned", library_defaults=True),
        Arm("aligned-noann", "aligned", {"annotate": False}),
        Arm("swap@0.1/0.75", "aligned+swap@0.1/0.75", {"annotate": False}),
        Arm("labelled", "aligned", rank_labels=True),
        Arm(CHAT_BASELINE, "aligned", _CHAT, chat=True),
        Arm("chat+dedup", "dedup", _CHAT, chat=True),
        # behind --arms all / by name
        Arm("aligned", "aligned"),
        Arm("aligned-full", "aligned", {"annotate_top": None}),
        Arm("swap+ann", "aligned+swap@0.1/0.75"),
        Arm("superset@0.25", "aligned+superset@0.25"),
        Arm("chat-doc", "baseline", chat=True),
        Arm("chat-doc+dedup", "dedup", chat=True, pair_name="chat-doc"),
    )
}
#: the default set (``--arms decisive``): the arms users actually get
DECISIVE: tuple[str, ...] = ("baseline", "default", "aligned-noann", "swap@0.1/0.75", "labelled", "chat", "chat+dedup")


def parse_arms(text: str) -> tuple[Arm, ...]:
    """``"decisive"`` (:data:`DECISIVE`), ``"all"`` or comma-separated arm names; the pairs they need are added."""
    what = text.strip()
    names = list(ARMS) if what == "all" else list(DECISIVE) if what == "decisive" else []
    names = names or [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in ARMS]
    if unknown or not names:
        raise ValueError(f"unknown arm(s) {unknown or text!r}: choose from {', '.join(ARMS)}, 'decisive' or 'all'")
    wanted = set(names) | {ARMS[n].pair for n in names}
    return tuple(a for a in ARMS.values() if a.name in wanted)


def arms_for(arms: Sequence[Arm], k: int, chat_max_k: int) -> tuple[Arm, ...]:
    """The arms run at ``k``: chats only up to ``chat_max_k`` (their history must fit the model's context)."""
    return tuple(a for a in arms if not a.chat or k <= chat_max_k)
