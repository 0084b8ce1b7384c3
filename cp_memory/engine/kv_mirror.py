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

:meth:`BlockMirror.find_section` finds a *section* of a prompt — its block lines, tokenised alone —
wherever it sits after a preamble the caller does not know (a system prompt, a chat template, the
history): among the cached chains whose blocks tile the section, the one a prompt used last — the newest
to have its section blocks stored *or a block stored after them* (a prompt that hits the cached section
stores its own question's blocks under it) — with that chain's ancestors. So a request tracked after its
prompt ran follows the chain of its own preamble, not the newest chain holding the same lines.

Bounded: at most ``max_blocks`` blocks are mirrored (:data:`DEFAULT_MAX_BLOCKS`, or a multiple of the
engine's block count): removals the feed never saw cannot pile up stale blocks; past the bound the blocks
least recently stored or extended are forgotten (not buried: the engine may still hold them).
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from ..core.checks import positive_int
from .kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent

__all__ = ["DEFAULT_MAX_BLOCKS", "ENGINE_BLOCKS_FACTOR", "BlockMirror", "Lookup", "Presence"]

Key = tuple[Hashable | None, tuple[int, ...]]

#: blocks mirrored at most when the engine's block count is not known (~700 bytes each: ~90 MB)
DEFAULT_MAX_BLOCKS = 131_072
#: blocks mirrored at most per block of the engine's cache, when its block count is known
ENGINE_BLOCKS_FACTOR = 2
#: ancestors of a newly stored block marked as used (a prompt's new blocks sit right under its cached ones)
TOUCH_DEPTH = 16


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

    def __init__(
        self, *, block_size: int | None = None, tombstones: int = 65_536, max_blocks: int = DEFAULT_MAX_BLOCKS
    ) -> None:
        if block_size is not None:
            positive_int(block_size, "block_size")
        positive_int(max_blocks, "max_blocks")
        self.block_size = block_size  # learned from the first BlockStored with blocks when None
        self.medium: str | None = None
        self.max_blocks = max_blocks
        self.forgotten = 0  # blocks dropped past max_blocks
        self._tombstone_cap = tombstones
        self._blocks: OrderedDict[Hashable, Key] = OrderedDict()  # hash -> (parent hash, tokens), least used first
        self._by_key: dict[Key, Hashable] = {}
        self._by_tokens: dict[tuple[int, ...], dict[Hashable, int]] = {}  # tokens -> {hash: store stamp}
        self._stamps = 0
        self._tombstones: OrderedDict[Key, None] = OrderedDict()
        self._buried_tokens: dict[tuple[int, ...], int] = {}  # tokens of tombstones -> how many

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
            self._by_tokens.clear()
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
            self._unlist(h, key)
            self._bury(key)
            removed.append(h)
        return removed

    def follows(self, event: BlockStored | BlockRemoved) -> bool:
        """Whether the mirror applies ``event`` (its medium and KV-cache group), once the medium is known."""
        return event.group in (None, 0) and (event.medium is None or self.medium in (None, event.medium))

    def clear(self) -> None:
        """Forget everything (tombstones too): the engine's state is not known any more."""
        self._blocks.clear()
        self._by_key.clear()
        self._by_tokens.clear()
        self._tombstones.clear()
        self._buried_tokens.clear()

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

    def find_section(self, token_ids: Sequence[int]) -> Lookup:
        """The cached chain holding ``token_ids`` *somewhere* in a prompt: HELD when the full blocks of
        some alignment of the tokens (one of ``block_size`` phases) form a cached chain; its ``hashes``
        are that chain's ancestors (the prompt's preamble, as far as the mirror knows it) then the
        section's own blocks. Several chains (the same section after different preambles): the newest.
        REMOVED when a block of the section was stored and dropped, UNKNOWN otherwise (not sent yet, or
        shorter than a block in every phase)."""
        size = self.block_size
        toks = tuple(int(t) for t in token_ids)
        if size is None or len(toks) < size:
            return Lookup(Presence.UNKNOWN, (), 0)
        best: tuple[int, tuple[Hashable, ...]] | None = None
        removed = False
        blocks = 0
        for phase in range(min(size, len(toks) - size + 1)):
            pieces = [toks[i : i + size] for i in range(phase, len(toks) - size + 1, size)]
            blocks = max(blocks, len(pieces))
            removed = removed or pieces[0] in self._buried_tokens
            for first in self._by_tokens.get(pieces[0], {}):
                chain, gone = self._tile(first, pieces)
                removed = removed or gone
                if chain is not None and (best is None or self._stamp(chain[-1]) > best[0]):
                    best = (self._stamp(chain[-1]), chain)
        if best is None:
            return Lookup(Presence.REMOVED if removed else Presence.UNKNOWN, (), blocks)
        return Lookup(Presence.HELD, self._ancestors(best[1][0]) + best[1], blocks)

    # -- internals ---------------------------------------------------------------------------
    def _tile(self, first: Hashable, pieces: list[tuple[int, ...]]) -> tuple[tuple[Hashable, ...] | None, bool]:
        """The chain from block ``first`` through ``pieces[1:]`` (None where it breaks off), and whether
        it broke off at a tombstone."""
        chain = [first]
        for piece in pieces[1:]:
            key: Key = (chain[-1], piece)
            h = self._by_key.get(key)
            if h is None:
                return None, key in self._tombstones
            chain.append(h)
        return tuple(chain), False

    def _ancestors(self, block: Hashable) -> tuple[Hashable, ...]:
        """The known cached parents of ``block``, the first block of the prompt first."""
        out: list[Hashable] = []
        parent = self._blocks[block][0]
        while parent is not None and parent in self._blocks and len(out) < len(self._blocks):
            out.append(parent)
            parent = self._blocks[parent][0]
        return tuple(reversed(out))

    def _stamp(self, block: Hashable) -> int:
        return self._by_tokens.get(self._blocks[block][1], {}).get(block, 0)

    def _unlist(self, h: Hashable, key: Key) -> None:
        holders = self._by_tokens.get(key[1])
        if holders is not None:
            holders.pop(h, None)
            if not holders:
                del self._by_tokens[key[1]]

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
        if not event.block_hashes:
            return  # nothing stored; and no size to learn from (a forged block_size=2**62 would blind us)
        if self.block_size is None:
            self.block_size = size
        elif size != self.block_size:
            return  # a partial-block entry (vLLM's fine-grained prefix boundaries): not a full block
        before = self._stamps
        parent = event.parent_block_hash
        for i, h in enumerate(event.block_hashes):
            key: Key = (parent, event.token_ids[i * size : (i + 1) * size])
            old = self._blocks.get(h)
            if old is not None and old != key and self._by_key.get(old) == h:
                del self._by_key[old]
            if old is not None:
                self._unlist(h, old)
                self._blocks.move_to_end(h)
            self._blocks[h] = key
            self._by_key[key] = h
            self._stamps += 1
            self._by_tokens.setdefault(key[1], {})[h] = self._stamps
            if key in self._tombstones:
                del self._tombstones[key]
                self._unbury(key[1])
            parent = h
        self._touch(event.parent_block_hash, before)
        while len(self._blocks) > self.max_blocks:
            self._forget_oldest()

    def _touch(self, block: Hashable | None, since: int) -> None:
        """A block was stored under ``block``: it and its nearest ancestors were just used by a prompt
        (up to one already stored or used since stamp ``since``: its own ancestors were marked then)."""
        for _ in range(TOUCH_DEPTH):
            key = None if block is None else self._blocks.get(block)
            holders = None if key is None else self._by_tokens.get(key[1])
            if key is None or holders is None or holders.get(block, since) >= since:
                return
            self._blocks.move_to_end(block)
            holders[block] = self._stamps
            block = key[0]

    def _forget_oldest(self) -> None:
        h, key = self._blocks.popitem(last=False)
        if self._by_key.get(key) == h:
            del self._by_key[key]
        self._unlist(h, key)
        self.forgotten += 1

    def _bury(self, key: Key) -> None:
        if key not in self._tombstones:
            self._buried_tokens[key[1]] = self._buried_tokens.get(key[1], 0) + 1
        self._tombstones[key] = None
        self._tombstones.move_to_end(key)
        while len(self._tombstones) > self._tombstone_cap:
            old, _ = self._tombstones.popitem(last=False)
            self._unbury(old[1])

    def _unbury(self, tokens: tuple[int, ...]) -> None:
        left = self._buried_tokens.get(tokens, 0) - 1
        if left > 0:
            self._buried_tokens[tokens] = left
        else:
            self._buried_tokens.pop(tokens, None)
