"""Index snapshots under ``index_dir`` (issue 9 §6): restore, config precedence, malformed files, files
of other writers, concurrent processes."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import SPEAKER_A as A
from tests.conftest import SPEAKER_B as B
from tests.mem0_fixtures import require_mem0

require_mem0()

from cp_memory.index import ContextIndex  # noqa: E402
from cp_memory.memory import ContextPilotMemory, scope_of  # noqa: E402

pytestmark = pytest.mark.mem0

Q1 = "What does Caroline want to do for her career?"
QB = "What does Melanie like to paint?"
FA = {"user_id": A}
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def keep_open(mem, monkeypatch):
    monkeypatch.setattr(mem, "close", lambda: None)  # the shared Memory stays open for later tests
    return mem


def snapshot_path(cp: ContextPilotMemory, filters: dict) -> Path:
    return cp._cp_pipeline.scopes.path(scope_of(filters))


def test_restart_with_index_dir_restores_index(keep_open, tmp_path):
    first = ContextPilotMemory(keep_open, index_dir=tmp_path, snapshot_every=1000)
    a = first.search(Q1, filters=FA, top_k=6)["context_pilot"]
    first.search(QB, filters={"user_id": B}, top_k=6)
    before = first.index_for(FA).snapshot()
    assert list(tmp_path.glob("*.cpidx")) == []  # cadence not reached yet
    first.close()  # snapshots
    files = list(tmp_path.glob("*.cpidx"))
    assert len(files) == 2
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)  # private to the owner
    second = ContextPilotMemory(keep_open, index_dir=tmp_path)
    index = second.index_for(FA)
    assert index.snapshot() == before and len(index) == 1
    again = second.search(Q1, filters=FA, top_k=6)["context_pilot"]
    assert again["prefix_len"] == 6 and again["order"] == a["order"]


def test_scope_lru_snapshots_evicted_scopes(mem, tmp_path):
    cp = ContextPilotMemory(mem, index_dir=tmp_path, max_scopes=1, snapshot_every=1000)
    a = cp.search(Q1, filters=FA, top_k=5)["context_pilot"]
    cp.search(QB, filters={"user_id": B}, top_k=5)  # evicts A: snapshotted
    assert cp.scopes == [f"user_id={B}"]
    again = cp.search(Q1, filters=FA, top_k=5)["context_pilot"]
    assert again["prefix_len"] == 5 and again["order"] == a["order"]


def test_the_wrappers_configuration_wins_over_a_restored_snapshot(keep_open, tmp_path):
    old = ContextPilotMemory(keep_open, index_dir=tmp_path, extra_budget=0.5, capacity_tokens=1000)
    for q in (Q1, "Caroline's family", "adoption", "support group"):
        old.search(q, filters=FA, top_k=4)
    old.save()
    new = ContextPilotMemory(keep_open, index_dir=tmp_path)  # extra_budget 0, no capacity model
    index = new.index_for(FA)
    assert len(index) == 4 and index.extra_budget == 0.0 and index.capacity_tokens is None
    for q in (Q1, "Caroline's family", "transition", "adoption agencies"):
        assert new.search(q, filters=FA, top_k=4)["context_pilot"]["extra"] == []


def test_restored_requests_keep_their_age_order(keep_open, tmp_path):
    first = ContextPilotMemory(keep_open, index_dir=tmp_path)
    for q in (Q1, QB.replace("Melanie", "Caroline"), "Caroline's family"):
        first.search(q, filters=FA, top_k=3)
    order = list(first._cp_pipeline.scopes.get(scope_of(FA)).requests)
    first.save()
    second = ContextPilotMemory(keep_open, index_dir=tmp_path, max_requests_per_scope=3)
    assert list(second._cp_pipeline.scopes.get(scope_of(FA)).requests) == order
    second.search("adoption", filters=FA, top_k=3)  # one over the bound: the oldest goes
    assert order[0] not in second.index_for(FA) and order[1] in second.index_for(FA)


def _valid_snapshot() -> bytes:
    index = ContextIndex()
    index.insert([("m1", "d1"), ("m2", "d2")])
    return index.snapshot()


@pytest.mark.parametrize(
    "content",
    [
        _valid_snapshot()[:-7],  # truncated
        b"\x00\xffgarbage\x13",  # not even text
        b"[1, 2, 3]",  # valid JSON, not an object
        b'{"version": 1, "requests": "nope"}',  # wrong field types
        b'{"version": 999}',  # a future version
        b"",  # empty
    ],
)
def test_a_malformed_snapshot_gives_one_error_and_a_cold_index(keep_open, tmp_path, caplog, content):
    cp = ContextPilotMemory(keep_open, index_dir=tmp_path)
    snapshot_path(cp, FA).write_bytes(content)
    with caplog.at_level(logging.ERROR, logger="cp_memory.memory"):
        first = cp.search(Q1, filters=FA, top_k=4)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "malformed" in errors[0].getMessage()
    assert first["context_pilot"]["fallback"] is False
    again = cp.search(Q1, filters=FA, top_k=4)["context_pilot"]  # alignment stays on for that scope
    assert again["fallback"] is False and again["prefix_len"] == 4


def test_reset_deletes_only_this_wrappers_snapshots_and_stray_temp_files_are_swept(tmp_path):
    from cp_memory.embedded import default_memory
    from tests.mem0_fixtures import ingest

    folder = tmp_path / "shared-index-dir"
    folder.mkdir()
    foreign = folder / ("f" * 24 + ".cpidx")
    foreign.write_bytes(_valid_snapshot())
    dead = folder / ("a" * 24 + ".cpidx.999999999.0123abcd.tmp")  # a writer that was killed
    alive = folder / ("b" * 24 + f".cpidx.{os.getpid()}.0123abcd.tmp")  # a writer still at work
    dead.write_bytes(b"half")
    alive.write_bytes(b"half")
    memory = default_memory()
    try:
        ingest(memory, "rz", ["Rita likes rowing.", "Rita likes chess."])
        cp = ContextPilotMemory(memory, index_dir=folder)
        assert not dead.exists() and alive.exists()
        cp.search("rowing", filters={"user_id": "rz"}, top_k=2)
        cp.save()
        mine = snapshot_path(cp, {"user_id": "rz"})
        assert mine.exists()
        cp.reset()
        assert not mine.exists() and foreign.exists() and alive.exists()
    finally:
        memory.close()


def test_two_processes_sharing_an_index_dir_never_corrupt_a_snapshot(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from cp_memory.config import ContextPilotConfig
        from cp_memory.scope import scope_of
        from cp_memory.memory.state import ScopeStore
        store = ScopeStore(ContextPilotConfig(index_dir={str(tmp_path)!r}, snapshot_every=1))
        who = sys.argv[1]
        for i in range(150):
            for user in ("shared", who):
                state = store.get(scope_of({{"user_id": user}}))
                with state.lock:
                    state.index.insert([(f"{{who}}-{{i}}-{{j}}", "d") for j in range(20)])
                    store.note_insert(state)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, w]) for w in ("p1", "p2")]
    assert [p.wait(timeout=240) for p in procs] == [0, 0]
    files = sorted(tmp_path.glob("*.cpidx"))
    assert len(files) == 3 and not list(tmp_path.glob("*.tmp"))
    for f in files:
        assert len(ContextIndex.restore(f.read_bytes())) > 0  # every snapshot is complete
