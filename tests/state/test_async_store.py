"""AsyncContextPilotMemory with Redis: the store is awaited (redis.asyncio), never called on the event loop's
thread. Two async workers share one conversation without a wrong pointer; a redis-server stopped with
SIGSTOP (it accepts bytes and never answers) leaves the loop running other tasks while the search waits
on it, and the turn sends full memories with one warning; after SIGCONT dedup resumes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from typing import Any

import pytest

from benchmarks.common.pointers import History
from tests.conftest import SPEAKER_A as A
from tests.mem0_fixtures import aingest, observations, questions, require_mem0
from tests.redis_server import RedisServer

require_mem0()

from cp_memory.embedded import default_memory  # noqa: E402
from cp_memory.memory import AsyncContextPilotMemory  # noqa: E402
from cp_memory.state.store import StateStore, Versioned  # noqa: E402

pytestmark = pytest.mark.mem0

F = {"user_id": A}
FAST = {"state_timeout_s": 0.25, "state_retry_s": 0.0}


@pytest.fixture(scope="module")
def amem():
    memory = default_memory(async_=True)
    facts = observations(0, per_speaker=60)
    memory.cp_test_ids = {A: asyncio.run(aingest(memory, A, facts[A]))}  # type: ignore[attr-defined]
    yield memory
    memory.close()


class SyncSpy:
    """The sync side of the store, recording every call (an async search must make none)."""

    def __init__(self, inner: StateStore) -> None:
        self.inner = inner
        self.calls: list[str] = []

    def read(self, key: str, *, have: str = "", ttl_s: int) -> Versioned:
        self.calls.append("read")
        return self.inner.read(key, have=have, ttl_s=ttl_s)

    def write(self, key: str, data: bytes, *, expected: str, ttl_s: int, token: str | None = None) -> str | None:
        self.calls.append("write")
        return self.inner.write(key, data, expected=expected, ttl_s=ttl_s, token=token)

    def delete(self, key: str) -> None:
        self.calls.append("delete")
        self.inner.delete(key)

    def close(self) -> None:
        self.inner.close()


class AsyncSpy:
    """The async side, counting calls in flight and signalling when one starts."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.in_flight = 0
        self.started = asyncio.Event()

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.in_flight += 1
        self.started.set()
        try:
            return await getattr(self.inner, name)(*args, **kwargs)
        finally:
            self.in_flight -= 1

    async def read(self, key: str, *, have: str = "", ttl_s: int) -> Versioned:
        got: Versioned = await self._call("read", key, have=have, ttl_s=ttl_s)
        return got

    async def write(self, key: str, data: bytes, *, expected: str, ttl_s: int, token: str | None = None) -> str | None:
        written: str | None = await self._call("write", key, data, expected=expected, ttl_s=ttl_s, token=token)
        return written

    async def delete(self, key: str) -> None:
        await self._call("delete", key)

    async def aclose(self) -> None:
        await self.inner.aclose()


def spied(cp: AsyncContextPilotMemory) -> tuple[SyncSpy, AsyncSpy]:
    state = cp._cp_pipeline.shared.state  # type: ignore[union-attr]
    sync, asyn = SyncSpy(state.store), AsyncSpy(state.astore)
    state.store, state.astore = sync, asyn  # type: ignore[assignment]
    return sync, asyn


async def aturn(cp: Any, history: History, query: str, conversation: str) -> Any:
    response = await cp.search(query, filters=F, top_k=6, conversation_id=conversation)
    history.check(response)
    history.sent(response, await cp.acommit(response))
    return response


async def test_two_async_workers_share_one_conversation(amem, redis_url):
    cps = [AsyncContextPilotMemory(amem, state_store=redis_url, **FAST) for _ in range(2)]
    spies = [spied(cp) for cp in cps]
    qs, history = questions(0), History()
    for i in range(6):
        await aturn(cps[i % 2], history, qs[i], "async-shared")
    assert history.pointers > 0 and history.wrong == [] and history.unrecorded == 0
    assert all(sync.calls == [] for sync, _ in spies)  # every store call was awaited


async def test_a_stopped_redis_leaves_the_loop_running(amem, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="cp_memory")
    server = RedisServer(tmp_path)
    server.start()
    assert server.proc is not None
    try:
        cp = AsyncContextPilotMemory(amem, state_store=server.url, **FAST)
        sync, spy = spied(cp)
        qs, history = questions(0), History()
        for i in range(5):
            await aturn(cp, history, qs[i], "stop")
        assert history.pointers > 0
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            spy.started.clear()
            search = asyncio.ensure_future(cp.search(qs[5], filters=F, top_k=6, conversation_id="stop"))
            await spy.started.wait()
            # this task runs while the search's store call is still waiting on the stopped server
            assert spy.in_flight > 0 and not search.done()
            response = await search
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        assert response["context_pilot"]["sent"] == []  # the store could not say: full memories
        assert {b["id"] for b in response["context_pilot"]["blocks"]} <= set(amem.cp_test_ids[A])
        history.sent(response, await cp.acommit(response))
        for i in range(6, 10):  # the store answers again: de-duplicated again, never wrongly
            await aturn(cp, history, qs[i], "stop")
    finally:
        server.kill()
    assert history.wrong == [] and sync.calls == []
    unavailable = [r for r in caplog.records if "cannot answer" in r.getMessage()]
    assert len(unavailable) == 1
