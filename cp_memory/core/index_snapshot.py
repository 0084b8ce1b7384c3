"""Snapshot format of :class:`~cp_memory.core.index.ContextIndex`: zlib'd JSON, validated on the way in.

Version 2 (written now)::

    {"version": 2,
     "options": {"alpha": .., "extra_budget": .., "swap_budget": .., "protect": ..,
                 "capacity_tokens": .., "tail_order": .., "linkage": ..},
     "tick": <last access clock>,
     "nodes": [[parent, slot, next_slot, [block ids], [token lens] | null, [request ids] | null,
                last_access], ...],          # pre-order: the root first, every parent before its children
     "requests": [request ids, least recently used first]}

Version 1 (read only) has no ``"requests"`` list and no swap options; its requests are restored in the
order of their nodes' last access (best effort: requests ending at one node keep their stored order).

Ids are str, int, float, bool, bytes (``{"b": hex}``) or lists of those (tuples). Only the tree, the
request order, the clock and the options are stored; every derived count (frequencies, subtree sizes,
tokens) is recomputed on restore, so a snapshot cannot make them inconsistent. :func:`load` raises
``ValueError`` — and nothing else — for anything that is not a well-formed snapshot: truncated or
garbage bytes, JSON that is not an object, wrong field types, an unknown version, references that do not
form a tree, or a snapshot over the size bounds.

Bounds (what a hostile snapshot can cost). ``max_bytes`` (default :data:`MAX_SNAPSHOT_BYTES`, 16 MiB)
caps the input and its decompressed JSON; decompression stops there, so a zlib bomb never inflates
further. The JSON may hold at most ``max_bytes // 16`` values, counted before parsing as its ``,``, ``[``
and ``{`` characters (a parsed value costs at most ~70 bytes besides its text: a JSON document of
small values would otherwise take ~20x its size). A legitimate snapshot is far below both bounds: 1024
requests of 100 distinct mem0 memories each are 3.3 MiB compressed, 6 MiB of JSON, ~0.4M values.
Validation is linear in the snapshot's size (one pass over the records, one walk of the tree).
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .tree import Node

__all__ = ["MAX_SNAPSHOT_BYTES", "OPTION_NAMES", "SNAPSHOT_VERSION", "Restored", "dump", "load", "restore_options"]

SNAPSHOT_VERSION = 2
#: a snapshot (compressed, and its decompressed JSON) larger than this is refused; the one default
MAX_SNAPSHOT_BYTES = 16 << 20
_BYTES_PER_VALUE = 16  # at most max_bytes // 16 JSON values
OPTION_NAMES = ("alpha", "extra_budget", "swap_budget", "protect", "capacity_tokens", "tail_order", "linkage")


@dataclass(frozen=True)
class Restored:
    """A decoded snapshot: stored options, clock, the tree and the live requests (LRU order)."""

    options: dict[str, Any]
    tick: int
    root: Node
    requests: list[tuple[Hashable, Node]]


def dump(options: Mapping[str, Any], tick: int, root: Node, requests: Iterable[tuple[Hashable, Node]]) -> bytes:
    """Encode a tree (pre-order, children by slot) and its requests, least recently used first."""
    order = list(requests)
    rank = {rid: i for i, (rid, _) in enumerate(order)}
    index_of: dict[int, int] = {}
    nodes: list[list[Any]] = []
    stack = [root]
    while stack:
        n = stack.pop()
        index_of[id(n)] = len(nodes)
        reqs = sorted(n.requests, key=rank.__getitem__) if n.requests else None
        nodes.append(
            [
                -1 if n.parent is None else index_of[id(n.parent)],
                n.slot,
                n.next_slot,
                [_enc(b) for b in n.seg],
                None if n.toks is None else list(n.toks),
                None if reqs is None else [_enc(r) for r in reqs],
                n.last_access,
            ]
        )
        stack.extend(sorted(n.children.values(), key=lambda c: c.slot, reverse=True))
    doc = {
        "version": SNAPSHOT_VERSION,
        "options": dict(options),
        "tick": tick,
        "nodes": nodes,
        "requests": [_enc(rid) for rid, _ in order],
    }
    return zlib.compress(json.dumps(doc, separators=(",", ":"), allow_nan=False).encode("utf-8"), 6)


def restore_options(stored: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The options a restored index is built with: the caller's ``overrides`` over the ``stored`` ones.
    The alignment mode is one value, never merged: ``mode`` or any of the flat ``extra_budget`` /
    ``swap_budget`` / ``protect`` in ``overrides`` drops all three stored ones."""
    flat = ("extra_budget", "swap_budget", "protect")
    if "mode" in overrides or any(k in overrides for k in flat):
        stored = {k: v for k, v in stored.items() if k not in flat}
    return {**stored, **overrides}


def load(data: bytes | bytearray | memoryview, *, max_bytes: int = MAX_SNAPSHOT_BYTES) -> Restored:
    """Decode and validate snapshot bytes; ``ValueError`` (only) for anything malformed or too large."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"restore needs bytes from snapshot(), got {type(data).__name__}")
    if not _is_int(max_bytes, 1):
        raise ValueError(f"max_bytes must be a positive int, got {max_bytes!r}")
    try:
        return _load(bytes(data), max_bytes)
    except _Corrupt as exc:
        raise ValueError(f"corrupt ContextIndex snapshot: {exc}") from None
    except (
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        AttributeError,
        OverflowError,
        RecursionError,
        MemoryError,
        zlib.error,
    ) as exc:
        raise ValueError(f"corrupt ContextIndex snapshot: {type(exc).__name__}: {exc}") from exc


class _Corrupt(Exception):
    pass


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise _Corrupt(what)


def _is_int(x: Any, low: int = 0) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= low


def _load(raw: bytes, max_bytes: int) -> Restored:
    _need(len(raw) <= max_bytes, f"{len(raw)} bytes, over the {max_bytes}-byte bound")
    inflater = zlib.decompressobj()
    try:
        text = inflater.decompress(raw, max_bytes + 1)
    except zlib.error as exc:
        raise _Corrupt(f"not zlib data ({exc})") from None
    _need(len(text) <= max_bytes, f"over the {max_bytes}-byte bound decompressed")
    _need(inflater.eof, "truncated data")
    values = text.count(b",") + text.count(b"[") + text.count(b"{") + 1  # each value but a first follows a ","
    limit = max_bytes // _BYTES_PER_VALUE
    _need(values <= limit, f"~{values} JSON values, over the bound of {limit} for {max_bytes} bytes")
    try:
        doc = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _Corrupt(f"not JSON ({exc})") from None
    del text
    _need(isinstance(doc, dict), f"expected a JSON object, got {type(doc).__name__}")
    version = doc.get("version")
    _need(_is_int(version) and version in (1, SNAPSHOT_VERSION), f"unsupported snapshot version {version!r:.40}")
    options, tick, raw_nodes = doc.get("options"), doc.get("tick"), doc.get("nodes")
    _need(isinstance(options, dict), "'options' must be an object")
    _need(_is_int(tick), f"'tick' must be a non-negative int, got {tick!r:.40}")
    _need(isinstance(raw_nodes, list) and len(raw_nodes) > 0, "'nodes' must be a non-empty list")
    root, ends, nodes = _tree(raw_nodes)
    tick = max([tick] + [n.last_access for n in nodes])
    if version == 1:
        ordered = sorted(range(len(ends)), key=lambda i: ends[i][1].last_access)
        requests = [ends[i] for i in ordered]
    else:
        stored = doc.get("requests")
        _need(isinstance(stored, list), "'requests' must be a list")
        where = dict(ends)
        requests = []
        for r in stored:
            rid = _dec(r)
            _need(rid in where, f"request {rid!r:.60} is listed but ends at no node")
            requests.append((rid, where.pop(rid)))
        _need(not where, f"request(s) {list(where)[:3]!r:.120} end at a node but are not listed")
    opts = {k: v for k, v in options.items() if k in OPTION_NAMES}
    return Restored(opts, tick, root, requests)


def _tree(raw_nodes: list[Any]) -> tuple[Node, list[tuple[Hashable, Node]], list[Node]]:
    """Rebuild the trie from pre-order node records, checking every reference (linear time)."""
    built: list[Node] = []
    slots: list[set[int] | None] = []  # per node: the slots its children took
    ends: list[tuple[Hashable, Node]] = []
    seen_requests: set[Hashable] = set()
    for i, rec in enumerate(raw_nodes):
        _need(isinstance(rec, list) and len(rec) == 7, f"node {i} must be a list of 7 fields")
        parent_i, slot, next_slot, seg, toks, reqs, last = rec
        _need(_is_int(parent_i, -1) and parent_i < i, f"node {i}: parent {parent_i!r:.40} must be an earlier node")
        _need((parent_i == -1) == (i == 0), f"node {i}: exactly the first node is the root")
        _need(_is_int(slot) and _is_int(next_slot) and _is_int(last), f"node {i}: slots and last access must be ints")
        _need(isinstance(seg, list), f"node {i}: blocks must be a list")
        ids = tuple(_dec(b) for b in seg)
        if toks is not None:
            _need(
                isinstance(toks, list) and len(toks) == len(ids) and all(_is_int(t) for t in toks),
                f"node {i}: token lens must be non-negative ints, one per block",
            )
        if i == 0:
            _need(not ids and toks is None, "the root holds no blocks")
            node = Node((), None, 0)
        else:
            _need(len(ids) > 0, f"node {i} holds no blocks")
            parent = built[parent_i]
            _need(ids[0] not in parent.children, f"node {i}: two children of node {parent_i} start with {ids[0]!r:.60}")
            taken = slots[parent_i]
            if taken is None:
                taken = slots[parent_i] = set()
            _need(slot not in taken, f"node {i}: slot {slot} is taken")
            _need(slot < parent.next_slot, f"node {i}: slot {slot} >= its parent's next slot")
            taken.add(slot)
            node = Node(ids, parent, slot, None if toks is None else tuple(toks))
            parent.children[ids[0]] = node
        node.next_slot = next_slot
        node.last_access = last
        if reqs is not None:
            _need(isinstance(reqs, list) and len(reqs) > 0, f"node {i}: requests must be a non-empty list or null")
            _need(i > 0, "no request can end at the root")
            node.requests = set()
            for r in reqs:
                rid = _dec(r)
                _need(rid not in seen_requests, f"request {rid!r:.60} ends at two nodes")
                seen_requests.add(rid)
                node.requests.add(rid)
                ends.append((rid, node))
        built.append(node)
        slots.append(None)
    for i, node in enumerate(built[1:], start=1):
        _need(bool(node.children) or bool(node.requests), f"node {i} is a dead end (no requests, no children)")
    _no_repeats_on_a_path(built[0])
    return built[0], ends, built


def _no_repeats_on_a_path(root: Node) -> None:
    """No block id occurs twice on one root-to-node path (so in no request): one walk, a set of the path."""
    on_path: set[Hashable] = set()
    stack: list[tuple[Node, bool]] = [(root, True)]
    while stack:
        node, entering = stack.pop()
        if not entering:
            on_path.difference_update(node.seg)
            continue
        for b in node.seg:
            _need(b not in on_path, f"a request's blocks repeat the id {b!r:.60}")
            on_path.add(b)
        stack.append((node, False))
        stack.extend((c, True) for c in node.children.values())


def _enc(x: Any) -> Any:
    if isinstance(x, (str, bool, int)):
        return x
    if isinstance(x, float):
        if not math.isfinite(x):
            raise TypeError(f"cannot snapshot the non-finite float id {x!r}")
        return x
    if isinstance(x, tuple):
        return [_enc(v) for v in x]
    if isinstance(x, bytes):
        return {"b": x.hex()}
    raise TypeError(f"cannot snapshot id {x!r} of type {type(x).__name__}; use str, int or tuples of them")


def _dec(x: Any) -> Hashable:
    if isinstance(x, list):
        return tuple(_dec(v) for v in x)
    if isinstance(x, dict):
        _need(set(x) == {"b"} and isinstance(x["b"], str), f"bad id object {x!r:.60}")
        return bytes.fromhex(x["b"])
    _need(isinstance(x, (str, int, float)), f"bad id {x!r:.60}")  # bool is an int; null is refused
    _need(not isinstance(x, float) or math.isfinite(x), f"bad id {x!r}")
    return x  # type: ignore[no-any-return]
