"""Engine processes never outlive their owner, not even when it is killed, without llama-server: a fake engine
of two processes that both ignore SIGTERM, owned by a Python process that gets ``kill -9``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import cp_memory
from cp_memory.engine._workdir import (
    OWNER_FILE,
    make_workdir,
    process_start_time,
    sweep_stale_workdirs,
)

from ._owner import GroupEngine

OWNER = Path(__file__).with_name("_owner.py")


def alive(pid: int) -> bool:
    """The PID exists and is not a zombie waiting to be reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] != b"Z"


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def run_owner(*args: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """Start ``_owner.py ARGS`` and read the JSON line it prints once its server is healthy."""
    # the owner imports the same cp_memory as this test process
    root = str(Path(cp_memory.__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    owner = subprocess.Popen(
        [sys.executable, str(OWNER), *args], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": path}
    )
    assert owner.stdout is not None
    line = owner.stdout.readline()
    if not line:
        owner.wait()
        pytest.fail(f"owner exited with {owner.returncode} before its server was up")
    return owner, json.loads(line)


@pytest.mark.parametrize("thread", ["main", "worker"])
def test_killed_owner_takes_a_sigterm_deaf_process_group_with_it(thread: str) -> None:
    """kill -9 of the owner: the watchdog sends TERM to the group, then KILL after the grace
    (1 s here), to the leader *and* the process it forked; the work directory is removed.
    From a worker thread no pdeathsig applies: the watchdog alone does it."""
    owner, info = run_owner("group", thread)
    pids = info["pids"]
    try:
        assert all(alive(p) for p in pids)  # the starting thread has exited: still running
    finally:
        owner.kill()
        owner.wait()
    left = wait_gone(pids, timeout=15)
    for pid in left:  # do not leave the orphans of a failed run behind
        os.kill(pid, 9)
    assert left == []
    deadline = time.monotonic() + 5
    while Path(info["workdir"]).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(info["workdir"]).exists()


def test_graceful_stop_disarms_the_watchdog() -> None:
    server = GroupEngine(stop_timeout=1.0).start()
    watchdog = server._watchdog
    assert watchdog is not None and watchdog.proc.poll() is None
    workdir = server.workdir()
    server.stop()  # TERM is ignored by both processes: KILL after 1 s
    assert watchdog.proc.poll() == 0  # told to stand down, exited cleanly (and was reaped)
    assert server._watchdog is None and not workdir.exists()
    server.stop()  # idempotent


def test_die_with_parent_false_starts_no_watchdog() -> None:
    with GroupEngine(stop_timeout=1.0, die_with_parent=False) as server:
        assert server._watchdog is None and server.is_running


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _owned_dir(root: Path, name: str, content: str | None) -> Path:
    path = root / name
    path.mkdir()
    if content is not None:
        (path / OWNER_FILE).write_text(content)
    (path / "server.log").write_text("log")
    return path


def test_sweep_removes_only_dirs_of_dead_owners(tmp_path: Path) -> None:
    me = os.getpid()
    dead = _owned_dir(tmp_path, "cp_memory-llama-server-1-a", f"{_dead_pid()} -\n")
    live = _owned_dir(tmp_path, "cp_memory-llama-server-2-b", f"{me} {process_start_time(me)}\n")
    live_unknown_start = _owned_dir(tmp_path, "cp_memory-sglang-3-c", f"{me} -\n")
    recycled = _owned_dir(tmp_path, "cp_memory-sglang-4-d", f"{me} 1\n")  # same PID, other start
    no_owner = _owned_dir(tmp_path, "cp_memory-other-tool", None)
    garbage = _owned_dir(tmp_path, "cp_memory-garbage", "not a pid\n")
    not_ours = _owned_dir(tmp_path, "unrelated-1", f"{_dead_pid()} -\n")
    link = tmp_path / "cp_memory-link"
    link.symlink_to(_owned_dir(tmp_path, "target", f"{_dead_pid()} -\n"))

    removed = sweep_stale_workdirs(tmp_path)

    assert sorted(removed) == sorted([dead, recycled])
    for kept in (live, live_unknown_start, no_owner, garbage, not_ours, link):
        assert kept.exists(), kept
    assert (tmp_path / "target").exists()


def test_make_workdir_records_its_owner(tmp_path: Path) -> None:
    stale = _owned_dir(tmp_path, "cp_memory-llama-server-9-z", f"{_dead_pid()} -\n")
    path = make_workdir("llama-server", tmp_path)
    assert not stale.exists()  # swept on the way
    assert path.name.startswith(f"cp_memory-llama-server-{os.getpid()}-")
    assert oct(path.stat().st_mode & 0o777) == "0o700"
    pid, started = (path / OWNER_FILE).read_text().split()
    assert int(pid) == os.getpid() and started == str(process_start_time(os.getpid()))
    assert sweep_stale_workdirs(tmp_path) == [] and path.exists()


# --- semaphores a killed engine group leaks (issue 28 item 12) --------------------------------------------

#: an engine that is still "loading" (SIGTERM ignored, as vLLM while it loads its model) and holds a spawn-context
#: multiprocessing lock: a named POSIX semaphore that only multiprocessing's resource tracker — a process of the
#: same group, which ignores SIGTERM too — unlinks once its users died without cleaning up
SEMAPHORE_ENGINE = """
import multiprocessing, signal, sys, time
from multiprocessing import shared_memory
signal.signal(signal.SIGTERM, signal.SIG_IGN)
lock = multiprocessing.get_context("spawn").Lock()
segment = shared_memory.SharedMemory(create=True, size=4096)  # vLLM's CPU message queues: psm_*, ~200 MiB
print(lock._semlock.name, segment.name, flush=True)
time.sleep(600)
"""


def _semaphore_engine() -> tuple[subprocess.Popen[str], Path, Path]:
    engine = subprocess.Popen(
        [sys.executable, "-c", SEMAPHORE_ENGINE], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert engine.stdout is not None
    name, segment = engine.stdout.readline().split()  # "/mp-xxxxxxxx", "psm_xxxxxxxx"
    semaphore, memory = Path("/dev/shm") / f"sem.{name.lstrip('/')}", Path("/dev/shm") / segment.lstrip("/")
    assert semaphore.exists() and memory.exists(), f"no {semaphore} or {memory}"
    return engine, semaphore, memory


def _gone(path: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not path.exists()


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="POSIX semaphores live in /dev/shm on Linux only")
def test_a_killed_owner_leaves_no_semaphore_of_its_starting_engine(tmp_path: Path) -> None:
    # an owner killed while vLLM started: its watchdog's SIGKILL (after the grace) hit the resource tracker
    # before it unlinked vLLM's semaphore: a 32-byte /dev/shm/sem.mp-* file left, one kill in three
    from cp_memory.engine._process import Watchdog

    engine, semaphore, memory = _semaphore_engine()
    with open(tmp_path / "watchdog.log", "ab") as log:
        watchdog = Watchdog.start(engine.pid, 0.5, None, log)
    assert watchdog is not None
    try:
        assert watchdog._pipe is not None
        watchdog._pipe.close()  # the owner dies: its end of the pipe closes without the disarm byte
        engine.wait(timeout=30)  # reaped, as init reaps the engine of a dead owner
        watchdog.proc.wait(timeout=30)
        said = (tmp_path / "watchdog.log").read_text()
        assert _gone(semaphore, 5.0) and _gone(memory, 5.0), f"{semaphore} or {memory} leaked; watchdog: {said}"
    finally:
        semaphore.unlink(missing_ok=True)
        memory.unlink(missing_ok=True)
        if engine.poll() is None:
            os.killpg(engine.pid, 9)


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="POSIX semaphores live in /dev/shm on Linux only")
def test_stopping_a_starting_engine_leaves_no_semaphore() -> None:
    from cp_memory.engine._process import terminate

    engine, semaphore, memory = _semaphore_engine()
    other = multiprocessing_semaphore_of_a_live_process()
    try:
        terminate(engine, 0.5, stragglers=True, since=time.time() - 60)  # TERM ignored, KILL, then the sweep
        assert _gone(semaphore, 5.0) and _gone(memory, 5.0), f"{semaphore} or {memory} leaked"
        assert other[1].exists()  # a semaphore a live process maps is never touched
    finally:
        semaphore.unlink(missing_ok=True)
        memory.unlink(missing_ok=True)
        other[0].kill()
        other[0].wait()


def multiprocessing_semaphore_of_a_live_process() -> tuple[subprocess.Popen[str], Path]:
    holder = subprocess.Popen(
        [sys.executable, "-c", SEMAPHORE_ENGINE.replace("signal.signal(signal.SIGTERM, signal.SIG_IGN)", "")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    name = holder.stdout.readline().split()[0]
    return holder, Path("/dev/shm") / f"sem.{name.lstrip('/')}"
