"""Engine side of cp_memory: a streaming client for OpenAI-compatible prefix-caching engines and
managed engine processes (llama.cpp ``llama-server`` on CPU, vLLM on CPU or GPU, SGLang on GPU,
``sglang-router`` in front of replicas), and the KV-cache event feed that keeps indexes in step with vLLM
and SGLang.

See docs/engine.md. Needs the ``engine`` extra (httpx, tenacity; gguf for the random test model).
"""

from __future__ import annotations

from ..extras import requires

with requires("engine", "cp_memory.engine"):  # httpx, tenacity
    from ._server import ManagedServer, free_port, running
    from .client import AsyncEngineClient, EngineClient
    from .deadline import Clock
    from .errors import (
        EngineConnectionError,
        EngineDeadlineExceeded,
        EngineError,
        EngineResponseTooLarge,
        EngineStatusError,
        EngineStreamError,
        EngineTimeout,
        LlamaServerNotFound,
        MalformedEvents,
        ServerStartError,
        SGLangRouterUnavailable,
        SGLangUnavailable,
        VLLMModelError,
        VLLMUnavailable,
    )
    from .hf_model import SMOLLM2_135M, hf_model_dir
    from .kv_events import KVEventFeed
    from .kv_follow import EngineCacheFeed
    from .kv_sync import KVCacheSync
    from .llamacpp import (
        LlamaServer,
        RandomModelSpec,
        find_llama_server,
        random_model_path,
        smollm2_model_path,
    )
    from .router import SGLangRouter, sglang_router_available
    from .sglang import SGLangServer, sglang_available
    from .sse import CompletionResult
    from .vllm import VLLMServer, vllm_available

__all__ = [
    "AsyncEngineClient",
    "Clock",
    "CompletionResult",
    "EngineCacheFeed",
    "EngineClient",
    "EngineConnectionError",
    "EngineDeadlineExceeded",
    "EngineError",
    "EngineResponseTooLarge",
    "EngineStatusError",
    "EngineStreamError",
    "EngineTimeout",
    "KVCacheSync",
    "KVEventFeed",
    "LlamaServer",
    "MalformedEvents",
    "ManagedServer",
    "free_port",
    "LlamaServerNotFound",
    "RandomModelSpec",
    "SMOLLM2_135M",
    "SGLangRouter",
    "SGLangRouterUnavailable",
    "SGLangServer",
    "SGLangUnavailable",
    "ServerStartError",
    "VLLMModelError",
    "VLLMServer",
    "VLLMUnavailable",
    "find_llama_server",
    "hf_model_dir",
    "random_model_path",
    "running",
    "sglang_available",
    "sglang_router_available",
    "smollm2_model_path",
    "vllm_available",
]
