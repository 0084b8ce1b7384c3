"""Private temporary directories of engine servers, and the sweep of those a dead owner left.

A server's directory (its log, llama.cpp's slot files) is ``<tmp>/cp_memory-<engine>-<pid>-<rnd>``
with an owner file holding the owner's PID and its start time (``/proc/<pid>/stat`` field 22, so a
recycled PID is not mistaken for the owner). A directory is swept only when all of these hold: its
name starts with ``cp_memory-``, it is a real directory (not a link) of this user, its owner file
parses, and that owner is dead. A live owner's directory, or one whose owner file is missing or
unreadable (someone else's format, or a directory being created), is never touched.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["OWNER_FILE", "PREFIX", "make_workdir", "process_start_time", "sweep_stale_workdirs"]

PREFIX = "cp_memory-"
OWNER_FILE = ".cp_memory_owner"


def process_start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot, ``None`` when unknown (no /proc, gone)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()  # the command name may hold spaces and parens
    try:
        return int(fields[19])  # field 22 of the whole line; fields[0] is field 3
    except (IndexError, ValueError):
        return None


def _owner_alive(pid: int, started: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, belongs to someone else: only the start time can tell it is not the owner
    now = process_start_time(pid)
    return started is None or now is None or now == started


def _read_owner(path: Path) -> tuple[int, int | None] | None:
    try:
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            return None
        parts = (path / OWNER_FILE).read_text(encoding="ascii").split()
        pid = int(parts[0])
        started = int(parts[1]) if len(parts) > 1 and parts[1] != "-" else None
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return None
    return (pid, started) if pid > 0 else None


def sweep_stale_workdirs(root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the ``cp_memory-*`` directories under ``root`` (default: the temp dir) whose owner
    is dead; returns what was removed."""
    base = Path(root) if root is not None else Path(tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(base.glob(PREFIX + "*"))
    except OSError:
        return removed
    for path in entries:
        owner = _read_owner(path)
        if owner is None or _owner_alive(*owner):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            logger.info("removed %s left behind by dead process %d", path, owner[0])
            removed.append(path)
    return removed


def make_workdir(engine_name: str, root: str | os.PathLike[str] | None = None) -> Path:
    """Sweep stale directories, then create this process's new private directory (mode 0700)."""
    sweep_stale_workdirs(root)
    pid = os.getpid()
    path = Path(
        tempfile.mkdtemp(prefix=f"{PREFIX}{engine_name}-{pid}-", dir=os.fspath(root) if root is not None else None)
    )
    started = process_start_time(pid)
    (path / OWNER_FILE).write_text(f"{pid} {started if started is not None else '-'}\n", encoding="ascii")
    return path
