"""Foreign traffic for the CoA benchmark: other applications' one-off prompts sent while the chain runs."""

from __future__ import annotations

import time

import pytest

from benchmarks.coa.foreign import ForeignTraffic, foreign_prompt
from cp_memory.engine import EngineClient

from ..loopback import FakeRequest, loopback_engine, sse

USAGE = {
    "prompt_tokens": 100,
    "completion_tokens": 1,
    "total_tokens": 101,
    "prompt_tokens_details": {"cached_tokens": 10},
}


def _answer(req: FakeRequest) -> tuple[int, dict[str, str], bytes]:
    chunk = {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": "x", "finish_reason": "length"}]}
    return 200, {"content-type": "text/event-stream"}, sse(chunk, {"id": "c", "choices": [], "usage": USAGE})


def test_prompts_are_one_offs_sharing_no_prefix() -> None:
    prompts = [foreign_prompt(i, 50) for i in range(20)]
    assert len(set(prompts)) == 20
    assert prompts[3] == foreign_prompt(3, 50)  # reproducible
    assert len({p[:12] for p in prompts[:10]}) == 10  # they differ from the first characters on


def test_traffic_rotates_over_the_targets_at_the_rate_and_totals_what_the_engines_reported() -> None:
    with loopback_engine(_answer) as a, loopback_engine(_answer) as b:
        clients = [EngineClient(a.url, max_retries=0), EngineClient(b.url, max_retries=0)]
        with ForeignTraffic(clients, rate=40, words=20) as ft:
            time.sleep(0.3)
        for c in clients:
            c.close()
        stats = ft.stats()
        assert 6 <= stats.requests <= 16
        assert stats.failed == 0
        assert abs(len(a.requests) - len(b.requests)) <= 1
        assert stats.prompt_tokens == 100 * stats.requests and stats.prefilled_tokens == 90 * stats.requests
        prompts = [r.body["prompt"] for r in a.requests + b.requests]
        assert len(set(prompts)) == len(prompts)


def test_no_rate_sends_nothing_and_bad_settings_are_refused() -> None:
    with ForeignTraffic([], rate=0) as ft:
        pass
    assert ft.stats().requests == 0
    with pytest.raises(ValueError, match="rate"):
        ForeignTraffic([], rate=-1)
    with pytest.raises(ValueError, match="target"):
        ForeignTraffic([], rate=1)
