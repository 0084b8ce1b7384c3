"""The hosted client (``MemoryClient``/``AsyncMemoryClient``) wrapped: every argument reaches the platform
unchanged. The platform cannot be reached from here, so a small fake of its HTTP API runs behind
``httpx.MockTransport`` and the tests compare the exact requests made directly and through the wrapper.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.mem0_fixtures import require_mem0

require_mem0()
import httpx
from mem0 import AsyncMemoryClient, MemoryClient
from mem0.client.types import SearchMemoryOptions

from cp_memory.memory import (
    AsyncContextPilotMemory,
    AsyncContextPilotMemoryClient,
    ContextPilotMemory,
    ContextPilotMemoryClient,
    SearchResults,
)

pytestmark = pytest.mark.mem0

FACTS = {
    "alice": [
        "Alice moved to Lisbon.",
        "Alice works as a nurse.",
        "Alice has a cat.",
        "Alice likes jazz.",
        "Alice runs marathons.",
    ],
    "bob": ["Bob lives in Oslo.", "Bob is a nurse too."],
}


class FakePlatform:
    """Just enough of api.mem0.ai: ping, search (both response shapes), get, and a recorder for the rest."""

    def __init__(self, shape: str = "dict", fail: int = 0) -> None:
        self.shape = shape
        self.fail = fail  # answer this many searches with 503 first
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.memories = {
            f"{u}-{i}": {"id": f"{u}-{i}", "memory": t, "user_id": u, "metadata": None}
            for u, ts in FACTS.items()
            for i, t in enumerate(ts)
        }

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        path = request.url.path
        self.requests.append((request.method, path, dict(request.url.params), body))
        if path == "/v1/ping/":
            return httpx.Response(200, json={"user_email": "test@example.com", "org_id": "org", "project_id": "proj"})
        if path == "/v3/memories/search/":
            if self.fail:
                self.fail -= 1
                return httpx.Response(503, json={"detail": "busy"})
            if not isinstance(body.get("filters", {}), dict):  # modelled: the platform validates filters
                return httpx.Response(400, json={"detail": "filters must be an object"})
            user = _user_of(body.get("filters") or {})
            hits = [
                dict(m, score=1.0 - i / 10)
                for i, m in enumerate(self.memories.values())
                if user is not None and m["user_id"] == user
            ]
            hits = hits[: body.get("top_k", 10)]
            return httpx.Response(200, json=hits if self.shape == "list" else {"results": hits})
        if path.startswith("/v1/memories/") and request.method == "GET" and path.count("/") == 4:
            mid = path.split("/")[3]
            if mid in self.memories:
                return httpx.Response(200, json=self.memories[mid])
            return httpx.Response(404, json={"detail": "Memory not found"})
        if path == "/v1/memories/" and request.method == "DELETE":
            return (
                httpx.Response(400, json={"detail": "bad filters"})
                if not request.url.params
                else httpx.Response(200, json={"message": "deleted"})
            )
        return httpx.Response(200, json={"ok": True, "path": path})


def _user_of(filters: dict[str, Any]) -> str | None:
    if "user_id" in filters:
        return filters["user_id"]
    for part in filters.get("AND", []):
        if "user_id" in part:
            return part["user_id"]
    return None


@pytest.fixture(autouse=True)
def _no_ping_over_the_network(monkeypatch):
    """AsyncMemoryClient pings the platform with ``requests`` (not its httpx client) in __init__: answer
    that one call locally, as the fake platform would."""

    def ping(self):
        self.org_id, self.project_id = "org", "proj"
        return "test@example.com"

    monkeypatch.setattr(AsyncMemoryClient, "_validate_api_key", ping)


def async_client(fake: FakePlatform) -> AsyncMemoryClient:
    return AsyncMemoryClient(api_key="test-key", client=httpx.AsyncClient(transport=httpx.MockTransport(fake)))


def client(fake: FakePlatform) -> MemoryClient:
    return MemoryClient(api_key="test-key", client=httpx.Client(transport=httpx.MockTransport(fake)))


def searches(fake: FakePlatform) -> list[Any]:
    return [body for method, path, _, body in fake.requests if path == "/v3/memories/search/"]


def test_wrapping_a_client_gives_the_hosted_wrapper_and_keeps_the_class():
    cp = ContextPilotMemory(client(FakePlatform()))
    assert type(cp) is ContextPilotMemoryClient and isinstance(cp, MemoryClient)
    assert callable(cp.users)  # MemoryClient.users() is not hidden by the wrapper
    assert not hasattr(cp, "close")  # the client has no close(); neither has its wrapper
    with pytest.raises(TypeError, match="AsyncContextPilotMemory"):
        ContextPilotMemory(async_client(FakePlatform()))


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.search(
            "Where does Alice live?", options=SearchMemoryOptions(filters={"user_id": "alice"}, top_k=3)
        ),
        lambda c: c.search("Where does Alice live?", SearchMemoryOptions(filters={"user_id": "alice"}, top_k=3)),
        lambda c: c.search("Where does Alice live?", filters={"AND": [{"user_id": "alice"}]}, top_k=2, rerank=True),
        lambda c: c.search("Where does Alice live?", filters={"user_id": "alice"}),
        lambda c: c.search("jazz", filters={"user_id": "alice"}, categories=["music"], threshold=0.3),
    ],
)
def test_search_sends_exactly_the_callers_request(call):
    direct, wrapped = FakePlatform(), FakePlatform()
    plain = call(client(direct))
    out = call(ContextPilotMemory(client(wrapped)))
    assert searches(wrapped) == searches(direct)  # the user filter and top_k are never replaced
    assert sorted(r["id"] for r in out["results"]) == sorted(r["id"] for r in plain["results"])
    assert all(r["id"].startswith("alice-") for r in out["results"])
    assert "context_pilot" in out and out["context_pilot"]["fallback"] is False


def test_list_shaped_responses_stay_lists():
    cp = ContextPilotMemory(client(FakePlatform(shape="list")))
    out = cp.search("Alice", filters={"user_id": "alice"}, top_k=3)
    assert isinstance(out, list) and isinstance(out, SearchResults) and len(out) == 3
    assert out.context_pilot["scope"] == "user_id=alice" and out.context_pilot["context"].startswith("[Doc 1]")


def test_dedup_raises_top_k_only_and_results_stay_within_top_k():
    fake = FakePlatform()
    cp = ContextPilotMemory(client(fake))
    first = cp.search("Alice", filters={"user_id": "alice"}, top_k=2, conversation_id="c")
    cp.commit(first)
    second = cp.search("Alice", filters={"user_id": "alice"}, top_k=2, conversation_id="c")
    bodies = searches(fake)
    assert bodies[0] == {"query": "Alice", "filters": {"user_id": "alice"}, "top_k": 2}
    assert bodies[1] == {"query": "Alice", "filters": {"user_id": "alice"}, "top_k": 4}  # the one change
    assert len(second["results"]) == 2 and {s["id"] for s in second["context_pilot"]["sent"]} == {
        r["id"] for r in first["results"]
    }


def test_other_methods_pass_through_with_their_own_signatures():
    direct, wrapped = FakePlatform(), FakePlatform()
    c, cp = client(direct), ContextPilotMemory(client(wrapped))
    calls = [
        ("add", ("Alice adopted a dog.",), {"user_id": "alice"}),
        ("get", ("alice-1",), {}),
        ("get_all", (), {"filters": {"user_id": "alice"}}),
        ("update", ("alice-1",), {"text": "Alice works as a surgeon."}),
        ("delete", ("alice-2",), {"delete_linked": True}),
        ("delete_all", (), {"user_id": "alice"}),
        ("history", ("alice-1",), {}),
        ("users", (), {}),
        ("delete_users", (), {"user_id": "bob"}),
        ("batch_update", ([{"memory_id": "alice-1", "text": "x"}],), {}),
        ("batch_delete", ([{"memory_id": "alice-1"}],), {}),
        ("create_memory_export", ("{}",), {"user_id": "alice"}),
        ("get_memory_export", (), {"user_id": "alice"}),
        ("get_summary", (), {"filters": {"user_id": "alice"}}),
        ("get_project", (), {}),
        ("get_webhooks", ("p1",), {}),
        ("create_webhook", ("https://h.example/x", "w", "p1", ["memory_add"]), {}),
        ("update_webhook", (1,), {"name": "w2"}),
        ("delete_webhook", (1,), {}),
        ("feedback", ("alice-1",), {"feedback": "POSITIVE"}),
        ("reset", (), {}),
    ]
    for name, args, kwargs in calls:
        import inspect

        assert inspect.signature(getattr(cp, name)) == inspect.signature(getattr(c, name)), name
        assert inspect.getdoc(getattr(cp, name)) == inspect.getdoc(getattr(c, name)), name
        outcomes = []
        for obj in (c, cp):
            try:
                outcomes.append(("ok", getattr(obj, name)(*args, **kwargs)))
            except Exception as exc:  # the same error both ways (mem0's own error mapping)
                outcomes.append((type(exc).__name__, str(exc)))
        assert outcomes[0] == outcomes[1], name

    def strip(reqs: list[Any]) -> list[Any]:
        return [r for r in reqs if r[1] != "/v1/ping/"]

    assert strip(wrapped.requests) == strip(direct.requests)


def test_platform_errors_are_retried_then_mapped_like_mem0():
    from mem0.exceptions import NetworkError

    with pytest.raises(NetworkError):  # mem0 maps a 503 to NetworkError ...
        client(FakePlatform(fail=1)).search("Alice", filters={"user_id": "alice"})
    fake = FakePlatform(fail=1)
    out = ContextPilotMemory(client(fake), retry_wait_s=0.001).search("Alice", filters={"user_id": "alice"})
    assert len(searches(fake)) == 2 and out["results"]  # ... which the wrapper retries (bounded)
    fake = FakePlatform(fail=5)
    with pytest.raises(NetworkError, match="busy"):
        ContextPilotMemory(client(fake), retry_wait_s=0.001).search("Alice", filters={"user_id": "alice"})
    assert len(searches(fake)) == 3  # retry_attempts, then mem0's own error


async def test_async_client_wrapper():
    fake = FakePlatform()
    cp = AsyncContextPilotMemory(async_client(fake))
    assert type(cp) is AsyncContextPilotMemoryClient and isinstance(cp, AsyncMemoryClient)
    out = await cp.search("Alice", filters={"user_id": "alice"}, top_k=3, conversation_id=str(uuid.uuid4()))
    assert len(out["results"]) == 3 and out["context_pilot"]["turn"] == 1
    assert searches(fake)[-1] == {"query": "Alice", "filters": {"user_id": "alice"}, "top_k": 3}
    with pytest.raises(TypeError, match="ContextPilotMemory"):
        AsyncContextPilotMemory(client(FakePlatform()))


def test_every_method_is_async_exactly_where_the_clients_is():
    """``async def`` stays ``async def`` (delete_all and reset were plain functions returning a coroutine)."""
    from tests.memory.test_contract import assert_same_coroutine_kinds

    assert_same_coroutine_kinds(ContextPilotMemoryClient, MemoryClient)
    assert_same_coroutine_kinds(AsyncContextPilotMemoryClient, AsyncMemoryClient)
    direct = async_client(FakePlatform())
    assert_same_coroutine_kinds(AsyncContextPilotMemory(direct), direct)
    plain = client(FakePlatform())
    assert_same_coroutine_kinds(ContextPilotMemory(plain), plain)


async def test_async_delete_all_is_awaited_and_reaches_the_platform():
    import inspect

    fake = FakePlatform()
    cp = AsyncContextPilotMemory(async_client(fake))
    fn = cp.delete_all
    out = await fn(user_id="alice") if inspect.iscoroutinefunction(fn) else fn(user_id="alice")
    assert out == {"message": "deleted"}
    assert [(m, p) for m, p, _, _ in fake.requests if m == "DELETE"] == [("DELETE", "/v1/memories/")]


@pytest.mark.parametrize("filters", ["alice", ["user_id", "alice"], 5])
async def test_filters_that_are_not_a_dict_reach_the_platform_as_mem0s_client_sends_them(filters):
    """mem0's ``MemoryClient`` sends any ``filters`` on and the platform decides; the wrapper refused them
    (``FiltersTypeError``, the local ``Memory``'s rule) before the request was made. Now both make the same
    request and fail with the same mem0 error."""
    outcomes = []
    for wrap in (False, True):
        fake = FakePlatform()
        direct = client(fake)
        with pytest.raises(Exception) as caught:
            (ContextPilotMemory(direct) if wrap else direct).search("Alice", filters=filters, top_k=3)
        outcomes.append((type(caught.value), searches(fake)))
        afake = FakePlatform()
        adirect = async_client(afake)
        with pytest.raises(Exception) as acaught:
            await (AsyncContextPilotMemory(adirect) if wrap else adirect).search("Alice", filters=filters, top_k=3)
        outcomes.append((type(acaught.value), searches(afake)))
    assert outcomes[:2] == outcomes[2:]
    assert outcomes[0][1] == [{"query": "Alice", "filters": filters, "top_k": 3}]
    assert "FiltersTypeError" not in {t.__name__ for t, _ in outcomes}
