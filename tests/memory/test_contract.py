"""The drop-in contract: a wrapped mem0 object is indistinguishable from mem0's own except
where documented (``search`` gains ``conversation_id``, its results are aligned and carry ``rank`` and
``context_pilot``). Conformance: every public method of ``Memory``/``AsyncMemory`` is called directly and
through the wrapper on the same store, and the results compared.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from tests.mem0_fixtures import ingest, require_mem0

require_mem0()

from mem0 import AsyncMemory, Memory  # noqa: E402
from mem0.memory.base import MemoryBase  # noqa: E402

from cp_memory.embedded import default_config, default_memory  # noqa: E402
from cp_memory.memory import AsyncContextPilotMemory, ContextPilotMemory  # noqa: E402

pytestmark = pytest.mark.mem0

PUBLIC = sorted(n for n in dir(Memory) if not n.startswith("_") and callable(getattr(Memory, n)))


def same_signature_and_doc(ours: Any, theirs: Any, name: str) -> None:
    if name == "from_config":  # mem0's signature; mem0's doc (if any) plus what the wrapper adds
        assert inspect.signature(ours) == inspect.signature(theirs)
        assert inspect.getdoc(ours).startswith(inspect.getdoc(theirs) or "")
    elif name == "search":
        params = dict(inspect.signature(ours).parameters)
        assert params.pop("conversation_id").kind is inspect.Parameter.KEYWORD_ONLY
        assert list(params.values()) == list(inspect.signature(theirs).parameters.values())
        assert inspect.getdoc(ours).startswith(inspect.getdoc(theirs))
        assert "conversation_id" in inspect.getdoc(ours)
    else:
        assert inspect.signature(ours) == inspect.signature(theirs), name
        assert inspect.getdoc(ours) == inspect.getdoc(theirs), name


def test_a_wrapper_is_a_mem0_memory(mem):
    cp = ContextPilotMemory(mem)
    assert isinstance(cp, Memory) and isinstance(cp, MemoryBase)
    for name in PUBLIC:
        same_signature_and_doc(getattr(cp, name), getattr(mem, name), name)
        same_signature_and_doc(getattr(ContextPilotMemory, name), getattr(Memory, name), name)
    assert PUBLIC == [
        "add",
        "chat",
        "close",
        "delete",
        "delete_all",
        "from_config",
        "get",
        "get_all",
        "history",
        "reset",
        "search",
        "update",
    ]


async def test_an_async_wrapper_is_a_mem0_async_memory():
    amem = default_memory(async_=True)
    try:
        cp = AsyncContextPilotMemory(amem)
        assert isinstance(cp, AsyncMemory) and isinstance(cp, MemoryBase)
        for name in PUBLIC:
            same_signature_and_doc(getattr(cp, name), getattr(amem, name), name)
        assert inspect.iscoroutinefunction(cp.search) and inspect.iscoroutinefunction(cp.add)
        assert not inspect.iscoroutinefunction(cp.close)  # mem0's AsyncMemory.close is sync
        assert cp.close() is None
    finally:
        amem.close()


def _coroutine_kinds(ours: Any, theirs: Any) -> dict[str, tuple[bool, bool]]:
    """For every public method of mem0's ``theirs`` and every own method of the wrapper ``ours``:
    (is ours a coroutine function, is theirs). Own methods mem0 lacks must be sync (theirs: False)."""
    names = {n for n in dir(theirs) if not n.startswith("_") and callable(getattr(theirs, n, None))}
    names |= {n for n in dir(type(ours) if not isinstance(ours, type) else ours) if not n.startswith("_")}
    out = {}
    for name in sorted(names):
        mine = getattr(ours, name, None)
        if not callable(mine):
            continue  # a property (cp_config, scopes, ...)
        out[name] = (inspect.iscoroutinefunction(mine), inspect.iscoroutinefunction(getattr(theirs, name, None)))
    return out


def assert_same_coroutine_kinds(ours: Any, theirs: Any) -> None:
    """``async def`` stays ``async def`` and sync stays sync, method by method: code that awaits only when
    ``inspect.iscoroutinefunction`` says so must never get a coroutine it does not await."""
    kinds = _coroutine_kinds(ours, theirs)
    # the async wrappers' own awaitable twins of commit/rollback (mem0 has neither): async by design
    twins = {"acommit", "arollback"}
    wrong = {n: k for n, k in kinds.items() if k[0] != k[1] and not (n in twins and k == (True, False))}
    assert not wrong, f"(wrapper is async, mem0 is async) differ for {wrong}"
    assert {"search", "delete_all", "reset", "commit", "rollback"} <= set(kinds)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_every_method_is_async_exactly_where_mem0s_is(kind: str) -> None:
    theirs_cls, ours_cls = (Memory, ContextPilotMemory) if kind == "sync" else (AsyncMemory, AsyncContextPilotMemory)
    assert_same_coroutine_kinds(ours_cls, theirs_cls)  # the classes (help(), static checks)
    memory = default_memory(async_=kind == "async")
    try:
        assert_same_coroutine_kinds(ours_cls(memory), memory)  # and the instances (forwarded methods)
    finally:
        memory.close()


async def test_async_delete_all_and_reset_are_coroutine_functions_that_delete() -> None:
    """Regression: they were plain functions returning a coroutine, so ``await fn() if
    iscoroutinefunction(fn) else fn()`` never awaited them and nothing was deleted."""
    from tests.mem0_fixtures import aingest

    amem = default_memory(async_=True)
    cp = AsyncContextPilotMemory(amem)
    try:
        await aingest(amem, "del-a", FACTS)

        async def call(fn: Any, **kwargs: Any) -> Any:
            return await fn(**kwargs) if inspect.iscoroutinefunction(fn) else fn(**kwargs)

        await call(cp.delete_all, user_id="del-a")
        assert (await amem.get_all(filters={"user_id": "del-a"}))["results"] == []
        await aingest(amem, "del-b", FACTS)
        await call(cp.reset)
        assert (await amem.get_all(filters={"user_id": "del-b"}))["results"] == []
    finally:
        cp.close()


@pytest.mark.parametrize("filters", ["alice", 5, ["user_id"]])
def test_filters_that_are_not_a_dict_fail_as_mem0_fails(mem, filters):
    """mem0 raises AttributeError ('str' object has no attribute 'copy') or TypeError (a list); the wrapper
    raised TypeError only, which code catching mem0's AttributeError missed. Its error is both now."""
    with pytest.raises(Exception) as theirs:
        mem.search("Where does Alice live?", filters=filters)
    with pytest.raises(type(theirs.value), match="filters must be a dict") as ours:
        ContextPilotMemory(mem).search("Where does Alice live?", filters=filters)
    assert isinstance(ours.value, TypeError) and isinstance(ours.value, AttributeError)


def test_attribute_reads_writes_and_deletes_reach_the_wrapped_memory(mem):
    cp = ContextPilotMemory(mem)
    original = mem.embedding_model
    try:
        cp.embedding_model = "swapped"
        assert mem.embedding_model == "swapped" and cp.embedding_model == "swapped"
    finally:
        mem.embedding_model = original
    cp.cp_probe = 1
    assert mem.cp_probe == 1
    del cp.cp_probe
    assert not hasattr(mem, "cp_probe")
    assert cp.config is mem.config and cp.project is not None


def test_sync_and_async_wrappers_refuse_the_other_kind():
    amem = default_memory(async_=True)
    try:
        with pytest.raises(TypeError, match="AsyncContextPilotMemory"):
            ContextPilotMemory(amem)
    finally:
        amem.close()
    with pytest.raises(TypeError, match="ContextPilotMemory"):
        AsyncContextPilotMemory(default_memory())


def test_from_config_builds_and_wraps(tmp_path):
    mem0_config = default_config()
    cp = ContextPilotMemory.from_config(
        {"mem0": mem0_config, "context_pilot": {"extra_budget": 0.2, "index_dir": str(tmp_path)}}
    )
    assert isinstance(cp, ContextPilotMemory) and isinstance(cp.wrapped, Memory)
    assert cp.cp_config.extra_budget == 0.2 and cp.cp_config.index_dir == tmp_path
    plain = ContextPilotMemory.from_config(mem0_config)  # a plain mem0 config works too
    assert plain.cp_config.extra_budget == 0.0
    with pytest.raises(ValueError, match="unknown top-level keys"):
        ContextPilotMemory.from_config({"mem0": mem0_config, "contextpilot": {}})
    with pytest.raises(ValueError):
        ContextPilotMemory.from_config({"mem0": mem0_config, "context_pilot": {"alpha": -1}})
    cp.close()
    plain.close()


def _strip(result: Any) -> Any:
    """Results without the fields that legitimately differ between two calls (ranks, scores, times)."""
    if isinstance(result, dict):
        return {
            k: _strip(v)
            for k, v in result.items()
            if k not in ("score", "rank", "context_pilot", "created_at", "updated_at", "id", "user_id")
        }
    if isinstance(result, list):
        return sorted((_strip(r) for r in result), key=repr)
    return result


FACTS = ["Cal likes kites.", "Cal likes kelp.", "Cal has a kayak."]

#: every public method of Memory/AsyncMemory, called as ``call(memory, user_id, ids_of_that_user)``
CALLS: list[tuple[str, Any]] = [
    ("add", lambda m, u, ids: m.add("Cal flies kites on Sunday.", user_id=u, infer=False)),
    ("get", lambda m, u, ids: m.get(ids[0])),
    ("get_all", lambda m, u, ids: m.get_all(filters={"user_id": u})),
    ("search", lambda m, u, ids: m.search("kites", filters={"user_id": u}, top_k=3)),
    ("update", lambda m, u, ids: m.update(ids[1], text="Cal likes kelp salad.")),
    ("history", lambda m, u, ids: m.history(ids[1])),
    ("delete", lambda m, u, ids: m.delete(ids[2])),
    ("chat", lambda m, u, ids: m.chat("hi")),
    ("search-bad", lambda m, u, ids: m.search("kites", filters={})),
    ("delete_all", lambda m, u, ids: m.delete_all(user_id=u)),
    ("delete_all-bad", lambda m, u, ids: m.delete_all()),
    ("get_all-after", lambda m, u, ids: m.get_all(filters={"user_id": u})),
]


def _outcome(result: Any = None, exc: BaseException | None = None) -> tuple[str, Any]:
    if exc is not None:
        return (type(exc).__name__, str(exc))
    if isinstance(result, list) and result and isinstance(result[0], dict) and "event" in result[0]:
        result = [h["event"] for h in result]  # history: events (ids and times differ)
    return ("ok", _strip(result))


def test_conformance_every_public_method_direct_and_wrapped():
    memory = default_memory()
    cp = ContextPilotMemory(memory)
    try:
        ids = {"ca": ingest(memory, "ca", FACTS), "cb": ingest(memory, "cb", FACTS)}
        for name, call in CALLS:
            got = []
            for obj, user in ((memory, "ca"), (cp, "cb")):
                try:
                    got.append(_outcome(call(obj, user, ids[user])))
                except Exception as exc:  # noqa: BLE001 - the same error both ways is the contract
                    got.append(_outcome(exc=exc))
            assert got[0] == got[1], name
        ingest(memory, "cc", ["Cal is back."])
        assert cp.reset() is None and memory.get_all(filters={"user_id": "cc"})["results"] == []
        assert {n for n, _ in CALLS} >= set(PUBLIC) - {"close", "from_config", "reset"}
    finally:
        cp.close()


async def test_conformance_every_public_method_direct_and_wrapped_async():
    from tests.mem0_fixtures import aingest

    amem = default_memory(async_=True)
    cp = AsyncContextPilotMemory(amem)
    try:
        ids = {"ca": await aingest(amem, "ca", FACTS), "cb": await aingest(amem, "cb", FACTS)}
        for name, call in CALLS:
            got = []
            for obj, user in ((amem, "ca"), (cp, "cb")):
                try:
                    result = call(obj, user, ids[user])
                    got.append(_outcome(await result if inspect.isawaitable(result) else result))
                except Exception as exc:  # noqa: BLE001 - the same error both ways is the contract
                    got.append(_outcome(exc=exc))
            assert got[0] == got[1], name
        assert await cp.reset() is None
    finally:
        cp.close()


def test_results_never_exceed_top_k_and_keep_score_and_rank(mem):
    cp = ContextPilotMemory(mem)
    filters = {"user_id": "Caroline"}
    for _ in range(3):
        out = cp.search("Caroline's career and family", filters=filters, top_k=4, conversation_id="tk")
        assert len(out["results"]) <= 4
        assert all(isinstance(r["score"], float) and isinstance(r["rank"], int) for r in out["results"])
        cp.commit(out)


def _conformance_rows() -> dict[str, str]:
    """docs/mem0.md's conformance table: first cell -> the row's text."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "mem0.md").read_text(encoding="utf-8")
    section = text.split("## The contract: what is mem0's and what differs", 1)[1].split("\n\n", 2)[1]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] and not set(cells[0]) <= {"-", " "}:
            rows[cells[0]] = line
    return rows


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_every_difference_from_mem0_is_in_the_conformance_table(kind: str) -> None:
    """Zero undocumented differences: each way a wrapper differs from the mem0 object it wraps (found by
    comparing them, not from a list) has its row in docs/mem0.md's table; each own name is listed."""
    theirs_cls, ours_cls = (Memory, ContextPilotMemory) if kind == "sync" else (AsyncMemory, AsyncContextPilotMemory)
    memory = default_memory(async_=kind == "async")
    try:
        ours = ours_cls(memory)
        rows = _conformance_rows()
        found: dict[str, str] = {}
        if set(vars(ours)) != set(vars(memory)):
            found["vars(wrapper)"] = f"{sorted(vars(ours))} vs {sorted(vars(memory))[:4]}..."
        if inspect.signature(ours_cls.__init__) != inspect.signature(theirs_cls.__init__):
            found["constructor"] = str(inspect.signature(ours_cls.__init__))
        if repr(ours) != repr(memory):
            found["repr"] = repr(ours)
        if set(dir(ours)) != set(dir(memory)):
            found["dir"] = str(sorted(set(dir(ours)) ^ set(dir(memory))))
        if inspect.getdoc(ours_cls) != inspect.getdoc(theirs_cls):
            found["help"] = "class docstring"
        for name in PUBLIC:
            mine, mem0s = getattr(ours_cls, name), getattr(theirs_cls, name)
            if inspect.signature(mine) != inspect.signature(mem0s) or inspect.getdoc(mine) != inspect.getdoc(mem0s):
                found[f"`{name}`"] = name
        missing = {k: v for k, v in found.items() if not any(k in first for first in rows)}
        assert not missing, f"differences without a row in docs/mem0.md's conformance table: {missing}"
        own = {n for n in set(dir(ours)) - set(dir(memory)) if not n.startswith("_")}
        listed = rows["own names"]
        assert not {n for n in own if f"`{n}`" not in listed}, "own names missing from the 'own names' row"
    finally:
        memory.close()
