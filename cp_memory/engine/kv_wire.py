"""The KV-cache events' wire format (vLLM, SGLang): typed records and a bounded decoder.

Both engines publish the same three events (vLLM ``vllm.distributed.kv_events``, SGLang a copy of it)
on a ZMQ ``PUB`` socket, one multipart message per scheduler step that changed the cache::

    [topic, sequence (8 bytes, big-endian), msgpack([timestamp, [event, ...], dp_rank?])]

An event is a ``BlockStored`` (block hashes, parent block hash, token ids, block size, ...), a
``BlockRemoved`` (block hashes) or an ``AllBlocksCleared``. vLLM >= 0.11 encodes an event as a map
with a ``"type"`` key; older vLLM and SGLang as an array whose first item is the type name, then the
fields in declaration order. :func:`decode_batch` reads both and checks every field; anything else
raises :class:`MalformedEvents`.

Decoding is bounded (the feed's socket is not trusted): a payload over ``max_message_bytes``
(:data:`MAX_MESSAGE_BYTES`, 4 MiB; also the subscriber's ZMQ ``MAXMSGSIZE``, so a bigger message is
never even received), more than :data:`MAX_EVENTS_PER_BATCH` (262,144) events, a ``block_size``
outside 1..:data:`MAX_BLOCK_SIZE` (65,536), a hash over :data:`MAX_HASH_BYTES` (256) bytes or a value
nested deeper than msgspec's recursion guard (the interpreter's limit: a 1,000-deep value of ~1 KB)
is a :class:`MalformedEvents`, never a ``RecursionError``.

Events are published when the engine runs a step: a cache reset shows up with the next request's
batch, not when ``/reset_prefix_cache`` answers.
"""

from __future__ import annotations

import gc
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .errors import MalformedEvents

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
    "MalformedEvents",
    "decode_batch",
    "decode_event",
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


# ---------------------------------------------------------------------------------------------
# decoding
# ---------------------------------------------------------------------------------------------

_ARRAY_FIELDS = {  # the field order of the array encoding (older vLLM, SGLang)
    "BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium"),
    "BlockRemoved": ("block_hashes", "medium"),
    "AllBlocksCleared": (),
}


def _hash(value: Any, what: str) -> BlockHash:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, (bytes, str)):
        if len(value) > MAX_HASH_BYTES:
            raise MalformedEvents(f"{what}: a block hash of {len(value)} bytes (at most {MAX_HASH_BYTES})")
        return value
    raise MalformedEvents(f"{what}: a block hash must be an int, bytes or str, got {type(value).__name__}")


def _hashes(value: Any, what: str) -> tuple[BlockHash, ...]:
    if not isinstance(value, (list, tuple)):
        raise MalformedEvents(f"{what}: block_hashes must be a list, got {type(value).__name__}")
    return tuple(_hash(v, what) for v in value)


def _int(value: Any, what: str, *, minimum: int = 0, maximum: int | None = None) -> int:
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or value < minimum
        or (maximum is not None and value > maximum)
    ):
        bound = f" and <= {maximum}" if maximum is not None else ""
        raise MalformedEvents(f"{what} must be an int >= {minimum}{bound}, got {value!r}"[:200])
    return value


def _optional_str(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise MalformedEvents(f"{what} must be a str or null, got {type(value).__name__}")


def _optional_int(value: Any, what: str) -> int | None:
    return None if value is None else _int(value, what)


def _fields(raw: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(raw, dict):
        kind = raw.get("type")
        if not isinstance(kind, str):
            raise MalformedEvents("an event map has no 'type'")
        return kind, raw
    if isinstance(raw, (list, tuple)) and raw and isinstance(raw[0], str):
        kind = raw[0]
        names = _ARRAY_FIELDS.get(kind)
        if names is None:
            return kind, {}
        return kind, dict(zip(names, raw[1:]))
    raise MalformedEvents(f"an event must be a map or a tagged array, got {type(raw).__name__}")


def decode_event(raw: Any) -> KVEvent | None:
    """One event, or None for an event type this module does not know (newer engines add some)."""
    kind, f = _fields(raw)
    if kind == "BlockStored":
        hashes = _hashes(f.get("block_hashes"), kind)
        size = _int(f.get("block_size"), "BlockStored.block_size", minimum=1, maximum=MAX_BLOCK_SIZE)
        tokens = f.get("token_ids")
        if not isinstance(tokens, (list, tuple)):
            raise MalformedEvents("BlockStored.token_ids must be a list")
        toks = tuple(_int(t, "a token id") for t in tokens)
        if len(toks) != len(hashes) * size:
            raise MalformedEvents(f"BlockStored: {len(toks)} token ids for {len(hashes)} blocks of {size}")
        parent = f.get("parent_block_hash")
        return BlockStored(
            hashes,
            None if parent is None else _hash(parent, kind),
            toks,
            size,
            _optional_str(f.get("medium"), "BlockStored.medium"),
            _optional_int(f.get("group_idx"), "BlockStored.group_idx"),
        )
    if kind == "BlockRemoved":
        return BlockRemoved(
            _hashes(f.get("block_hashes"), kind),
            _optional_str(f.get("medium"), "BlockRemoved.medium"),
            _optional_int(f.get("group_idx"), "BlockRemoved.group_idx"),
        )
    if kind == "AllBlocksCleared":
        return AllBlocksCleared()
    return None


def decode_batch(
    frames: Sequence[bytes],
    *,
    max_bytes: int = MAX_MESSAGE_BYTES,
    max_events: int = MAX_EVENTS_PER_BATCH,
) -> EventBatch:
    """``[topic, seq, payload]`` -> :class:`EventBatch`; raises :class:`MalformedEvents` (bounds: see the
    module docstring)."""
    if len(frames) != 3:
        raise MalformedEvents(f"expected 3 frames (topic, sequence, payload), got {len(frames)}")
    _, seq_bytes, payload = frames
    if len(seq_bytes) != 8:
        raise MalformedEvents(f"the sequence frame has {len(seq_bytes)} bytes, expected 8")
    if len(payload) > max_bytes:
        raise MalformedEvents(f"payload of {len(payload)} bytes (at most {max_bytes})")
    seq = int.from_bytes(seq_bytes, "big", signed=True)
    with _gc_paused():  # a 200k-event message builds ~1M objects: collections would make it 5x slower
        body = _decode_payload(payload)
        if len(body[1]) > max_events:
            raise MalformedEvents(f"{len(body[1])} events in one message (at most {max_events})")
        ts = body[0]
        if not isinstance(ts, (int, float)) or isinstance(ts, bool):
            raise MalformedEvents(f"batch timestamp must be a number, got {type(ts).__name__}")
        rank = body[2] if len(body) > 2 else None
        events = tuple(e for e in (decode_event(raw) for raw in body[1]) if e is not None)
    return EventBatch(seq, float(ts), events, _optional_int(rank, "data_parallel_rank"))


def _decode_payload(payload: bytes) -> Any:
    """msgpack -> ``[timestamp, [events], ...]``; raises :class:`MalformedEvents`."""
    import msgspec

    try:
        body = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError as exc:
        raise MalformedEvents(f"payload is not msgpack: {exc}") from None
    except RecursionError:  # msgspec's guard: a value nested deeper than the interpreter allows
        raise MalformedEvents("payload nested deeper than the decoder allows") from None
    if not isinstance(body, (list, tuple)) or len(body) < 2 or not isinstance(body[1], (list, tuple)):
        raise MalformedEvents("payload must be [timestamp, [events], dp_rank?]")
    return body


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic collector off while a message is decoded (what msgspec's docs advise for big messages),
    back on after unless someone else had it off."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
