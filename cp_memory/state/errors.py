"""What the state-store seam raises: :class:`StateError` (a :class:`~cp_memory.core.errors.CPMemoryError`)
and its kinds. Callers treat each as "the store cannot say" and fall back to their local state
(:mod:`cp_memory.memory.shared`)."""

from __future__ import annotations

from ..core.errors import CPMemoryError

__all__ = ["ForeignRecord", "LostRecord", "StateError", "StoreUnavailable"]


class StateError(CPMemoryError):
    """The shared state store cannot answer, or a value it holds is not this key's to use."""


class StoreUnavailable(StateError):
    """The store cannot answer now (down, timeout, out of memory, refused): the caller falls back."""


class ForeignRecord(StateError, ValueError):
    """The value belongs to another key (scope, conversation or tenant)."""


class LostRecord(StateError, ValueError):
    """A tombstone: the conversation's record was lost (restart, eviction) after turns someone remembers; its
    numbering cannot be rebuilt, so the conversation is never de-duplicated again (full memories)."""
