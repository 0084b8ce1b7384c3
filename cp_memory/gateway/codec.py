"""The hot path's JSON: a request body read once, and the bytes the gateway writes, as fast as orjson makes
them and byte for byte what the standard library writes.

The gateway forwards ``json.dumps(body, ensure_ascii=False, separators=(",", ":"))`` (UTF-8) for a request
it changed, and keys its replay memo by each segment's JSON. orjson writes those bytes ~25x faster and the
same for every string, integer, ``true``/``false``/``null``, array and object — but not for every float (it
writes ``1e-05`` as ``0.00001`` and ``2.5e-07`` as ``2.5e-7``), nor NaN or infinities (``null``), and it refuses
integers beyond 64 bits, non-string keys and unpaired surrogates. So a body is read by the standard library
(the same objects as ever: big integers stay integers) with hooks that watch its numbers: :func:`decode`
says whether the body is **plain** — no float that orjson writes differently from ``float.__repr__`` (what
``json.dumps`` writes), no NaN or infinity. For a plain value :func:`encode` is orjson's bytes; for any other,
or wherever orjson refuses the value, the standard library's. The gateway's own additions to a body (marks,
keys, pointers, memories) are strings, objects and integers, so a plain body stays plain.

:func:`key` is :func:`encode`'s bytes where it can write them, as a memo key: two values with the same key
are equal (both encoders write finite floats so that they read back exactly, and a plain value has no NaN,
which orjson would write as ``null``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["Decoded", "decode", "encode", "key"]


@dataclass(frozen=True)
class Decoded:
    """A JSON document as the standard library reads it, and whether :func:`encode` may write it with orjson."""

    value: Any
    plain: bool


def decode(raw: bytes | str) -> Decoded:
    """``json.loads(raw)`` (the same objects, the same errors: ``ValueError``, ``UnicodeDecodeError``) and
    whether every number in it is one orjson writes as ``json.dumps`` does."""
    odd: list[str] = []

    def number(text: str) -> float:
        value = float(text)
        if not odd and orjson.dumps(value) != float.__repr__(value).encode():
            odd.append(text)
        return value

    def constant(text: str) -> float:  # NaN, Infinity, -Infinity: json.dumps writes them, orjson writes null
        odd.append(text)
        return float(text)

    value = json.loads(raw, parse_float=number, parse_constant=constant)
    return Decoded(value, not odd)


def encode(value: Any, plain: bool) -> bytes:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")``, byte for byte; by orjson
    when ``value`` is ``plain`` (:func:`decode`) and orjson takes it. Raises what the standard library raises
    (``UnicodeEncodeError`` for an unpaired surrogate, ``TypeError`` for what JSON cannot hold)."""
    if plain:
        try:
            return orjson.dumps(value)
        except TypeError:  # orjson.JSONEncodeError: a big integer, a non-string key, a surrogate, deep nesting
            pass
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def key(value: Any, plain: bool) -> bytes:
    """:func:`encode`'s bytes, or the ASCII-escaped JSON where those cannot be written (an unpaired surrogate,
    which UTF-8 cannot hold): equal keys, equal values (an escaped text never equals a raw one)."""
    try:
        return encode(value, plain)
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":")).encode("ascii")
