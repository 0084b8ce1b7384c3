"""A gateway session's record (what replicas share): it comes back as it went in, it is never another key's,
it never holds what its fields cannot be, and it is never larger than its bound."""

from __future__ import annotations

import json

import pytest

from cp_memory.gateway.content.records import ContentState, PendingContent, Where
from cp_memory.gateway.protocols import Api
from cp_memory.gateway.replay import SentLog
from cp_memory.gateway.session_record import SessionRecord, decode_session, encode_session

OWNER = "the owner tag of this key"
BOUND = 1 << 20


def _record() -> SessionRecord:
    content = ContentState()
    where = Where(2, ("messages", 3, "content"), 10, 400, "toolu_01")
    content.commit(Api.CHAT, PendingContent(blocks=(("k1", where),), chunks=(("c1", where),)))
    content.commit(Api.CHAT, PendingContent(orders=(("anchor", ("x", "y", "z")),)))
    logs = {
        Api.CHAT: SentLog(
            ({"role": "user", "content": "hi"}, {"role": "tool", "content": "…"}), ("d1", "d2"), frozenset({1})
        ),
        Api.MESSAGES: SentLog(("system text",), ("d0",)),
    }
    return SessionRecord(logs, "epoch-1", True, content)


def test_a_record_comes_back_as_it_went_in() -> None:
    record = _record()
    back = decode_session(encode_session(record, OWNER, max_bytes=BOUND), OWNER, max_bytes=BOUND)
    assert back.logs == record.logs and back.logs[Api.CHAT].rewrites == frozenset({1})
    assert (back.epoch, back.cached) == ("epoch-1", True)
    assert back.content.block(Api.CHAT, "k1") == record.content.block(Api.CHAT, "k1")
    assert back.content.chunk(Api.CHAT, "c1") == record.content.chunk(Api.CHAT, "c1")
    assert back.content.aligned(Api.CHAT, "anchor", ["z", "x", "y"]) == ("x", "y", "z")  # the index, restored


def test_a_record_under_another_key_is_not_used() -> None:
    data = encode_session(_record(), "another session's owner tag", max_bytes=BOUND)
    with pytest.raises(ValueError, match="another session or tenant"):
        decode_session(data, OWNER, max_bytes=BOUND)


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(v=2),
        lambda d: d.update(mem=["e", "yes"]),
        lambda d: d["logs"]["chat"].update(digests=["d1"]),  # segments and digests no longer pair up
        lambda d: d["logs"]["chat"].update(rewrites=[5]),  # a rewrite of a segment the log does not have
        lambda d: d["logs"].update(nonsense={"segments": [], "digests": [], "rewrites": []}),
        lambda d: d["content"]["blocks"][0].__setitem__(2, -1),  # a negative segment
        lambda d: d["content"]["blocks"][0].__setitem__(5, 1),  # a location that ends before it starts
        lambda d: d["content"]["indexes"][0].__setitem__(2, "not base64!"),
        lambda d: d["content"]["indexes"][0].__setitem__(2, "aGVsbG8="),  # base64, not a snapshot
    ],
)
def test_a_malformed_record_is_refused_with_a_value_error(change: object) -> None:
    doc = json.loads(encode_session(_record(), OWNER, max_bytes=BOUND))
    change(doc)  # type: ignore[operator]
    with pytest.raises(ValueError):
        decode_session(json.dumps(doc).encode(), OWNER, max_bytes=BOUND)
    with pytest.raises(ValueError):
        decode_session(b"\xff not json", OWNER, max_bytes=BOUND)


def test_a_record_over_its_bound_is_written_smaller_content_first_its_own_log_last() -> None:
    record = _record()
    full = encode_session(record, OWNER, max_bytes=BOUND)
    without_content = len(
        encode_session(SessionRecord(record.logs, "epoch-1", True, ContentState()), OWNER, max_bytes=BOUND)
    )
    small = decode_session(
        encode_session(record, OWNER, max_bytes=without_content, keep=Api.CHAT), OWNER, max_bytes=BOUND
    )
    assert small.logs == record.logs and small.content.block(Api.CHAT, "k1") is None
    smaller = decode_session(
        encode_session(record, OWNER, max_bytes=without_content - 1, keep=Api.CHAT), OWNER, max_bytes=BOUND
    )
    assert list(smaller.logs) == [Api.CHAT] and smaller.epoch == "epoch-1"  # the other protocol's log went first
    with pytest.raises(ValueError, match="over the bound"):
        decode_session(full, OWNER, max_bytes=len(full) - 1)
