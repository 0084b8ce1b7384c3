"""Engine workers for the multi-replica benchmarks (CoA, scale): llama-server or vLLM, one interface.

``--engine llama`` (default) starts ``llama-server`` replicas (1 slot, ``cache_mib`` of host prompt
cache); ``--engine vllm`` starts vLLM's OpenAI server (CPU build; automatic prefix caching shared by
all requests) with a KV cache of the same size a llama-server replica holds — one slot of ``ctx_size``
tokens plus ``cache_mib`` — so that both engines get the same memory. ``sglang-router`` fronts either
(it speaks the OpenAI API to its workers). The engines' own counters are read from ``/metrics`` under
llama-server's names: ``prompt_tokens_total`` = tokens prefilled (vLLM: prompt tokens minus prefix-cache
hits), ``prompt_seconds_total`` = prefill time (vLLM: the sum of its ``request_prefill_time_seconds``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import httpx

from cp_memory.engine import (
    SMOLLM2_135M,
    LlamaServer,
    RandomModelSpec,
    VLLMServer,
    hf_model_dir,
    random_model_path,
    smollm2_model_path,
)
from cp_memory.engine._server import ManagedServer

logger = logging.getLogger("benchmarks.workers")

__all__ = [
    "ENGINES",
    "Engine",
    "capacity_tokens",
    "kv_bytes_per_token",
    "make_worker",
    "model_path",
    "requests_served",
    "served_name",
    "vllm_kv_cache_bytes",
    "worker_metrics",
]

Engine = Literal["llama", "vllm"]
ENGINES: tuple[Engine, ...] = ("llama", "vllm")


def model_path(engine: str, model: str) -> Path:
    """``random`` (the small random-weight shape) or ``smollm2`` (SmolLM2-135M-Instruct), as the engine
    loads it: a GGUF for llama-server, a Hugging Face folder for vLLM (built offline, cached)."""
    if engine == "vllm":
        return hf_model_dir() if model == "random" else hf_model_dir(weights="smollm2")
    return random_model_path() if model == "random" else smollm2_model_path()


def kv_bytes_per_token(engine: str, model: str) -> int:
    """K and V bytes per token: layers x KV heads x head dim x 2 (K, V) x element size (llama-server
    f16; vLLM float32, :class:`VLLMServer`'s default dtype on CPU)."""
    spec = RandomModelSpec() if model == "random" else SMOLLM2_135M
    return spec.n_layer * spec.n_head_kv * spec.head_dim * 2 * (4 if engine == "vllm" else 2)


def vllm_kv_cache_bytes(per_token: int, cache_mib: int, ctx_size: int) -> int:
    """A vLLM worker's KV cache: what a llama-server replica holds, one slot of ``ctx_size`` tokens
    plus ``cache_mib`` of host prompt cache (and two CPU blocks of headroom: vLLM keeps one back)."""
    return cache_mib * 2**20 + (ctx_size + 256) * per_token


def capacity_tokens(engine: str, model: str, cache_mib: int, ctx_size: int) -> int:
    """Tokens a worker's cache holds, for the routers' cache models: llama-server's host prompt cache
    (its slot's own context aside, as the benchmarks have always modelled it); vLLM's whole KV cache."""
    per_token = kv_bytes_per_token(engine, model)
    if engine == "vllm":
        return vllm_kv_cache_bytes(per_token, cache_mib, ctx_size) // per_token
    return cache_mib * 2**20 // per_token


def make_worker(
    engine: str,
    model: Path,
    *,
    threads: int,
    cache_mib: int,
    ctx_size: int,
    kv_bytes_per_token: int = 0,
    log_path: Path | None = None,
    block_size: int | None = None,
    vllm_args: Sequence[str] = (),
) -> ManagedServer:
    """One cold worker (not started) on ``model`` (:func:`model_path`); vLLM needs the model's
    ``kv_bytes_per_token`` to size its cache like a llama-server replica's."""
    if engine == "llama":
        return LlamaServer(
            model, slots=1, ctx_size=ctx_size, threads=threads, cache_ram_mib=cache_mib, log_path=log_path
        )
    if engine == "vllm":
        if kv_bytes_per_token <= 0:
            raise ValueError("a vLLM worker needs kv_bytes_per_token to size its KV cache")
        return VLLMServer(
            model,
            max_model_len=ctx_size,
            kv_cache_bytes=vllm_kv_cache_bytes(kv_bytes_per_token, cache_mib, ctx_size),
            block_size=block_size,
            threads=threads,
            log_path=log_path,
            extra_args=vllm_args,
        )
    raise ValueError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")


def served_name(server: ManagedServer) -> str:
    """The model name the worker serves (what a gateway in front of it must ask for)."""
    name = getattr(server, "served_model_name", None) or getattr(server, "alias", None)
    if not isinstance(name, str):
        raise TypeError(f"{server!r} names no served model")
    return name


_LLAMA = re.compile(r"^(llamacpp:[a-z_]+)\s+([0-9.eE+-]+)$", re.MULTILINE)
_VLLM = re.compile(r"^(vllm:[a-z_:]+)(\{[^}]*\})?\s+([0-9.eE+-]+)$", re.MULTILINE)


def _metrics_text(server: ManagedServer) -> str | None:
    try:
        resp = httpx.get(f"{server.base_url}/metrics", timeout=10)
        resp.raise_for_status()
    except httpx.HTTPError as exc:
        logger.warning("no /metrics from %s: %s", server.base_url, exc)
        return None
    return resp.text


def _vllm_counters(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in _VLLM.finditer(text):
        name = m.group(1).split(":", 1)[1]
        out[name] = out.get(name, 0.0) + float(m.group(3))
    return out


def worker_metrics(server: ManagedServer) -> dict[str, float]:
    """The engine's own counters under llama-server's names (see the module docstring)."""
    text = _metrics_text(server)
    if text is None:
        return {}
    if isinstance(server, VLLMServer):
        c = _vllm_counters(text)
        prompt = c.get("prompt_tokens_total", 0.0)
        hits = c.get("prefix_cache_hits_total", 0.0)
        return {
            "prompt_tokens_total": prompt - hits,
            "prompt_seconds_total": c.get("request_prefill_time_seconds_sum", 0.0),
            "vllm_prompt_tokens_total": prompt,
            "vllm_prefix_cache_hits_total": hits,
            "vllm_prefix_cache_queries_total": c.get("prefix_cache_queries_total", 0.0),
            "requests_total": c.get("request_success_total", 0.0),
        }
    return {m.group(1).split(":", 1)[1]: float(m.group(2)) for m in _LLAMA.finditer(text)}


_LAUNCH = re.compile(rb"launch_slot_.*processing task")


def requests_served(server: ManagedServer) -> int:
    """Completion requests a worker served: llama-server's log (one ``launch_slot_`` line each), vLLM's
    ``request_success_total``."""
    if isinstance(server, VLLMServer):
        return int(worker_metrics(server).get("requests_total", 0))
    log: Any = server.log_path
    if log is None or not Path(log).exists():
        return 0
    return len(_LAUNCH.findall(Path(log).read_bytes()))
