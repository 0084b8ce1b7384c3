"""SGLang's router (``sglang-router``) as a managed process in front of real llama-server workers.

The router's ``cache_aware`` policy remembers which worker served which request text; a repeated long
prompt must go back to the worker that cached it, which the engine proves by reporting the prompt as
cached (the other worker never saw it). Round-robin sends the repeat to the other worker: a cold prefill.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cp_memory.engine import EngineClient, LlamaServer, running
from cp_memory.engine._server import ServerStartError
from cp_memory.engine.router import KEY_ENV, SGLangRouter, sglang_router_available

from ..support import missing as _missing
from ..support import random_text


def long_prompt(seed: int, n_words: int = 900) -> str:
    return random_text(seed, n_words)


@pytest.fixture(scope="module")
def router_available() -> None:
    if not sglang_router_available():
        _missing("sglang-router is not installed (pip install 'cp-memory[router]')")


@pytest.fixture(scope="module")
def workers(random_model: Path, router_available: None) -> Iterator[list[LlamaServer]]:
    """Two llama-server workers (1 slot, 1 thread, host prompt cache on) on the random-weight model."""
    with running(
        [LlamaServer(random_model, slots=1, ctx_size=4096, threads=1, cache_ram_mib=64) for _ in range(2)]
    ) as w:
        yield w


# ---------------------------------------------------------------------------------------------- arguments
def test_bad_arguments_are_rejected_before_anything_is_launched() -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        SGLangRouter([])
    with pytest.raises(TypeError, match="list of URLs"):
        SGLangRouter("http://127.0.0.1:1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="http://host:port"):
        SGLangRouter(["127.0.0.1:8000"])
    with pytest.raises(ValueError, match="policy"):
        SGLangRouter(["http://127.0.0.1:1"], policy="affinity")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cache_threshold"):
        SGLangRouter(["http://127.0.0.1:1"], cache_threshold=1.5)
    with pytest.raises(ValueError, match="balance_abs_threshold"):
        SGLangRouter(["http://127.0.0.1:1"], balance_abs_threshold=-1)
    with pytest.raises(ValueError, match="balance_rel_threshold"):
        SGLangRouter(["http://127.0.0.1:1"], balance_rel_threshold=0.5)


def test_command_carries_the_policy_and_thresholds() -> None:
    r = SGLangRouter(
        ["http://127.0.0.1:9001/", "http://127.0.0.1:9002"],
        cache_threshold=0.5,
        balance_abs_threshold=8,
        balance_rel_threshold=1.25,
        eviction_interval_s=30,
        max_tree_size=1 << 20,
    )
    cmd = r.command(4321)
    assert cmd[1:3] == ["-m", "sglang_router.launch_router"]
    i = cmd.index("--worker-urls")
    assert cmd[i + 1 : i + 3] == ["http://127.0.0.1:9001", "http://127.0.0.1:9002"]
    pairs = {cmd[j]: cmd[j + 1] for j in range(len(cmd) - 1) if cmd[j].startswith("--")}
    assert pairs["--policy"] == "cache_aware" and pairs["--port"] == "4321"
    assert pairs["--host"] == "127.0.0.1" and pairs["--prometheus-host"] == "127.0.0.1"
    assert pairs["--prometheus-port"] != "29000"  # never the shared default port
    assert (
        pairs["--cache-threshold"],
        pairs["--balance-abs-threshold"],
        pairs["--balance-rel-threshold"],
        pairs["--eviction-interval-secs"],
        pairs["--max-tree-size"],
    ) == ("0.5", "8", "1.25", "30", "1048576")
    assert "--cache-threshold" not in SGLangRouter(["http://127.0.0.1:1"]).command(1)  # router default


def test_a_failed_start_quotes_the_log_tail(router_available: None) -> None:
    router = SGLangRouter(["http://127.0.0.1:9"], extra_args=["--no-such-flag"], startup_timeout=30)
    with pytest.raises(ServerStartError, match="no-such-flag"):
        router.start()
    assert not router.is_running


# ---------------------------------------------------------------------------------------------- workers' key
def test_the_workers_key_reaches_the_launcher_through_its_environment_never_its_argv() -> None:
    key = "worker-key-" + "x" * 16
    r = SGLangRouter(["http://127.0.0.1:9001"], api_key=key)
    cmd = r.command(4321)
    assert key not in " ".join(cmd) and cmd[1] == "-c" and KEY_ENV in cmd[2]
    assert r.headers == {"Authorization": f"Bearer {key}"} and SGLangRouter(["http://127.0.0.1:1"]).headers == {}
    with pytest.raises(ValueError, match="api_key"):
        SGLangRouter(["http://127.0.0.1:1"], api_key="")


@pytest.mark.engine
def test_workers_behind_a_key_need_it_and_get_it_through_the_router(random_model: Path, router_available) -> None:
    """A managed VLLMServer requires its key on every route but /health; here llama-server's ``--api-key`` plays
    that worker. Without ``api_key=`` the router refuses to start, saying why; with it, its client's requests
    carry the key through the router (which forwards ``Authorization``) and are served."""
    key = "worker-key-" + "y" * 16
    with LlamaServer(random_model, slots=1, ctx_size=1024, threads=1, extra_args=["--api-key", key]) as worker:
        bare = SGLangRouter([worker.base_url], startup_timeout=30)
        with pytest.raises(ServerStartError, match="requires an API key: pass api_key="):
            bare.start()
        assert not bare.is_running
        with SGLangRouter([worker.base_url], api_key=key) as router:
            assert key not in Path(f"/proc/{router.pid}/cmdline").read_text()
            with router.client(model="m", timeout=120, max_retries=1) as client:
                assert client.complete("Hello there", max_tokens=2).completion_tokens == 2


# ---------------------------------------------------------------------------------------------- routing
def _send_twice(router: SGLangRouter, model: str, prompt: str) -> tuple[Any, Any]:
    with EngineClient(router.base_url, model=model, timeout=120, max_retries=1) as client:
        first = client.complete(prompt, max_tokens=2)
        second = client.complete(prompt, max_tokens=2)
    return first, second


@pytest.mark.engine
def test_cache_aware_routes_a_repeated_long_prompt_back_to_the_worker_that_cached_it(
    workers: list[LlamaServer],
) -> None:
    model = workers[0].alias
    with SGLangRouter([w.base_url for w in workers]) as router:
        assert router.is_running and router.base_url.startswith("http://127.0.0.1:")
        for seed in (1, 2):
            first, second = _send_twice(router, model, long_prompt(seed))
            assert first.prompt_tokens and first.prompt_tokens > 800
            assert (first.cached_tokens or 0) < 0.5 * first.prompt_tokens  # cold on first sight
            # only the worker that served the first request holds the prompt
            assert (second.cached_tokens or 0) >= 0.95 * second.prompt_tokens, second


@pytest.mark.engine
def test_round_robin_sends_the_repeat_to_the_other_worker(workers: list[LlamaServer]) -> None:
    model = workers[0].alias
    with SGLangRouter([w.base_url for w in workers], policy="round_robin") as router:
        _first, second = _send_twice(router, model, long_prompt(3))
    assert (second.cached_tokens or 0) < 0.5 * second.prompt_tokens, second


# ---------------------------------------------------------------------------------------------- lifecycle
OWNER = textwrap.dedent("""
    import json, sys, time
    from cp_memory.engine.router import SGLangRouter
    router = SGLangRouter([sys.argv[1]]).start()
    print(json.dumps({"pid": router.pid, "url": router.base_url}), flush=True)
    time.sleep(600)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.engine
def test_the_router_dies_with_a_killed_owner(workers: list[LlamaServer]) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, workers[0].base_url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()
        assert line, owner.stderr.read() if owner.stderr else ""
        info = json.loads(line)
        assert _alive(info["pid"])
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        deadline = time.monotonic() + 20
        while _alive(info["pid"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(info["pid"]), "the router outlived its owner"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
