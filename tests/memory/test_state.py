"""The snapshot folder behind the mem0 wrapper's per-scope indexes (``index_dir``), at the store level.

One file per full scope, named without ambiguity; only regular files are read, size-capped; the folder is
private and bounded; a snapshot replaced by another process is reported. mem0 is not needed here: the
store is fed block ids directly, as the search pipeline does.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

from cp_memory.core.index import ContextIndex
from cp_memory.core.scope import Scope, scope_of
from cp_memory.memory.config import ContextPilotConfig
from cp_memory.memory.state import ScopeStore

ROOT = Path(__file__).resolve().parents[2]
ALICE = scope_of({"user_id": "alice"})


def store(folder: Path, **options) -> ScopeStore:
    return ScopeStore(ContextPilotConfig(index_dir=folder, **options))


def remember(s: ScopeStore, scope: Scope, *blocks: str) -> None:
    """One request of ``blocks`` in the scope's index, snapshotted at once."""
    state = s.get(scope)
    with state.lock:
        state.index.insert([(b, "d") for b in blocks])
        s.save_state(state)


def blocks_of(s: ScopeStore, scope: Scope) -> set:
    index = s.get(scope).index
    return {b for rid in index.request_ids() for b, _ in index.order_of(rid)}


# --- names ------------------------------------------------------------------------------------------


def test_scopes_whose_string_forms_collide_never_share_a_snapshot(tmp_path):
    pair = scope_of({"user_id": "alice", "agent_id": "support"})
    forged = scope_of({"user_id": "alice&agent_id=support"})
    assert str(forged) == "user_id=alice%26agent_id=support" != str(pair)  # the display form escapes "&"
    first = store(tmp_path)
    remember(first, pair, "support-memory")
    remember(first, forged, "forged-memory")
    assert first.path(pair) != first.path(forged)  # and the file names differ
    second = store(tmp_path)  # after a restart each scope gets its own index back
    assert blocks_of(second, pair) == {"support-memory"} and blocks_of(second, forged) == {"forged-memory"}


def test_snapshots_named_by_earlier_versions_are_not_read(tmp_path):
    index = ContextIndex()
    index.insert([("old", "d")])
    legacy = tmp_path / (hashlib.sha1(str(ALICE).encode()).hexdigest()[:24] + ".cpidx")
    legacy.write_bytes(index.snapshot())  # such a name could belong to a colliding scope
    s = store(tmp_path)
    assert len(s.get(ALICE).index) == 0 and legacy.exists()  # cold, and the old file is left alone


# --- odd files ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "folder", "socket", "oversized"])
def test_only_a_regular_file_is_read(tmp_path, caplog, kind):
    s = store(tmp_path / "index", max_snapshot_bytes=4096)
    path = s.path(ALICE)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    elif kind == "socket":
        import socket

        sock = socket.socket(socket.AF_UNIX)
        try:
            sock.bind(str(path))
        except OSError as exc:  # a path too long for AF_UNIX
            pytest.skip(f"cannot bind a socket there: {exc}")
        sock.close()
    else:
        path.write_bytes(b"x" * 4097)
    with caplog.at_level(logging.ERROR, logger="cp_memory.memory"):
        state = s.get(ALICE)  # returns (a FIFO would block an ordinary open; /dev/zero never ends)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "starting cold" in errors[0]
    assert len(state.index) == 0
    with state.lock:  # the next snapshot replaces the odd entry with a regular file
        state.index.insert([("m", "d")])
        s.save_state(state)
    if kind != "folder":  # a folder cannot be replaced by a file: it stays cold, with one error per restore
        assert stat.S_ISREG(os.lstat(path).st_mode) and len(store(tmp_path / "index").get(ALICE).index) == 1


def test_a_snapshot_over_the_size_bound_is_not_written(tmp_path, caplog):
    s = store(tmp_path, max_snapshot_bytes=1024)
    state = s.get(ALICE)
    with state.lock, caplog.at_level(logging.WARNING, logger="cp_memory.memory"):
        state.index.insert([(os.urandom(8).hex(), "d") for _ in range(200)])
        s.save_state(state)
    assert not s.path(ALICE).exists()
    assert any("over max_snapshot_bytes" in r.getMessage() for r in caplog.records)


def test_a_deep_snapshot_over_max_requests_is_trimmed_on_restore_in_one_pass(tmp_path):
    # a snapshot of 3,000 nested requests (each ending one node deeper) was trimmed to max_requests_per_scope
    # by the scope's first searches, one request at a time, each walk going to the root under the scope's
    # lock (an 83 KiB file: 12.5 s of CPU); the restore now keeps the 8 most recent at once
    nodes = [[-1, 0, 1, [], None, None, 0]]
    nodes += [[i - 1, 0, int(i < 3000), [[f"m{i}", "d"]], None, [f"r{i}"], i] for i in range(1, 3001)]
    doc = {"version": 2, "options": {}, "tick": 3000, "nodes": nodes, "requests": [f"r{i}" for i in range(1, 3001)]}
    s = store(tmp_path, max_requests_per_scope=8)
    s.path(ALICE).write_bytes(zlib.compress(json.dumps(doc).encode()))
    state = s.get(ALICE)
    assert state.index.request_ids() == [f"r{i}" for i in range(2993, 3001)]
    assert state.index.order_of("r3000")[-1] == ("m3000", "d")  # the kept requests are whole


# --- the folder ---------------------------------------------------------------------------------------


def test_index_dir_is_created_private(tmp_path):
    folder = tmp_path / "a" / "cpidx"
    store(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_world_writable_index_dir_is_used_with_a_warning(tmp_path, caplog):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="cp_memory.memory"):
        remember(store(folder), ALICE, "m")
    assert any("world-writable" in r.getMessage() for r in caplog.records)


def test_an_index_dir_other_users_can_list_is_used_with_a_warning(tmp_path, caplog):
    folder = tmp_path / "listable"
    folder.mkdir()
    folder.chmod(0o755)  # was used silently: anyone could list the names
    with caplog.at_level(logging.WARNING, logger="cp_memory.memory"):
        remember(store(folder), ALICE, "m")
    assert any("can be read or listed by other users (mode 755)" in r.getMessage() for r in caplog.records)


def test_snapshot_names_are_salted_per_folder(tmp_path):
    from cp_memory.memory.snapshots import SALT_FILE, snapshot_name

    first, second = store(tmp_path / "a"), store(tmp_path / "b")
    guessed = snapshot_name(ALICE)  # what anyone can compute from a guessed user id
    assert first.path(ALICE).name != guessed and first.path(ALICE).name != second.path(ALICE).name
    salt = tmp_path / "a" / SALT_FILE
    assert stat.S_IMODE(salt.stat().st_mode) == 0o600
    remember(first, ALICE, "m")
    assert blocks_of(store(tmp_path / "a"), ALICE) == {"m"}  # the salt is the folder's: a restart reads it


def test_a_snapshot_written_before_the_salt_is_restored_and_renamed(tmp_path):
    from cp_memory.memory.snapshots import snapshot_name

    index = ContextIndex()
    index.insert([("before", "d")])
    (tmp_path / snapshot_name(ALICE)).write_bytes(index.snapshot())  # an unsalted name, as earlier versions wrote
    bob = scope_of({"user_id": "bob"})
    (tmp_path / snapshot_name(bob)).write_bytes(index.snapshot())
    s = store(tmp_path)
    assert blocks_of(s, ALICE) == {("before")}
    assert s.path(ALICE).exists() and not (tmp_path / snapshot_name(ALICE)).exists()
    s.forget_matching({"user_id": "bob"})  # delete_all finds an unsalted snapshot too
    assert not (tmp_path / snapshot_name(bob)).exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another user needs root")
def test_an_index_dir_owned_by_another_user_is_used_with_a_warning(tmp_path, caplog):
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    os.chown(folder, 4242, 4242)
    with caplog.at_level(logging.WARNING, logger="cp_memory.memory"):
        store(folder)
    assert any("owned by uid 4242" in r.getMessage() for r in caplog.records)


# --- bounds -------------------------------------------------------------------------------------------


def test_snapshot_files_and_the_record_of_used_scopes_are_bounded(tmp_path):
    s = store(tmp_path, max_scopes=2, max_snapshots=5)
    users = [scope_of({"user_id": f"u{i}"}) for i in range(30)]
    for i, scope in enumerate(users):
        remember(s, scope, f"m{i}")
        os.utime(s.path(scope), ns=(i * 10**9, i * 10**9))  # a distinct age per file (no sleeping)
    on_disk = sorted(tmp_path.glob("*.cpidx"))
    assert len(on_disk) == 5 and on_disk == sorted(s.path(u) for u in users[-5:])  # the most recent kept
    assert len(s._used) == 5
    assert len(store(tmp_path).get(users[0]).index) == 0  # a trimmed scope starts cold
    assert blocks_of(store(tmp_path), users[-1]) == {"m29"}


def test_a_restart_trims_a_folder_over_the_bound(tmp_path):
    s = store(tmp_path)
    for i in range(12):
        scope = scope_of({"user_id": f"u{i}"})
        remember(s, scope, "m")
        os.utime(s.path(scope), ns=(i * 10**9, i * 10**9))
    store(tmp_path, max_snapshots=4)
    assert sorted(tmp_path.glob("*.cpidx")) == sorted(s.path(scope_of({"user_id": f"u{i}"})) for i in range(8, 12))


def test_delete_all_finds_every_snapshot_of_a_user_even_after_a_restart(tmp_path):
    first = store(tmp_path)
    alice_scopes = [
        ALICE,
        scope_of({"user_id": "alice", "agent_id": "support"}),
        scope_of({"user_id": "alice", "k": 1}),
    ]
    bob = scope_of({"user_id": "bob"})
    for scope in [*alice_scopes, bob]:
        remember(first, scope, "m")
    second = store(tmp_path)  # a new process: it never used these scopes
    second.forget_matching({"user_id": "alice"})
    assert [p.exists() for p in map(second.path, alice_scopes)] == [False, False, False]
    assert second.path(bob).exists()


# --- several processes --------------------------------------------------------------------------------


def test_a_snapshot_replaced_by_another_process_is_reported_once(tmp_path, caplog):
    mine = store(tmp_path)
    remember(mine, ALICE, "mine")
    other = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from cp_memory.memory.config import ContextPilotConfig
        from cp_memory.memory.state import ScopeStore
        from cp_memory.core.scope import scope_of
        s = ScopeStore(ContextPilotConfig(index_dir={str(tmp_path)!r}))
        state = s.get(scope_of({{"user_id": "alice"}}))
        with state.lock:
            state.index.insert([("theirs", "d")])
            s.save_state(state)
    """)
    subprocess.run([sys.executable, "-c", other], check=True, timeout=120)
    with caplog.at_level(logging.WARNING, logger="cp_memory.memory"):
        remember(mine, ALICE, "mine again")
        remember(mine, ALICE, "and again")
    warnings = [r.getMessage() for r in caplog.records if "another writer" in r.getMessage()]
    assert len(warnings) == 1 and "sticky routing" in warnings[0]


def test_no_report_when_only_this_process_writes(tmp_path, caplog):
    mine = store(tmp_path)
    with caplog.at_level(logging.WARNING, logger="cp_memory.memory"):
        for i in range(3):
            remember(mine, ALICE, f"m{i}")
        remember(store(tmp_path), ALICE, "after a restart")  # a restore counts as this process's read
    assert not [r for r in caplog.records if "another writer" in r.getMessage()]
