"""Engine workers for the multi-replica benchmarks (CoA, scale): llama-server or vLLM, one interface.

``--engine llama`` (default) starts ``llama-server`` replicas (1 slot, ``cache_mib`` of host prompt
cache); ``--engine vllm`` starts vLLM's OpenAI server (CPU build; automatic prefix caching shared by
all requests) with a KV cache of the same size a llama-server replica holds — one slot of ``ctx_size``
tokens plus ``cache_mib`` — so that both engines get the same memory. ``sglang-router`` fronts either
(it speaks the OpenAI API to its workers). The engines' own counters are read from ``/metrics`` under
llama-server's names: ``prompt_tokens_total`` = tokens prefilled (vLLM: prompt tokens minus prefix-cache
hits), ``prompt_seconds_total`` = prefill time (vLLM: the sum of its ``request_prefill_time_seconds``).
A :class:`WorkerSpec` (a run's ``--engine``, ``--model``, ``--threads``, ...) starts them alike.
"""

from __future__ import annotations

import logging
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common.config import EngineOptions, ModelOptions
from benchmarks.common.harness import ENGINES, Engine, resolve_model
from cp_memory.engine import SMOLLM2_135M, LlamaServer, ManagedServer, RandomModelSpec, VLLMServer

logger = logging.getLogger("benchmarks.workers")

__all__ = [
    "WorkerOptions",
    "WorkerSpec",
    "capacity_tokens",
    "kv_bytes_per_token",
    "requests_served",
    "served_name",
    "vllm_kv_cache_bytes",
    "worker_metrics",
]


@dataclass(frozen=True, kw_only=True)
class WorkerOptions(ModelOptions, EngineOptions):
    """The options a multi-replica benchmark's config has for its workers: ``--engine --model --vllm-args``
    (the harness's) and ``--threads --cache-mib --ctx-size`` per worker."""

    threads: int
    cache_mib: int
    ctx_size: int


@dataclass(frozen=True, kw_only=True)
class WorkerSpec:
    """A benchmark's engine workers, all alike: ``engine``, ``model`` by name (``--model``; resolved by
    :func:`benchmarks.common.harness.resolve_model`), and each worker's threads, cache and context."""

    engine: Engine
    model: str
    threads: int
    cache_mib: int
    ctx_size: int
    vllm_args: tuple[str, ...] = ()

    @classmethod
    def from_options(cls, opts: WorkerOptions) -> WorkerSpec:
        """From a config's ``--engine --model --threads --cache-mib --ctx-size --vllm-args``; the model is
        resolved (built and cached on first use) here, so a name the engine cannot load fails at once."""
        fields = {f: getattr(opts, f) for f in ("engine", "model", "threads", "cache_mib", "ctx_size")}
        resolve_model(opts.model, opts.engine)
        return cls(**fields, vllm_args=tuple(opts.vllm_args.split()))

    @property
    def kv_bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.engine, self.model)

    @property
    def capacity_tokens(self) -> int:
        """Tokens one worker's cache holds, for the routers' cache models (:func:`capacity_tokens`)."""
        return capacity_tokens(self.engine, self.model, self.cache_mib, self.ctx_size)

    def worker(
        self, log_path: Path | None = None, *, kv_events: bool = False, api_key: str | None = None
    ) -> ManagedServer:
        """One cold worker (not started): llama-server with one slot and ``cache_mib`` of host prompt cache,
        or vLLM with the KV cache such a replica holds (:func:`vllm_kv_cache_bytes`); ``kv_events``: vLLM
        publishes its KV-cache events (llama-server has none: refused). ``api_key``: vLLM's key (None: a
        random one per worker); workers behind one ``SGLangRouter`` share one (:meth:`pool_key`)."""
        model = resolve_model(self.model, self.engine)
        if kv_events and self.engine != "vllm":
            raise ValueError(f"{self.engine} workers publish no KV-cache events: an event feed needs --engine vllm")
        if self.engine == "llama":
            return LlamaServer(
                model,
                slots=1,
                ctx_size=self.ctx_size,
                threads=self.threads,
                cache_ram_mib=self.cache_mib,
                log_path=log_path,
            )
        if self.engine == "vllm":
            return VLLMServer(
                model,
                max_model_len=self.ctx_size,
                kv_cache_bytes=vllm_kv_cache_bytes(self.kv_bytes_per_token, self.cache_mib, self.ctx_size),
                threads=self.threads,
                log_path=log_path,
                extra_args=self.vllm_args,
                kv_events=kv_events,
                api_key=api_key,
            )
        raise ValueError(f"unknown engine {self.engine!r}; choose from {', '.join(ENGINES)}")


def kv_bytes_per_token(engine: str, model: str) -> int:
    """K and V bytes per token of ``model`` (``random``/``tiny``: the test shape; ``smollm2*``: SmolLM2-135M):
    layers x KV heads x head dim x 2 (K, V) x element size (llama-server f16; vLLM float32,
    :class:`VLLMServer`'s default dtype on CPU)."""
    spec = SMOLLM2_135M if model.startswith("smollm2") else RandomModelSpec()
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
        key = server.api_key  # a managed vLLM refuses every route but /health without it
        resp = httpx.get(
            f"{server.base_url}/metrics", timeout=10, headers={"Authorization": f"Bearer {key}"} if key else {}
        )
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


def pool_key(spec: WorkerSpec) -> str | None:
    """One API key for a pool of vLLM workers behind one router (a managed vLLM refuses requests without its
    key, and sglang-router forwards the client's); None for llama-server, which needs none."""
    return secrets.token_urlsafe(24) if spec.engine == "vllm" else None


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
