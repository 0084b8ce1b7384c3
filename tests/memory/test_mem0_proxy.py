"""``cp_memory.mem0_proxy``: the drop-in for mem0's chat proxy, on real mem0 (embedded Qdrant + MiniLM).

mem0's own proxy (``mem0.proxy.main.Mem0``) raises in ``search`` on mem0ai 2.x and needs litellm; the drop-in
keeps its signature, calls the model with the openai SDK and places memories by the gateway's rule. The model
is a real llama-server with SmolLM2-135M where an answer is needed; the placement tests record what reached a
loopback upstream answering a fixed chat completion.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.loopback import FakeEngine, FakeRequest, loopback_engine
from tests.mem0_fixtures import require_mem0

openai = pytest.importorskip("openai")

ANSWER = {
    "id": "c1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Noted."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
}


def _answer(_: FakeRequest) -> tuple[int, dict[str, str], bytes]:
    return 200, {"content-type": "application/json"}, json.dumps(ANSWER).encode()


@pytest.fixture(scope="module")
def store() -> Iterator[Any]:
    from tests.mem0_fixtures import chat_memory

    with chat_memory() as memory:  # as the gateway and the drop-in open it
        yield memory


@pytest.fixture()
def upstream() -> Iterator[FakeEngine]:
    with loopback_engine(_answer) as engine:
        yield engine


@pytest.fixture(scope="module")
def smollm2() -> Iterator[Any]:
    from cp_memory.engine import LlamaServer, smollm2_model_path
    from tests.support import llama_server_binary, missing

    llama_server_binary()
    try:
        model = smollm2_model_path()
    except FileNotFoundError as exc:
        missing(str(exc))
    with LlamaServer(model, ctx_size=4096, cache_ram_mib=0, extra_args=["--n-predict", "48"]) as server:
        yield server


def _mem0s_create_parameters() -> list[str]:
    """mem0's ``Completions.create`` parameters, read from its source (importing it needs litellm)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("mem0.proxy.main")
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Completions")
    create = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "create")
    return [a.arg for a in create.args.args]


def test_the_signature_is_mem0s() -> None:
    require_mem0()
    from cp_memory.mem0_proxy import AsyncCompletions, Completions

    theirs = _mem0s_create_parameters()
    ours = list(inspect.signature(Completions.create).parameters)
    for name in ("model", "messages", "user_id", "agent_id", "run_id", "metadata", "filters", "top_k"):
        assert name in ours and name in theirs
    assert ours[:8] == theirs[:8]
    assert inspect.iscoroutinefunction(AsyncCompletions.create)


def _scoped_messages(sent: list[Any]) -> list[Any]:
    return [m for m in sent if m["role"] != "system"]


def test_memories_are_placed_before_the_newest_user_message_and_replayed(store: Any, upstream: FakeEngine) -> None:
    from cp_memory.core.chat_memories import MEMORIES_HEAD
    from cp_memory.mem0_proxy import Mem0

    for fact in ("Bob lives in Porto", "Bob plays the cello", "Bob is allergic to cheese"):
        store.add(fact, user_id="bob", infer=False)
    client = Mem0(memory=store, base_url=upstream.url + "/v1", llm_api_key="sk-local")
    messages: list[Any] = [{"role": "user", "content": "Where does Bob live?"}]
    answer = client.chat.completions.create(model="m", messages=messages, user_id="bob", limit=3)
    assert isinstance(answer, openai.types.chat.ChatCompletion) and answer.choices[0].message.content == "Noted."
    first = upstream.requests[-1].body["messages"]
    assert first[0]["role"] == "system"  # mem0's proxy's own system prompt, as mem0 adds it
    assert first[1]["content"].startswith(MEMORIES_HEAD) and "Bob lives in Porto" in first[1]["content"]
    assert first[1]["content"].endswith("\n\nWhere does Bob live?")
    messages += [{"role": "assistant", "content": "Noted."}, {"role": "user", "content": "Where does Bob live now?"}]
    client.chat.completions.create(model="m", messages=messages, user_id="bob", limit=3)
    second = upstream.requests[-1].body["messages"]
    assert second[:2] == first  # the first turn as sent, memories included: the cached prefix holds
    assert "shown before: turn 1 items" in second[3]["content"]  # pointers into turn 1, which the history shows
    assert "Bob lives in Porto" not in second[3]["content"]  # not sent twice
    assert client.flush(120)
    stored = [m["memory"] for m in store.get_all(filters={"user_id": "bob"})["results"]]
    assert "Where does Bob live now?" in stored and "Noted." in stored  # the turn, added after the answer
    client.close()


def test_an_edited_history_starts_a_new_conversation_without_pointers(store: Any, upstream: FakeEngine) -> None:
    from cp_memory.mem0_proxy import Mem0

    store.add("Carol collects stamps", user_id="carol", infer=False)
    client = Mem0(memory=store, base_url=upstream.url + "/v1", llm_api_key="sk-local")
    messages: list[Any] = [{"role": "user", "content": "What does Carol collect?"}]
    client.chat.completions.create(model="m", messages=messages, user_id="carol")
    edited = [{"role": "user", "content": "What does Carol like?"}, {"role": "assistant", "content": "Coins."}]
    edited.append({"role": "user", "content": "What does Carol collect, really?"})
    client.chat.completions.create(model="m", messages=edited, user_id="carol")
    last = upstream.requests[-1].body["messages"]
    assert "shown before" not in last[-1]["content"] and "Carol collects stamps" in last[-1]["content"]
    client.close()


def test_async_drop_in_places_the_same_way(store: Any, upstream: FakeEngine) -> None:
    from cp_memory.mem0_proxy import AsyncMem0, Mem0

    store.add("Dana runs marathons", user_id="dana", infer=False)
    sync = Mem0(memory=store, base_url=upstream.url + "/v1", llm_api_key="sk-local")
    messages = [{"role": "user", "content": "What sport does Dana do?"}]
    sync.chat.completions.create(model="m", messages=messages, user_id="dana")
    sync_sent = upstream.requests[-1].body["messages"]

    async def run() -> Any:
        from cp_memory.core.chat_memories import CHAT_MEMORY_OPTIONS
        from cp_memory.embedded import default_memory
        from cp_memory.memory import AsyncContextPilotMemory

        memory = AsyncContextPilotMemory(default_memory(async_=True), **CHAT_MEMORY_OPTIONS)
        await memory.add("Dana runs marathons", user_id="dana", infer=False)
        client = AsyncMem0(memory=memory, base_url=upstream.url + "/v1", llm_api_key="sk-local")
        answer = await client.chat.completions.create(model="m", messages=messages, user_id="dana")
        assert client.flush(120)
        client.close()
        return answer

    answer = asyncio.run(run())
    assert isinstance(answer, openai.types.chat.ChatCompletion)
    assert upstream.requests[-1].body["messages"] == sync_sent  # one flow, two drivers
    sync.close()


def test_a_failing_search_calls_the_model_without_memories(upstream: FakeEngine) -> None:
    from cp_memory.mem0_proxy import Mem0

    class Broken:
        def search(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("mem0 is down")

        def add(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("mem0 is down")

    client = Mem0(memory=Broken(), base_url=upstream.url + "/v1", llm_api_key="sk-local")
    answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], user_id="x")
    assert answer.choices[0].message.content == "Noted."
    assert upstream.requests[-1].body["messages"][-1] == {"role": "user", "content": "Hi"}
    assert client.flush(30) and client._writer.failed == 1
    with pytest.raises(ValueError, match="One of user_id, agent_id, run_id"):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}])
    client.close()


@pytest.mark.engine
def test_mem0s_own_example_runs_with_only_the_import_changed(
    smollm2: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mem0's docs ("OpenAI Compatibility", memory-aware restaurant recommendation), against llama-server:
    only the import differs. Its config names a Qdrant server; here it is the embedded default's config, and
    the model's endpoint comes from the environment, as the openai SDK reads it."""
    require_mem0()
    from cp_memory.embedded import default_config

    monkeypatch.setenv("OPENAI_BASE_URL", smollm2.base_url + "/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    config = default_config(str(tmp_path / "mem0"))
    # --- mem0's example; only this import differs (was: from mem0.proxy.main import Mem0) ---
    from cp_memory.mem0_proxy import Mem0

    client = Mem0(config=config)

    # Store preferences
    client.chat.completions.create(
        messages=[{"role": "user", "content": "I love Indian food but I'm allergic to cheese."}],
        model="gpt-5-mini",
        user_id="alice",
    )

    # Later conversation reuses the memory
    response = client.chat.completions.create(
        messages=[{"role": "user", "content": "Suggest dinner options in San Francisco."}],
        model="gpt-5-mini",
        user_id="alice",
    )
    print(response.choices[0].message.content)
    # --- end of mem0's example ---
    assert isinstance(response, openai.types.chat.ChatCompletion) and response.choices[0].message.content
    assert client.flush(120)
    stored = [m["memory"] for m in client.memory.get_all(filters={"user_id": "alice"})["results"]]
    assert "I love Indian food but I'm allergic to cheese." in stored
    third = client.chat.completions.create(
        messages=[{"role": "user", "content": "What food am I allergic to?"}], model="gpt-5-mini", user_id="alice"
    )
    assert third.usage is not None and third.usage.prompt_tokens > response.usage.prompt_tokens  # memories in
    client.close()
    client.memory.close()
