"""Agent workloads (Chain-of-Agents) with agent-aware routing on top of cp_memory.

    from cp_memory.agents import AgentRouter, ChainConfig, ChainOfAgents
    router = AgentRouter([EngineClient(url) for url in urls], capacity_tokens=100_000)
    coa = ChainOfAgents(router, config=ChainConfig(segment_tokens=1024))
    result = coa.answer("Who ...?", blocks)          # blocks: cp_memory.ContextBlock (id + text)

See docs/coa.md.
"""

from __future__ import annotations

from .coa import ChainOfAgents
from .config import ChainConfig
from .errors import AgentsError, ChainOfAgentsError
from .flow import adrive, drive
from .prompts import MANAGER_TEMPLATE, PRIOR_TURN_TEMPLATE, WORKER_TEMPLATE, manager_prompt, worker_prompt
from .records import CallStats, CoAPlan, CoAQuery, CoAResult, EngineCall, FlowStep, RouterStep
from .routes import BalanceScope, PlacementPolicy, Route, RouteReason, RouterStats, RoutingPolicy, WorkerStats
from .routing import AgentRouter
from .segment import Segment, Segmenter, estimate_tokens, render_segment
from .shared_routing import RouterStateConfig

__all__ = [
    "MANAGER_TEMPLATE",
    "PRIOR_TURN_TEMPLATE",
    "WORKER_TEMPLATE",
    "AgentRouter",
    "AgentsError",
    "BalanceScope",
    "CallStats",
    "ChainConfig",
    "ChainOfAgents",
    "ChainOfAgentsError",
    "CoAPlan",
    "CoAQuery",
    "CoAResult",
    "EngineCall",
    "FlowStep",
    "PlacementPolicy",
    "Route",
    "RouteReason",
    "RouterStateConfig",
    "RouterStats",
    "RouterStep",
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
