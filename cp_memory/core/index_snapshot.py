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
further. The JSON may hold at most ``max_bytes // 24`` values, counted before parsing as its ``,``, ``[``
and ``{`` characters (a parsed value costs up to ~64 bytes besides its text: a JSON document of small
values would otherwise take ~20x its size). The tree may hold at most ``max_bytes // 512`` nodes,
``max_bytes // 64`` block ids and ``max_bytes // 256`` requests (never fewer than 1,024 nodes, 4,096
blocks, 1,024 requests): 32,768 / 262,144 / 65,536 at the default, each checked as the records are read,
so no shape of document — deep, wide, many requests at one node — builds more than that. A legitimate
snapshot is far below every bound: 1024 requests of 100 distinct mem0 memories each are 3.2 MiB
compressed, 5.9 MiB of JSON, ~0.32M values, 1,025 nodes, 102,400 blocks. At the bounds a restore (or its
refusal) takes < 64 MiB (Python allocations) and well under a second of CPU (tests/core/test_index_snapshot.py).
Validation is linear in the snapshot's size (one pass over the records, one walk of the tree); the garbage
collector is paused while the tree is built (fresh objects, no cycles to find: it was half the CPU).
``max_requests`` (:meth:`~cp_memory.core.index.ContextIndex.restore`) keeps only the most recently used
requests, dropping the others and the nodes only they used in one pass.
"""

from __future__ import annotations

import gc
import json
import math
import zlib
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .checks import positive_int
from .tree import Node, remove_leaf

__all__ = ["MAX_SNAPSHOT_BYTES", "OPTION_NAMES", "SNAPSHOT_VERSION", "Restored", "dump", "load", "restore_options"]

SNAPSHOT_VERSION = 2
#: a snapshot (compressed, and its decompressed JSON) larger than this is refused; the one default
MAX_SNAPSHOT_BYTES = 16 << 20
_BYTES_PER_VALUE = 24  # at most max_bytes // 24 JSON values
_BYTES_PER_NODE = 512  # at most max_bytes // 512 trie nodes (and never fewer than _MIN_NODES)
_MIN_NODES = 1024
_BYTES_PER_BLOCK = 64  # at most max_bytes // 64 block ids in all nodes together (never fewer than _MIN_BLOCKS)
_MIN_BLOCKS = 4096
_BYTES_PER_REQUEST = 256  # at most max_bytes // 256 requests (and never fewer than _MIN_NODES)
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


def load(
    data: bytes | bytearray | memoryview, *, max_bytes: int = MAX_SNAPSHOT_BYTES, max_requests: int | None = None
) -> Restored:
    """Decode and validate snapshot bytes; ``ValueError`` (only) for anything malformed or too large.
    ``max_requests``: keep only that many most recently used requests (the others are dropped in one pass,
    with the nodes only they used)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"restore needs bytes from snapshot(), got {type(data).__name__}")
    positive_int(max_bytes, "max_bytes")
    if max_requests is not None:
        positive_int(max_requests, "max_requests")
    collecting = gc.isenabled()
    gc.disable()  # the tree is built of fresh objects with no garbage cycles: collecting them is half the cost
    try:
        return _load(bytes(data), max_bytes, max_requests)
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
    finally:
        if collecting:
            gc.enable()


class _Corrupt(Exception):
    pass


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise _Corrupt(what)


def _is_int(x: Any, low: int = 0) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= low


def _load(raw: bytes, max_bytes: int, max_requests: int | None) -> Restored:
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
        chars = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Corrupt(f"not JSON ({exc})") from None
    del text, inflater  # parse from one copy of the document, not two
    try:
        doc = json.loads(chars)
    except json.JSONDecodeError as exc:
        raise _Corrupt(f"not JSON ({exc})") from None
    del chars
    _need(isinstance(doc, dict), f"expected a JSON object, got {type(doc).__name__}")
    version = doc.get("version")
    _need(_is_int(version) and version in (1, SNAPSHOT_VERSION), f"unsupported snapshot version {version!r:.40}")
    options, tick, raw_nodes = doc.get("options"), doc.get("tick"), doc.get("nodes")
    _need(isinstance(options, dict), "'options' must be an object")
    _need(_is_int(tick), f"'tick' must be a non-negative int, got {tick!r:.40}")
    _need(isinstance(raw_nodes, list) and len(raw_nodes) > 0, "'nodes' must be a non-empty list")
    most = max(_MIN_NODES, max_bytes // _BYTES_PER_NODE)
    _need(len(raw_nodes) <= most, f"{len(raw_nodes)} nodes, over the bound of {most} for {max_bytes} bytes")
    bounds = (max(_MIN_BLOCKS, max_bytes // _BYTES_PER_BLOCK), max(_MIN_NODES, max_bytes // _BYTES_PER_REQUEST))
    root, ends, nodes = _tree(raw_nodes, *bounds)
    del raw_nodes, doc["nodes"]
    tick = max([tick] + [n.last_access for n in nodes])
    if version == 1:
        requests = sorted(ends.items(), key=lambda end: end[1].last_access)
    else:
        stored = doc.get("requests")
        _need(isinstance(stored, list), "'requests' must be a list")
        requests = []
        for r in stored:
            rid = _dec(r)
            node = ends.pop(rid, None)
            if node is None:
                raise _Corrupt(f"request {rid!r:.60} is listed but ends at no node")
            requests.append((rid, node))
        _need(not ends, f"request(s) {list(ends)[:3]!r:.120} end at a node but are not listed")
    if max_requests is not None and len(requests) > max_requests:
        requests = _trim(nodes, requests, max_requests)
    opts = {k: v for k, v in options.items() if k in OPTION_NAMES}
    return Restored(opts, tick, root, requests)


def _trim(nodes: list[Node], requests: list[tuple[Hashable, Node]], keep: int) -> list[tuple[Hashable, Node]]:
    """Keep the ``keep`` most recently used requests; drop the others and every node left without a
    request below it — one pass over the requests and one over the nodes (children before parents)."""
    cut = len(requests) - keep
    for rid, node in requests[:cut]:
        assert node.requests is not None
        node.requests.discard(rid)
        if not node.requests:
            node.requests = None
    for node in reversed(nodes):  # pre-order reversed: a node's children are settled before it
        if node.parent is not None and not node.children and not node.requests:
            remove_leaf(node)
    return requests[cut:]


def _tree(raw_nodes: list[Any], max_blocks: int, max_ends: int) -> tuple[Node, dict[Hashable, Node], list[Node]]:
    """Rebuild the trie from pre-order node records, checking every reference (linear time). Each record
    is released once read, so the parsed JSON and the tree never both hold the whole snapshot."""
    built: list[Node] = []
    taken: dict[int, int | set[int]] = {}  # node -> the slot its child took (a set once it has several)
    ends: dict[Hashable, Node] = {}
    blocks = 0
    for i, rec in enumerate(raw_nodes):
        raw_nodes[i] = None
        if not (isinstance(rec, list) and len(rec) == 7):
            raise _Corrupt(f"node {i} must be a list of 7 fields")
        parent_i, slot, next_slot, seg, toks, reqs, last = rec
        if not (_is_int(parent_i, -1) and parent_i < i):
            raise _Corrupt(f"node {i}: parent {parent_i!r:.40} must be an earlier node")
        if (parent_i == -1) != (i == 0):
            raise _Corrupt(f"node {i}: exactly the first node is the root")
        if not (_is_int(slot) and _is_int(next_slot) and _is_int(last)):
            raise _Corrupt(f"node {i}: slots and last access must be ints")
        if not isinstance(seg, list):
            raise _Corrupt(f"node {i}: blocks must be a list")
        blocks += len(seg)
        if blocks > max_blocks:
            raise _Corrupt(f"over the bound of {max_blocks} block ids in all nodes")
        ids = tuple(map(_dec, seg))
        if toks is not None and not (
            isinstance(toks, list) and len(toks) == len(ids) and all(_is_int(t) for t in toks)
        ):
            raise _Corrupt(f"node {i}: token lens must be non-negative ints, one per block")
        node = _root(ids, toks) if i == 0 else _child(built, taken, i, parent_i, slot, ids, toks)
        node.next_slot = next_slot
        node.last_access = last
        if reqs is not None:
            _ends_at(node, i, reqs, ends)
            if len(ends) > max_ends:
                raise _Corrupt(f"over the bound of {max_ends} requests")
        built.append(node)
    for i, node in enumerate(built):
        if i and not node.children and not node.requests:
            raise _Corrupt(f"node {i} is a dead end (no requests, no children)")
    _no_repeats_on_a_path(built)
    return built[0], ends, built


def _root(ids: tuple[Hashable, ...], toks: Any) -> Node:
    if ids or toks is not None:
        raise _Corrupt("the root holds no blocks")
    return Node((), None, 0)


def _child(
    built: list[Node],
    taken: dict[int, int | set[int]],
    i: int,
    parent_i: int,
    slot: int,
    ids: tuple[Hashable, ...],
    toks: Any,
) -> Node:
    if not ids:
        raise _Corrupt(f"node {i} holds no blocks")
    parent = built[parent_i]
    if ids[0] in parent.children:
        raise _Corrupt(f"node {i}: two children of node {parent_i} start with {ids[0]!r:.60}")
    if slot >= parent.next_slot:
        raise _Corrupt(f"node {i}: slot {slot} >= its parent's next slot")
    slots = taken.get(parent_i)
    if slots == slot or isinstance(slots, set) and slot in slots:
        raise _Corrupt(f"node {i}: slot {slot} is taken")
    if slots is None:
        taken[parent_i] = slot  # most nodes have one child: an int, not a set
    elif isinstance(slots, set):
        slots.add(slot)
    else:
        taken[parent_i] = {slots, slot}
    node = Node(ids, parent, slot, None if toks is None else tuple(toks))
    parent.children[ids[0]] = node
    return node


def _ends_at(node: Node, i: int, reqs: Any, ends: dict[Hashable, Node]) -> None:
    if not (isinstance(reqs, list) and reqs):
        raise _Corrupt(f"node {i}: requests must be a non-empty list or null")
    if i == 0:
        raise _Corrupt("no request can end at the root")
    node.requests = set()
    for r in reqs:
        rid = _dec(r)
        if rid in ends:
            raise _Corrupt(f"request {rid!r:.60} ends at two nodes")
        ends[rid] = node
        node.requests.add(rid)


def _no_repeats_on_a_path(preorder: list[Node]) -> None:
    """No block id occurs twice on one root-to-node path (so in no request): one pass over the nodes in
    pre-order, keeping the current path (a stack of nodes) and the set of its blocks."""
    on_path: set[Hashable] = set()
    path: list[Node] = [preorder[0]]
    for node in preorder[1:]:
        while path[-1] is not node.parent:
            on_path.difference_update(path.pop().seg)
        for b in node.seg:
            if b in on_path:
                raise _Corrupt(f"a request's blocks repeat the id {b!r:.60}")
            on_path.add(b)
        path.append(node)


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
    kind = type(x)
    if kind is str or kind is int:
        return x  # type: ignore[no-any-return]
    if kind is list:
        return tuple(_dec(v) for v in x)
    if isinstance(x, dict):
        _need(set(x) == {"b"} and isinstance(x["b"], str), f"bad id object {x!r:.60}")
        return bytes.fromhex(x["b"])
    if not isinstance(x, (str, int, float)) or isinstance(x, float) and not math.isfinite(x):
        raise _Corrupt(f"bad id {x!r:.60}")  # bool is an int; null is refused
    return x  # type: ignore[no-any-return]
