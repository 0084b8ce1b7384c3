"""The snapshot folder (``index_dir``): one file per scope, read defensively, written atomically, bounded.

* **Names** encode the full scope unambiguously: one field per entity id and one for the other filter
  conditions, each the first 20 hex digits of HMAC-SHA256 over ``key NUL value`` (``_`` when absent) keyed
  with the folder's **salt**, e.g. ``<user>.<agent>.<run>.<conditions>.cpidx``. No user id can make two
  scopes share a file, ``delete_all(user_id=...)`` finds every snapshot of that user by name, and without
  the salt nobody can confirm a guessed user id from a name. The salt is 32 random bytes in
  ``.cpidx-salt`` (0600) inside the folder, created once (atomically: every process sharing the folder
  reads the same one). Names written before the salt (the same fields, unkeyed SHA-256) are still read:
  on its first restore such a snapshot is renamed to its salted name. Files named by even earlier
  versions (``<sha1(scope)[:24]>.cpidx``, which could collide) are never read: those scopes start cold.
* **Reading** accepts only a regular file that is not a symbolic link, opened without blocking and checked
  with ``fstat`` before a byte is read, at most ``max_bytes`` long. A FIFO, a device, a link (to
  ``/dev/zero`` or anywhere), a folder or an oversized file is refused with a reason; the store logs one
  error and the scope starts cold.
* **Writing**: a unique temporary file (mode 0600), fsync'ed, atomically renamed: a reader sees the
  previous snapshot or the new one, never a torn file; for one scope the last writer wins. Before the
  rename the current file is compared with the one this process last read or wrote: if another writer
  replaced it, several processes serve this scope and the store warns (:class:`WriteResult`).
* **Bounds**: at most ``max_files`` snapshots stay in the folder. At start-up and after every
  ``max_files // 10`` new files, the least recently used beyond the bound (by modification time; a
  restore counts as a use) are deleted, except those of scopes in memory. Stray ``.tmp`` files of writers
  that are gone are removed at start-up.
* **The folder** is created 0700; an existing folder that is world-writable or owned by another user is
  used with a warning (anyone who can write it can plant snapshots: they change only cache hits, never
  what reaches a prompt, but they are still not this process's), and so is one that other users can
  read or list (e.g. 0755: they see how many scopes there are and when each was used; the salt keeps them
  from telling whose).
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import logging
import os
import re
import stat
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..core.scope import ENTITY_KEYS, Scope

__all__ = ["SALT_FILE", "SNAPSHOT_SUFFIX", "FileId", "SnapshotFolder", "SnapshotRead", "WriteResult", "snapshot_name"]

logger = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".cpidx"
SALT_FILE = ".cpidx-salt"
_SALT_BYTES = 32
_FIELD = r"(?:[0-9a-f]{20}|_)"
_NAME = re.compile(rf"^{_FIELD}\.{_FIELD}\.{_FIELD}\.{_FIELD}\.cpidx$")
_OLD_NAME = r"[0-9a-f]{24}\.cpidx"  # written before scope names were unambiguous: never read
_TMP = re.compile(rf"^(?:{_FIELD}\.{_FIELD}\.{_FIELD}\.{_FIELD}\.cpidx|{_OLD_NAME})\.(\d+)\.[0-9a-f]+\.tmp$")

#: (st_dev, st_ino) of a snapshot file: a new snapshot is always a new file
FileId = tuple[int, int]


def _field(key: str, value: str | None, salt: bytes | None = None) -> str:
    if value is None or value == "":
        return "_"
    text = f"{key}\0{value}".encode()
    digest = hashlib.sha256(text) if salt is None else hmac.new(salt, text, hashlib.sha256)
    return digest.hexdigest()[:20]


def snapshot_name(scope: Scope, salt: bytes | None = None) -> str:
    """The file name of ``scope``'s snapshot in a folder with ``salt`` (None: the unsalted name written
    before folders had a salt; module doc)."""
    values = (scope.user_id, scope.agent_id, scope.run_id, scope.conditions)
    return ".".join(_field(k, v, salt) for k, v in zip((*ENTITY_KEYS, "conditions"), values)) + SNAPSHOT_SUFFIX


@dataclass(frozen=True)
class SnapshotRead:
    """What reading one scope's snapshot found: ``data`` (None: no file, or ``error`` says why not),
    and the identity of the entry found (None when there is none)."""

    data: bytes | None
    identity: FileId | None
    error: str | None = None


@dataclass(frozen=True)
class WriteResult:
    """A written snapshot: its identity, and whether it replaced a file this process did not last see
    (another writer's; ``replaced_foreign``)."""

    identity: FileId
    replaced_foreign: bool


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return name
    return "not a regular file"


class SnapshotFolder:
    """``index_dir``: read, write, delete and bound the scopes' snapshot files. Thread-safe."""

    def __init__(
        self, path: Path, *, max_files: int, max_bytes: int, in_use: Callable[[], Iterable[str]] = tuple
    ) -> None:
        self.path = Path(path)
        self.max_files = max_files
        self.max_bytes = max_bytes
        self._in_use = in_use
        self._lock = threading.Lock()
        self._created = 0  # new files written since the last trim
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._check_folder()
        self.salt = _folder_salt(self.path)
        self._sweep_stray_tmp()
        self.trim()

    # ------------------------------------------------------------------ names
    def name(self, scope: Scope) -> str:
        return snapshot_name(scope, self.salt)

    def file(self, scope: Scope) -> Path:
        return self.path / self.name(scope)

    def _migrate(self, scope: Scope, path: Path) -> None:
        """A snapshot still under its unsalted name (written before the folder had a salt) takes its salted
        name, once; a concurrent restore may have done it first."""
        legacy = self.path / snapshot_name(scope)
        try:
            os.rename(legacy, path)
            logger.info("renamed the snapshot %s to its salted name %s", legacy.name, path.name)
        except FileNotFoundError:
            pass
        except OSError as exc:
            logger.warning("could not rename the unsalted snapshot %s: %s", legacy, exc)

    # ------------------------------------------------------------------ read
    def read(self, scope: Scope) -> SnapshotRead:
        """The scope's snapshot bytes, refusing anything but a regular file of at most ``max_bytes``."""
        path = self.file(scope)
        if not os.path.lexists(path):
            self._migrate(scope, path)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return SnapshotRead(None, None)
        except OSError as exc:
            return SnapshotRead(None, None, f"cannot stat it: {exc}")
        identity = (st.st_dev, st.st_ino)
        if not stat.S_ISREG(st.st_mode):
            return SnapshotRead(None, identity, f"it is {_kind(st.st_mode)}, not a regular file")
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            return SnapshotRead(None, None)
        except OSError as exc:
            why = "it became a symbolic link" if exc.errno == errno.ELOOP else str(exc)
            return SnapshotRead(None, identity, f"cannot open it: {why}")
        try:
            st = os.fstat(fd)
            identity = (st.st_dev, st.st_ino)
            if not stat.S_ISREG(st.st_mode):
                return SnapshotRead(None, identity, f"it is {_kind(st.st_mode)}, not a regular file")
            if st.st_size > self.max_bytes:
                return SnapshotRead(
                    None, identity, f"{st.st_size} bytes, over max_snapshot_bytes={self.max_bytes}; not read"
                )
            chunks, left = [], self.max_bytes + 1
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            data = b"".join(chunks)
            if len(data) > self.max_bytes:
                return SnapshotRead(None, identity, f"it grew over max_snapshot_bytes={self.max_bytes}; not read")
            try:
                os.utime(fd)  # a restore is a use: the trim keeps recently used snapshots
            except OSError:
                pass
            return SnapshotRead(data, identity)
        except OSError as exc:
            return SnapshotRead(None, identity, f"cannot read it: {exc}")
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ write
    def write(self, scope: Scope, data: bytes, last_seen: FileId | None) -> WriteResult:
        """Atomically replace the scope's snapshot with ``data``. ``last_seen``: the identity of the file as
        this process last read or wrote it (None: it saw none). Raises ``OSError`` on failure."""
        path = self.file(scope)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
                st = os.fstat(f.fileno())
            try:
                before = os.lstat(path)
                current: FileId | None = (before.st_dev, before.st_ino)
            except FileNotFoundError:
                current = None
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if current is None:
            self._note_created()
        return WriteResult((st.st_dev, st.st_ino), current is not None and current != last_seen)

    # ------------------------------------------------------------------ delete
    def delete(self, scope: Scope) -> None:
        self.file(scope).unlink(missing_ok=True)
        (self.path / snapshot_name(scope)).unlink(missing_ok=True)  # an unsalted one not restored since

    def delete_names(self, names: Iterable[str]) -> None:
        for name in names:
            if _NAME.match(name):
                (self.path / name).unlink(missing_ok=True)

    def delete_matching(self, entities: Mapping[str, str]) -> int:
        """Delete every snapshot (of any writer) whose scope has these entity ids; returns how many."""
        wanted = [
            {ENTITY_KEYS.index(k): _field(k, v, salt) for k, v in entities.items() if k in ENTITY_KEYS}
            for salt in (self.salt, None)  # salted names, and unsalted ones written before the salt
        ]
        if not wanted[0]:
            return 0
        deleted = 0
        for name in self._names():
            fields = name.split(".")
            if any(all(fields[i] == h for i, h in want.items()) for want in wanted):
                (self.path / name).unlink(missing_ok=True)
                deleted += 1
        return deleted

    # ------------------------------------------------------------------ bounds
    def trim(self) -> int:
        """Delete the least recently used snapshots beyond ``max_files`` (never one of a scope in memory)."""
        with self._lock:
            self._created = 0
        entries = []
        for name in self._names():
            try:
                entries.append((os.lstat(self.path / name).st_mtime_ns, name))
            except FileNotFoundError:
                continue
        over = len(entries) - self.max_files
        if over <= 0:
            return 0
        keep = set(self._in_use())
        deleted = 0
        for _, name in sorted(entries):
            if deleted >= over:
                break
            if name in keep:
                continue
            (self.path / name).unlink(missing_ok=True)
            deleted += 1
        logger.info(
            "trimmed %d least recently used snapshot(s) in %s (max_snapshots=%d)", deleted, self.path, self.max_files
        )
        return deleted

    def _note_created(self) -> None:
        with self._lock:
            self._created += 1
            due = self._created >= max(1, self.max_files // 10)
        if due:
            self.trim()

    def _names(self) -> list[str]:
        try:
            with os.scandir(self.path) as it:
                return [e.name for e in it if _NAME.match(e.name)]
        except OSError as exc:
            logger.error("cannot list the snapshot folder %s: %s", self.path, exc)
            return []

    # ------------------------------------------------------------------ start-up
    def _check_folder(self) -> None:
        st = os.stat(self.path)
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO) and not st.st_mode & stat.S_IWOTH:
            logger.warning(
                "index_dir %s can be read or listed by other users (mode %o): they see how many scopes "
                "there are and when each was used (not whose: names are salted); use chmod 700",
                self.path,
                stat.S_IMODE(st.st_mode),
            )
        if st.st_mode & stat.S_IWOTH:
            logger.warning(
                "index_dir %s is world-writable (mode %o): any local user can plant or replace snapshots; "
                "use a folder only this user can write (chmod 700)",
                self.path,
                stat.S_IMODE(st.st_mode),
            )
        euid = os.geteuid() if hasattr(os, "geteuid") else None
        if euid is not None and st.st_uid != euid:
            logger.warning(
                "index_dir %s is owned by uid %d, not by this process (uid %d): its owner can plant or "
                "replace snapshots",
                self.path,
                st.st_uid,
                euid,
            )

    def _sweep_stray_tmp(self) -> None:
        try:
            with os.scandir(self.path) as it:
                names = [e.name for e in it if e.name.endswith(".tmp")]
        except OSError:
            return
        for name in names:
            m = _TMP.match(name)
            if m is not None and not _pid_alive(int(m.group(1))):
                logger.info("removing a stray snapshot temp file of a dead writer: %s", self.path / name)
                (self.path / name).unlink(missing_ok=True)


def _folder_salt(folder: Path) -> bytes:
    """The folder's salt (module doc): read from ``.cpidx-salt``, or created there — atomically, by a
    hard link of a complete 0600 file, so concurrent processes all end up with the first one written.
    An unreadable or malformed salt file is logged and replaced by a salt of this process alone (its
    snapshots are then restored by no other process)."""
    path = folder / SALT_FILE
    for _ in range(3):
        try:
            return _read_salt(path)
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            logger.error("the snapshot salt %s is unusable (%s): this process uses a salt of its own", path, exc)
            return os.urandom(_SALT_BYTES)
        tmp = folder / f"{SALT_FILE}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(_SALT_BYTES).hex().encode())
                f.flush()
                os.fsync(f.fileno())
            os.link(tmp, path)  # fails if another process published its salt first: read that one
        except FileExistsError:
            pass
        except OSError as exc:
            logger.error("cannot create the snapshot salt %s (%s): this process uses a salt of its own", path, exc)
            return os.urandom(_SALT_BYTES)
        finally:
            tmp.unlink(missing_ok=True)
    return _read_salt(path)


def _read_salt(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != 2 * _SALT_BYTES:
            raise ValueError(f"not a regular file of {2 * _SALT_BYTES} hex digits")
        text = os.read(fd, 2 * _SALT_BYTES + 1)
    finally:
        os.close(fd)
    return bytes.fromhex(text.decode("ascii"))
