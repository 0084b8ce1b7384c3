"""Shared fixtures: one embedded mem0 store with two LoCoMo speakers, for every mem0 test module; a private
redis-server per test module (`redis_server`, `redis_url`); the fast tier.

Building the store (embedding ~120 facts on the CPU) costs seconds, so it is session-scoped; tests that add or
delete memories use their own user ids and clean up.

The fast tier, ``python -m pytest -m fast``: the pure tests (the core, the provider builders and usage
readers, the benchmarks' models and harness, the architecture rules) with no engine, no mem0 store, no vLLM
and nothing marked slow. Only the files of :data:`FAST_TIER` are collected for it, so it starts at once. The
full tier (``python -m pytest``, what CI runs) runs everything.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.redis_server import RedisServer, running_redis

SPEAKER_A, SPEAKER_B = "Caroline", "Melanie"

#: the folders and files the fast tier collects (relative to the repository)
FAST_TIER = (
    "tests/core/",
    "tests/providers/",
    "tests/benchmarks/test_cache_model.py",
    "tests/benchmarks/test_provider_cache.py",
    "tests/benchmarks/test_harness.py",
    "tests/benchmarks/test_locomo_select.py",
    "tests/test_architecture.py",
)
#: a test with one of these markers (or the session's mem0 store) is never fast
NOT_FAST = {"slow", "engine", "vllm", "mem0"}
ROOT = Path(__file__).resolve().parents[1]


def _fast_selected(config: pytest.Config) -> bool:
    return str(config.getoption("markexpr", "") or "").strip() == "fast"


def _in_fast_tier(path: Path) -> bool:
    rel = path.resolve().relative_to(ROOT).as_posix() if path.resolve().is_relative_to(ROOT) else ""
    return any(rel.startswith(p) or p.startswith(rel + "/") or rel in ("", "tests") for p in FAST_TIER)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``-m fast`` collects only the fast tier's files (collecting everything takes longer than the tier)."""
    candidate = collection_path.is_dir() or collection_path.name.startswith("test_")
    if _fast_selected(config) and candidate and not _in_fast_tier(collection_path):
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks ``fast`` every test of :data:`FAST_TIER` that needs no engine, no mem0 store and is not slow."""
    for item in items:
        marks = {m.name for m in item.iter_markers()}
        uses_store = "mem" in getattr(item, "fixturenames", ())
        if _in_fast_tier(Path(str(item.path))) and not marks & NOT_FAST and not uses_store:
            item.add_marker(pytest.mark.fast)


@pytest.fixture(scope="session")
def mem() -> Iterator[Any]:
    """A real mem0 ``Memory`` (local Qdrant + bundled MiniLM) holding 60 LoCoMo facts of each speaker."""
    from tests.mem0_fixtures import ingest, observations, require_mem0

    require_mem0()
    from cp_memory.embedded import default_memory

    memory = default_memory()
    facts = observations(0, per_speaker=60)
    memory.cp_test_ids = {s: ingest(memory, s, facts[s]) for s in (SPEAKER_A, SPEAKER_B)}
    yield memory
    memory.close()


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private redis-server per test module (tests/redis_server.py)."""
    folder: Path = tmp_path_factory.mktemp("redis")
    with running_redis(folder) as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """That server's URL, its database emptied for each test."""
    redis_server.client().flushall()
    return redis_server.url
