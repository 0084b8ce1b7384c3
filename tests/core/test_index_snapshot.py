"""Index snapshots: the caller's configuration wins, malformed data is exactly a ValueError, a hostile
snapshot costs bounded memory and linear work, and a restored index keeps its least-recently-used order."""

from __future__ import annotations

import json
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cp_memory.core.index import ContextIndex
from cp_memory.core.index_snapshot import MAX_SNAPSHOT_BYTES


def decode(data: bytes):
    return json.loads(zlib.decompress(data))


def encode(doc) -> bytes:
    return zlib.compress(json.dumps(doc).encode())


def sample_index(**options) -> ContextIndex:
    index = ContextIndex(**options)
    index.build([["m1", "m2", 3], ["m2", "m1", 4], [("t", 1), b"raw", 2.5]], request_ids=["b0", "b1", ("b", 2)])
    for i in range(6):
        index.insert([i, "m1", i + 10], f"r{i}")
    index.evict("r2")
    return index


def test_overrides_win_over_the_stored_configuration():
    # a snapshot written with extra_budget=0.5, capacity 1000 restored by a wrapper configured
    # with extra_budget=0, capacity None must not keep adopting extras
    index = ContextIndex(extra_budget=0.5, capacity_tokens=1000, tail_order="retrieval")
    index.insert(list(range(10)), "warm")
    data = index.snapshot()
    assert ContextIndex.restore(data).insert(list(range(1, 7))).extra == (0,)
    plain = ContextIndex.restore(data, extra_budget=0.0, capacity_tokens=None, tail_order="frequency")
    assert (plain.extra_budget, plain.capacity_tokens, plain.tail_order) == (0.0, None, "frequency")
    assert plain.insert(list(range(1, 7))).extra == ()
    sized = ContextIndex.restore(data, token_len=lambda b: 7)
    assert sized.token_len is not None and sized.capacity_tokens == 1000


def test_a_smaller_capacity_override_evicts_least_recently_used_first():
    index = ContextIndex()
    for i in range(5):
        index.insert([f"{i}a", f"{i}b"], f"r{i}")  # 2 tokens each, r0 oldest
    restored = ContextIndex.restore(index.snapshot(), capacity_tokens=6)
    assert restored.request_ids() == ["r2", "r3", "r4"] and restored.cached_tokens == 6


def test_bad_overrides_are_the_callers_error():
    data = ContextIndex().snapshot()
    with pytest.raises(TypeError, match="unknown option"):
        ContextIndex.restore(data, extra=0.1)
    with pytest.raises(ValueError, match="alpha"):
        ContextIndex.restore(data, alpha=-1)
    with pytest.raises(TypeError, match="bytes"):
        ContextIndex.restore("not bytes")  # type: ignore[arg-type]


def test_restored_index_keeps_lru_order_and_evicts_like_the_original():
    index = sample_index(capacity_tokens=40)
    restored = ContextIndex.restore(index.snapshot())
    assert restored.request_ids() == index.request_ids()
    assert restored.snapshot() == index.snapshot()  # byte-stable round trip
    for i in range(30):  # the same stream on both
        blocks = [f"n{i}", "m1", f"n{i + 1}", i % 4]
        a, b = index.insert(blocks, f"s{i}"), restored.insert(blocks, f"s{i}")
        assert (a.order, a.prefix_len) == (b.order, b.prefix_len)
        assert restored.request_ids() == index.request_ids()
    assert restored.evicted_by_capacity == index.evicted_by_capacity > 0


def test_version_1_snapshots_restore_in_best_effort_lru_order():
    index = sample_index()
    doc = decode(index.snapshot())
    doc["version"] = 1
    del doc["requests"]  # v1 had no request order: the nodes' last access gives it
    restored = ContextIndex.restore(encode(doc))
    assert restored.request_ids() == index.request_ids()
    assert {r: restored.order_of(r) for r in restored.request_ids()} == {
        r: index.order_of(r) for r in index.request_ids()
    }


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: [d], "JSON object"),
        (lambda d: {**d, "version": 3}, "version"),
        (lambda d: {**d, "version": True}, "version"),
        (lambda d: {**d, "tick": "7"}, "tick"),
        (lambda d: {**d, "options": []}, "options"),
        (lambda d: {**d, "options": {**d["options"], "alpha": "x"}}, "alpha"),
        (lambda d: {**d, "nodes": {}}, "nodes"),
        (lambda d: {**d, "nodes": [[5, 0, 0, [], None, None, 0]] + d["nodes"][1:]}, "parent"),
        (lambda d: {**d, "nodes": d["nodes"] + [[0, 99, 0, ["zz"], None, None, 0]]}, "slot"),
        (lambda d: {**d, "nodes": d["nodes"] + [[0, 0, 0, ["zz"], None, ["q"], 0]]}, "slot 0 is taken"),
        (lambda d: {**d, "nodes": d["nodes"] + [[1, 0, 0, ["zz"], [1, 2], ["q"], 0]]}, "token lens"),
        (lambda d: {**d, "nodes": d["nodes"] + [[1, 50, 0, [None], None, ["q"], 0]]}, "bad id"),
        (lambda d: {**d, "requests": d["requests"][1:]}, "not listed"),
        (lambda d: {**d, "requests": d["requests"] + ["ghost"]}, "ends at no node"),
    ],
)
def test_malformed_snapshots_raise_value_error_with_a_clear_message(mutate, message):
    doc = decode(sample_index().snapshot())
    with pytest.raises(ValueError, match=message):
        ContextIndex.restore(encode(mutate(doc)))


def test_truncated_garbage_and_bombs():
    data = sample_index().snapshot()
    for cut in (0, 1, len(data) // 2, len(data) - 1):
        with pytest.raises(ValueError, match="corrupt"):
            ContextIndex.restore(data[:cut])
    with pytest.raises(ValueError, match="corrupt"):
        ContextIndex.restore(b"\x00garbage")
    with pytest.raises(ValueError, match="not JSON"):
        ContextIndex.restore(zlib.compress(b"\xff\xfe{"))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 40) | st.floats(allow_nan=True) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from paths(v, prefix + (i,))


def replaced(doc, path, value):
    if not path:
        return value
    out = dict(doc) if isinstance(doc, dict) else list(doc)
    out[path[0]] = replaced(doc[path[0]], path[1:], value)
    return out


def must_restore_or_raise_value_error(data: bytes) -> None:
    try:
        index = ContextIndex.restore(data)
    except ValueError:
        return
    # whatever restored is a working, consistent index
    for i in range(3):
        index.insert(["m1", i, "m2"])
    for rid in index.request_ids():
        assert index.order_of(rid) is not None
        index.evict(rid)
    assert len(index) == 0 and index.cached_tokens == 0 and index.node_count == 1


VALID = decode(sample_index(capacity_tokens=50).snapshot())
ALL_PATHS = list(paths(VALID))


@pytest.mark.slow  # fuzzing: the full tier
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ALL_PATHS), json_values)
def test_fuzz_any_field_replaced(path, value):
    must_restore_or_raise_value_error(encode(replaced(VALID, path, value)))


@pytest.mark.slow  # fuzzing: the full tier
@settings(max_examples=200, deadline=None)
@given(json_values)
def test_fuzz_any_json_document(doc):
    must_restore_or_raise_value_error(encode(doc))


@pytest.mark.slow  # fuzzing: the full tier
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), st.integers(0, 400), st.binary(max_size=8))
def test_fuzz_bytes(garbage, cut, splice):
    must_restore_or_raise_value_error(garbage)
    valid = sample_index().snapshot()
    must_restore_or_raise_value_error(valid[:cut] + splice + valid[cut + len(splice) :])


# --- what a hostile snapshot can cost ------------------------------------------------------------------


def chain(n: int) -> bytes:
    """A snapshot of n nested nodes, one request ending at each (depth n)."""
    nodes = [[-1, 0, 1, [], None, None, 0]] + [[i - 1, 0, int(i < n), [i], None, [f"r{i}"], i] for i in range(1, n + 1)]
    return encode(
        {"version": 2, "options": {}, "tick": n, "nodes": nodes, "requests": [f"r{i}" for i in range(1, n + 1)]}
    )


def fan(n: int) -> bytes:
    """A snapshot of n children of the root, one request each (width n)."""
    nodes = [[-1, 0, n, [], None, None, 0]] + [[0, i - 1, 0, [i], None, [f"r{i}"], i] for i in range(1, n + 1)]
    return encode(
        {"version": 2, "options": {}, "tick": n, "nodes": nodes, "requests": [f"r{i}" for i in range(1, n + 1)]}
    )


def traced_lines(data: bytes) -> int:
    """Python lines cp_memory executes to restore ``data``: a measure of work that does not depend on time."""
    import sys

    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return local

    def tracer(frame, event, arg):
        return local if "cp_memory" in frame.f_code.co_filename else None

    sys.settrace(tracer)
    try:
        ContextIndex.restore(data)
    finally:
        sys.settrace(None)
    return count


@pytest.mark.parametrize("shape", [chain, fan], ids=["depth", "width"])
def test_restore_work_is_linear_in_depth_and_width(shape):
    # a 245 KiB snapshot of this shape took 20 s to validate when the work grew with depth * requests or
    # width * children; doubling the size must now roughly double the work (quadratic: 4x)
    small, large = traced_lines(shape(1000)), traced_lines(shape(2000))
    assert large < 2.3 * small


def test_decompression_stops_at_the_bound(tmp_path):
    import tracemalloc

    packer = zlib.compressobj(9)
    spaces = b" " * (1 << 20)
    bomb = packer.compress(b'{"version": 2') + b"".join(packer.compress(spaces) for _ in range(128))
    bomb += packer.compress(b"}") + packer.flush()  # 128 KiB that inflate to 128 MiB
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="bound"):
            ContextIndex.restore(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * MAX_SNAPSHOT_BYTES  # the bound and zlib's buffer, never the 128 MiB (nor its decoding)


def test_a_document_of_many_small_values_is_refused_before_parsing():
    import tracemalloc

    lists = zlib.compress(b'{"version":2,"options":{},"tick":0,"nodes":[' + b"[]," * (4 << 20) + b"[]]}", 9)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="JSON values"):
            ContextIndex.restore(lists)  # 12 MiB of JSON: within the byte bound, but ~8M values
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_SNAPSHOT_BYTES  # parsed, 4M lists would take ~300 MiB


def test_the_bounds_follow_max_bytes_and_a_legitimate_snapshot_fits():
    data = sample_index().snapshot()
    with pytest.raises(ValueError, match="bound"):
        ContextIndex.restore(data, max_bytes=len(data) - 1)
    assert len(ContextIndex.restore(data, max_bytes=16 * len(zlib.decompress(data)))) == len(sample_index())
    with pytest.raises(ValueError, match="max_bytes"):
        ContextIndex.restore(data, max_bytes=0)


# --- hostile snapshots at the bounds (issue 28 item 3) ------------------------------------------------


def doc_of(nodes: list, requests: list) -> bytes:
    return encode({"version": 2, "options": {}, "tick": len(nodes), "nodes": nodes, "requests": requests})


def many_nodes(n: int, deep: bool) -> bytes:
    """n one-block nodes (a chain, or children of the root), one request each; the last request is not
    listed, so the document is malformed only at its very end."""
    root = [-1, 0, 1 if deep else n, [], None, None, 0]
    nodes = [root] + [
        [i - 1 if deep else 0, 0 if deep else i - 1, int(deep and i < n), [i], None, [i], i] for i in range(1, n + 1)
    ]
    return doc_of(nodes, list(range(1, n)))


def wide_node(n: int) -> bytes:
    """One node of n blocks, the last repeating the first (malformed at the last block)."""
    return doc_of([[-1, 0, 1, [], None, None, 0], [0, 0, 0, [*range(1000, 1000 + n), 1000], None, ["r"], 1]], ["r"])


def crowded_node(n: int) -> bytes:
    """n requests ending at one node; the last one not listed."""
    ids = list(range(1000, 1000 + n))
    return doc_of([[-1, 0, 1, [], None, None, 0], [0, 0, 0, [1], None, ids, 1]], ids[:-1])


def everything(n: int) -> bytes:
    """A chain of n nodes holding 8 blocks and 2 requests each: every bound reached at once."""
    nodes = [[-1, 0, 1, [], None, None, 0]]
    for i in range(1, n + 1):
        nodes.append([i - 1, 0, int(i < n), list(range(8 * i, 8 * i + 8)), None, [2 * i, 2 * i + 1], i])
    return doc_of(nodes, [r for i in range(1, n + 1) for r in (2 * i, 2 * i + 1)][:-1])


def cost_of(data: bytes) -> tuple[float, int]:
    """(CPU seconds, peak bytes of Python allocations) of restoring ``data``, which must be refused."""
    import time
    import tracemalloc

    tracemalloc.start()
    start = time.process_time()
    try:
        with pytest.raises(ValueError, match="corrupt"):
            ContextIndex.restore(data)
        return time.process_time() - start, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


MiB = 1 << 20


@pytest.mark.slow  # 1-3 s each at the bounds: the full tier
@pytest.mark.parametrize(
    "hostile",
    [
        # what the review built: documents at the value bound alone (1M values), refused now at a tree bound
        lambda: many_nodes(90_000, deep=False),
        lambda: many_nodes(90_000, deep=True),
        lambda: wide_node(690_000),
        lambda: crowded_node(340_000),
        # the worst documents the tree bounds still let through to their last check
        lambda: many_nodes(32_000, deep=True),
        lambda: wide_node(262_000),
        lambda: crowded_node(65_000),
        lambda: everything(32_000),
    ],
    ids=["width", "depth", "blocks", "requests", "depth-inside", "blocks-inside", "requests-inside", "all-inside"],
)
def test_a_malformed_snapshot_just_inside_every_bound_ends_cold_in_bounded_memory(hostile):
    # before the node/block/request bounds these documents (within the value bound) took 68-109 MiB and up
    # to 2.5 s of CPU before their last line was found wrong; now each stops at a bound, or inside them all
    data = hostile()
    assert len(data) < 2 * MiB  # a few hundred KiB on disk: the size the review used
    cpu, peak = cost_of(data)
    assert peak < 64 * MiB
    assert cpu < 30  # generous (tracemalloc slows it ~5x; ~0.5 s without it on a loaded 2-core box)


@pytest.mark.parametrize(
    ("hostile", "bound"),
    [
        (lambda: many_nodes(32_768, deep=True), "32769 nodes, over the bound of 32768"),
        (lambda: wide_node(262_144), "bound of 262144 block ids"),
        (lambda: crowded_node(65_537), "bound of 65536 requests"),
    ],
    ids=["nodes", "blocks", "requests"],
)
def test_one_past_each_bound_is_refused_naming_it(hostile, bound):
    with pytest.raises(ValueError, match=bound):
        ContextIndex.restore(hostile())


def test_max_requests_keeps_the_most_recent_in_one_pass():
    index = ContextIndex.restore(chain(5000), max_requests=3)
    assert index.request_ids() == ["r4998", "r4999", "r5000"]  # least recently used first, as stored
    index.insert([9999], "new")
    assert index.evict("r4998") and len(index) == 3
    fanned = ContextIndex.restore(fan(5000), max_requests=3)
    assert fanned.node_count == 4  # the root and the three kept leaves: the others' nodes went with them
    assert fanned.frequency(1) == 0 and fanned.frequency(5000) == 1


def test_trimming_a_deep_chain_costs_linear_work():
    # a snapshot of n nested requests trimmed one request at a time walked to the root for each: an
    # 83 KiB file took 12.5 s of CPU. Trimmed in one pass, twice the requests cost about twice the work.
    def work(n: int) -> int:
        import sys

        count = 0

        def local(frame, event, arg):
            nonlocal count
            count += event == "line"
            return local

        sys.settrace(lambda frame, event, arg: local if "cp_memory" in frame.f_code.co_filename else None)
        try:
            index = ContextIndex.restore(chain(n), max_requests=10)
            for _ in range(10):  # then the first searches evict the rest, one each
                index.evict(index.request_ids()[0])
        finally:
            sys.settrace(None)
        return count

    small, large = work(2000), work(4000)
    assert large < 2.3 * small


def test_max_requests_must_be_positive():
    with pytest.raises(ValueError, match="max_requests"):
        ContextIndex.restore(sample_index().snapshot(), max_requests=0)


@pytest.mark.parametrize("bad", [True, False, 0, -1, 1.5, "10", 1e9])
def test_the_bounds_of_a_restore_are_counts_never_a_bool(bad):
    data = sample_index().snapshot()
    with pytest.raises(ValueError, match=r"max_bytes must be an int >= 1, got "):
        ContextIndex.restore(data, max_bytes=bad)
    with pytest.raises(ValueError, match=r"max_requests must be an int >= 1, got "):
        ContextIndex.restore(data, max_requests=bad)
