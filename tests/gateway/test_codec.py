"""The hot path's JSON codec writes, for every value, exactly the bytes the standard library writes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cp_memory.gateway.codec import decode, encode, key


def stdlib(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4), max_leaves=30
)


@settings(max_examples=400, deadline=None)
@given(values)
def test_a_body_read_and_written_again_is_the_standard_librarys_bytes(value: Any) -> None:
    raw = json.dumps(value).encode()  # what a client sends (NaN and big integers included: json allows them)
    decoded = decode(raw)
    assert stdlib(decoded.value) == stdlib(json.loads(raw))  # the same objects (NaN is not equal to itself)
    assert encode(decoded.value, decoded.plain) == stdlib(decoded.value)


@settings(max_examples=300, deadline=None)
@given(values, st.data())
def test_keys_are_equal_exactly_when_the_values_are(a: Any, data: st.DataObject) -> None:
    b = data.draw(st.sampled_from([a, [a], {"k": a}]) | values)  # often the same value, sometimes another
    da, db = decode(json.dumps(a)), decode(json.dumps(b))
    same = json.dumps(da.value) == json.dumps(db.value)  # the standard library's text (NaN written as NaN)
    assert (key(da.value, da.plain) == key(db.value, db.plain)) is same


@pytest.mark.parametrize(
    ("raw", "plain"),
    [
        (b'{"temperature":0.7,"max_tokens":100}', True),
        (b'{"x":1e-05}', False),  # orjson writes 0.00001
        (b'{"x":2.5e-07}', False),  # orjson writes 2.5e-7
        (b'{"x":NaN}', False),  # orjson writes null
        (b'{"x":1e400}', False),  # infinity
        (b'{"seed":123456789012345678901234567890}', True),  # a big integer stays an integer (orjson refuses it)
    ],
)
def test_plain_names_the_numbers_orjson_writes_differently(raw: bytes, plain: bool) -> None:
    decoded = decode(raw)
    assert decoded.plain is plain
    assert stdlib(decoded.value) == stdlib(json.loads(raw))
    assert encode(decoded.value, decoded.plain) == stdlib(decoded.value)


def test_every_code_point_is_written_as_the_standard_library_writes_it() -> None:
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    assert encode({"t": text}, True) == stdlib({"t": text})


def test_an_unpaired_surrogate_fails_as_before_but_still_has_a_key() -> None:
    value = decode(b'{"t":"\\ud800"}')
    with pytest.raises(UnicodeEncodeError):
        encode(value.value, value.plain)
    assert key(value.value, value.plain) == b'{"t":"\\ud800"}'
    assert key({"t": "\\ud800"}, True) != key(value.value, value.plain)


def test_errors_are_the_standard_librarys() -> None:
    with pytest.raises(ValueError):
        decode(b"{not json")
    with pytest.raises(UnicodeDecodeError):
        decode(b'{"a":"\xff"}')
