"""The KV-event decoder against messages built with the engines' own declarations.

vLLM and SGLang declare their events as msgspec Structs; the classes below copy those declarations (vLLM
0.32's ``vllm.distributed.kv_events``: a map tagged by ``"type"``; SGLang's
``sglang.srt.disaggregation.kv_events``: a tagged array) so that a message here is encoded exactly as the
engine encodes it, then decoded by :func:`decode_batch`. The fuzz part damages such messages field by field
and byte by byte: every outcome is a decoded batch or a :class:`MalformedEvents`, never another exception.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.support import require_kv_events

require_kv_events()
import msgspec  # noqa: E402

from cp_memory.engine.kv_wire import (  # noqa: E402
    MAX_HASH_BYTES,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    MalformedEvents,
    decode_batch,
    decode_event,
)

# ---------------------------------------------------------------------------------------------
# vLLM 0.32's declarations (vllm/distributed/kv_events.py), as published
# ---------------------------------------------------------------------------------------------


class VLLMEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class VLLMEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    pass


class VLLMBlockStored(VLLMEvent, tag="BlockStored"):
    block_hashes: list[bytes | int]
    parent_block_hash: bytes | int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None


class VLLMBlockRemoved(VLLMEvent, tag="BlockRemoved"):
    block_hashes: list[bytes | int]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class VLLMAllBlocksCleared(VLLMEvent, tag="AllBlocksCleared"):
    pass


# ---------------------------------------------------------------------------------------------
# SGLang's declarations (python/sglang/srt/disaggregation/kv_events.py): tagged arrays, no rank
# ---------------------------------------------------------------------------------------------


class SGLangEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]


class SGLangEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    pass


class SGLangBlockStored(SGLangEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None = None


class SGLangBlockRemoved(SGLangEvent, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: str | None = None


class SGLangAllBlocksCleared(SGLangEvent, tag="AllBlocksCleared"):
    pass


SHA = bytes(range(32))  # vLLM's sha256 block hash


def frames(batch: msgspec.Struct, seq: int = 7) -> list[bytes]:
    return [b"kv", seq.to_bytes(8, "big"), msgspec.msgpack.encode(batch)]


def vllm_step() -> VLLMEventBatch:
    """One vLLM step: a cache reset, two 4-token blocks stored after a sha256 parent, one block dropped."""
    stored = VLLMBlockStored(
        block_hashes=[11, SHA],
        parent_block_hash=SHA[::-1],
        token_ids=[1, 2, 3, 4, 5, 6, 7, 8],
        block_size=4,
        lora_id=None,
        medium="GPU",
        lora_name=None,
        extra_keys=[("mm", "img-1", 0), None],
        group_idx=1,
        session_id="alice",
    )
    return VLLMEventBatch(
        ts=1.5,
        events=[VLLMAllBlocksCleared(), stored, VLLMBlockRemoved([11], "GPU", group_idx=1)],
        data_parallel_rank=2,
    )


def test_a_vllm_step_decodes_as_vllm_encodes_it() -> None:
    assert decode_batch(frames(vllm_step())) == EventBatch(
        7,
        1.5,
        (
            AllBlocksCleared(),
            BlockStored((11, SHA), SHA[::-1], (1, 2, 3, 4, 5, 6, 7, 8), 4, "GPU", 1),
            BlockRemoved((11,), "GPU", 1),
        ),
        2,
    )


def test_an_sglang_step_decodes_as_sglang_encodes_it() -> None:
    """SGLang sends tagged arrays and no rank; an array may stop before its trailing fields (older versions
    have no ``medium``)."""
    batch = SGLangEventBatch(
        ts=2.0,
        events=[
            SGLangBlockStored([5, 6], None, [9, 8, 7, 6], 2, None),
            SGLangBlockRemoved([5], "GPU"),
            SGLangAllBlocksCleared(),
            ["BlockStored", [7], 6, [1, 2], 2],  # no lora_id, no medium
        ],
    )
    sent = msgspec.msgpack.decode(msgspec.msgpack.encode(batch))
    assert sent[1][0][:5] == ["BlockStored", [5, 6], None, [9, 8, 7, 6], 2] and len(sent) == 2
    assert decode_batch(frames(batch, seq=0)) == EventBatch(
        0,
        2.0,
        (
            BlockStored((5, 6), None, (9, 8, 7, 6), 2),
            BlockRemoved((5,), "GPU"),
            AllBlocksCleared(),
            BlockStored((7,), 6, (1, 2), 2),
        ),
    )


def test_one_event_decodes_alone() -> None:
    assert decode_event(msgspec.msgpack.encode(VLLMBlockRemoved([SHA], None))) == BlockRemoved((SHA,))
    assert decode_event(msgspec.msgpack.encode(SGLangBlockRemoved([3]))) == BlockRemoved((3,))
    assert decode_event(msgspec.msgpack.encode({"type": "BlockUpdated", "x": 1})) is None


def test_a_newer_engines_event_types_are_skipped_in_both_layouts() -> None:
    events = [{"type": "BlockUpdated", "x": [1]}, ["BlockUpdated", 1, 2], ["AllBlocksCleared"]]
    assert decode_batch(frames(VLLMEventBatch(1.0, events))).events == (AllBlocksCleared(),)


# ---------------------------------------------------------------------------------------------
# block hashes: one rule for both layouts (an int, or bytes or a str of at most MAX_HASH_BYTES)
# ---------------------------------------------------------------------------------------------

GOOD_HASHES = [0, -(2**63), 2**64 - 1, b"", SHA, b"h" * MAX_HASH_BYTES, "s" * MAX_HASH_BYTES]
BAD_HASHES = [True, 1.5, None, [1], {"h": 1}, b"h" * (MAX_HASH_BYTES + 1), "s" * (MAX_HASH_BYTES + 1)]


def removed_and_stored(h: Any) -> list[Any]:
    """The hash as a removed block, a stored block and a stored block's parent, in both layouts."""
    return [
        {"type": "BlockRemoved", "block_hashes": [h]},
        ["BlockRemoved", [h]],
        {"type": "BlockStored", "block_hashes": [h], "parent_block_hash": 1, "token_ids": [1], "block_size": 1},
        ["BlockStored", [1], h, [1], 1],
    ]


@pytest.mark.parametrize("h", GOOD_HASHES, ids=repr)
def test_every_hash_the_rule_accepts_decodes_in_both_layouts(h: Any) -> None:
    for event in removed_and_stored(h):
        (decoded,) = decode_batch(frames(VLLMEventBatch(1.0, [event]))).events
        assert h in (getattr(decoded, "block_hashes", ()) + (getattr(decoded, "parent_block_hash", None),))


@pytest.mark.parametrize("h", BAD_HASHES, ids=["bool", "float", "None", "list", "map", "bytes257", "str257"])
def test_every_hash_the_rule_refuses_is_refused_in_both_layouts(h: Any) -> None:
    for event in removed_and_stored(h):
        if h is None and isinstance(event, list) and event[0] == "BlockStored":
            continue  # a parent of None is the first block of a prompt
        with pytest.raises(MalformedEvents, match="block hash"):
            decode_batch(frames(VLLMEventBatch(1.0, [event])))


# ---------------------------------------------------------------------------------------------
# malformed fields: refused with the field named, in both layouts
# ---------------------------------------------------------------------------------------------

STORED = {
    "type": "BlockStored",
    "block_hashes": [1, 2],
    "parent_block_hash": None,
    "token_ids": [1, 2, 3, 4],
    "block_size": 2,
}


@pytest.mark.parametrize(
    "event, match",
    [
        ({**STORED, "token_ids": [1, 2, -3, 4]}, "token_ids"),
        ({**STORED, "token_ids": [1, 2, True, 4]}, "token_ids"),
        ({**STORED, "token_ids": [1, 2, 3.0, 4]}, "token_ids"),
        ({**STORED, "block_size": True}, "block_size"),
        ({**STORED, "block_size": 2.0}, "block_size"),
        ({**STORED, "medium": 3}, "medium"),
        ({**STORED, "group_idx": -1}, "group_idx"),
        ({"type": "BlockStored", "block_hashes": [1], "token_ids": [1]}, "block_size"),
        ({"type": "BlockRemoved"}, "block_hashes"),
        ({"type": 5}, "'type'"),
        ({"block_hashes": [1]}, "'type'"),
        ({**STORED, 5: 1}, "BlockStored"),  # a map key that is not a str: no declared layout has one
        (["BlockStored", [1, 2], None, [1, 2, 3], 2], "3 token ids for 2 blocks"),
        (["BlockStored", [1, 2], None, [1, 2, 3, 4], 0], "block_size"),
        (["BlockStored", [1]], "BlockStored: Expected `array` of at least length 5"),
        (["BlockRemoved", 5], "BlockRemoved: Expected `array`, got `int`"),
        ([None, 1], "tagged array"),
        ([], "tagged array"),
        ("BlockStored", "map or a tagged array"),
    ],
)
def test_a_malformed_event_is_refused_with_its_field(event: Any, match: str) -> None:
    with pytest.raises(MalformedEvents, match=match):
        decode_batch(frames(VLLMEventBatch(1.0, [event])))


@pytest.mark.parametrize(
    "body, match",
    [
        ([True, []], "Expected `float`, got `bool`"),
        ([1.0, [], -1], ">= 0"),
        ([1.0], "at least length 2"),
        ([1.0, {}], "Expected `array`, got `object`"),
    ],
)
def test_a_malformed_batch_is_refused(body: Any, match: str) -> None:
    with pytest.raises(MalformedEvents, match=r"\[timestamp, \[events\], dp_rank\?\].*" + match):
        decode_batch([b"", bytes(8), msgspec.msgpack.encode(body)])


# ---------------------------------------------------------------------------------------------
# fuzz: damaged engine messages decode or are refused, nothing else
# ---------------------------------------------------------------------------------------------

ODD: list[Any] = [
    None,
    True,
    -1,
    0,
    2**62,
    1.5,
    "",
    "GPU",
    "x" * 300,
    b"",
    SHA,
    [],
    [1],
    {},
    {"a": 1},
    msgspec.msgpack.Ext(1, b"x"),
]


def damaged(rng: random.Random, event: dict[str, Any] | list[Any]) -> dict[str, Any] | list[Any]:
    """One field of ``event`` replaced by an odd value, removed, or a list grown by one item."""
    if isinstance(event, dict):
        key = rng.choice([*event, "extra"])
        event = dict(event)
        if rng.random() < 0.2:
            event.pop(key, None)
        else:
            value = event.get(key)
            grow = isinstance(value, list) and rng.random() < 0.3
            event[key] = [*value, rng.choice(ODD)] if grow else rng.choice(ODD)
        return event
    event = list(event)
    i = rng.randrange(len(event) + 1)
    return event[:i] if rng.random() < 0.2 else [*event[:i], rng.choice(ODD), *event[i + 1 :]]


def test_damaged_messages_decode_or_are_refused_as_malformed() -> None:
    rng = random.Random(33)
    vllm = msgspec.msgpack.decode(msgspec.msgpack.encode(vllm_step().events))
    sglang = [["BlockStored", [5, 6], None, [9, 8, 7, 6], 2, None, "GPU"], ["BlockRemoved", [5]], ["AllBlocksCleared"]]
    outcomes = {"decoded": 0, "refused": 0}
    for i in range(3_000):
        events = [damaged(rng, e) if rng.random() < 0.5 else e for e in rng.choice([vllm, sglang])]
        payload = bytearray(msgspec.msgpack.encode([1.5, events, 0]))
        if i % 5 == 0:  # byte-level damage: a byte changed, or the message cut short
            j = rng.randrange(len(payload))
            payload = (
                payload[:j] if rng.random() < 0.5 else payload[:j] + bytes([rng.randrange(256)]) + payload[j + 1 :]
            )
        try:
            batch = decode_batch([b"", i.to_bytes(8, "big"), bytes(payload)])
        except MalformedEvents:
            outcomes["refused"] += 1
        else:
            assert all(isinstance(e, (BlockStored, BlockRemoved, AllBlocksCleared)) for e in batch.events)
            outcomes["decoded"] += 1
    assert outcomes["decoded"] > 500 and outcomes["refused"] > 500, outcomes
