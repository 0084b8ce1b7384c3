"""cp_memory: ContextPilot-style context reuse for Mem0 and agent frameworks.

The core (index, alignment, scheduling, dedup, annotations, render, scope) needs only numpy and scipy. The
mem0 wrappers (``ContextPilotMemory`` and twins, ``ContextPilotConfig``: mem0 + pydantic), the embedded
default and the engine clients load lazily, on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from .core.alignment_mode import AlignmentKind, AlignmentMode
from .core.annotations import location_annotation, order_annotation
from .core.blocks import ContextBlock
from .core.dedup import Deduplicator, DedupResult, Location
from .core.errors import CPMemoryError
from .core.index import BatchPlan, ContextIndex, Placement
from .core.scheduling import schedule

__version__ = "0.1.0"

_LAZY = {  # name -> its module (each behind the mem0 extra)
    "ContextPilotMemory": "cp_memory.memory",
    "AsyncContextPilotMemory": "cp_memory.memory",
    "ContextPilotMemoryClient": "cp_memory.memory",
    "AsyncContextPilotMemoryClient": "cp_memory.memory",
    "ContextPilotConfig": "cp_memory.memory",
    "default_memory": "cp_memory.embedded",
}

__all__ = [
    "AlignmentKind",
    "AlignmentMode",
    "CPMemoryError",
    "ContextIndex",
    "Placement",
    "BatchPlan",
    "ContextBlock",
    "Deduplicator",
    "DedupResult",
    "Location",
    "order_annotation",
    "location_annotation",
    "schedule",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cp_memory' has no attribute {name!r}")
    from .extras import requires

    with requires("mem0", f"cp_memory.{name}"):
        return getattr(importlib.import_module(module), name)
