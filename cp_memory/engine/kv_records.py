"""The KV-cache events as records (what :mod:`cp_memory.engine.kv_wire` decodes into and every consumer
reads: the KV-event index, the publishers' tests) and the decoder's bounds. No I/O, no msgspec."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

__all__ = [
    "MAX_BLOCK_SIZE",
    "MAX_EVENTS_PER_BATCH",
    "MAX_HASH_BYTES",
    "MAX_MESSAGE_BYTES",
    "AllBlocksCleared",
    "BlockHash",
    "BlockRemoved",
    "BlockStored",
    "EventBatch",
    "KVEvent",
]

#: the largest payload decoded (bytes); also the subscriber's ZMQ ``MAXMSGSIZE`` (4x a 128k-token step)
MAX_MESSAGE_BYTES = 4 * 2**20
#: the most events one message may carry (vLLM sends one ``BlockRemoved`` per evicted block)
MAX_EVENTS_PER_BATCH = 262_144
#: the largest ``block_size`` accepted (vLLM: 16 by default, hybrid models a few hundred)
MAX_BLOCK_SIZE = 65_536
#: the longest bytes/str block hash accepted (vLLM's sha256: 32 bytes)
MAX_HASH_BYTES = 256

#: a block hash as published: an int (vLLM >= 0.10 with the default hash), bytes (sha256) or a str
BlockHash = Hashable


@dataclass(frozen=True)
class BlockStored:
    """``block_hashes[i]`` holds ``token_ids[i * block_size : (i + 1) * block_size]``, chained after
    ``parent_block_hash`` (None: the first block of a prompt)."""

    block_hashes: tuple[BlockHash, ...]
    parent_block_hash: BlockHash | None
    token_ids: tuple[int, ...]
    block_size: int
    medium: str | None = None
    group: int | None = None


@dataclass(frozen=True)
class BlockRemoved:
    """The engine dropped these blocks (evicted to make room, or replaced)."""

    block_hashes: tuple[BlockHash, ...]
    medium: str | None = None
    group: int | None = None


@dataclass(frozen=True)
class AllBlocksCleared:
    """The engine holds no cached block any more (a cache reset, or a restarted engine)."""


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass(frozen=True)
class EventBatch:
    """One published message: the events of one engine step, in order."""

    seq: int
    ts: float
    events: tuple[KVEvent, ...]
    rank: int | None = None
