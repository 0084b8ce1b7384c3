"""Chain-of-Agents against real llama-server instances (random-weight model: the text is noise, the
prefix cache and its cached_tokens are real)."""

import pytest

from cp_memory.agents import AgentRouter, ChainConfig, ChainOfAgents, CoAResult, RouteReason, Segmenter
from cp_memory.core.blocks import ContextBlock
from tests.support import random_text

pytestmark = pytest.mark.engine


def make_docs(n, n_words=180, seed=0):
    return [ContextBlock(f"s{i}", random_text(seed * 1000 + i, n_words)) for i in range(n)]


def with_tokens(client, blocks):
    return [ContextBlock(b.id, b.text, tokens=len(client.tokenize(b.text))) for b in blocks]


def test_recurring_segments_hit_the_cache_of_the_worker_they_are_routed_to(llama_pool):
    from cp_memory.engine import EngineClient

    clients = [EngineClient(s.base_url, timeout=60) for s in llama_pool]
    try:
        docs = with_tokens(clients[0], make_docs(4))
        router = AgentRouter(clients)
        coa = ChainOfAgents(
            router,
            config=ChainConfig(worker_max_tokens=4, manager_max_tokens=2),
            segmenter=Segmenter(max(d.tokens for d in docs) + 10),
        )
        first = coa.answer("Where did they travel?", docs)
        second = coa.answer("Who is the teacher?", list(reversed(docs)))
        assert isinstance(second, CoAResult) and len(second.segments) == 4
        placed = {c.block_ids: c.worker for c in first.worker_calls}
        assert len(set(placed.values())) == 2  # new documents spread over both
        for call in second.worker_calls:
            assert call.route is RouteReason.AFFINITY and placed[call.block_ids] == call.worker
            assert call.cached_tokens is not None and call.prompt_tokens is not None
            assert call.cached_tokens >= 0.9 * call.segment_tokens, call
        for call in first.worker_calls:
            assert call.cached_tokens < 0.5 * call.segment_tokens  # first sight: cold
    finally:
        for c in clients:
            c.close()


async def test_async_clients_and_round_robin_baseline_on_real_engines(llama_pool):
    from cp_memory.engine import AsyncEngineClient

    clients = [AsyncEngineClient(s.base_url, timeout=60) for s in llama_pool]
    try:
        docs = make_docs(2, n_words=150, seed=1)
        router = AgentRouter(clients, policy="round_robin")
        coa = ChainOfAgents(
            router,
            config=ChainConfig(segment_tokens=10_000, worker_max_tokens=4, manager_max_tokens=2),
            manager=clients[0],
        )
        first = await coa.aanswer("What is in the garden?", docs)
        second = await coa.aanswer("What is in the market?", docs)
        (w1,), (w2,) = first.worker_calls, second.worker_calls
        assert w1.worker != w2.worker  # baseline ignores the cache
        assert w2.cached_tokens < 0.5 * w2.prompt_tokens  # ... and misses it
        assert first.answer is not None and second.manager_call.prompt_tokens
    finally:
        for c in clients:
            await c.close()
