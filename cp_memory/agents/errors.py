"""What the agents package raises: :class:`AgentsError` (a :class:`~cp_memory.core.errors.CPMemoryError`)
and its kinds. Bad arguments are plain ``ValueError`` / ``TypeError`` (:mod:`cp_memory.core.checks`)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Literal

from ..core.errors import CPMemoryError

__all__ = ["AgentsError", "ChainOfAgentsError", "Role"]

#: who made an engine call (a failed chain names it; :mod:`.records` re-exports it with the call records)
Role = Literal["worker", "manager"]


class AgentsError(CPMemoryError):
    """An agent workload failed (the engine's own error, if any, is ``__cause__``)."""


class ChainOfAgentsError(AgentsError, RuntimeError):
    """A chain failed: which question, which call (worker step or manager) on which worker, and why.

    The underlying exception (e.g. :class:`cp_memory.engine.EngineError`, raised after the client's
    bounded retries) is ``__cause__``. The failed turn of a conversation was rolled back: asking again
    sends the documents again.
    """

    def __init__(
        self, message: str, *, question: str, role: Role, step: int, worker_name: str, tag: Hashable | None = None
    ) -> None:
        super().__init__(message)
        self.question = question
        self.role = role
        self.step = step
        self.worker_name = worker_name
        self.tag = tag
