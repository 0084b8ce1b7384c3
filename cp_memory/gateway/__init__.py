"""cp_memory's gateway: an OpenAI- and Anthropic-compatible HTTP proxy that never breaks a prompt cache.

``cp-memory gateway --upstream URL [--port N]`` (or ``python -m cp_memory.gateway ...``) serves OpenAI Chat
Completions, OpenAI Responses and Anthropic Messages in front of any OpenAI-compatible engine (vLLM,
llama-server, SGLang), OpenAI or Anthropic; other paths are forwarded untouched. It replays each session's
earlier messages exactly as it sent them (prefix replay), applies the provider's cache rules
(:mod:`cp_memory.gateway.rules`), keeps tenants apart, and reports the savings (``X-CP-*`` headers,
``/cp/savings``, ``/metrics``). docs/gateway.md has the how-to and every bound.

Needs the ``gateway`` extra: ``pip install 'cp-memory[gateway]'``.
"""

from __future__ import annotations

from ..extras import requires

with requires("gateway", "cp_memory.gateway"):
    import aiohttp  # noqa: F401
    import httpx  # noqa: F401
    import orjson  # noqa: F401
    import prometheus_client  # noqa: F401
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401

from .app import build_app
from .config import GatewayConfig, UpstreamKind
from .flow import Gateway, Plan

__all__ = ["Gateway", "GatewayConfig", "Plan", "UpstreamKind", "build_app"]
