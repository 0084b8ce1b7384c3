"""Index snapshots under ``index_dir``: restore, the wrapper's configuration wins, malformed and odd files,
files of other writers, concurrent processes, pending turns and the scopes they keep."""

from __future__ import annotations

import gc
import json
import logging
import os
import stat
import subprocess
import sys
import textwrap
import threading
import weakref
import zlib
from pathlib import Path

import pytest

from tests.conftest import SPEAKER_A as A
from tests.conftest import SPEAKER_B as B
from tests.mem0_fixtures import require_mem0

require_mem0()

from cp_memory.core.index import ContextIndex  # noqa: E402
from cp_memory.memory import ContextPilotMemory, scope_of  # noqa: E402

pytestmark = pytest.mark.mem0

Q1 = "What does Caroline want to do for her career?"
QB = "What does Melanie like to paint?"
FA = {"user_id": A}
ROOT = Path(__file__).resolve().parents[2]


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
    order = first._cp_pipeline.scopes.get(scope_of(FA)).index.request_ids()
    first.save()
    second = ContextPilotMemory(keep_open, index_dir=tmp_path, max_requests_per_scope=3)
    assert second._cp_pipeline.scopes.get(scope_of(FA)).index.request_ids() == order
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
        from cp_memory.memory.config import ContextPilotConfig
        from cp_memory.core.scope import scope_of
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


# --- the wrapper's configuration wins for every option, the alignment mode included -------------------

SWAP_QUERIES = ("What does Caroline want to do for her career?", "Caroline's family", "adoption", "support group")


def test_a_wrapper_without_swap_never_swaps_after_restoring_a_swap_snapshot(keep_open, tmp_path):
    swapping = ContextPilotMemory(keep_open, index_dir=tmp_path, swap_budget=0.4, protect=0.0)
    dropped = [swapping.search(q, filters=FA, top_k=5)["context_pilot"]["dropped"] for q in SWAP_QUERIES]
    assert any(dropped)  # the snapshot really comes from a wrapper that swapped
    swapping.save()
    seen = []
    for q in SWAP_QUERIES:
        plain = ContextPilotMemory(keep_open, index_dir=tmp_path)  # no swap configured: restores that snapshot
        out = plain.search(q, filters=FA, top_k=5)
        seen.append((len(out["results"]), out["context_pilot"]["dropped"]))
    assert seen == [(5, [])] * len(SWAP_QUERIES)  # all of mem0's 5 results, none swapped out


def test_a_planted_snapshot_changes_no_option_of_the_restored_index(keep_open, tmp_path):
    planted = ContextIndex(alpha=0.5, swap_budget=1.0, protect=0.0, capacity_tokens=3, tail_order="retrieval")
    planted.insert([("m1", "d1"), ("m2", "d2")])
    doc = json.loads(zlib.decompress(planted.snapshot()))
    doc["options"]["linkage"] = "single"  # every stored option differs from the wrapper's
    cp = ContextPilotMemory(keep_open, index_dir=tmp_path)
    snapshot_path(cp, FA).write_bytes(zlib.compress(json.dumps(doc).encode()))
    index = cp.index_for(FA)
    assert len(index) == 1  # the planted tree was restored ...
    assert index.options() == cp._cp_pipeline.scopes.new_index().options()  # ... with none of its options


# --- odd files under index_dir: one error, that scope starts cold, searches never hang ----------------


def _odd_entry(kind: str, path: Path, tmp_path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "link to a valid snapshot":
        target = tmp_path / "elsewhere.bin"
        target.write_bytes(_valid_snapshot())
        path.symlink_to(target)
    elif kind == "folder":
        path.mkdir()
    elif kind == "zlib bomb":
        path.write_bytes(zlib.compress(b'{"version": 2' + b" " * (64 << 20) + b"}", 9))
    elif kind == "oversized":
        path.write_bytes(b"\x78\x9c" + os.urandom((16 << 20) + 10))


@pytest.mark.parametrize(
    "kind", ["fifo", "link to /dev/zero", "link to a valid snapshot", "folder", "zlib bomb", "oversized"]
)
def test_an_odd_file_at_a_snapshot_path_gives_one_error_and_a_cold_index(keep_open, tmp_path, caplog, kind):
    folder = tmp_path / "index"
    cp = ContextPilotMemory(keep_open, index_dir=folder)
    path = snapshot_path(cp, FA)
    _odd_entry(kind, path, tmp_path)
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(out=cp.search(Q1, filters=FA, top_k=4)), daemon=True)
    with caplog.at_level(logging.ERROR, logger="cp_memory.memory"):
        worker.start()
        worker.join(120)  # a liveness guard, not a timing: a blocked read never returns
        if worker.is_alive() and kind == "fifo":
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # release the blocked reader
    assert not worker.is_alive(), f"the search hung on {kind}"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "starting cold" in errors[0].getMessage()
    assert result["out"]["context_pilot"]["fallback"] is False
    again = cp.search(Q1, filters=FA, top_k=4)["context_pilot"]  # alignment stays on for that scope
    assert again["fallback"] is False and again["prefix_len"] == 4


# --- pending turns hold a scope's key, never its index -------------------------------------------------

USERS = [f"pt{i}" for i in range(8)]


@pytest.fixture(scope="module")
def many_users():
    from cp_memory.embedded import default_memory
    from tests.mem0_fixtures import ingest

    memory = default_memory()
    for u in USERS:
        ingest(memory, u, [f"{u} likes rowing.", f"{u} plays chess on Sundays.", f"{u} has a dog named Rex."])
    memory.close = lambda: None  # closed at teardown below
    yield memory
    type(memory).close(memory)


@pytest.fixture
def live_states(monkeypatch):
    """How many ScopeState objects (indexes) are alive: each one created is watched by a weak reference."""
    from cp_memory.memory import state as state_module

    created: list[weakref.ref] = []

    class Watched(state_module.ScopeState):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            created.append(weakref.ref(self))

    monkeypatch.setattr(state_module, "ScopeState", Watched)

    def count() -> int:
        gc.collect()
        return sum(1 for ref in created if ref() is not None)

    return count


def test_uncommitted_turns_keep_no_evicted_index_alive(many_users, live_states):
    cp = ContextPilotMemory(many_users, max_scopes=2)
    for u in USERS:  # every turn stays pending (never committed, never rolled back)
        cp.search("hobbies", filters={"user_id": u}, top_k=3, conversation_id="chat")
    assert len(cp._cp_pipeline.turns) == len(USERS)
    assert live_states() == 2  # max_scopes, however many turns are pending


def test_a_rollback_after_the_scope_was_evicted_leaves_its_restored_index(many_users, tmp_path):
    cp = ContextPilotMemory(many_users, index_dir=tmp_path, max_scopes=2)
    first = cp.search("hobbies", filters={"user_id": USERS[0]}, top_k=3, conversation_id="chat")
    rid = first["context_pilot"]["request_id"]
    for u in USERS[1:4]:  # USERS[0] is evicted, snapshotted with the pending request
        cp.search("hobbies", filters={"user_id": u}, top_k=3, conversation_id="chat")
    assert f"user_id={USERS[0]}" not in cp.scopes
    cp.rollback(first)  # the model call failed
    assert rid not in cp.index_for({"user_id": USERS[0]})
