"""The benchmark's arms (routing policies) and the worker pool each arm runs on.

Every arm gets fresh (cold) llama-server workers. Arms of kind ``agent`` give ChainOfAgents one client per
worker and route with :class:`~cp_memory.agents.AgentRouter`; arms of kind ``sglang`` put SGLang's own
router (``sglang-router``, :class:`~cp_memory.engine.router.SGLangRouter`) in front of the same workers
and give ChainOfAgents a single client pointing at it. The chain, its segmenter and its prompts are the
same in every arm: only where each request runs differs.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from benchmarks.workers import WorkerSpec, pool_key, served_name
from cp_memory.agents import AgentRouter
from cp_memory.engine import EngineCacheFeed, EngineClient, ManagedServer, VLLMServer, running
from cp_memory.engine.router import SGLangRouter

logger = logging.getLogger("benchmarks.coa")

__all__ = ["ARMS", "Arm", "Pool", "entry_clients", "parse_arm", "parse_overrides", "pool"]

#: ChainConfig settings an arm may set (the rest of an agent arm's overrides go to AgentRouter)
COA_OPTIONS = ("model_tails", "manager_affinity")


@dataclass(frozen=True)
class Arm:
    """A routing policy: ``agent`` arms pass ``agent`` to AgentRouter, ``sglang`` arms ``router`` to
    SGLangRouter (an empty dict = the router's own defaults)."""

    name: str
    kind: Literal["agent", "sglang"]
    agent: dict[str, Any] = field(default_factory=dict)
    router: dict[str, Any] = field(default_factory=dict)
    color: str = "#888888"
    coa: dict[str, Any] = field(default_factory=dict)
    #: agent arms: each worker's cache model follows its engine's KV-cache events (vLLM workers only)
    feed: bool = False

    def describe(self) -> str:
        args = {**self.agent, **self.coa} if self.kind == "agent" else self.router
        what = "AgentRouter" if self.kind == "agent" else "sglang-router"
        feeds = ", feeds=EngineCacheFeed per worker" if self.feed else ""
        return f"{what}({', '.join(f'{k}={v}' for k, v in args.items()) or 'defaults'}{feeds})"


#: the arms, by name; --arms picks some, --agent-args / --sglang-tuned override their settings
ARMS: dict[str, Arm] = {
    a.name: a
    for a in (
        Arm("round_robin", "agent", {"policy": "round_robin"}, color="#9e9e9e"),
        Arm("sglang_cache_aware", "sglang", router={"policy": "cache_aware"}, color="#ff9f40"),
        # the best of a grid (cache_threshold 0.1/0.5, balance_abs_threshold 8, max_tree_size 50k with 5 s
        # eviction) on the single-turn workload; within the defaults' run-to-run spread (docs/coa.md)
        Arm(
            "sglang_cache_aware_tuned",
            "sglang",
            router={"policy": "cache_aware", "balance_abs_threshold": 8},
            color="#d62728",
        ),
        Arm("agent_aware", "agent", {"policy": "affinity"}, color="#1f77b4"),
        # the same, each worker's cache model following its vLLM engine's KV-cache events (--engine vllm)
        Arm("agent_aware_feed", "agent", {"policy": "affinity"}, color="#2ca02c", feed=True),
        # ablations, for the "why": the old safeguard and SGLang's pool-wide safeguard rule
        Arm("agent_aware_abs2", "agent", {"policy": "affinity", "balance_abs_threshold": 2}, color="#aec7e8"),
        Arm("agent_aware_global", "agent", {"policy": "affinity", "balance_scope": "global"}, color="#9edae5"),
    )
}


def parse_overrides(spec: str) -> dict[str, Any]:
    """``"a=1,b=0.5,c=target"`` -> ``{"a": 1, "b": 0.5, "c": "target"}`` (ints, floats, else strings)."""
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, raw = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected key=value, got {part!r}")
        value: Any = raw.strip()
        for conv in (int, float):
            try:
                value = conv(value)
                break
            except ValueError:
                continue
        out[key.strip()] = value
    return out


def parse_arm(spec: str) -> Arm:
    """A known arm name, or ``<arm>[k=v,...]``: that arm with its settings overridden (an ad-hoc arm,
    e.g. ``agent_aware[balance_abs_threshold=64]`` or ``sglang_cache_aware[cache_threshold=0.5]``)."""
    spec = spec.strip()
    if spec in ARMS:
        return ARMS[spec]
    m = re.fullmatch(r"([a-z_0-9]+)\[(.*)\]", spec)
    if m is None or m.group(1) not in ARMS:
        raise ValueError(f"unknown arm {spec!r}; choose from {', '.join(ARMS)} or <arm>[key=value,...]")
    base, over = ARMS[m.group(1)], parse_overrides(m.group(2))
    if base.kind == "sglang":
        return replace(base, name=spec, router={**base.router, **over})
    coa = {k: bool(v) for k, v in over.items() if k in COA_OPTIONS}
    agent = {k: v for k, v in over.items() if k not in COA_OPTIONS}
    return replace(base, name=spec, agent={**base.agent, **agent}, coa={**base.coa, **coa})


@dataclass
class Pool:
    """One arm's running workers and the AgentRouter ChainOfAgents uses."""

    workers: list[ManagedServer]
    router: AgentRouter[EngineClient]
    sglang: SGLangRouter | None
    feeds: list[EngineCacheFeed] = field(default_factory=list)

    def feed_stats(self) -> dict[str, int] | None:
        """The feeds' counters summed over workers (None without feeds): events applied, sections tracked,
        requests the engines' evictions removed from the cache models, feeds lost."""
        if not self.feeds:
            return None
        total: dict[str, int] = {}
        for f in self.feeds:
            counts = {"batches": f.sync.stats.batches, "tracked": f.sync.stats.tracked}
            counts |= {"evicted": f.sync.stats.evicted, "expired": f.sync.stats.expired, "lost": f.sync.stats.lost}
            counts |= {"untokenized": f.stats.untokenized, "dropped": f.stats.dropped}
            counts |= {f"evicted {cause}": n for cause, n in f.sync.stats.causes.items()}  # evicted, by cause
            for k, v in counts.items():
                total[k] = total.get(k, 0) + v
        return total


def entry_clients(servers: list[ManagedServer], sglang: SGLangRouter | None) -> list[EngineClient]:
    """Where requests enter the pool: one client for the gateway when there is one (it fronts the
    engines), else one client per worker."""
    if sglang is not None:
        return [sglang.client(model=served_name(servers[0]), timeout=600, max_retries=2)]
    return [EngineClient(s.base_url, api_key=s.api_key, timeout=600, max_retries=2) for s in servers]


def follow(
    servers: list[ManagedServer], clients: list[EngineClient], stack: contextlib.ExitStack
) -> list[EngineCacheFeed]:
    """One :class:`~cp_memory.engine.EngineCacheFeed` per vLLM worker, live before the arm's first request
    (each engine flushed once its feed listens, so both start from a known, empty cache)."""
    feeds = []
    for server, client in zip(servers, clients):
        endpoint = server.kv_events_endpoint if isinstance(server, VLLMServer) else None
        if endpoint is None:
            raise TypeError(f"an event feed needs running vLLM workers with kv_events, got {server!r}")
        feed = EngineCacheFeed(endpoint, tokenize=client.tokenize).start()
        stack.callback(feed.stop)
        if client.flush_cache():
            feed.flushed()
        feeds.append(feed)
    return feeds


@contextlib.contextmanager
def pool(
    arm: Arm, spec: WorkerSpec, *, workers: int, capacity_tokens: int | None, log_dir: Path | None = None
) -> Iterator[Pool]:
    """Start ``workers`` cold engine workers (llama-server or vLLM: :class:`benchmarks.workers.WorkerSpec`;
    and the SGLang router for ``sglang`` arms; feeds of the engines' KV-cache events for ``feed`` arms);
    stop them after."""
    tag = re.sub(r"[^\w.-]+", "_", arm.name)
    logs = [None if log_dir is None else log_dir / f"{tag}-w{i}.log" for i in range(workers)]
    key = pool_key(spec) if arm.kind == "sglang" else None  # vLLM workers behind one router share a key
    cold = [spec.worker(log, kv_events=arm.feed, api_key=key) for log in logs]
    with running(cold) as servers, contextlib.ExitStack() as stack:
        sglang: SGLangRouter | None = None
        if arm.kind == "sglang":
            sglang = SGLangRouter(
                [s.base_url for s in servers],
                api_key=key,
                request_timeout_s=600,
                log_path=None if log_dir is None else log_dir / f"{tag}-router.log",
                **arm.router,
            ).start()
            stack.callback(sglang.stop)
        clients = entry_clients(servers, sglang)
        for c in clients:
            stack.callback(c.close)
        if sglang is not None:
            router = AgentRouter(clients, names=["sglang-router"], policy="round_robin")
        else:
            feeds = follow(servers, clients, stack) if arm.feed else []
            router = AgentRouter(clients, capacity_tokens=capacity_tokens, feeds=feeds or None, **arm.agent)
        yield Pool(servers, router, sglang, feeds if sglang is None else [])
