"""Prometheus metrics of one gateway (its own registry: two gateways in one process never mix).

No label carries a tenant, a session or a key: labels are the protocol, an outcome, a token kind or a
breakpoint kind, and tenants appear only as a count.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..providers.usage import CacheUsage

__all__ = ["CONTENT_TYPE", "GatewayMetrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class GatewayMetrics:
    """The gateway's counters; :meth:`render` is the ``/metrics`` page."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "cp_gateway_requests", "Requests by protocol and outcome", ["api", "outcome"], registry=r
        )
        self.upstream_status = Counter(
            "cp_gateway_upstream_responses",
            "Upstream answers by protocol and status class",
            ["api", "status"],
            registry=r,
        )
        self.tokens = Counter(
            "cp_gateway_tokens", "Prompt and output tokens the upstream reported", ["kind"], registry=r
        )
        self.fail_open = Counter(
            "cp_gateway_fail_open", "Requests forwarded unchanged after an internal error", registry=r
        )
        self.replayed = Counter("cp_gateway_replayed_segments", "Leading segments matched to the sent log", registry=r)
        self.rewritten = Counter(
            "cp_gateway_rewritten_segments", "Replayed segments whose client bytes differed", registry=r
        )
        self.marks = Counter("cp_gateway_marks_added", "Anthropic breakpoints added", ["where"], registry=r)
        self.fields = Counter("cp_gateway_fields_added", "Cache fields added", ["field"], registry=r)
        self.content_rewrites = Counter(
            "cp_gateway_content_rewritten_segments", "Segments the content rules rewrote", registry=r
        )
        self.content_pointers = Counter(
            "cp_gateway_content_pointers",
            "Location annotations the content rules put for blocks sent before",
            registry=r,
        )
        self.placements = Counter(
            "cp_gateway_mem0_placements",
            "Requests that carried mem0 memories, by placement (cached: replayed with their turn; fresh: below "
            "the provider's cache minimum)",
            ["placement"],
            registry=r,
        )
        self.overhead = Histogram(
            "cp_gateway_overhead_seconds",
            "Time the gateway spent on a request before forwarding it",
            ["api"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )
        self.sessions = Gauge("cp_gateway_sessions", "Sessions kept for prefix replay", registry=r)
        self.tenants = Gauge("cp_gateway_tenants", "Tenants with savings on record", registry=r)

    def usage(self, usage: CacheUsage, gateway_tokens: int) -> None:
        self.tokens.labels("input").inc(usage.input_tokens)
        self.tokens.labels("cache_read").inc(usage.cache_read_tokens)
        self.tokens.labels("cache_write").inc(usage.cache_write_tokens)
        self.tokens.labels("uncached").inc(usage.uncached_tokens)
        self.tokens.labels("output").inc(usage.output_tokens)
        self.tokens.labels("cached_by_gateway").inc(gateway_tokens)

    def render(self) -> bytes:
        return generate_latest(self.registry)
