"""Foreign traffic for the CoA benchmark: other applications' one-off prompts sent while the chain runs."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from benchmarks.coa import foreign
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


class VirtualTime:
    """The sender's clock and its stop event in one, on virtual time: ``perf_counter()`` reads the time;
    ``wait(s)`` (the sender's pause until the next request is due) moves it ``s`` on at once, up to
    ``horizon``. A pause that would cross the horizon sets ``reached`` and blocks until the traffic is
    stopped, so the requests sent are exactly those due by the horizon, whatever the machine's load."""

    def __init__(self, horizon: float) -> None:
        self.now = 0.0
        self.horizon = horizon
        self.reached = threading.Event()
        self._stopped = threading.Event()

    def perf_counter(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        if self.now + seconds <= self.horizon:
            self.now += seconds
            return self._stopped.is_set()
        self.reached.set()
        return self._stopped.wait()

    def is_set(self) -> bool:
        return self._stopped.is_set()

    def set(self) -> None:
        self._stopped.set()


def test_traffic_rotates_over_the_targets_at_the_rate_and_totals_what_the_engines_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 40 requests/s one request is due every 25 ms: by 0.31 s, the 13 due at 0, 25, ..., 300 ms, even
    ones to the first engine, odd ones to the second."""
    clock = VirtualTime(horizon=0.31)
    monkeypatch.setattr(foreign, "time", clock)
    monkeypatch.setattr(foreign, "threading", SimpleNamespace(Event=lambda: clock, Thread=threading.Thread))
    with loopback_engine(_answer) as a, loopback_engine(_answer) as b:
        clients = [EngineClient(a.url, max_retries=0), EngineClient(b.url, max_retries=0)]
        with ForeignTraffic(clients, rate=40, words=20) as ft:
            assert clock.reached.wait(60), "the sender never reached 0.31 s"  # a bound against hanging only
        for c in clients:
            c.close()
        stats = ft.stats()
        assert stats.requests == 13 and stats.failed == 0
        assert sorted(r.body["prompt"] for r in a.requests) == sorted(foreign_prompt(i, 20) for i in range(0, 13, 2))
        assert sorted(r.body["prompt"] for r in b.requests) == sorted(foreign_prompt(i, 20) for i in range(1, 13, 2))
        assert stats.prompt_tokens == 100 * 13 and stats.prefilled_tokens == 90 * 13


def test_no_rate_sends_nothing_and_bad_settings_are_refused() -> None:
    with ForeignTraffic([], rate=0) as ft:
        pass
    assert ft.stats().requests == 0
    with pytest.raises(ValueError, match="rate"):
        ForeignTraffic([], rate=-1)
    with pytest.raises(ValueError, match="target"):
        ForeignTraffic([], rate=1)
