"""Real llama-server (built by scripts/build_llama_server.sh) on a random-weight model.

The random model has SmolLM2's tokenizer and a tiny llama architecture: its prefill cost is real
for that architecture (weights do not change the cost), its generated text is noise.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from cp_memory.engine import (
    AsyncEngineClient,
    EngineClient,
    EngineError,
    LlamaServer,
    LlamaServerNotFound,
    find_llama_server,
)
from cp_memory.engine._server import ServerStartError

WORDS = (
    "time year people way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government "
    "number night point home water room mother area money story fact month lot right study book "
    "eye job word business issue side kind head house service friend father power hour game line "
    "end member law car city community name president team minute idea kid body information back "
    "parent face others level office door health person art war history party result change "
    "morning reason research girl guy moment air teacher force education river garden window "
    "memory context cache prefix token engine block request answer model index order table chair"
).split()


def words(seed: int, n: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # the PID exists: only fine if it was reused by something that is not our server
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    return b"llama-server" not in cmdline


def test_find_llama_server_env_override_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CP_MEMORY_LLAMA_SERVER", str(tmp_path / "nope"))
    with pytest.raises(LlamaServerNotFound, match="build_llama_server.sh"):
        find_llama_server()


def test_find_llama_server_missing_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CP_MEMORY_LLAMA_SERVER", raising=False)
    monkeypatch.setenv("CP_MEMORY_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="scripts/build_llama_server.sh"):
        find_llama_server()


@pytest.mark.engine
def test_prefix_cache_hit_lowers_ttft(random_server: LlamaServer) -> None:
    """Two prompts sharing a ~1600-token prefix: the second is served mostly from the cache and
    its TTFT beats a cold prompt of the same length. Two samples per side, best of each, because
    the CI machine may be busy (a single sample can be hit by a scheduling hiccup)."""
    with EngineClient(random_server.base_url) as client:
        prefix = words(1, 1600)
        shared = len(client.tokenize(prefix) or [])
        assert shared > 1000
        warm = client.complete(prefix + " " + words(2, 80), max_tokens=2)
        hits = [client.complete(prefix + " " + words(3 + i, 80), max_tokens=2) for i in range(2)]
        n_tokens = hits[0].prompt_tokens
        assert n_tokens is not None
        colds = [client.complete(_text_of(client, 40 + i, n_tokens), max_tokens=2) for i in range(2)]
    assert warm.cached_tokens is not None and warm.cached_tokens < 0.1 * shared, warm
    for hit in hits:
        assert hit.cached_tokens is not None and hit.cached_tokens >= 0.8 * shared, (hit, shared)
    for cold in colds:
        assert cold.prompt_tokens is not None and cold.cached_tokens is not None
        assert cold.cached_tokens < 0.1 * cold.prompt_tokens, cold
        assert abs(cold.prompt_tokens - n_tokens) <= 0.05 * n_tokens, (cold, n_tokens)
    best_hit = min(h.ttft_s for h in hits)
    best_cold = min(c.ttft_s for c in colds)
    assert best_hit < best_cold, (hits, colds)
    # the engine's own prefill clock agrees (llama.cpp timings.prompt_ms)
    assert all(h.server_prompt_ms is not None for h in hits + colds)
    assert min(h.server_prompt_ms for h in hits) < min(c.server_prompt_ms for c in colds)


def _text_of(client: EngineClient, seed: int, n_tokens: int) -> str:
    """Word text of at most ``n_tokens`` tokens (and within a few tokens of it)."""
    text = words(seed, n_tokens)
    ids = client.tokenize(text) or []
    while len(ids) > n_tokens:
        text = text.rsplit(" ", max(1, (len(ids) - n_tokens) // 2))[0]
        ids = client.tokenize(text) or []
    return text


@pytest.mark.engine
def test_chat_reports_usage_and_request_id(random_server: LlamaServer) -> None:
    messages = [{"role": "system", "content": words(5, 300)}, {"role": "user", "content": "Say something."}]
    with EngineClient(random_server.base_url) as client:
        first = client.chat(messages, max_tokens=4, request_id="turn-1")
        messages[-1] = {"role": "user", "content": "Say something else."}
        second = client.chat(messages, max_tokens=4, request_id="turn-2")
    assert first.request_id == "turn-1" and second.request_id == "turn-2"
    assert isinstance(first.text, str) and first.finish_reason in ("stop", "length")
    assert first.prompt_tokens and first.prompt_tokens > 300
    assert second.cached_tokens is not None and second.cached_tokens >= 300


@pytest.mark.engine
async def test_async_client(random_server: LlamaServer) -> None:
    prefix = words(6, 800)
    async with AsyncEngineClient(random_server.base_url) as client:
        a = await client.complete(prefix + " alpha", max_tokens=2, request_id="a")
        b = await client.complete(prefix + " beta", max_tokens=2, request_id="b")
        # two concurrent requests on a 1-slot server: queued, both complete
        c, d = await asyncio.gather(
            client.complete(words(7, 50), max_tokens=2), client.complete(words(8, 50), max_tokens=2)
        )
        assert await client.flush_cache() is False  # llama.cpp: no complete flush over HTTP
    assert a.request_id == "a" and b.request_id == "b"
    assert b.cached_tokens is not None and b.cached_tokens >= 700
    assert c.prompt_tokens and d.prompt_tokens


@pytest.mark.engine
def test_lifecycle_restart_flushes_and_stop_leaves_no_process(random_model: Path) -> None:
    server = LlamaServer(random_model, slots=2, ctx_size=2048, cache_ram_mib=64)
    with server:
        pid = server.pid
        assert pid is not None and server.is_running
        assert server.base_url.startswith("http://127.0.0.1:")
        prompt = words(9, 400)
        with EngineClient(server.base_url) as client:
            client.complete(prompt, max_tokens=1)
            again = client.complete(prompt, max_tokens=1)
            assert again.cached_tokens and again.cached_tokens >= 300
            assert client.flush_cache() is False  # slots erased, --cache-ram not clearable
        port = server.port
        assert server.flush_cache() is True  # restart: the complete flush
        assert server.port == port and server.pid != pid and _pid_gone(pid)
        with EngineClient(server.base_url) as client:
            cold = client.complete(prompt, max_tokens=1)
        assert cold.cached_tokens == 0, cold
        pid2 = server.pid
    assert pid2 is not None and _pid_gone(pid2)
    assert server.pid is None and not server.is_running
    server.stop()  # idempotent


@pytest.mark.engine
@pytest.mark.parametrize("thread", ["main", "worker"])
def test_server_dies_with_a_killed_parent(random_model: Path, thread: str) -> None:
    """SIGKILL the Python process that owns the server: no cleanup code of its own runs, yet the
    server must go. From the main thread, ``setpriv --pdeathsig KILL`` and the watchdog both act;
    from a worker thread (whose exit would fire a pdeathsig, so none is used) the watchdog alone:
    TERM to the group, KILL after ``stop_timeout`` (2 s) should llama-server's handler hang.
    ``scripts/stress_engine_lifecycle.sh`` runs this 50 times in a row."""
    from .test_lifecycle import alive, run_owner, wait_gone

    owner, info = run_owner("llama", thread, str(random_model))
    pid = info["pid"]
    try:
        assert alive(pid)
    finally:
        owner.kill()
        owner.wait()
    left = wait_gone([pid], timeout=20)
    if left:  # never leave a stray llama-server behind, even when failing
        os.kill(pid, 9)
    assert left == [] and _pid_gone(pid)
    deadline = time.monotonic() + 5
    while Path(info["workdir"]).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(info["workdir"]).exists()


@pytest.mark.engine
def test_bad_model_fails_fast_with_log(llama_binary: Path, tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"this is not a gguf file")
    server = LlamaServer(bogus, startup_timeout=60)
    with pytest.raises(ServerStartError, match="exited with code") as info:
        server.start()
    assert isinstance(info.value, EngineError)
    assert server.pid is None and not server.is_running


@pytest.mark.engine
def test_smollm2_generates_text(llama_binary: Path) -> None:
    from cp_memory.engine import smollm2_model_path

    try:
        model = smollm2_model_path()
    except FileNotFoundError as exc:
        from .conftest import _missing

        _missing(str(exc))
        raise
    with LlamaServer(model, ctx_size=512, cache_ram_mib=0) as server, EngineClient(server.base_url) as client:
        res: Any = client.chat([{"role": "user", "content": "What is the capital of France?"}], max_tokens=6)
    assert res.text.strip(), res
    assert res.prompt_tokens and res.completion_tokens


def test_repack_is_off_where_amx_kernels_could_run(llama_binary: Path, random_model: Path, tmp_path: Path) -> None:
    """ggml's AMX kernels died with SIGILL here (SmolLM2 Q4_1 on a VM advertising AMX): weight
    repacking, which routes Q4 weights to them, is off by default where they could run."""
    from cp_memory.engine.llamacpp import _amx_kernels_possible

    def cmd(**kw: Any) -> list[str]:
        return LlamaServer(random_model, slot_save=False, binary=llama_binary, **kw).command(1)

    assert "--no-repack" in cmd(repack=False)
    assert "--no-repack" not in cmd(repack=True)
    assert ("--no-repack" in cmd()) == _amx_kernels_possible(llama_binary)
    fake = tmp_path / "llama.cpp-x" / "bin" / "llama-server"
    fake.parent.mkdir(parents=True)
    cpu_has_amx = "amx_int8" in Path("/proc/cpuinfo").read_text()
    assert _amx_kernels_possible(fake) == cpu_has_amx  # no BUILD_INFO: assume AMX compiled in
    (fake.parent.parent / "BUILD_INFO").write_text("GGML_NATIVE=ON amx=off jobs=2\n")
    assert _amx_kernels_possible(fake) is False
