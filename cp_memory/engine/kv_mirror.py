"""The blocks an engine's prefix cache holds, rebuilt from its KV-cache events (I/O-free).

vLLM's automatic prefix caching and SGLang's RadixCache (with a page size) keep *blocks*: a block is
``block_size`` prompt tokens, identified by a hash of its tokens chained after its parent block, so
it is reused only at the same position after the same text. :class:`BlockMirror` applies
:mod:`~cp_memory.engine.kv_events` in order and answers :meth:`BlockMirror.lookup`: is the chain of
full blocks of these tokens cached, which block hashes is it, or was one of them removed?

The mirror is keyed by ``(parent hash, block tokens)``, so a prompt's tokens (``/tokenize``) find
their hashes without recomputing the engine's hash function. Removed blocks leave a bounded number
of tombstones: a lookup that reaches one knows the engine *had* those tokens and dropped them (its
events arrived before the caller asked), rather than not knowing them yet. Only the first medium
(``GPU`` on vLLM, also on its CPU build) and KV-cache group 0 are mirrored; offload tiers and the
extra groups of hybrid models are ignored (a block offloaded to host memory counts as removed).
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from .kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent

__all__ = ["BlockMirror", "Lookup", "Presence"]

Key = tuple[Hashable | None, tuple[int, ...]]


class Presence(enum.Enum):
    """What the mirror knows of a prompt's chain of full blocks."""

    HELD = "held"  # every full block is cached
    REMOVED = "removed"  # a block of the chain was stored and then removed
    UNKNOWN = "unknown"  # a block was never seen (its BlockStored has not arrived, or never will)


@dataclass(frozen=True)
class Lookup:
    presence: Presence
    hashes: tuple[Hashable, ...]  # the chain's cached blocks, first block first (all of them when HELD)
    blocks: int  # full blocks in the looked-up tokens


class BlockMirror:
    """The engine's cached blocks as its events tell (see the module docstring). Not thread-safe."""

    def __init__(self, *, block_size: int | None = None, tombstones: int = 65_536) -> None:
        if block_size is not None and (not isinstance(block_size, int) or block_size < 1):
            raise ValueError(f"block_size must be a positive int or None, got {block_size!r}")
        self.block_size = block_size  # learned from the first BlockStored when None
        self.medium: str | None = None
        self._tombstone_cap = tombstones
        self._blocks: dict[Hashable, Key] = {}  # hash -> (parent hash, tokens)
        self._by_key: dict[Key, Hashable] = {}
        self._tombstones: OrderedDict[Key, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_hash: object) -> bool:
        return block_hash in self._blocks

    @property
    def cached_tokens(self) -> int:
        return sum(len(tokens) for _, tokens in self._blocks.values())

    def apply(self, event: KVEvent) -> list[Hashable]:
        """Apply one event; return the hashes of the blocks it removed (all of them on a clear)."""
        if isinstance(event, AllBlocksCleared):
            removed = list(self._blocks)
            for key in self._by_key:
                self._bury(key)
            self._blocks.clear()
            self._by_key.clear()
            return removed
        if not self._mirrored(event.medium, event.group):
            return []
        if isinstance(event, BlockStored):
            self._store(event)
            return []
        assert isinstance(event, BlockRemoved)
        removed = []
        for h in event.block_hashes:
            if h not in self._blocks:
                continue
            key = self._blocks.pop(h)
            if self._by_key.get(key) == h:
                del self._by_key[key]
            self._bury(key)
            removed.append(h)
        return removed

    def clear(self) -> None:
        """Forget everything (tombstones too): the engine's state is not known any more."""
        self._blocks.clear()
        self._by_key.clear()
        self._tombstones.clear()

    def lookup(self, token_ids: Sequence[int]) -> Lookup:
        """The chain of ``token_ids``' full blocks, walked from the first block."""
        size = self.block_size
        if size is None:
            return Lookup(Presence.UNKNOWN, (), 0)
        n = len(token_ids) // size
        parent: Hashable | None = None
        found: list[Hashable] = []
        for i in range(n):
            key: Key = (parent, tuple(token_ids[i * size : (i + 1) * size]))
            h = self._by_key.get(key)
            if h is None:
                presence = Presence.REMOVED if key in self._tombstones else Presence.UNKNOWN
                return Lookup(presence, tuple(found), n)
            found.append(h)
            parent = h
        return Lookup(Presence.HELD, tuple(found), n)

    # -- internals ---------------------------------------------------------------------------
    def _mirrored(self, medium: str | None, group: int | None) -> bool:
        if group not in (None, 0):
            return False
        if medium is None or self.medium is None:
            if medium is not None:
                self.medium = medium
            return True
        return medium == self.medium

    def _store(self, event: BlockStored) -> None:
        size = event.block_size
        if self.block_size is None:
            self.block_size = size
        elif size != self.block_size:
            return  # a partial-block entry (vLLM's fine-grained prefix boundaries): not a full block
        parent = event.parent_block_hash
        for i, h in enumerate(event.block_hashes):
            key: Key = (parent, event.token_ids[i * size : (i + 1) * size])
            old = self._blocks.get(h)
            if old is not None and old != key and self._by_key.get(old) == h:
                del self._by_key[old]
            self._blocks[h] = key
            self._by_key[key] = h
            self._tombstones.pop(key, None)
            parent = h

    def _bury(self, key: Key) -> None:
        self._tombstones[key] = None
        self._tombstones.move_to_end(key)
        while len(self._tombstones) > self._tombstone_cap:
            self._tombstones.popitem(last=False)
