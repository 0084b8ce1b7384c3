"""The offline embedded mem0 default: config, on-disk persistence, no network, no key."""

from __future__ import annotations

import os

import pytest

from tests.mem0_fixtures import require_mem0

require_mem0()

from cp_memory.embedded import (  # noqa: E402
    EMBEDDING_DIMS,
    OFFLINE_ENV,
    bundled_model_path,
    default_config,
    default_memory,
)

pytestmark = pytest.mark.mem0


def test_offline_environment_is_set():
    for key in ("MEM0_TELEMETRY", "HF_HUB_OFFLINE"):
        assert os.environ.get(key) == OFFLINE_ENV[key] or key in os.environ
    import mem0.memory.telemetry as telemetry

    assert telemetry.MEM0_TELEMETRY is False


def test_default_config_shapes(tmp_path):
    mem_cfg = default_config()
    assert mem_cfg["vector_store"] == {
        "provider": "qdrant",
        "config": {"collection_name": "cp_memory", "embedding_model_dims": EMBEDDING_DIMS, "path": ":memory:"},
    }
    assert mem_cfg["history_db_path"] == ":memory:"
    assert mem_cfg["embedder"]["provider"] == "huggingface"
    assert mem_cfg["embedder"]["config"]["model"] == str(bundled_model_path())
    assert (bundled_model_path() / "model.safetensors").is_file()
    disk = default_config(tmp_path / "store")
    assert disk["vector_store"]["config"]["path"] == str(tmp_path / "store" / "qdrant")
    assert disk["history_db_path"] == str(tmp_path / "store" / "history.db")
    server = default_config(qdrant={"url": "http://qdrant:6333", "api_key": "k"}, collection_name="c")
    assert server["vector_store"]["config"] == {
        "collection_name": "c",
        "embedding_model_dims": EMBEDDING_DIMS,
        "url": "http://qdrant:6333",
        "api_key": "k",
    }


def test_on_disk_memory_survives_restart(tmp_path):
    first = default_memory(tmp_path)
    out = first.add("Noor plays the oud.", user_id="noor", infer=False)
    mid = out["results"][0]["id"]
    found = first.search("What instrument does Noor play?", filters={"user_id": "noor"})
    assert [r["id"] for r in found["results"]] == [mid]
    first.close()
    first.vector_store.client.close()  # local Qdrant holds a lock on its folder
    second = default_memory(tmp_path)
    try:
        assert second.get(mid)["memory"] == "Noor plays the oud."
        assert [h["event"] for h in second.history(mid)] == ["ADD"]
    finally:
        second.close()
        second.vector_store.client.close()


def test_infer_without_llm_fails_fast_with_mem0_error():
    from mem0.exceptions import LLMError

    memory = default_memory(
        collection_name="no_llm",
        llm={
            "provider": "openai",
            "config": {"api_key": "offline", "openai_base_url": "http://127.0.0.1:9/v1", "max_tokens": 16},
        },
    )
    memory.llm.client = memory.llm.client.with_options(max_retries=0, timeout=2.0)
    with pytest.raises(LLMError):
        memory.add("I moved to Oslo last year.", user_id="x")  # infer=True needs an LLM: refused locally


def test_bad_torch_threads():
    with pytest.raises(ValueError):
        default_memory(torch_threads=0)


def test_one_collection_per_user_behaves_like_one_collection():
    from cp_memory.embedded import UserPartitionedQdrant

    memory = default_memory(collection_name="parts")
    assert isinstance(memory.vector_store, UserPartitionedQdrant)
    a = memory.add("Ann paints birds.", user_id="ann", agent_id="helper", infer=False)["results"][0]["id"]
    b = memory.add("Bob paints boats.", user_id="bob", agent_id="helper", infer=False)["results"][0]["id"]
    c = memory.add("The helper agent likes tidy notes.", agent_id="helper", infer=False)["results"][0]["id"]
    names = [col.name for col in memory.vector_store.client.get_collections().collections]
    assert len([n for n in names if n.startswith("parts__p")]) == 3  # ann, bob, agent-only memory
    # a user's search reads only that user's collection
    assert [r["id"] for r in memory.search("painting", filters={"user_id": "ann"}, threshold=0.0)["results"]] == [a]
    # agent-only filters fan out over all partitions, as one collection would answer
    agent = memory.search("painting", filters={"agent_id": "helper"}, threshold=0.0)["results"]
    assert sorted(r["id"] for r in agent) == sorted([a, b, c])
    assert [s["score"] for s in agent] == sorted((s["score"] for s in agent), reverse=True)
    assert len(memory.get_all(filters={"agent_id": "helper"})["results"]) == 3
    # by-id operations route through the id table
    assert memory.get(b)["memory"] == "Bob paints boats."
    memory.update(b, text="Bob paints ships.")
    assert memory.get(b)["memory"] == "Bob paints ships."
    memory.delete(b)
    assert memory.get(b) is None
    assert memory.search("painting", filters={"user_id": "bob"})["results"] == []
    memory.delete_all(user_id="ann")
    assert memory.get(a) is None and memory.get(c) is not None
    memory.reset()
    assert memory.get(c) is None and memory.search("notes", filters={"agent_id": "helper"})["results"] == []
    memory.add("After reset.", user_id="ann", infer=False)
    assert len(memory.get_all(filters={"user_id": "ann"})["results"]) == 1


def test_partitions_survive_restart(tmp_path):
    first = default_memory(tmp_path)
    mid = first.add("Ivo collects stamps.", user_id="ivo", infer=False)["results"][0]["id"]
    first.close()
    first.vector_store.client.close()
    second = default_memory(tmp_path)
    try:
        assert second.get(mid)["memory"] == "Ivo collects stamps."
        hits = second.search("hobby", filters={"agent_id": "none"}, threshold=0.0)["results"]
        assert hits == []
        assert [r["id"] for r in second.search("stamps", filters={"user_id": "ivo"})["results"]] == [mid]
    finally:
        second.close()
        second.vector_store.client.close()


def test_single_collection_layout_still_available():
    from cp_memory.embedded import SerialisedStore

    memory = default_memory(collection_name="flat", partition=False)
    from mem0.vector_stores.qdrant import Qdrant

    assert isinstance(memory.vector_store, SerialisedStore)  # local Qdrant is serialised (thread safety)
    assert type(memory.vector_store._store) is Qdrant
    with pytest.raises(ValueError):
        default_memory(qdrant={"url": "http://127.0.0.1:9", "api_key": "k"}, partition=True)
