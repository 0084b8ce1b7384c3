"""The settings of a :class:`~cp_memory.agents.ChainOfAgents`, in one frozen record with one default each.

    from cp_memory.agents import ChainConfig, ChainOfAgents
    coa = ChainOfAgents(router, config=ChainConfig(segment_tokens=1024, worker_max_tokens=48, chat=True))

The collaborators (router, segmenter, manager client, deduplicator) are passed to ``ChainOfAgents``
itself; everything here is a plain value, so one config can be shared, compared and varied with
:func:`dataclasses.replace`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from cp_memory.core.checks import positive_int

from .prompts import MANAGER_TEMPLATE, WORKER_TEMPLATE, check_worker_template

__all__ = ["ChainConfig", "config_fields"]


@dataclass(frozen=True, kw_only=True)
class ChainConfig:
    """How a chain runs. Invalid values raise ``ValueError`` (``TypeError`` for a wrong type) on construction.

    Attributes:
        segment_tokens: token budget of one worker's segment, for the segmenter ``ChainOfAgents`` builds
            (ignored when it is given a ``segmenter``).
        worker_max_tokens, manager_max_tokens: generation limits (CU length, answer length).
        manager_stop: stop sequences of the manager's answer (None: stop at ``manager_max_tokens``); a
            list is kept as a tuple, an empty one as None, a single string as one stop sequence.
        temperature: sampling temperature of every call.
        chat: send each prompt as one user message (``client.chat``) instead of a raw completion, for
            instruct models; the chat template's fixed header keeps the segment a shared prefix.
        max_conversations: conversations whose CUs (and, for the chain's own deduplicator, dedup records)
            are remembered; least recently used dropped.
        worker_template, manager_template: the prompts (:mod:`cp_memory.agents.prompts`); the worker
            template must start with ``{segment}``, the reusable prefix.
        model_tails: tell the router how many tokens each prompt adds after its segment (previous CU,
            question, instructions, generated tokens: the segmenter's ``token_len`` estimate), so its
            per-worker cache models fill up as the engines' caches do (an engine caches whole prompts).
        manager_affinity: route manager calls by their recurring prefix (the manager template's fixed
            text) like any other reusable block: they then share one worker's cache while it is not
            overloaded, instead of spreading their one-off prompts over every worker's cache.
    """

    segment_tokens: int = 1024
    worker_max_tokens: int = 128
    manager_max_tokens: int = 32
    manager_stop: tuple[str, ...] | None = None
    temperature: float = 0.0
    chat: bool = False
    max_conversations: int = 10_000
    worker_template: str = WORKER_TEMPLATE
    manager_template: str = MANAGER_TEMPLATE
    model_tails: bool = True
    manager_affinity: bool = True

    def __post_init__(self) -> None:
        for name in ("segment_tokens", "worker_max_tokens", "manager_max_tokens", "max_conversations"):
            positive_int(getattr(self, name), name)
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)):
            raise TypeError(f"temperature must be a number, got {self.temperature!r}")
        for name in ("worker_template", "manager_template"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"{name} must be str, got {type(getattr(self, name)).__name__}")
        check_worker_template(self.worker_template)
        object.__setattr__(self, "manager_stop", _stops(self.manager_stop))


def _stops(stop: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if not stop:
        return None
    stops = (stop,) if isinstance(stop, str) else tuple(stop)
    for s in stops:
        if not isinstance(s, str):
            raise TypeError(f"manager_stop must hold strings, got {type(s).__name__}")
    return stops


def config_fields() -> frozenset[str]:
    """The names of :class:`ChainConfig`'s settings."""
    return frozenset(f.name for f in fields(ChainConfig))
