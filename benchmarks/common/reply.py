"""The one reply record of the benchmarks: what an engine answered to one request (standard library only, so
``benchmarks.replay`` still runs on a bare Python)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Reply"]


@dataclass(frozen=True)
class Reply:
    """One request's outcome. ``ttft_s`` is ``None`` where the engine cannot time (the model-cache engine); a
    request that failed is a ``Reply`` with ``error`` set, never an exception."""

    text: str
    ttft_s: float | None
    total_s: float | None
    prompt_tokens: int | None
    cached_tokens: int | None
    error: str | None = None
    server_prompt_ms: float | None = None  # prefill time the engine reports (llama.cpp), no HTTP
    completion_tokens: int | None = None
