"""Fixtures for engine tests: a real llama-server on a random-weight model, and a tiny loopback
HTTP server that answers whatever a test tells it to (for malformed streams and error codes)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.loopback import (
    FakeEngine,
    FakeRequest,
    Payload,
    Responder,
    loopback_engine,
    sse,
)
from tests.support import REQUIRE_ENGINE, llama_server_binary
from tests.support import missing as _missing

__all__ = ["REQUIRE_ENGINE", "FakeClock", "FakeEngine", "FakeRequest", "Payload", "Responder", "_missing", "sse"]


class FakeClock:
    """A :class:`~cp_memory.engine.deadline.Clock` that stands still until slept on: a client's
    waits between attempts take no time, and ``slept`` lists them in order."""

    def __init__(self, start: float = 1000.0) -> None:
        self.t = start
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)


@pytest.fixture(scope="session")
def llama_binary() -> Path:
    return llama_server_binary()


@pytest.fixture(scope="session")
def random_model(llama_binary: Path) -> Path:
    from cp_memory.engine import random_model_path

    try:
        return random_model_path()
    except (FileNotFoundError, ImportError) as exc:
        _missing(f"cannot build the random test model: {exc}")
        raise AssertionError("unreachable") from exc


@pytest.fixture(scope="module")
def random_server(random_model: Path) -> Iterator[Any]:
    """One llama-server (1 slot, host prompt cache on) shared by a test module."""
    from cp_memory.engine import LlamaServer

    with LlamaServer(random_model, slots=1, ctx_size=4096, cache_ram_mib=256) as server:
        yield server


# ---------------------------------------------------------------------------------------------
# loopback fake engine (tests/loopback.py)
# ---------------------------------------------------------------------------------------------


@pytest.fixture()
def fake_engine() -> Iterator[FakeEngine]:
    """An HTTP server on 127.0.0.1 (loopback only); set ``.responder`` to choose the answer."""
    with loopback_engine() as engine:
        yield engine


@pytest.fixture()
def fake_clock() -> FakeClock:
    return FakeClock()


# ---------------------------------------------------------------------------------------------
# both clients behind one face
# ---------------------------------------------------------------------------------------------


class AsyncAsSync:
    """An :class:`AsyncEngineClient` behind a blocking facade: each call runs in a fresh event
    loop with a fresh client, so a test written once checks that both clients behave the same."""

    def __init__(self, url: str, **kw: Any) -> None:
        self.url, self.kw = url, kw

    def __getattr__(self, name: str) -> Callable[..., Any]:
        from cp_memory.engine import AsyncEngineClient

        async def call(*args: Any, **kwargs: Any) -> Any:
            async with AsyncEngineClient(self.url, **self.kw) as client:
                return await getattr(client, name)(*args, **kwargs)

        return lambda *args, **kwargs: asyncio.run(call(*args, **kwargs))

    def __enter__(self) -> AsyncAsSync:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


MakeClient = Callable[..., Any]


@pytest.fixture(params=["sync", "async"])
def make_client(request: pytest.FixtureRequest) -> MakeClient:
    """``make_client(url, **kw)``: an EngineClient, or an AsyncEngineClient driven through
    :class:`AsyncAsSync`, with fast retries (2 extra attempts, 10-50 ms apart)."""
    from cp_memory.engine import EngineClient

    def make(url: str, **kw: Any) -> Any:
        kw = {"max_retries": 2, "retry_wait_s": 0.01, "retry_wait_max_s": 0.05, **kw}
        return EngineClient(url, **kw) if request.param == "sync" else AsyncAsSync(url, **kw)

    return make
