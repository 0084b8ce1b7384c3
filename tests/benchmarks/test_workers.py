"""benchmarks.workers: one WorkerSpec starts the CoA and scale benchmarks' workers, whichever engine.

A spec is what the command line asked for (``--engine --model --threads --cache-mib --ctx-size
--vllm-args``); every worker it makes carries all of it, and both engines get the same memory.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from benchmarks.common import harness
from benchmarks.common.config import parse_config
from benchmarks.workers import WorkerOptions, WorkerSpec, capacity_tokens, kv_bytes_per_token
from cp_memory.engine import LlamaServer, VLLMServer

from ..support import missing


def _args(*argv: str) -> WorkerOptions:
    ap = argparse.ArgumentParser()
    harness.add_model(ap)
    harness.add_engine(ap)
    harness.add_threads(ap, 1)
    ap.add_argument("--cache-mib", type=int, default=24)
    ap.add_argument("--ctx-size", type=int, default=4096)
    return parse_config(ap, WorkerOptions, argv)


def test_a_vllm_worker_gets_the_commands_vllm_args() -> None:
    """Regression: the scale benchmark's replicas dropped --vllm-args (documented in docs/engine.md as
    ``"--vllm-args=--block-size 32"``): its vLLM replicas ran with vLLM's own block size."""
    spec = WorkerSpec.from_options(_args("--engine", "vllm", "--vllm-args=--block-size 32", "--threads", "2"))
    assert spec.vllm_args == ("--block-size", "32")
    try:
        worker = spec.worker(log_path=Path("w0.log"))
    except (FileNotFoundError, ImportError) as exc:
        missing(f"cannot build the vLLM test model: {exc}")
    assert isinstance(worker, VLLMServer)
    assert worker.extra_args == ("--block-size", "32") and worker.threads == 2
    # the KV cache a llama-server replica holds: one context plus the prompt cache
    assert worker.kv_cache_bytes == 24 * 2**20 + (4096 + 256) * spec.kv_bytes_per_token


def test_a_llama_worker_is_one_slot_with_the_prompt_cache_asked_for() -> None:
    spec = WorkerSpec.from_options(_args("--cache-mib", "48", "--ctx-size", "2048"))
    worker = spec.worker()
    assert isinstance(worker, LlamaServer)
    assert spec.capacity_tokens == 48 * 2**20 // 2048  # f16 K and V of the 4-layer test shape: 2 KiB a token


def test_every_model_name_has_the_kv_size_of_its_shape() -> None:
    """``tiny`` is the random test shape, ``smollm2-random`` SmolLM2-135M's shape with random weights."""
    assert kv_bytes_per_token("llama", "tiny") == kv_bytes_per_token("llama", "random") == 4 * 2 * 64 * 2 * 2
    assert kv_bytes_per_token("vllm", "smollm2-random") == kv_bytes_per_token("vllm", "smollm2")
    assert kv_bytes_per_token("vllm", "smollm2") > kv_bytes_per_token("vllm", "random")
    assert (
        capacity_tokens("vllm", "tiny", 24, 4096)
        == WorkerSpec(engine="vllm", model="random", threads=1, cache_mib=24, ctx_size=4096).capacity_tokens
    )


def test_a_model_vllm_alone_has_is_refused_for_llama_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="vllm only"):
        WorkerSpec.from_options(_args("--model", "smollm2-random"))
    with pytest.raises(ValueError, match="vllm only"):
        WorkerSpec(engine="llama", model="smollm2-random", threads=1, cache_mib=24, ctx_size=4096).worker()


def test_the_feed_arm_gets_vllm_workers_that_publish_their_kv_events_and_is_refused_on_llama() -> None:
    from benchmarks.coa.arms import ARMS

    assert ARMS["agent_aware_feed"].feed and ARMS["agent_aware_feed"].agent == ARMS["agent_aware"].agent
    spec = WorkerSpec.from_options(_args("--engine", "vllm"))
    try:
        worker = spec.worker(kv_events=True)
    except (FileNotFoundError, ImportError) as exc:
        missing(f"cannot build the vLLM test model: {exc}")
    assert isinstance(worker, VLLMServer) and worker.kv_events
    with pytest.raises(ValueError, match="publish no KV-cache events"):
        WorkerSpec.from_options(_args()).worker(kv_events=True)


def test_a_feed_arm_records_its_feeds_counters_summed_over_workers() -> None:
    from types import SimpleNamespace

    from benchmarks.coa.arms import Pool
    from cp_memory.engine.kv_follow import FeedStats
    from cp_memory.engine.kv_sync import SyncStats

    feed = SimpleNamespace(sync=SimpleNamespace(stats=SyncStats(batches=3, tracked=2, evicted=1)), stats=FeedStats())
    pool = Pool([], router=None, sglang=None, feeds=[feed, feed])  # type: ignore[arg-type]
    assert pool.feed_stats() == {
        "batches": 6,
        "tracked": 4,
        "evicted": 2,
        "expired": 0,
        "lost": 0,
        "untokenized": 0,
        "dropped": 0,
    }
    assert Pool([], router=None, sglang=None).feed_stats() is None  # type: ignore[arg-type]
