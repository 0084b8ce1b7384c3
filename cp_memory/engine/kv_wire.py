"""The KV-cache events' wire format (vLLM, SGLang): typed records and a bounded decoder.

Both engines publish the same three events (vLLM ``vllm.distributed.kv_events``, SGLang a copy of it)
on a ZMQ ``PUB`` socket, one multipart message per scheduler step that changed the cache::

    [topic, sequence (8 bytes, big-endian), msgpack([timestamp, [event, ...], dp_rank?])]

An event is a ``BlockStored`` (block hashes, parent block hash, token ids, block size, ...), a
``BlockRemoved`` (block hashes) or an ``AllBlocksCleared``. vLLM >= 0.11 encodes an event as a map with a
``"type"`` key; older vLLM and SGLang as an array whose first item is the type name, then the fields in
declaration order (the records: :mod:`cp_memory.engine.kv_records`). :func:`decode_batch` reads both with
msgspec Structs declared as the engines declare them (:mod:`cp_memory.engine._kv_structs`), checks what a
Struct cannot declare (a block hash is an int, or bytes or a str; one block per ``block_size`` token ids)
and skips an event type it does not know; anything else raises :class:`MalformedEvents`. A field the decoder
does not read is skipped unread, as the engines' own decoders skip it.

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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from .errors import MalformedEvents
from .kv_records import (
    MAX_BLOCK_SIZE,
    MAX_EVENTS_PER_BATCH,
    MAX_HASH_BYTES,
    MAX_MESSAGE_BYTES,
    AllBlocksCleared,
    BlockHash,
    BlockRemoved,
    BlockStored,
    EventBatch,
    KVEvent,
)

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

# ---------------------------------------------------------------------------------------------
# decoding: declared msgspec Structs (cp_memory.engine._kv_structs, imported on first use: msgspec is the
# kv-events extra) -> the records (cp_memory.engine.kv_records, re-exported here)
# ---------------------------------------------------------------------------------------------


def decode_event(encoded: bytes) -> KVEvent | None:
    """One msgpack-encoded event of either layout, or None for an event type this module does not know
    (newer engines add some); raises :class:`MalformedEvents`."""
    from . import _kv_structs

    with _recursion_refused():
        return _kv_structs.event_record(encoded)


def decode_batch(
    frames: Sequence[bytes],
    *,
    max_bytes: int = MAX_MESSAGE_BYTES,
    max_events: int = MAX_EVENTS_PER_BATCH,
) -> EventBatch:
    """``[topic, seq, payload]`` -> :class:`EventBatch`; raises :class:`MalformedEvents` (bounds: see the
    module docstring)."""
    from . import _kv_structs

    if len(frames) != 3:
        raise MalformedEvents(f"expected 3 frames (topic, sequence, payload), got {len(frames)}")
    _, seq_bytes, payload = frames
    if len(seq_bytes) != 8:
        raise MalformedEvents(f"the sequence frame has {len(seq_bytes)} bytes, expected 8")
    if len(payload) > max_bytes:
        raise MalformedEvents(f"payload of {len(payload)} bytes (at most {max_bytes})")
    seq = int.from_bytes(seq_bytes, "big", signed=True)
    with _gc_paused(), _recursion_refused():  # gc: a 200k-event message builds ~1M objects (5x slower)
        wire = _kv_structs.wire_batch(payload)
        if len(wire.events) > max_events:
            raise MalformedEvents(f"{len(wire.events)} events in one message (at most {max_events})")
        events = tuple(e for e in map(_kv_structs.event_record, wire.events) if e is not None)
    return EventBatch(seq, wire.ts, events, wire.data_parallel_rank)


@contextmanager
def _recursion_refused() -> Iterator[None]:
    """msgspec's guard (a value nested deeper than the interpreter allows) as :class:`MalformedEvents`."""
    try:
        yield
    except RecursionError:
        raise MalformedEvents("payload nested deeper than the decoder allows") from None


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
