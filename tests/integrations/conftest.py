"""Fixtures for the framework integrations: the embedded mem0 with two users, a real llama-server on a
random-weight model, and an httpx probe that records what the engine received and reported.

Each framework's tests skip when its extra is not installed, and the engine tests without the llama-server
binary; in strict mode (CP_MEMORY_STRICT=1, as CI runs) both fail instead (tests/support.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.mem0_fixtures import require_mem0
from tests.support import STRICT
from tests.support import missing as _missing

# the framework packages import mem0 before any cp_memory module could switch its telemetry off
os.environ.setdefault("MEM0_TELEMETRY", "False")

#: Alice's memories (the paper's running example style); Bob's must never reach Alice's prompts
ALICE = [
    "Alice moved to Lisbon in 2023.",
    "Alice works as a nurse at Santa Maria hospital.",
    "Alice has a cat named Miso.",
    "Alice plays the cello in a community orchestra.",
    "Alice is allergic to peanuts.",
    "Alice's sister Carla lives in Porto.",
]
BOB = ["Bob lives in Oslo and works as a plumber.", "Bob has a dog named Rex."]
SYSTEM = "You are a helpful assistant. Answer from the user's memories."


def require_extra(module: str, extra: str) -> None:
    """Skip without the framework's extra (fail in strict mode: CI installs every extra)."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError as exc:
        reason = f"{module} is not installed ({exc}): pip install -e '.[{extra}]'"
        if STRICT:
            _missing(reason)
        pytest.skip(reason, allow_module_level=True)


@pytest.fixture(scope="module")
def store() -> Iterator[Any]:
    """A plain mem0 Memory (embedded, offline) with Alice's and Bob's memories."""
    require_mem0()
    from cp_memory.embedded import default_memory

    memory = default_memory()
    memory.add([{"role": "user", "content": f} for f in ALICE], user_id="alice", infer=False)
    memory.add([{"role": "user", "content": f} for f in BOB], user_id="bob", infer=False)
    yield memory
    memory.close()


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    """One llama-server (1 slot, host prompt cache) on the random test model."""
    pytest.importorskip("httpx")
    from cp_memory.engine import LlamaServer, find_llama_server, random_model_path

    try:
        find_llama_server()
        model: Path = random_model_path()
    except (FileNotFoundError, ImportError) as exc:
        _missing(f"llama-server or the random test model is not available: {exc}")
        raise AssertionError("unreachable") from exc
    with LlamaServer(model, slots=1, ctx_size=4096, cache_ram_mib=256) as srv:
        yield srv


@pytest.fixture()
def probe() -> Any:
    from benchmarks.frameworks.probe import EngineProbe

    return EngineProbe()


def user_messages(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content")) for m in messages if m.get("role") == "user"]


def assert_no_foreign_memory(messages: list[dict[str, Any]]) -> None:
    text = "\n".join(str(m.get("content")) for m in messages)
    for fact in BOB:
        assert fact not in text, f"Bob's memory reached Alice's prompt: {fact}"
