"""VLLMServer without a running vLLM: its command line, the offline model directory, and clear errors
for bad input (vLLM missing, a model folder without a tokenizer, a server that fails to start)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from cp_memory.engine import EngineError, VLLMModelError, VLLMServer, VLLMUnavailable
from cp_memory.engine._server import ServerStartError
from cp_memory.engine.hf_model import has_tokenizer
from cp_memory.engine.vllm import find_vllm_python, vllm_available
from tests.support import missing


@pytest.fixture(scope="module")
def model_dir() -> Path:
    from cp_memory.engine import hf_model_dir

    try:
        return hf_model_dir()
    except (FileNotFoundError, ImportError) as exc:
        missing(f"cannot build the vLLM test model: {exc}")


def no_vllm_python(tmp_path: Path) -> str:
    """An interpreter stand-in that cannot import vllm (exits 1 for the import check)."""
    fake = tmp_path / "python-without-vllm"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    return str(fake)


def test_command_line(model_dir: Path) -> None:
    server = VLLMServer(
        model_dir,
        python="/opt/vllm/bin/python",
        block_size=32,
        num_blocks=64,
        kv_cache_bytes=1 << 26,
        max_num_seqs=4,
        enforce_eager=True,
        kv_events=True,
        extra_args=["--swap-space", "0"],
    )
    cmd = server.command(31000)
    assert cmd[:3] == ["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(cmd)
    for part in (
        f"--model {model_dir}",
        f"--served-model-name {model_dir.name}",
        "--host 127.0.0.1",
        "--port 31000",
        "--dtype float32",
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--max-model-len 4096",
        "--block-size 32",
        "--num-gpu-blocks-override 64",
        f"--kv-cache-memory-bytes {1 << 26}",
        "--max-num-seqs 4",
        "--enforce-eager",
        "--swap-space 0",
    ):
        assert part in joined
    assert cmd[cmd.index("--middleware") + 1] == "cp_memory_vllm_guard.KeyGuard"  # every route needs the key
    assert len(server.api_key) >= 32 and server.api_key not in joined  # never on the world-readable argv
    events = json.loads(cmd[cmd.index("--kv-events-config") + 1])
    assert events["endpoint"] == f"ipc://{server.workdir()}/kv-events"  # a socket in the private 0700 dir
    assert events["replay_endpoint"] == f"ipc://{server.workdir()}/kv-replay"  # a gap is asked of it first
    assert events["publisher"] == "zmq" and events["enable_kv_cache_events"]
    assert oct(server.workdir().stat().st_mode & 0o777) == "0o700"
    assert server.kv_events_endpoint is None  # not running
    workdir = server.workdir()
    server.stop()
    assert not workdir.exists()  # no temp dir left
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.base_url


def test_the_offline_model_directory(model_dir: Path) -> None:
    """Built once from the SmolLM2 GGUF (tokenizer) and random weights, cached like the GGUF models."""
    from cp_memory.engine import hf_model_dir

    assert hf_model_dir() == model_dir  # cached: the same folder, not rebuilt
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["num_hidden_layers"] == 4
    assert has_tokenizer(model_dir) and (model_dir / "model.safetensors").is_file()
    assert "im_start" in (model_dir / "chat_template.jinja").read_text()


def test_vllm_missing_names_the_extra(model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = no_vllm_python(tmp_path)
    assert not vllm_available(fake)
    with pytest.raises(VLLMUnavailable, match=r"pip install 'cp-memory\[vllm\]'") as info:
        VLLMServer(model_dir, python=fake).start()
    assert isinstance(info.value, EngineError)
    monkeypatch.setenv("CP_MEMORY_VLLM_PYTHON", fake)
    with pytest.raises(VLLMUnavailable, match="CP_MEMORY_VLLM_PYTHON"):
        find_vllm_python()


def test_a_model_folder_without_a_tokenizer_is_refused(model_dir: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare-model"
    bare.mkdir()
    (bare / "config.json").write_text((model_dir / "config.json").read_text())
    with pytest.raises(VLLMModelError, match="has no tokenizer"):
        VLLMServer(bare, python=sys.executable).start()
    VLLMServer(bare, tokenizer=str(model_dir), python="/x").command(1)  # a tokenizer given elsewhere is fine
    with pytest.raises(VLLMModelError, match="no config.json"):
        VLLMServer(tmp_path, python="/x").start()
    with pytest.raises(VLLMModelError, match="not found"):
        VLLMServer(tmp_path / "nope", python="/x").start()
    with pytest.raises(VLLMModelError, match="not a directory"):
        VLLMServer(model_dir / "config.json", python="/x").start()
    with pytest.raises(ValueError, match="block_size"):
        VLLMServer(model_dir, block_size=0)


def test_a_failed_start_quotes_the_log(model_dir: Path) -> None:
    """vLLM refuses an unknown flag: ServerStartError names the log and quotes its tail."""
    try:
        python = find_vllm_python()
    except VLLMUnavailable as exc:
        missing(str(exc))
    server = VLLMServer(model_dir, python=python, extra_args=["--no-such-flag"], startup_timeout=300)
    with pytest.raises(ServerStartError, match="exited with code") as info:
        server.start()
    assert str(server.log_path) in str(info.value) and "no-such-flag" in str(info.value)
    assert not server.is_running


def test_flush_and_tokenize_speak_vllm(make_client: Any, fake_engine: Any) -> None:
    """vLLM has neither /flush_cache nor /slots: the flush is POST /reset_prefix_cache, and /tokenize
    wants a ``prompt`` (it refuses llama.cpp's ``content`` with HTTP 400)."""

    def responder(req: Any) -> tuple[int, dict[str, str], bytes]:
        if req.path == "/reset_prefix_cache":
            return 200, {}, b""
        if req.path == "/tokenize":
            if "prompt" not in (req.body or {}):
                return 400, {"content-type": "application/json"}, b'{"error": {"message": "body.prompt missing"}}'
            return 200, {"content-type": "application/json"}, b'{"count": 2, "tokens": [28120, 905]}'
        return 404, {}, b""

    fake_engine.responder = responder
    with make_client(fake_engine.url) as client:
        assert client.flush_cache() is True
        assert client.tokenize("hello world") == [28120, 905]
    assert [(r.method, r.path) for r in fake_engine.requests] == [
        ("POST", "/flush_cache"),
        ("GET", "/slots"),
        ("POST", "/reset_prefix_cache"),
        ("POST", "/tokenize"),
        ("POST", "/tokenize"),
    ]
    assert fake_engine.requests[-1].body == {"prompt": "hello world", "add_special_tokens": False}


VLLM_METRICS = """\
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
vllm:prompt_tokens_total{engine="0",model_name="m"} 9006.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 64.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 9006.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 4.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 9.0
vllm:request_prefill_time_seconds_sum{engine="0",model_name="m"} 19.5
vllm:cache_config_info{block_size="32",kv_cache_dtype_skip_layers="[a, b]",num_gpu_blocks="1456"} 1.0
"""


def test_the_benchmarks_read_vllm_like_llama_server(fake_engine: Any, model_dir: Path) -> None:
    """CoA/scale compare engines by llama-server's counter names: vLLM's prefilled tokens are its prompt
    tokens minus its prefix-cache hits; the fidelity tool reads block size and blocks from /metrics."""
    from benchmarks import workers
    from benchmarks.vllm_fidelity import _engine_block_and_capacity, classify
    from cp_memory.engine import EngineClient

    fake_engine.responder = lambda req: (200, {"content-type": "text/plain"}, VLLM_METRICS.encode())
    server = VLLMServer(model_dir, python="/x")
    server.port = int(fake_engine.url.rsplit(":", 1)[1])
    m = workers.worker_metrics(server)
    assert m["prompt_tokens_total"] == 9006 - 64 and m["prompt_seconds_total"] == 19.5
    assert workers.requests_served(server) == 13
    with EngineClient(fake_engine.url) as client:
        assert _engine_block_and_capacity(client) == (32, 1456)
    server.port = None

    assert classify(256, 224, 255, 32, evicting=False) == "block-aligned-prompt"
    assert classify(300, 288, 288, 32, evicting=False) is None
    assert classify(300, 0, 288, 32, evicting=True) == "eviction"
    # a vLLM worker holds what a llama-server replica holds: one context plus the prompt cache
    per_token = workers.kv_bytes_per_token("vllm", "random")
    assert per_token == 4 * 2 * 64 * 2 * 4  # float32 K and V of the 4-layer test shape
    assert workers.capacity_tokens("vllm", "random", 24, 4096) == (24 * 2**20 + (4096 + 256) * per_token) // per_token
    worker = workers.WorkerSpec(engine="vllm", model="random", threads=1, cache_mib=24, ctx_size=4096).worker()
    assert isinstance(worker, VLLMServer) and worker.threads == 1 and worker.cpu_bind == "nobind"


def test_locomo_makes_a_vllm_engine(model_dir: Path) -> None:
    from benchmarks.locomo.http_engines import VLLMEngine
    from benchmarks.locomo.run import BenchConfig, make_engine

    engine = make_engine(
        BenchConfig(engine="vllm", model=str(model_dir), block_size=32, vllm_args=("--enforce-eager",))
    )
    assert isinstance(engine, VLLMEngine) and engine.kind == "vllm"
    assert engine.describe()["block_size"] == 32 and engine.random_weights


def test_a_virtualenv_python_is_asked_itself_though_it_links_to_this_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: virtualenv pythons are links to one base interpreter, so comparing resolved paths took
    vLLM's own venv for this one (which has no vllm) and reported vLLM missing."""
    import os

    other = tmp_path / "bin" / "python"
    other.parent.mkdir()
    os.symlink(os.path.realpath(sys.executable), other)
    fake = tmp_path / "site" / "vllm"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(fake.parent))
    assert vllm_available(other)  # asked in its own process, where this vllm imports


def test_the_guard_refuses_every_route_but_health_without_the_key(model_dir: Path, monkeypatch: Any) -> None:
    """The ASGI middleware every managed vLLM runs (vLLM's own --api-key guards /v1 only), driven directly:
    no key, a wrong key or another scheme -> 401 and the app never runs; the key -> the app; /health open."""
    import asyncio
    import importlib.util

    server = VLLMServer(model_dir, python="/x", api_key="a-key-of-sixteen-chars")
    assert repr(server).count("a-key") == 0
    folder = server._write_guard()
    monkeypatch.setenv("VLLM_API_KEY", server.api_key)
    spec = importlib.util.spec_from_file_location("guard", folder / "cp_memory_vllm_guard.py")
    assert spec is not None and spec.loader is not None
    guard_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(guard_module)
    reached: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])

    guard = guard_module.KeyGuard(app)

    def status(path: str, headers: dict[str, str], kind: str = "http") -> int | None:
        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)

        raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        asyncio.run(guard({"type": kind, "path": path, "method": "POST", "headers": raw}, None, send))
        return next((m.get("status", m.get("code")) for m in sent), None)

    for path in ("/server_info", "/reset_prefix_cache", "/collective_rpc", "/v1/completions", "/health/"):
        assert status(path, {}) == 401
        assert status(path, {"Authorization": "Bearer not-the-key-at-all"}) == 401
        assert status(path, {"Authorization": f"Basic {server.api_key}"}) == 401
    assert status("/v1/realtime", {}, kind="websocket") == 1008
    assert reached == []
    assert status("/health", {}) is None and status("/server_info", server.headers) is None
    assert reached == ["/health", "/server_info"]
    with pytest.raises(ValueError, match="api_key"):
        VLLMServer(model_dir, python="/x", api_key="short")
    server.stop()
