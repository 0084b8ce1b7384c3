"""Shared fixtures: one embedded mem0 store with two LoCoMo speakers, for every mem0 test module.

Building it (embedding ~120 facts on the CPU) costs seconds, so it is session-scoped; tests that add or
delete memories use their own user ids and clean up.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

SPEAKER_A, SPEAKER_B = "Caroline", "Melanie"


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
