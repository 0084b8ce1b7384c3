"""Owner-death watchdog for an engine's process group. Standard library only: it runs as a script.

:class:`~cp_memory.engine._server.ManagedServer` starts it right after the engine, in a session
of its own (a Ctrl-C or a ``kill -- -PGID`` aimed at the owner does not reach it)::

    python -I -S _watchdog.py PGID GRACE_S [WORKDIR]

Its stdin is the read end of a pipe whose only write end the owner holds. The owner writes
:data:`DISARM` once it has stopped the engine itself. End of file without that byte means the
owner is gone (``kill -9``, a crash, ``os._exit``), whatever thread started the engine: the
watchdog then sends SIGTERM to the engine's whole process group (multi-process engines such as
SGLang included), waits up to ``GRACE_S`` seconds for the group to empty, sends SIGKILL to what
is left (an engine whose SIGTERM handler deadlocked, as llama-server's can) and removes
``WORKDIR``.

Then it removes the POSIX semaphores the group leaked (:func:`sweep_semaphores`). vLLM's processes create
``multiprocessing`` locks (spawn context: named semaphores, ``/dev/shm/sem.mp-*``, 32 bytes) that only
``multiprocessing``'s resource tracker unlinks once its users died without cleaning up. That tracker is
one of the group's processes: it ignores SIGTERM to outlive the others, so the SIGKILL that ends a group
still starting after the grace period (vLLM loading its model ignores SIGTERM meanwhile) kills it first —
about one owner kill in three of a starting vLLM left one. The same tracker unlinks vLLM's
``multiprocessing.shared_memory`` segments (``/dev/shm/psm_*``, 160-250 MiB each on CPU), lost the same way.
A file is removed only when it is this user's, named ``sem.mp-*`` or ``psm_*``, created after the engine
started, and mapped by no live process (matched by inode in ``/proc/*/maps``): nobody can use it any more.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time

#: the byte an owner writes when it stopped the engine itself: exit without signalling anything
DISARM = b"D"
#: where POSIX named semaphores and shared memory live (Linux), and the prefixes of Python's multiprocessing
#: (``multiprocessing`` locks: ``sem.mp-*``; ``multiprocessing.shared_memory``: ``psm_*``)
SHM_DIR = "/dev/shm"
SEM_PREFIX = "sem.mp-"
SHM_PREFIXES = (SEM_PREFIX, "psm_")


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` exists (zombies not yet reaped count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal: it exists
        return True
    return True


def stop_group(pgid: int, grace_s: float, poll_s: float = 0.05) -> bool:
    """SIGTERM to group ``pgid``, wait up to ``grace_s`` for it to empty, then SIGKILL.

    Returns ``True`` when the group left on SIGTERM alone.
    """
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return True
        time.sleep(poll_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    return False


def wait_group_gone(pgid: int, timeout_s: float, poll_s: float = 0.05) -> bool:
    """Wait up to ``timeout_s`` for group ``pgid`` to empty; whether it did."""
    deadline = time.monotonic() + timeout_s
    while group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


def mapped_inodes(folder: str = SHM_DIR) -> set[int]:
    """Inodes of files under ``folder`` that a live process we may inspect has mapped (``/proc/*/maps``)."""
    inodes: set[int] = set()
    try:
        pids = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return inodes
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    parts = line.split(None, 5)
                    if len(parts) == 6 and parts[5].startswith(folder + "/"):
                        inodes.add(int(parts[4]))
        except (OSError, ValueError):
            continue
    return inodes


def sweep_semaphores(since: float, folder: str = SHM_DIR) -> list[str]:
    """Remove this user's ``sem.mp-*`` semaphores and ``psm_*`` shared memory segments in ``folder`` created at
    or after ``since`` (epoch seconds) that no live process maps; returns their names (module doc)."""
    try:
        entries = [e for e in os.scandir(folder) if e.name.startswith(SHM_PREFIXES)]
    except OSError:
        return []
    uid = os.getuid()
    candidates = []
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if st.st_uid == uid and os.path.isfile(entry.path) and not os.path.islink(entry.path):
            if max(st.st_ctime, st.st_mtime) >= since:
                candidates.append((entry, st.st_ino))
    if not candidates:
        return []
    in_use = mapped_inodes(folder)
    removed = []
    for entry, inode in candidates:
        if inode not in in_use:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
                removed.append(entry.name)
    return removed


def owner_disarmed(fd: int) -> bool:
    """Block until the owner disarms (``True``) or its end of the pipe closes (``False``)."""
    while True:
        chunk = os.read(fd, 64)
        if not chunk:
            return False
        if DISARM in chunk:
            return True


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        sys.stderr.write("usage: _watchdog.py PGID GRACE_S [WORKDIR]\n")
        return 2
    pgid, grace_s = int(argv[1]), float(argv[2])
    workdir = argv[3] if len(argv) == 4 else ""
    started = time.time() - 1.0  # the engine started just before its watchdog (and a clock tick of slack)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if owner_disarmed(0):
        return 0
    graceful = stop_group(pgid, grace_s)
    sys.stderr.write(
        f"[cp_memory watchdog] owner of process group {pgid} is gone: stopped it with "
        f"{'SIGTERM' if graceful else f'SIGKILL after {grace_s:g}s of SIGTERM'}\n"
    )
    if workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    wait_group_gone(pgid, 10.0)  # zombies not reaped yet count; they map nothing: sweep either way
    leaked = sweep_semaphores(started)
    if leaked:
        sys.stderr.write(f"[cp_memory watchdog] removed semaphores the group leaked: {', '.join(leaked)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
