"""ContextPilotMemory: mem0 with prompts that hit the engine's prefix cache.

    from cp_memory.embedded import default_memory
    from cp_memory.memory import ContextPilotMemory
    from cp_memory.render import build_prompt

    memory = ContextPilotMemory(default_memory())          # or any mem0 Memory / MemoryClient
    memory.add("Alice lives in Lisbon", user_id="alice", infer=False)
    found = memory.search("Where does Alice live?", filters={"user_id": "alice"}, conversation_id="chat-1")
    found["results"]          # mem0's own result dicts (<= top_k, fresh), in the aligned order, with "rank"
    found["context_pilot"]    # scope, placement, dedup outcome, annotations, rendered context
    prompt = build_prompt("Where does Alice live?", found)
    memory.commit(found)      # the prompt was sent: later turns point at these memories

Modules, one responsibility each (data flows top to bottom):

* :mod:`cp_memory.core.scope` — the full scope of a call (entity ids + other filter conditions) as a key;
* :mod:`.calls` — the caller's arguments, read without changing them (local and hosted mem0 shapes);
* :mod:`.state` — per-scope context indexes: LRU, snapshots (0600, atomic, malformed -> cold);
* :mod:`.filters` — would mem0 return this memory for these filters? (superset/swap extras);
* :mod:`.pipeline` — the I/O-free search pipeline and the two-phase turn (commit/rollback);
* :mod:`.flow` — the search as one generator, driven sync or async;
* :mod:`.proxy` / :mod:`.wrappers` — the mem0 contract: subclasses of mem0's classes that forward.
"""

from __future__ import annotations

import os

# mem0 reads MEM0_TELEMETRY when it is first imported, which this package does (its wrappers subclass
# mem0's classes): keep cp_memory's offline default unless the application chose otherwise.
os.environ.setdefault("MEM0_TELEMETRY", "False")

from ..core.scope import ENTITY_KEYS, Scope, scope_of
from ..extras import requires

with requires("mem0", "cp_memory.memory"):  # mem0ai (and pydantic, tenacity with it)
    from .config import ContextPilotConfig
    from .errors import FiltersTypeError, MemoryLayerError
    from .types import ContextPilotInfo, RenderedBlock, SearchResults, SentMemory
    from .wrappers import (
        AsyncContextPilotMemory,
        AsyncContextPilotMemoryClient,
        ContextPilotMemory,
        ContextPilotMemoryClient,
    )

__all__ = [
    "ENTITY_KEYS",
    "AsyncContextPilotMemory",
    "AsyncContextPilotMemoryClient",
    "ContextPilotConfig",
    "ContextPilotInfo",
    "ContextPilotMemory",
    "ContextPilotMemoryClient",
    "FiltersTypeError",
    "MemoryLayerError",
    "RenderedBlock",
    "Scope",
    "SearchResults",
    "SentMemory",
    "scope_of",
]
