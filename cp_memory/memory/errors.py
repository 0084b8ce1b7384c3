"""What the mem0 wrapper raises of its own: :class:`MemoryLayerError` (a
:class:`~cp_memory.core.errors.CPMemoryError`; not Python's builtin ``MemoryError``) and its kinds. mem0's
own errors pass through unchanged; bad arguments are plain ``ValueError`` / ``TypeError``; a failure of
alignment or dedup inside a search is logged and falls back to mem0's order, never raised."""

from __future__ import annotations

from ..core.errors import CPMemoryError

__all__ = ["FiltersTypeError", "MemoryLayerError"]


class MemoryLayerError(CPMemoryError):
    """The mem0 wrapper refused a call (mem0's own errors pass through as they are)."""


class FiltersTypeError(MemoryLayerError, TypeError, AttributeError):
    """``filters`` is not a dict (local ``Memory``/``AsyncMemory`` wrappers only: the hosted clients send any
    ``filters`` on to the platform, as mem0's ``MemoryClient`` does). mem0's ``Memory`` fails on it with
    ``AttributeError`` (``'str' object has no attribute 'copy'``) or ``TypeError`` (a list); this is both,
    so code catching mem0's error still catches it, and its message names the problem."""
