"""Per-scope state of the mem0 wrapper: one context index per full scope, LRU-bounded, snapshotted.

* one :class:`~cp_memory.core.index.ContextIndex` per full scope, created on first use, at most ``max_scopes``
  in memory (LRU); an evicted scope with changes is snapshotted first;
* every index — new or restored — aligns with the wrapper's configuration and nothing else: alpha, the
  one :class:`~cp_memory.core.alignment_mode.AlignmentMode` (exact, superset or swap), capacity, tail order,
  linkage. A snapshot stores options too, but restoring passes every one of them, so neither an old
  snapshot nor a planted one can switch swap (or anything else) on;
* persistence (``index_dir``) is :mod:`.snapshots`: unambiguous file names, defensive reads (only regular
  files, size-capped), atomic writes, a bound on the files kept. Any unreadable or malformed snapshot
  logs one error and gives that scope a cold index — alignment stays on;
* a snapshot replaced by another writer while this process served the scope means several processes
  serve it: logged once as a warning (dedup records are per process; route a conversation to one process);
* the record of scopes this store used (what ``forget_all`` deletes) is bounded by ``max_snapshots``;
  ``delete_all`` (``forget_matching``) finds snapshots by name, so it needs no record at all;
* with an engine's KV-cache feed (:meth:`ScopeStore.follow`, :mod:`.engine_feed`) every index in memory,
  and every index created or restored after, is attached to it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.clustering import DEFAULT_LINKAGE
from ..core.engine_cache import EngineCache
from ..core.index import ContextIndex
from ..core.lru import LRUMap
from ..core.scope import Scope
from .config import ContextPilotConfig
from .engine_feed import EngineFollow
from .snapshots import SNAPSHOT_SUFFIX, FileId, SnapshotFolder

__all__ = ["SNAPSHOT_SUFFIX", "ScopeState", "ScopeStore"]

logger = logging.getLogger(__name__)


@dataclass
class ScopeState:
    """One scope's index (which owns its live requests and their bound: :meth:`ContextIndex.trim`)."""

    scope: Scope
    index: ContextIndex
    lock: threading.Lock = field(default_factory=threading.Lock)
    unsaved: int = 0
    disk: FileId | None = None  # the snapshot file as this store last read or wrote it
    shared_warned: bool = False


class ScopeStore:
    """Scope -> :class:`ScopeState` (LRU; an evicted scope is snapshotted first). Thread-safe."""

    def __init__(self, config: ContextPilotConfig) -> None:
        self.config = config
        self.states: LRUMap[Scope, ScopeState] = LRUMap(config.max_scopes, on_evict=self._on_evicted)
        # snapshot name -> scope, for the scopes this store used most recently (what forget_all deletes)
        self._used: LRUMap[str, Scope] = LRUMap(config.max_snapshots)
        self.engine = EngineFollow(config)
        self.folder: SnapshotFolder | None = None
        if config.index_dir is not None:
            self.folder = SnapshotFolder(
                Path(config.index_dir),
                max_files=config.max_snapshots,
                max_bytes=config.max_snapshot_bytes,
                in_use=self._names_in_memory,
            )

    @property
    def index_dir(self) -> Path | None:
        return None if self.folder is None else self.folder.path

    # ------------------------------------------------------------------ index construction
    def index_options(self) -> dict[str, Any]:
        """Every option of a scope's index, from the configuration alone (restores pass all of them)."""
        c = self.config
        return {
            "alpha": c.alpha,
            "mode": c.alignment,
            "capacity_tokens": c.capacity_tokens,
            "tail_order": c.tail_order,
            "linkage": DEFAULT_LINKAGE,
        }

    def new_index(self) -> ContextIndex:
        return ContextIndex(**self.index_options())

    def path(self, scope: Scope) -> Path:
        assert self.folder is not None
        return self.folder.file(scope)

    def _names_in_memory(self) -> list[str]:
        folder = self.folder  # None while the folder's own constructor trims: no scope is in memory yet
        return [] if folder is None else [folder.name(s) for s, _ in self.states.items()]

    def _restore(self, scope: Scope) -> tuple[ContextIndex | None, FileId | None]:
        if self.folder is None:
            return None, None
        self._used.set(self.folder.name(scope), scope)
        found = self.folder.read(scope)
        if found.error is not None:
            logger.error(
                "unreadable context index snapshot for %s (%s): %s; starting cold",
                scope,
                self.folder.file(scope),
                found.error,
            )
            return None, found.identity
        if found.data is None:
            return None, found.identity
        try:
            index = ContextIndex.restore(
                found.data,
                max_bytes=self.config.max_snapshot_bytes,
                max_requests=self.config.max_requests_per_scope,  # trimmed in one pass, not one search each
                **self.index_options(),
            )
        except Exception as exc:  # any malformed snapshot: one error, a cold index, alignment stays on
            logger.error(
                "malformed context index snapshot for %s (%s): %s: %s; starting cold",
                scope,
                self.folder.file(scope),
                type(exc).__name__,
                exc,
            )
            return None, found.identity
        logger.debug("restored context index for %s (%d requests)", scope, len(index))
        return index, found.identity

    def get(self, scope: Scope) -> ScopeState:
        """The scope's state, created (restored from a snapshot when there is one) on first use."""

        def create() -> ScopeState:
            restored, disk = self._restore(scope)
            index = restored or self.new_index()
            self.engine.attach(index)
            return ScopeState(scope=scope, index=index, disk=disk)

        return self.states.get_or_create(scope, create)

    def follow(self, engine: EngineCache | None) -> None:
        """Follow ``engine``'s KV-cache feed (None: stop): every index in memory is detached from the feed
        followed so far and attached to the new one; indexes created or restored later are attached too."""
        self.engine.follow(engine, lambda: [state.index for _, state in self.states.items()])

    def peek(self, scope: Scope) -> ScopeState | None:
        """The scope's state if it is in memory (no restore, recency unchanged)."""
        return self.states.peek(scope)

    # ------------------------------------------------------------------ snapshots
    def save_state(self, state: ScopeState) -> None:
        """Snapshot one scope (caller holds ``state.lock``)."""
        if self.folder is None:
            return
        self._used.set(self.folder.name(state.scope), state.scope)
        try:
            data = state.index.snapshot()
            if len(data) > self.config.max_snapshot_bytes:
                logger.warning(
                    "the context index snapshot of %s is %d bytes, over max_snapshot_bytes=%d: it would not "
                    "be restored, so it is not written (lower max_requests_per_scope or raise the bound)",
                    state.scope,
                    len(data),
                    self.config.max_snapshot_bytes,
                )
                return
            written = self.folder.write(state.scope, data, state.disk)
        except Exception:
            logger.exception("could not snapshot the context index of %s to %s", state.scope, self.path(state.scope))
            return
        state.unsaved = 0
        state.disk = written.identity
        if written.replaced_foreign and not state.shared_warned:
            state.shared_warned = True
            logger.warning(
                "the context index snapshot of %s was replaced by another writer since this process last read "
                "or wrote it: several processes (or wrappers) serving one index_dir serve this scope. Each keeps "
                "its own dedup records, so with round-robin routing a turn's location annotations can point at "
                "memories another process sent; route each conversation (best: each user) to one process "
                "(sticky routing)",
                state.scope,
            )

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

    # ------------------------------------------------------------------ forgetting
    def forget(self, scopes: list[Scope]) -> None:
        """Forget these scopes' indexes, in memory and their snapshots on disk."""
        for scope in scopes:
            self.states.pop(scope)
            if self.folder is not None:
                self.folder.delete(scope)
                self._used.pop(self.folder.name(scope))

    def forget_matching(self, entities: dict[str, str]) -> None:
        """Forget every scope whose entity ids include ``entities`` (after mem0 ``delete_all``): in memory,
        and every matching snapshot in ``index_dir`` (whoever wrote it, whenever)."""
        self.forget(
            [s for s, _ in self.states.items() if all(s.entity_filters.get(k) == v for k, v in entities.items())]
        )
        if self.folder is not None:
            self.folder.delete_matching(entities)

    def forget_all(self) -> None:
        """Forget every index this store has used (after mem0 ``reset``): only this store's snapshots (the
        ``max_snapshots`` it used most recently), never other files of a shared folder."""
        self.states.clear()
        if self.folder is None:
            return
        names = [name for name, _ in self._used.clear()]
        self.folder.delete_names(names)
