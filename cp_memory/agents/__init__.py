"""Agent workloads (Chain-of-Agents) with agent-aware routing on top of cp_memory.

    from cp_memory.agents import AgentRouter, ChainOfAgents
    router = AgentRouter([EngineClient(url) for url in urls], capacity_tokens=100_000)
    coa = ChainOfAgents(router, segment_tokens=1024)
    result = coa.answer("Who ...?", blocks)          # blocks: cp_memory.ContextBlock (id + text)

See docs/coa.md.
"""

from __future__ import annotations

from .coa import (
    MANAGER_TEMPLATE,
    PRIOR_TURN_TEMPLATE,
    WORKER_TEMPLATE,
    CallStats,
    ChainOfAgents,
    ChainOfAgentsError,
    CoAPlan,
    CoAQuery,
    CoAResult,
    manager_prompt,
    worker_prompt,
)
from .flow import adrive, drive
from .records import EngineCall
from .routing import AgentRouter, Route, RouterStats, RoutingPolicy, WorkerStats
from .segment import Segment, Segmenter, estimate_tokens, render_segment

__all__ = [
    "MANAGER_TEMPLATE",
    "PRIOR_TURN_TEMPLATE",
    "WORKER_TEMPLATE",
    "AgentRouter",
    "CallStats",
    "ChainOfAgents",
    "ChainOfAgentsError",
    "CoAPlan",
    "CoAQuery",
    "CoAResult",
    "EngineCall",
    "Route",
    "RouterStats",
    "RoutingPolicy",
    "Segment",
    "Segmenter",
    "WorkerStats",
    "adrive",
    "drive",
    "estimate_tokens",
    "manager_prompt",
    "render_segment",
    "worker_prompt",
]
