"""The engines the LoCoMo benchmark can measure, behind one small interface.

==================  =============================================================  ======================
``kind``            what it is                                                     cold cache between modes
==================  =============================================================  ======================
``llama.cpp``       a ``llama-server`` launched here (CPU; SmolLM2-135M by default)  server restart
``sglang``          ``python -m sglang.launch_server`` launched here (GPU)           ``POST /flush_cache``
``openai-compatible`` any server at ``--engine-url`` (SGLang, vLLM, llama.cpp ...)   ``/flush_cache`` (SGLang),
                                                                                   ``/reset_prefix_cache`` (vLLM);
                                                                                   llama.cpp: slots erased only
``model-cache``     no LLM: ``cp_memory.cache_model`` scores prompts                  a new cache object
==================  =============================================================  ======================

Every engine answers with a :class:`Reply`; a request that fails is a ``Reply`` with ``error`` set
(the run goes on and the failure is counted in the table), never an exception.
"""
from __future__ import annotations

import logging
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Self

    from cp_memory.cache_model import PrefixCacheModel

logger = logging.getLogger(__name__)

__all__ = [
    "CACHE_POLICIES",
    "WARMUP_PROMPT",
    "BenchEngine",
    "ClientEngine",
    "LlamaEngine",
    "ModelCacheEngine",
    "Reply",
    "SGLangEngine",
    "UrlEngine",
    "make_cache_model",
    "messages_text",
]

#: Sent after every flush/restart and left out of all statistics. Shares nothing with the benchmark
#: prompts beyond the first few template tokens, the same in every mode.
WARMUP_PROMPT = "Warm-up request; answer with one word. Question: What colour is the sky?\nAnswer:"


@dataclass(frozen=True)
class Reply:
    """One request's outcome. ``ttft_s`` is ``None`` where the engine cannot time (model-cache)."""

    text: str
    ttft_s: float | None
    total_s: float | None
    prompt_tokens: int | None
    cached_tokens: int | None
    error: str | None = None
    server_prompt_ms: float | None = None   # prefill time the engine reports (llama.cpp), no HTTP


def messages_text(messages: Sequence[dict[str, Any]]) -> str:
    """A chat as one string (for the model-cache engine): ``role: content`` blocks."""
    return "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages)


class BenchEngine(ABC):
    """What the runner needs from an engine."""

    kind: str = "engine"
    #: False: TTFT is not measured (model-cache); the table shows n/a
    measures_ttft: bool = True

    def __init__(self, model: str) -> None:
        self.model = model
        self.flushes: dict[str, int] = {}

    def start(self) -> None:
        """Launch or connect; idempotent."""

    @abstractmethod
    def _flush(self) -> str:
        """Make the prefix cache cold; return how (recorded with every mode)."""

    def flush(self) -> str:
        how = self._flush()
        self.flushes[how] = self.flushes.get(how, 0) + 1
        return how

    @abstractmethod
    def complete(self, prompt: str, *, max_tokens: int) -> Reply: ...

    @abstractmethod
    def chat(self, messages: list[dict[str, Any]], *, max_tokens: int) -> Reply: ...

    def warmup(self, n: int) -> None:
        """``n`` throw-away requests (not recorded)."""
        for _ in range(n):
            reply = self.complete(WARMUP_PROMPT, max_tokens=2)
            if reply.error:
                logger.warning("warm-up request failed: %s", reply.error)

    def close(self) -> None:
        """Stop what was launched."""

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model, "measures_ttft": self.measures_ttft,
                "flushes": dict(self.flushes)}

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------------------------------ HTTP engines
class ClientEngine(BenchEngine):
    """An engine reached through :class:`cp_memory.engine.EngineClient` (streamed, timed on the client)."""

    kind = "openai-compatible"

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 timeout: float = 600.0, send_model: bool = True) -> None:
        super().__init__(model)
        self.base_url = base_url
        self.api_key = api_key
        self.timeout = timeout
        self.send_model = send_model
        self._client: Any = None

    def _new_client(self) -> None:
        from cp_memory.engine import EngineClient

        if self._client is not None:
            self._client.close()
        assert self.base_url is not None
        self._client = EngineClient(self.base_url, model=self.model if self.send_model else None,
                                    api_key=self.api_key, timeout=self.timeout)

    @property
    def client(self) -> Any:
        if self._client is None:
            self._new_client()
        return self._client

    def _call(self, method: str, payload: Any, max_tokens: int) -> Reply:
        from cp_memory.engine import EngineError

        try:
            r = getattr(self.client, method)(payload, max_tokens=max_tokens, temperature=0.0)
        except EngineError as exc:
            logger.warning("engine request failed: %s", exc)
            return Reply("", None, None, None, None, error=str(exc)[:500])
        return Reply(r.text, r.ttft_s, r.total_s, r.prompt_tokens, r.cached_tokens,
                     server_prompt_ms=getattr(r, "server_prompt_ms", None))

    def complete(self, prompt: str, *, max_tokens: int) -> Reply:
        return self._call("complete", prompt, max_tokens)

    def chat(self, messages: list[dict[str, Any]], *, max_tokens: int) -> Reply:
        return self._call("chat", messages, max_tokens)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "url": self.base_url}


class UrlEngine(ClientEngine):
    """A server someone else started (``--engine-url``). Its kind is probed to pick the cache flush."""

    def __init__(self, base_url: str, model: str | None = None, *, api_key: str | None = None,
                 timeout: float = 600.0) -> None:
        super().__init__(model or "", base_url=base_url.rstrip("/").removesuffix("/v1"), api_key=api_key,
                         timeout=timeout)
        self.server = "unknown"

    def start(self) -> None:
        import httpx

        assert self.base_url is not None
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        with httpx.Client(base_url=self.base_url, timeout=10.0, headers=headers) as http:
            try:
                if http.get("/get_model_info").status_code == 200:
                    self.server = "sglang"
                elif http.get("/props").status_code == 200:
                    self.server = "llama.cpp"
                if not self.model:
                    data = http.get("/v1/models").json().get("data") or []
                    self.model = str(data[0]["id"]) if data else "unknown-model"
            except (httpx.HTTPError, ValueError, KeyError, IndexError, AttributeError) as exc:
                raise RuntimeError(f"engine at {self.base_url} does not answer like an OpenAI-compatible "
                                   f"server: {exc}") from exc
        self.kind = f"openai-compatible ({self.server})" if self.server != "unknown" else "openai-compatible"
        self._new_client()
        logger.info("engine at %s: %s, model %s", self.base_url, self.kind, self.model)

    def _flush(self) -> str:
        if self.client.flush_cache():
            return "flush_cache"
        if self.server == "llama.cpp":
            logger.warning("llama.cpp at %s: slots erased, but its host prompt cache cannot be cleared over "
                           "HTTP; modes may see each other's prefixes. Use --engine llama for a fair run.",
                           self.base_url)
            return "slots-erased (host prompt cache kept)"
        import httpx
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:  # vLLM (with VLLM_SERVER_DEV_MODE=1): POST /reset_prefix_cache
            resp = httpx.post(f"{self.base_url}/reset_prefix_cache", headers=headers, timeout=30.0)
            if resp.status_code == 200:
                return "reset_prefix_cache"
        except httpx.HTTPError:
            pass
        logger.warning("engine at %s has no cache flush endpoint: modes are NOT separated by a cold cache",
                       self.base_url)
        return "none (no flush endpoint)"

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "server": self.server}


class LaunchedEngine(ClientEngine):
    """A server launched and owned here (``self.server``): restart it for a cold cache, stop it on close."""

    server: Any = None

    def _restart(self) -> str:
        self.server.restart()
        self.base_url = self.server.base_url
        self._new_client()  # no keep-alive connection to the old process
        return "restart"

    def close(self) -> None:
        super().close()
        if self.server is not None:
            self.server.stop()
            self.server = None


class LlamaEngine(LaunchedEngine):
    """A ``llama-server`` launched here: the embedded CPU engine. Flush = restart (the only full one)."""

    kind = "llama.cpp"

    def __init__(self, model_path: str | Path, *, ctx_size: int = 8192, threads: int | None = None,
                 cache_ram_mib: int = 2048, log_path: str | Path | None = None) -> None:
        self.model_path = Path(model_path)
        super().__init__(_model_name(self.model_path))
        self.ctx_size = ctx_size
        self.threads = threads
        self.cache_ram_mib = cache_ram_mib
        self.log_path = log_path
        self.server: Any = None
        self.version = "unknown"

    def start(self) -> None:
        from cp_memory.engine import LlamaServer

        if self.server is not None and self.server.is_running:
            return
        self.server = LlamaServer(self.model_path, slots=1, ctx_size=self.ctx_size, threads=self.threads,
                                  cache_ram_mib=self.cache_ram_mib, alias=self.model,
                                  log_path=self.log_path)
        self.server.start()
        try:
            self.version = self.server.version()
        except Exception:
            logger.debug("llama-server --version failed", exc_info=True)
        self.base_url = self.server.base_url
        self._new_client()

    def _flush(self) -> str:
        return self._restart()

    @property
    def random_weights(self) -> bool:
        """The generated random-weight test model: real prefill timings, meaningless answers."""
        return self.model_path.name.startswith("random-")

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model_path": str(self.model_path), "version": self.version,
                "random_weights": self.random_weights,
                "ctx_size": self.ctx_size, "slots": 1, "cache_ram_mib": self.cache_ram_mib,
                "threads": self.server.threads if self.server is not None else self.threads}


class SGLangEngine(LaunchedEngine):
    """An SGLang server launched here (GPU). Flush = ``POST /flush_cache`` (RadixAttention cache)."""

    kind = "sglang"

    def __init__(self, model_path: str, *, context_length: int | None = None,
                 mem_fraction_static: float | None = None, extra_args: Sequence[str] = (),
                 log_path: str | Path | None = None) -> None:
        super().__init__(model_path)
        self.model_path = model_path
        self.context_length = context_length
        self.mem_fraction_static = mem_fraction_static
        self.extra_args = tuple(extra_args)
        self.log_path = log_path
        self.server: Any = None

    def start(self) -> None:
        from cp_memory.engine import SGLangServer

        if self.server is not None and self.server.is_running:
            return
        self.server = SGLangServer(self.model_path, context_length=self.context_length,
                                   mem_fraction_static=self.mem_fraction_static, extra_args=self.extra_args,
                                   log_path=self.log_path)
        self.server.start()
        self.base_url = self.server.base_url
        self._new_client()

    def _flush(self) -> str:
        for attempt in range(5):
            if self.client.flush_cache():
                return "flush_cache"
            time.sleep(0.5 * (attempt + 1))  # refused while a request is still running
        logger.warning("SGLang refused /flush_cache 5 times; restarting it for a cold cache")
        return self._restart()


# ------------------------------------------------------------------------------------------ model-cache
#: ``--cache-policy`` choices: the engine each one models
CACHE_POLICIES = ("radix", "llama.cpp")


def make_cache_model(policy: str = "radix", *, capacity_tokens: int | None = 65_536,
                     block_size: int = 16) -> PrefixCacheModel:
    """A fresh :mod:`cp_memory.cache_model` cache: ``radix`` (SGLang/vLLM: chained blocks of ``block_size``
    tokens, LRU over ``capacity_tokens``) or ``llama.cpp`` (one slot + host prompt cache of
    ``capacity_tokens``). Both on regex tokens (no tokenizer needed)."""
    from cp_memory.cache_model import BlockPrefixCache, LlamaServerCache

    if policy == "radix":
        return BlockPrefixCache(capacity_tokens, block_size=block_size)
    if policy == "llama.cpp":
        return LlamaServerCache(capacity_tokens)
    raise ValueError(f"unknown cache policy {policy!r}: choose from {CACHE_POLICIES}")


class ModelCacheEngine(BenchEngine):
    """No LLM: every prompt is served by :mod:`cp_memory.cache_model` (deterministic, machine-independent).
    Gives the hit ratio only (regex tokens); TTFT, answers and F1 are n/a."""

    kind = "model-cache"
    measures_ttft = False

    def __init__(self, *, capacity_tokens: int = 65_536, policy: str = "radix", block_size: int = 16) -> None:
        super().__init__(f"cp_memory.cache_model {policy} (no LLM)")
        self.capacity_tokens = capacity_tokens
        self.policy = policy
        self.block_size = block_size
        self.cache = make_cache_model(policy, capacity_tokens=capacity_tokens, block_size=block_size)

    def _flush(self) -> str:
        self.cache = make_cache_model(self.policy, capacity_tokens=self.capacity_tokens,
                                      block_size=self.block_size)
        return "new-cache"

    def warmup(self, n: int) -> None:
        return None

    def complete(self, prompt: str, *, max_tokens: int) -> Reply:
        served = self.cache.serve(prompt)
        return Reply("", None, None, served.prompt, served.cached)

    def chat(self, messages: list[dict[str, Any]], *, max_tokens: int) -> Reply:
        return self.complete(messages_text(messages), max_tokens=max_tokens)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "capacity_tokens": self.capacity_tokens, "policy": self.policy,
                "block_tokens": self.block_size if self.policy == "radix" else 1,
                "note": "hit ratio from cp_memory.cache_model (regex tokens); no LLM, TTFT not measured"}


def _model_name(path: Path) -> str:
    name = path.name
    for suffix in (".gguf",):
        name = name.removesuffix(suffix)
    return name


def slug(text: str) -> str:
    """A folder-name-safe version of ``text``."""
    text = text.rstrip("/").split("/")[-1] if "/" in text else text
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "unknown"
