"""The root of every error cp_memory raises on purpose: :class:`CPMemoryError`.

Each package that has errors of its own keeps them in its ``errors`` module under one base that derives from
the root (docs/ARCHITECTURE.md, "Errors")::

    CPMemoryError
    ├── EngineError        cp_memory.engine.errors   an engine fault (a RuntimeError)
    ├── StateError         cp_memory.state.errors    the shared state store cannot say, or a record is not ours
    ├── MemoryLayerError   cp_memory.memory.errors   the mem0 wrapper refuses a call
    └── AgentsError        cp_memory.agents.errors   a Chain-of-Agents run failed

so ``except CPMemoryError`` catches all of them. Every class also keeps the builtin exception a caller
would catch without knowing cp_memory (``ValueError``, ``TimeoutError``, ``FileNotFoundError``, ...). A bad
argument is a plain ``ValueError`` / ``TypeError`` naming it (:mod:`cp_memory.core.checks`), not a
``CPMemoryError``.
"""

from __future__ import annotations

__all__ = ["CPMemoryError"]


class CPMemoryError(Exception):
    """Raised on purpose by cp_memory: every package's error base derives from it."""
