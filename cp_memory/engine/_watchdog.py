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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
