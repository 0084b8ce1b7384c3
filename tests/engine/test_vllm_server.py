"""A real vLLM (CPU build) with automatic prefix caching: one server for the whole module.

The server runs the small random-weight llama (``hf_model_dir()``) with 32-token blocks and a
64-block KV cache (2,048 tokens), so that a few prompts evict each other. It is owned by a separate
process (``_vllm_owner.py``) so that the last test can ``kill -9`` that owner and check that vLLM's
three processes and its files go with it — without a second start-up.

Expectations are vLLM's block rules: a prompt of ``n`` tokens can hit at most
``floor((n - 1) / 32) * 32`` tokens (the last token is always computed), only full blocks are
cached, and blocks are chained (a block matches only after the same prefix).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import cp_memory
from tests.support import missing, random_text

from .test_lifecycle import alive, wait_gone

pytestmark = pytest.mark.vllm

BLOCK = 32
NUM_BLOCKS = 64
OWNER = Path(__file__).with_name("_vllm_owner.py")


def _prerequisites() -> Path:
    from cp_memory.engine.vllm import VLLMUnavailable, find_vllm_python

    try:
        find_vllm_python()
    except VLLMUnavailable as exc:
        missing(str(exc))
    for module in ("zmq", "msgspec"):
        try:
            __import__(module)
        except ImportError:
            missing("the kv-events extra (pyzmq, msgspec) is not installed")
    from cp_memory.engine import hf_model_dir

    try:
        return hf_model_dir()
    except (FileNotFoundError, ImportError) as exc:
        missing(f"cannot build the vLLM test model: {exc}")


class OwnedServer:
    """The owner process and what it printed (base_url, model, kv_events, pids, workdir, log)."""

    def __init__(self, model: Path) -> None:
        self.model = model
        self.owner: subprocess.Popen[str] | None = None
        self.info: dict[str, Any] = {}

    def ensure(self) -> dict[str, Any]:
        if self.owner is not None and self.owner.poll() is None:
            return self.info
        root = str(Path(cp_memory.__file__).resolve().parent.parent)
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        args = [
            f"block_size={BLOCK}",
            f"num_blocks={NUM_BLOCKS}",
            f"max_model_len={BLOCK * (NUM_BLOCKS - 1)}",  # vLLM keeps one block back (the null block)
            "enforce_eager=true",
            "cpu_bind=nobind",
            "stop_timeout=5",
        ]
        self.owner = subprocess.Popen(
            [sys.executable, str(OWNER), str(self.model), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": path},
        )
        assert self.owner.stdout is not None and self.owner.stderr is not None
        line = self.owner.stdout.readline()
        if not line:
            self.owner.wait()
            pytest.fail(f"the vLLM owner exited with {self.owner.returncode}:\n{self.owner.stderr.read()[-12000:]}")
        self.info = json.loads(line)
        return self.info

    def kill_owner(self) -> None:
        if self.owner is not None and self.owner.poll() is None:
            self.owner.send_signal(signal.SIGKILL)
            self.owner.wait()


@pytest.fixture(scope="module")
def vllm() -> Iterator[OwnedServer]:
    owned = OwnedServer(_prerequisites())
    owned.ensure()
    yield owned
    pids = owned.info.get("pids", [])
    owned.kill_owner()
    wait_gone(pids, 60.0)


@pytest.fixture()
def client(vllm: OwnedServer) -> Iterator[Any]:
    from cp_memory.engine import EngineClient

    info = vllm.ensure()
    with EngineClient(info["base_url"], model=info["model"], api_key=info["api_key"], timeout=120.0) as c:
        assert c.flush_cache(), "POST /reset_prefix_cache refused"
        yield c


def hit_limit(n: int) -> int:
    return (n - 1) // BLOCK * BLOCK


def test_cached_tokens_of_a_known_prompt_sequence(client: Any) -> None:
    """Cold, repeated, extended, diverging: vLLM reports what the block rules say, and what
    benchmarks.common.cache_model's radix policy with vLLM's block size predicts."""
    from benchmarks.common.cache_model import BlockPrefixCache

    base = random_text(1, 180)
    prompts = [base, base, base + " " + random_text(2, 60), random_text(3, 20) + " " + base]
    model = BlockPrefixCache(None, block_size=BLOCK)
    seen = []
    for prompt in prompts:
        tokens = client.tokenize(prompt)
        assert tokens, "vLLM /tokenize answered nothing"
        r = client.complete(prompt, max_tokens=1, temperature=0.0)
        assert r.prompt_tokens == len(tokens)
        seen.append((r.cached_tokens, model.serve(tokens, generated=1).cached, len(tokens)))
    (c0, _, _), (c1, _, n1), (c2, _, _), (c3, _, _) = seen
    n_base = len(client.tokenize(base))
    assert c0 == 0
    assert c1 == hit_limit(n1)  # everything but the last block boundary
    assert c2 >= (n_base - 1) // BLOCK * BLOCK - BLOCK  # the base's full blocks (its last token may merge)
    assert c3 == 0  # a different first block: nothing matches after it (chained hashes)
    assert [s[0] for s in seen] == [s[1] for s in seen], f"vLLM vs model (cached, model, prompt): {seen}"


def test_flush_empties_the_cache(client: Any) -> None:
    prompt = random_text(4, 150)
    client.complete(prompt, max_tokens=1)
    assert client.complete(prompt, max_tokens=1).cached_tokens > 0
    assert client.flush_cache()
    assert client.complete(prompt, max_tokens=1).cached_tokens == 0


def test_the_eviction_feed_keeps_the_index_in_step(vllm: OwnedServer, client: Any) -> None:
    """The engine's own evictions (its KV events) evict the request from its ContextIndex; requests
    whose blocks stay are kept."""
    from cp_memory.core.index import ContextIndex
    from cp_memory.engine import KVCacheSync, KVEventFeed

    sync = KVCacheSync()
    index = ContextIndex(capacity_tokens=10**9)  # a model that would never evict: only the feed does
    sync.attach(index)
    with KVEventFeed(vllm.info["kv_events"], sync.apply, on_lost=sync.lost):
        assert client.flush_cache()
        sync.flushed()
        target = random_text(5, 300)
        p = index.insert(["m1", "m2"])
        client.complete(target, max_tokens=1)
        sync.track(index, p.request_id, client.tokenize(target))
        deadline = time.monotonic() + 90  # an event batch can take long on a loaded 2-core machine
        while sync.tracked and not sync.mirror.lookup(client.tokenize(target)).hashes and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sync.live and sync.mirror.block_size == BLOCK
        assert p.request_id in index
        # other prompts, together larger than the 2,048-token cache: the engine frees the target's blocks
        for i in range(8):
            client.complete(random_text(100 + i, 300), max_tokens=1)
        deadline = time.monotonic() + 90
        while p.request_id in index and time.monotonic() < deadline:
            time.sleep(0.05)
        assert p.request_id not in index, f"still indexed; sync {sync.stats}"
        assert client.complete(target, max_tokens=1).cached_tokens < hit_limit(len(client.tokenize(target)))
        assert sync.stats.lost == 0


def test_a_dropped_event_is_recovered_by_vllms_replay(vllm: OwnedServer, client: Any) -> None:
    """vLLM's publisher keeps what it sent; a message the subscriber lost (dropped on receipt here, as a
    full high-water mark drops it) is asked of vLLM's replay socket when the next one shows the gap, and
    applied in order: the lost prompt's blocks are in the mirror, no gap is reported, the sync never lost."""
    from cp_memory.engine import KVCacheSync
    from cp_memory.engine.kv_events import KVEventFeed
    from cp_memory.engine.kv_mirror import Presence

    class Lossy(KVEventFeed):
        lose = 0

        def _handle(self, frames: list[bytes]) -> None:
            if self.lose and self.last_seq is not None:
                self.lose -= 1  # failure injection: this message never reaches the feed
                return
            super()._handle(frames)

    info = vllm.ensure()
    sync = KVCacheSync()
    with Lossy(info["kv_events"], sync.apply, on_lost=sync.lost, replay_endpoint=info["kv_replay"]) as feed:
        deadline = time.monotonic() + 60
        for i in itertools.count():  # vLLM's publisher connects on its own schedule: until a batch arrives
            if feed.batches > 0:
                break
            assert time.monotonic() < deadline, "vLLM published no KV-cache event in 60 s"
            client.complete(random_text(950 + i, 80), max_tokens=1)
            time.sleep(0.2)
        lost, after = random_text(31, 200), random_text(32, 200)
        feed.lose = 1
        client.complete(lost, max_tokens=1)  # its BlockStored is the message lost
        client.complete(after, max_tokens=1)  # the next message shows the gap
        deadline = time.monotonic() + 30
        while feed.recovered == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert feed.recovered == 1 and feed.gaps == 0, repr(feed)
        assert sync.mirror.lookup(client.tokenize(lost)).presence is Presence.HELD
        assert sync.stats.lost == 0


FACTS = [
    "Dana moved to Porto in 2021 and lives in a small flat near the river with a view of the bridges.",
    "Dana works as a marine biologist at the aquarium and studies how octopuses solve puzzles.",
    "Dana plays the cello in a community orchestra that rehearses every Thursday evening in the old school.",
    "Dana's sister Mia runs a bakery in the old town that sells sourdough bread and custard tarts.",
    "Dana is training for a half marathon in the autumn and runs along the beach three mornings a week.",
    "Dana adopted a grey cat called Pixel last spring from the shelter next to the market.",
]


def _flood(client: Any) -> None:
    """Prompts that together exceed the 2,048-token cache: the engine frees older blocks."""
    for i in range(8):
        client.complete(random_text(200 + i, 300), max_tokens=1)


def _followed_feed(vllm: OwnedServer, client: Any) -> Any:
    """An EngineCacheFeed on the running vLLM, live after a confirmed flush (it joined a running engine)."""
    from cp_memory.engine import EngineCacheFeed

    feed = EngineCacheFeed(vllm.info["kv_events"], tokenize=client.tokenize).start()
    # vLLM's publisher (re)connects to the feed's fresh socket on its own schedule and drops what it sends
    # before: prompts of new blocks until one batch arrives, so the test's own events are not lost
    deadline = time.monotonic() + 60
    for i in itertools.count():
        if feed.sync.stats.batches > 0:
            break
        assert time.monotonic() < deadline, f"vLLM published no KV-cache event to {feed!r} in 60 s"
        client.complete(random_text(900 + i, 80), max_tokens=1)
        time.sleep(0.2)
    assert client.flush_cache()
    feed.flushed()
    return feed


def _watched(feed: Any, n: int) -> None:
    deadline = time.monotonic() + 30
    while not (feed.stats.tracked >= n and feed.sync.pending == 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert feed.stats.tracked >= n and feed.sync.pending == 0, f"not watched: {feed!r} {feed.sync.stats}"


def _gone(request_id: Any, index: Any) -> bool:
    deadline = time.monotonic() + 30
    while request_id in index and time.monotonic() < deadline:
        time.sleep(0.05)
    return request_id not in index


def test_the_mem0_wrapper_follows_vllm(vllm: OwnedServer, client: Any) -> None:
    """follow_engine: a chat turn's memories (inside vLLM's chat template, after a system prompt) are found
    in vLLM's own events once committed, and vLLM evicting them evicts the request from the scope's index."""
    from tests.mem0_fixtures import ingest, require_mem0

    require_mem0()
    from cp_memory.core.render import build_messages
    from cp_memory.embedded import default_memory
    from cp_memory.memory import ContextPilotMemory

    memory = default_memory()
    ingest(memory, "dana", FACTS)
    cp = ContextPilotMemory(memory, capacity_tokens=10**9)  # a model that would never evict: only vLLM does
    feed = _followed_feed(vllm, client)
    try:
        cp.follow_engine(feed)
        question = "Where does Dana live and what does she do?"
        found = cp.search(question, filters={"user_id": "dana"}, top_k=6, conversation_id="c1")
        messages = build_messages(question, found, system="You are a helpful assistant.")
        with cp.sending(found):
            client.chat(messages, max_tokens=1)
        _watched(feed, 1)
        index = cp.index_for({"user_id": "dana"})
        rid = index.request_ids()[-1]
        assert feed.sync.stats.expired == 0 and feed.live
        _flood(client)
        assert _gone(rid, index), f"still indexed; sync {feed.sync.stats}"
        assert feed.sync.stats.evicted == 1 and feed.sync.stats.lost == 0
    finally:
        feed.stop()
        memory.close()


def test_agent_router_workers_follow_vllm(vllm: OwnedServer, client: Any) -> None:
    """AgentRouter(feeds=...): the worker's cache model holds a segment while vLLM does, and drops it when
    vLLM does — instead of a capacity guess that would keep it for ever."""
    from cp_memory.agents.routing import AgentRouter

    feed = _followed_feed(vllm, client)
    try:
        router = AgentRouter([client], capacity_tokens=10**9, feeds=[feed])
        segment = random_text(6, 250)
        route = router.route(["doc-1"], [len(client.tokenize(segment))], text=segment)
        client.complete(f"{segment}\n\nQuestion: what is it about?\nAnswer:", max_tokens=1)
        router.release(route)
        _watched(feed, 1)
        assert route.request_id in router.index(0)
        _flood(client)
        assert _gone(route.request_id, router.index(0)), f"still modelled; sync {feed.sync.stats}"
        assert feed.sync.stats.evicted == 1
    finally:
        feed.stop()


def test_the_admin_api_needs_the_servers_key(vllm: OwnedServer, client: Any) -> None:
    """Loopback is open to every local user: without the key, vLLM's dev routes (its whole config, the
    cache, worker RPCs) and the API answer 401; with it our client and the flush work, and /health stays
    open for the start-up wait. Before: 200 for all three dev routes, no credentials needed."""
    import httpx

    url = vllm.info["base_url"]
    with httpx.Client(base_url=url, timeout=30.0) as http:
        for method, path, body in (
            ("GET", "/server_info", None),
            ("POST", "/reset_prefix_cache", None),
            ("POST", "/collective_rpc", {"method": "get_model_config"}),
            ("GET", "/v1/models", None),
            ("POST", "/tokenize", {"prompt": "hi"}),
            ("GET", "/metrics", None),
        ):
            for headers in ({}, {"Authorization": "Bearer wrong-key-wrong-key"}):
                answer = http.request(method, path, json=body, headers=headers)
                assert answer.status_code == 401, f"{method} {path} {headers}: HTTP {answer.status_code}"
        assert http.get("/health").status_code == 200
        key = {"Authorization": f"Bearer {vllm.info['api_key']}"}
        assert http.get("/server_info", headers=key).status_code == 200
    assert client.flush_cache() and client.complete("Hello", max_tokens=1).prompt_tokens > 0
    assert vllm.info["api_key"] not in Path(vllm.info["log"]).read_text(errors="replace")
    with open(f"/proc/{vllm.info['pid']}/cmdline", "rb") as f:  # world-readable: never the key
        assert vllm.info["api_key"].encode() not in f.read()


def test_killed_owner_takes_vllm_with_it(vllm: OwnedServer) -> None:
    """Last: kill -9 the process that started vLLM: API server, engine core and worker die, and the
    work directory (KV-event socket and vLLM's own ipc sockets) is removed."""
    info = vllm.ensure()
    pids = info["pids"]
    assert len(pids) >= 3, f"expected vLLM's API server, engine core and worker, got {pids}"
    assert all(alive(p) for p in pids)
    assert Path(info["workdir"]).is_dir()
    vllm.kill_owner()
    assert wait_gone(pids, 60.0) == []
    deadline = time.monotonic() + 30
    while Path(info["workdir"]).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(info["workdir"]).exists()
