"""Per-scope state of the mem0 wrapper: one context index per full scope, LRU-bounded, snapshotted.

Persistence (``index_dir``):

* a snapshot is one file per scope, ``<sha1(scope)[:24]>.cpidx``, created with mode 0600 and written to a
  unique temporary file that is fsync'ed and atomically renamed: a reader (this or another process) sees
  the previous snapshot or the new one, never a torn file. Processes sharing an ``index_dir`` therefore
  never corrupt each other's snapshots; for one scope the last writer wins (each snapshot is complete);
* a stray ``.tmp`` left by a writer that was killed is removed at start-up when its writer is gone;
* restoring never trusts the snapshot's settings: the wrapper's configuration (alpha, budgets,
  capacity...) wins. Any malformed snapshot (truncated, garbage, wrong types, unknown version) logs one
  error and gives that scope a cold index — alignment stays on;
* ``forget_all`` deletes only the snapshots of scopes this wrapper has used, never other files of a
  shared folder.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import ContextPilotConfig
from ..index import ContextIndex
from ..lru import LRUMap
from ..scope import Scope

__all__ = ["SNAPSHOT_SUFFIX", "ScopeState", "ScopeStore"]

logger = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".cpidx"
_TMP = re.compile(r"^[0-9a-f]{24}\.cpidx\.(\d+)\.[0-9a-f]+\.tmp$")


@dataclass
class ScopeState:
    """One scope's index and the live request ids it holds (oldest first)."""

    scope: Scope
    index: ContextIndex
    requests: deque[Any] = field(default_factory=deque)
    lock: threading.Lock = field(default_factory=threading.Lock)
    unsaved: int = 0


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


class ScopeStore:
    """Scope -> :class:`ScopeState` (LRU; an evicted scope is snapshotted first). Thread-safe."""

    def __init__(self, config: ContextPilotConfig) -> None:
        self.config = config
        self.index_dir = Path(config.index_dir) if config.index_dir is not None else None
        self._used: dict[str, Scope] = {}  # snapshot name -> scope, for every scope this store touched
        self._used_lock = threading.Lock()
        if self.index_dir is not None:
            self.index_dir.mkdir(parents=True, exist_ok=True)
            self._clean_stray_tmp()
        self.states: LRUMap[Scope, ScopeState] = LRUMap(config.max_scopes, on_evict=self._on_evicted)

    # ------------------------------------------------------------------ index construction
    def _index_options(self) -> dict[str, Any]:
        c = self.config
        options = {
            "alpha": c.alpha,
            "extra_budget": c.extra_budget,
            "capacity_tokens": c.capacity_tokens,
            "tail_order": c.tail_order,
        }
        if c.swap_budget:
            options.update(swap_budget=c.swap_budget, protect=c.protect)
        return options

    def new_index(self) -> ContextIndex:
        return ContextIndex(**self._index_options())

    def path(self, scope: Scope) -> Path:
        assert self.index_dir is not None
        name = hashlib.sha1(str(scope).encode("utf-8")).hexdigest()[:24]
        return self.index_dir / f"{name}{SNAPSHOT_SUFFIX}"

    def _restore(self, scope: Scope) -> ContextIndex | None:
        if self.index_dir is None:
            return None
        path = self.path(scope)
        with self._used_lock:
            self._used[path.name] = scope
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            logger.error("could not read the context index snapshot of %s (%s): %s; starting cold", scope, path, exc)
            return None
        try:
            index = ContextIndex.restore(data, **self._index_options())
        except Exception as exc:  # any malformed snapshot: one error, a cold index, alignment stays on
            logger.error(
                "malformed context index snapshot for %s (%s): %s: %s; starting cold",
                scope,
                path,
                type(exc).__name__,
                exc,
            )
            return None
        logger.debug("restored context index for %s (%d requests)", scope, len(index))
        return index

    def get(self, scope: Scope) -> ScopeState:
        """The scope's state, created (restored from a snapshot when there is one) on first use."""

        def create() -> ScopeState:
            index = self._restore(scope) or self.new_index()
            return ScopeState(scope=scope, index=index, requests=deque(index.request_ids()))

        return self.states.get_or_create(scope, create)

    def peek(self, scope: Scope) -> ScopeState | None:
        return self.states.get(scope)

    # ------------------------------------------------------------------ snapshots
    def save_state(self, state: ScopeState) -> None:
        """Snapshot one scope (caller holds ``state.lock``)."""
        if self.index_dir is None:
            return
        path = self.path(state.scope)
        with self._used_lock:
            self._used[path.name] = state.scope
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")
        try:
            data = state.index.snapshot()
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            state.unsaved = 0
        except Exception:
            logger.exception("could not snapshot the context index of %s to %s", state.scope, path)
            tmp.unlink(missing_ok=True)

    def note_insert(self, state: ScopeState) -> None:
        """Count one insert (caller holds ``state.lock``); snapshot every ``snapshot_every`` inserts."""
        state.unsaved += 1
        if state.unsaved >= self.config.snapshot_every:
            self.save_state(state)

    def _on_evicted(self, scope: Scope, state: ScopeState) -> None:
        with state.lock:
            if state.unsaved:
                self.save_state(state)

    def save(self) -> None:
        """Snapshot every scope whose index changed since its last snapshot."""
        for _, state in self.states.items():
            with state.lock:
                if state.unsaved:
                    self.save_state(state)

    def _clean_stray_tmp(self) -> None:
        assert self.index_dir is not None
        for p in self.index_dir.glob(f"*{SNAPSHOT_SUFFIX}.*.tmp"):
            m = _TMP.match(p.name)
            if m is not None and not _pid_alive(int(m.group(1))):
                logger.info("removing a stray snapshot temp file of a dead writer: %s", p)
                p.unlink(missing_ok=True)

    # ------------------------------------------------------------------ forgetting
    def forget(self, scopes: list[Scope]) -> None:
        """Forget these scopes' indexes, in memory and their snapshots on disk."""
        for scope in scopes:
            self.states.pop(scope)
            if self.index_dir is not None:
                path = self.path(scope)
                path.unlink(missing_ok=True)
                with self._used_lock:
                    self._used.pop(path.name, None)

    def forget_matching(self, entities: dict[str, str]) -> None:
        """Forget every in-memory scope whose entity ids include ``entities`` (after mem0 ``delete_all``)."""
        with self._used_lock:
            known = set(self._used.values())
        known.update(s for s, _ in self.states.items())
        self.forget([s for s in known if all(s.entity_filters.get(k) == v for k, v in entities.items())])

    def forget_all(self) -> None:
        """Forget every index this store has used (after mem0 ``reset``): only this store's snapshots."""
        self.states.clear()
        if self.index_dir is None:
            return
        with self._used_lock:
            names, self._used = set(self._used), {}
        for name in names:
            (self.index_dir / name).unlink(missing_ok=True)
