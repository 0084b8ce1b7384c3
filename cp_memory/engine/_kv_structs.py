"""The KV-cache events as msgspec Structs, declared as the engines declare them, and their decoding.

Two layouts, with the fields :mod:`cp_memory.engine.kv_wire` reads (msgspec skips any other field unread,
and an array's trailing fields, as the engines' own decoders do):

- vLLM >= 0.11 (``vllm.distributed.kv_events``): an event is a map tagged by ``"type"``,
  ``{"type": "BlockStored", "block_hashes": [...], ...}``;
- SGLang (``sglang.srt.disaggregation.kv_events``) and older vLLM: a tagged array, the type name and then
  the fields in declaration order, ``["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
  lora_id, medium]``; trailing fields with a default may be left out (``omit_defaults``).

Both send a batch as the array ``[ts, [event, ...], data_parallel_rank?]``. :class:`WireBatch` leaves each
event encoded (``msgspec.Raw``, a slice, no copy): :func:`event_record` decodes it by its layout (msgspec
unions may not mix maps and arrays of Structs) and skips a type not in :data:`EVENT_TYPES`. A block hash is
``Any`` here, msgspec refusing a ``bytes | str`` union: :func:`event_record` checks each with the one rule
(an int, or bytes or a str of at most :data:`~cp_memory.engine.kv_records.MAX_HASH_BYTES`). msgspec is the
``kv-events`` extra: kv_wire imports this module when it decodes.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import msgspec

from .errors import MalformedEvents
from .kv_records import (
    MAX_BLOCK_SIZE,
    MAX_HASH_BYTES,
    AllBlocksCleared,
    BlockHash,
    BlockRemoved,
    BlockStored,
    KVEvent,
)

__all__ = [
    "ARRAY_EVENT",
    "BATCH",
    "EVENT_TYPES",
    "MAP_EVENT",
    "ArrayAllBlocksCleared",
    "ArrayBlockRemoved",
    "ArrayBlockStored",
    "MapAllBlocksCleared",
    "MapBlockRemoved",
    "MapBlockStored",
    "WireBatch",
    "WireEvent",
    "event_record",
    "wire_batch",
]

#: an int >= 0 (msgspec never takes a bool or a float for an ``int``)
NonNegative = Annotated[int, msgspec.Meta(ge=0)]

#: the event types decoded (tags of both layouts); any other type is a newer engine's, skipped
EVENT_TYPES = ("BlockStored", "BlockRemoved", "AllBlocksCleared")


class WireBatch(msgspec.Struct, array_like=True, gc=False):
    """``[ts, [event, ...], data_parallel_rank?]`` (vLLM's ``EventBatch``; SGLang's has no rank)."""

    ts: float
    events: list[msgspec.Raw]
    data_parallel_rank: NonNegative | None = None


# vLLM >= 0.11: tagged maps (``KVCacheEvent(tag=True)``); kw_only so that a field with a default may come first
class MapBlockStored(msgspec.Struct, tag="BlockStored", tag_field="type", kw_only=True, gc=False):
    block_hashes: list[Any]
    parent_block_hash: Any = None
    token_ids: list[NonNegative]
    block_size: int
    medium: str | None = None
    group_idx: NonNegative | None = None


class MapBlockRemoved(msgspec.Struct, tag="BlockRemoved", tag_field="type", kw_only=True, gc=False):
    block_hashes: list[Any]
    medium: str | None = None
    group_idx: NonNegative | None = None


class MapAllBlocksCleared(msgspec.Struct, tag="AllBlocksCleared", tag_field="type", gc=False):
    pass


# SGLang, vLLM < 0.11: tagged arrays (``KVCacheEvent(array_like=True, tag=True)``), fields in this order
class ArrayBlockStored(msgspec.Struct, tag="BlockStored", array_like=True, gc=False):
    block_hashes: list[Any]
    parent_block_hash: Any
    token_ids: list[NonNegative]
    block_size: int
    lora_id: Any = None
    medium: str | None = None
    group_idx: ClassVar[None] = None  # not in the array layout


class ArrayBlockRemoved(msgspec.Struct, tag="BlockRemoved", array_like=True, gc=False):
    block_hashes: list[Any]
    medium: str | None = None
    group_idx: ClassVar[None] = None


class ArrayAllBlocksCleared(msgspec.Struct, tag="AllBlocksCleared", array_like=True, gc=False):
    pass


#: one decoded event of either layout
WireEvent = (
    MapBlockStored
    | MapBlockRemoved
    | MapAllBlocksCleared
    | ArrayBlockStored
    | ArrayBlockRemoved
    | ArrayAllBlocksCleared
)

BATCH = msgspec.msgpack.Decoder(WireBatch)
MAP_EVENT: msgspec.msgpack.Decoder[WireEvent] = msgspec.msgpack.Decoder(
    MapBlockStored | MapBlockRemoved | MapAllBlocksCleared
)
ARRAY_EVENT: msgspec.msgpack.Decoder[WireEvent] = msgspec.msgpack.Decoder(
    ArrayBlockStored | ArrayBlockRemoved | ArrayAllBlocksCleared
)

# the first byte of a msgpack map (fixmap, map 16, map 32) and of an array (fixarray, array 16, array 32)
_MAP_HEADS = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}
_ARRAY_HEADS = frozenset(range(0x90, 0xA0)) | {0xDC, 0xDD}


def wire_batch(payload: bytes) -> WireBatch:
    """msgpack -> ``[ts, [events], data_parallel_rank?]``, each event still encoded; raises
    :class:`MalformedEvents` (``RecursionError`` for a value nested deeper than the interpreter allows)."""
    try:
        return BATCH.decode(payload)
    except msgspec.ValidationError as exc:
        raise MalformedEvents(f"payload must be [timestamp, [events], dp_rank?]: {exc}") from None
    except msgspec.DecodeError as exc:
        raise MalformedEvents(f"payload is not msgpack: {exc}") from None


def event_record(encoded: bytes | msgspec.Raw) -> KVEvent | None:
    """One encoded event -> its record, None for a type not in :data:`EVENT_TYPES`; raises
    :class:`MalformedEvents`. msgspec unions may not mix maps and arrays of Structs: the first byte (a msgpack
    map or array) picks :data:`MAP_EVENT` or :data:`ARRAY_EVENT`."""
    head = memoryview(encoded)[0]
    decoder = MAP_EVENT if head in _MAP_HEADS else ARRAY_EVENT if head in _ARRAY_HEADS else None
    try:
        if decoder is not None:
            return _record(decoder.decode(encoded))
        value = msgspec.msgpack.decode(encoded)
    except msgspec.ValidationError as exc:
        _refuse_unless_unknown(encoded, exc)
        return None
    except msgspec.DecodeError as exc:  # the batch skipped over it unread: e.g. a str that is not UTF-8
        raise MalformedEvents(f"an event is not msgpack: {exc}") from None
    raise MalformedEvents(f"an event must be a map or a tagged array, got {type(value).__name__}")


def _refuse_unless_unknown(encoded: bytes | msgspec.Raw, exc: msgspec.ValidationError) -> None:
    """Raises :class:`MalformedEvents` with msgspec's reason, unless the event it refused is of a type not in
    :data:`EVENT_TYPES` (a newer engine's: skipped)."""
    try:
        value = msgspec.msgpack.decode(encoded)
    except msgspec.DecodeError:
        value = None
    kind = value.get("type") if isinstance(value, dict) else value[0] if isinstance(value, list) and value else None
    if not isinstance(kind, str):
        raise MalformedEvents(f"an event must be a map with a 'type' or a tagged array: {exc}") from None
    if kind in EVENT_TYPES:
        raise MalformedEvents(f"{kind}: {exc}") from None


def _record(wire: WireEvent) -> KVEvent:
    """A Struct of either layout -> its record, after the checks a Struct does not declare: each block hash
    an int, bytes or str (of at most :data:`MAX_HASH_BYTES`), ``1 <= block_size <=`` :data:`MAX_BLOCK_SIZE`,
    ``block_size`` token ids a block."""
    if isinstance(wire, (MapBlockStored, ArrayBlockStored)):
        hashes = _hashes(wire.block_hashes, "BlockStored")
        size = wire.block_size
        if not 1 <= size <= MAX_BLOCK_SIZE:
            raise MalformedEvents(f"BlockStored.block_size must be an int >= 1 and <= {MAX_BLOCK_SIZE}, got {size}")
        if len(wire.token_ids) != len(hashes) * size:
            raise MalformedEvents(f"BlockStored: {len(wire.token_ids)} token ids for {len(hashes)} blocks of {size}")
        parent = wire.parent_block_hash
        return BlockStored(
            hashes,
            None if parent is None else _hash(parent, "BlockStored"),
            tuple(wire.token_ids),
            size,
            wire.medium,
            wire.group_idx,
        )
    if isinstance(wire, (MapBlockRemoved, ArrayBlockRemoved)):
        return BlockRemoved(_hashes(wire.block_hashes, "BlockRemoved"), wire.medium, wire.group_idx)
    return AllBlocksCleared()


def _hashes(values: list[Any], what: str) -> tuple[BlockHash, ...]:
    return tuple(_hash(v, what) for v in values)


def _hash(value: Any, what: str) -> BlockHash:
    """The one rule for a block hash: an int (not a bool), or bytes or a str of at most
    :data:`MAX_HASH_BYTES`."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, (bytes, str)):
        if len(value) > MAX_HASH_BYTES:
            raise MalformedEvents(f"{what}: a block hash of {len(value)} bytes (at most {MAX_HASH_BYTES})")
        return value
    raise MalformedEvents(f"{what}: a block hash must be an int, bytes or str, got {type(value).__name__}")
