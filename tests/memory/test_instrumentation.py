"""Tracing a wrapper the way applications trace a mem0 ``Memory``: every common pattern wraps the wrapper's
own ``search`` once, never loops, and leaves the wrapped mem0 object alone.

Regression: an assignment of one of the wrapper's own names (``w.search = traced(w.search)``) was forwarded to
the wrapped mem0 object; the wrapper's ``search`` then called ``wrapped.search`` -- the traced wrapper's
``search`` again -- and the next search raised ``RecursionError``. The same line works on a plain ``Memory``.

Patterns: instance assignment, a ``functools.wraps`` decorator, and OpenTelemetry-style patching with
``wrapt.wrap_function_wrapper`` (what OpenTelemetry's instrumentations use) on the instance, on the
wrapper's class and on mem0's class. Sync, async and hosted wrappers (the platform modelled by
tests/memory/test_hosted.py's fake).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.mem0_fixtures import require_mem0

require_mem0()

import wrapt  # noqa: E402
from mem0 import AsyncMemory, Memory, MemoryClient  # noqa: E402

from cp_memory.embedded import default_memory  # noqa: E402
from cp_memory.memory import (  # noqa: E402
    AsyncContextPilotMemory,
    ContextPilotMemory,
    ContextPilotMemoryClient,
)
from tests.memory.test_hosted import (  # noqa: E402
    FakePlatform,
    _no_ping_over_the_network,  # noqa: F401  (autouse: AsyncMemoryClient's ping answered locally)
    async_client,
    client,
)

pytestmark = pytest.mark.mem0

FACTS = ["Alice moved to Lisbon in 2023.", "Alice works as a nurse.", "Alice has a cat named Miso."]
ALICE = {"user_id": "alice"}


def traced(fn: Callable[..., Any], calls: list[str]) -> Callable[..., Any]:
    """The usual hand-written tracer: ``functools.wraps``, async-aware (an ``async def`` stays one)."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def atrace(*args: Any, **kwargs: Any) -> Any:
            calls.append(fn.__name__)
            return await fn(*args, **kwargs)

        return atrace

    @functools.wraps(fn)
    def trace(*args: Any, **kwargs: Any) -> Any:
        calls.append(fn.__name__)
        return fn(*args, **kwargs)

    return trace


def otel_wrapper(calls: list[str]) -> Callable[..., Any]:
    """An OpenTelemetry-style ``wrapt`` wrapper (``(wrapped, instance, args, kwargs)``), async-aware."""

    def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        calls.append("span:" + wrapped.__name__)
        return wrapped(*args, **kwargs)

    return wrapper


@pytest.fixture(scope="module")
def memory() -> Iterator[Memory]:
    mem = default_memory()
    for fact in FACTS:
        mem.add(fact, user_id="alice", infer=False)
    yield mem
    mem.close()


@pytest.fixture(scope="module")
def amemory() -> Iterator[AsyncMemory]:
    import asyncio

    amem = default_memory(async_=True)

    async def ingest() -> None:
        for fact in FACTS:
            await amem.add(fact, user_id="alice", infer=False)

    asyncio.run(ingest())
    yield amem
    amem.close()


def _assert_ours(out: Any, mem0_object: Any) -> None:
    assert out["context_pilot"]["scope"] == "user_id=alice" and out["results"], out
    assert "search" not in vars(mem0_object)  # nothing was planted on mem0's object


PATTERNS = ["assign", "decorate", "wrapt-instance", "wrapt-class"]


def _instrument(pattern: str, cp: Any, calls: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    if pattern == "assign":
        cp.search = traced(cp.search, calls)
    elif pattern == "decorate":  # a decorator factory applied to the bound method, as tracing libraries do
        decorate = functools.partial(traced, calls=calls)
        cp.search = decorate(cp.search)
    elif pattern == "wrapt-instance":
        wrapt.wrap_function_wrapper(cp, "search", otel_wrapper(calls))
    else:  # the wrapper's class, undone after the test
        cls = type(cp)
        monkeypatch.setattr(cls, "search", cls.__dict__["search"])  # restored by monkeypatch
        wrapt.wrap_function_wrapper(cls, "search", otel_wrapper(calls))


@pytest.mark.parametrize("pattern", PATTERNS)
def test_tracing_a_sync_wrapper_wraps_its_own_search_once(memory, pattern, monkeypatch):
    cp = ContextPilotMemory(memory)
    calls: list[str] = []
    _instrument(pattern, cp, calls, monkeypatch)
    for _ in range(2):
        _assert_ours(cp.search("Where does Alice live?", filters=ALICE, conversation_id="c1"), memory)
    assert len(calls) == 2 and calls[0].endswith("search")
    assert inspect.signature(cp.search).parameters.keys() >= {"query", "conversation_id"}
    if pattern != "wrapt-class":
        del cp.search  # the instance's override goes; the wrapper's own method is back
        calls.clear()
        cp.search("Where does Alice live?", filters=ALICE)
        assert calls == []


@pytest.mark.parametrize("pattern", PATTERNS)
async def test_tracing_an_async_wrapper_wraps_its_own_search_once(amemory, pattern, monkeypatch):
    cp = AsyncContextPilotMemory(amemory)
    calls: list[str] = []
    _instrument(pattern, cp, calls, monkeypatch)
    for _ in range(2):
        _assert_ours(await cp.search("Where does Alice live?", filters=ALICE, conversation_id="c1"), amemory)
    assert len(calls) == 2
    if pattern in ("assign", "decorate"):
        assert inspect.iscoroutinefunction(cp.search)  # code that checks before awaiting still awaits


@pytest.mark.parametrize("pattern", PATTERNS)
def test_tracing_a_hosted_wrapper_wraps_its_own_search_once(pattern, monkeypatch):
    fake = FakePlatform()
    direct = client(fake)
    cp = ContextPilotMemory(direct)
    assert type(cp) is ContextPilotMemoryClient
    calls: list[str] = []
    _instrument(pattern, cp, calls, monkeypatch)
    for _ in range(2):
        _assert_ours(cp.search("Alice", filters=ALICE, top_k=3, conversation_id="c1"), direct)
    assert len(calls) == 2


@pytest.mark.parametrize("pattern", ["assign", "wrapt-instance"])
async def test_tracing_an_async_hosted_wrapper_wraps_its_own_search_once(pattern, monkeypatch):
    direct = async_client(FakePlatform())
    cp = AsyncContextPilotMemory(direct)
    calls: list[str] = []
    _instrument(pattern, cp, calls, monkeypatch)
    for _ in range(2):
        _assert_ours(await cp.search("Alice", filters=ALICE, top_k=3, conversation_id="c1"), direct)
    assert len(calls) == 2


def test_the_same_line_on_a_plain_memory_for_comparison(memory):
    calls: list[str] = []
    memory.search = traced(memory.search, calls)
    try:
        memory.search("Where does Alice live?", filters=ALICE)
        assert calls == ["search"]
    finally:
        del memory.search


def test_tracing_mem0s_own_methods_through_the_wrapper_reaches_mem0(memory):
    """A name the wrapper does not define is mem0's: tracing it through the wrapper traces mem0's method
    (what ``w.embedding_model = x`` does for attributes), and the wrapper's search is untouched."""
    cp = ContextPilotMemory(memory)
    calls: list[str] = []
    cp.get_all = traced(cp.get_all, calls)
    try:
        assert memory.get_all(filters=ALICE)["results"] and calls == ["get_all"]
        cp.search("Where does Alice live?", filters=ALICE)
        assert calls == ["get_all"]
    finally:
        del cp.get_all
    assert "get_all" not in vars(memory)


def test_instrumenting_mem0s_class_traces_the_call_the_wrapper_makes(memory, monkeypatch):
    """OpenTelemetry's mem0 instrumentations patch mem0's classes: the wrapper's search then makes exactly
    one traced mem0 search (no second span, no loop)."""
    calls: list[str] = []
    monkeypatch.setattr(Memory, "search", Memory.__dict__["search"])
    monkeypatch.setattr(MemoryClient, "search", MemoryClient.__dict__["search"])
    wrapt.wrap_function_wrapper(Memory, "search", otel_wrapper(calls))
    cp = ContextPilotMemory(memory)
    _assert_ours(cp.search("Where does Alice live?", filters=ALICE), memory)
    assert calls == ["span:search"]
    wrapt.wrap_function_wrapper(MemoryClient, "search", otel_wrapper(calls))
    fake = FakePlatform()
    ContextPilotMemory(client(fake)).search("Alice", filters=ALICE, top_k=3)
    assert calls == ["span:search", "span:search"]


def test_properties_of_the_wrapper_stay_read_only(memory):
    cp = ContextPilotMemory(memory)
    with pytest.raises(AttributeError):
        cp.cp_config = None
    assert not hasattr(memory, "cp_config")
