"""The engines reached over HTTP: a server launched here (llama-server, vLLM, SGLang) or one at a URL."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cp_memory.engine import CompletionResult, EngineClient, EngineError, LlamaServer, SGLangServer, VLLMServer

from .engines import BenchEngine, Reply

logger = logging.getLogger(__name__)

__all__ = ["ClientEngine", "LaunchedEngine", "LlamaEngine", "SGLangEngine", "UrlEngine", "VLLMEngine"]

REQUEST_TIMEOUT_S = 600.0  # one streamed request, to its last token


class ClientEngine(BenchEngine):
    """An engine reached through :class:`cp_memory.engine.EngineClient` (streamed, timed on the client)."""

    kind = "openai-compatible"

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None) -> None:
        super().__init__(model)
        self.base_url = base_url
        self.api_key = api_key
        self._client: EngineClient | None = None

    def _new_client(self) -> EngineClient:
        if self._client is not None:
            self._client.close()
        assert self.base_url is not None
        self._client = EngineClient(self.base_url, model=self.model, api_key=self.api_key, timeout=REQUEST_TIMEOUT_S)
        return self._client

    @property
    def client(self) -> EngineClient:
        return self._client if self._client is not None else self._new_client()

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _call(self, send: Callable[[], CompletionResult]) -> Reply:
        try:
            r = send()
        except EngineError as exc:
            logger.warning("engine request failed: %s", exc)
            return Reply("", None, None, None, None, error=str(exc)[:500])
        return Reply(r.text, r.ttft_s, r.total_s, r.prompt_tokens, r.cached_tokens, server_prompt_ms=r.server_prompt_ms)

    def complete(self, prompt: str, *, max_tokens: int) -> Reply:
        return self._call(lambda: self.client.complete(prompt, max_tokens=max_tokens, temperature=0.0))

    def chat(self, messages: list[dict[str, Any]], *, max_tokens: int) -> Reply:
        return self._call(lambda: self.client.chat(messages, max_tokens=max_tokens, temperature=0.0))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "url": self.base_url}


class UrlEngine(ClientEngine):
    """A server someone else started (``--engine-url``). Its kind is probed to pick the cache flush."""

    def __init__(self, base_url: str, model: str | None = None, *, api_key: str | None = None) -> None:
        super().__init__(model or "", base_url=base_url.rstrip("/").removesuffix("/v1"), api_key=api_key)
        self.server = "unknown"

    def start(self) -> None:
        import httpx

        assert self.base_url is not None
        with httpx.Client(base_url=self.base_url, timeout=10.0, headers=self.headers) as http:
            try:
                if http.get("/get_model_info").status_code == 200:
                    self.server = "sglang"
                elif http.get("/props").status_code == 200:
                    self.server = "llama.cpp"
                if not self.model:
                    data = http.get("/v1/models").json().get("data") or []
                    self.model = str(data[0]["id"]) if data else "unknown-model"
            except (httpx.HTTPError, ValueError, KeyError, IndexError, AttributeError) as exc:
                raise RuntimeError(
                    f"engine at {self.base_url} does not answer like an OpenAI-compatible server: {exc}"
                ) from exc
        self.kind = f"openai-compatible ({self.server})" if self.server != "unknown" else "openai-compatible"
        self._new_client()
        logger.info("engine at %s: %s, model %s", self.base_url, self.kind, self.model)

    def _flush(self) -> str:
        if self.client.flush_cache():
            return "flush_cache"
        if self.server == "llama.cpp":
            logger.warning(
                "llama.cpp at %s: slots erased, but its host prompt cache cannot be cleared over "
                "HTTP; modes may see each other's prefixes. Use --engine llama for a fair run.",
                self.base_url,
            )
            return "slots-erased (host prompt cache kept)"
        import httpx

        try:  # vLLM (with VLLM_SERVER_DEV_MODE=1): POST /reset_prefix_cache
            resp = httpx.post(f"{self.base_url}/reset_prefix_cache", headers=self.headers, timeout=30.0)
            if resp.status_code == 200:
                return "reset_prefix_cache"
        except httpx.HTTPError:
            pass
        logger.warning(
            "engine at %s has no cache flush endpoint: modes are NOT separated by a cold cache", self.base_url
        )
        return "none (no flush endpoint)"

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "server": self.server}


class LaunchedEngine(ClientEngine):
    """A server of :mod:`cp_memory.engine` (``server_class``) launched and owned here, on ``model_path`` with
    ``server_args``: restart it for a cold cache, stop it on close."""

    server_class: Any

    def __init__(self, model: str, model_path: str | Path, **server_args: Any) -> None:
        super().__init__(model)
        self.model_path = model_path
        self.server_args = server_args
        self.server: Any = None

    def _started(self) -> None:
        """Hook after the server came up (before the client is made)."""

    def start(self) -> None:
        if self.server is not None and self.server.is_running:
            return
        self.server = self.server_class(self.model_path, **self.server_args)
        self.server.start()
        self._started()
        self.base_url = self.server.base_url
        self.api_key = self.server.api_key or self.api_key  # a managed vLLM answers its key only
        self._new_client()

    def _flush_or_restart(self, flush: Callable[[], bool], label: str, what: str) -> str:
        """``flush()`` until it succeeds (refused while a request still runs: 5 tries, growing waits), then
        ``label``; else a restart for a cold cache."""
        for attempt in range(5):
            if flush():
                return label
            time.sleep(0.5 * (attempt + 1))
        logger.warning("%s refused %s 5 times; restarting it for a cold cache", self.kind, what)
        return self._restart()

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
    server_class = LlamaServer

    def __init__(self, model_path: str | Path, *, ctx_size: int, threads: int | None, cache_ram_mib: int) -> None:
        path = Path(model_path)
        name = path.name.removesuffix(".gguf")
        super().__init__(
            name, path, slots=1, ctx_size=ctx_size, threads=threads, cache_ram_mib=cache_ram_mib, alias=name
        )
        self.version = "unknown"

    def _started(self) -> None:
        try:
            self.version = self.server.version()
        except Exception:
            logger.debug("llama-server --version failed", exc_info=True)

    def _flush(self) -> str:
        return self._restart()

    @property
    def random_weights(self) -> bool:
        """The generated random-weight test model: real prefill timings, meaningless answers."""
        return Path(self.model_path).name.startswith("random-")

    def describe(self) -> dict[str, Any]:
        args = self.server_args
        return {
            **super().describe(),
            "model_path": str(self.model_path),
            "version": self.version,
            "random_weights": self.random_weights,
            "ctx_size": args["ctx_size"],
            "slots": 1,
            "cache_ram_mib": args["cache_ram_mib"],
            "threads": self.server.threads if self.server is not None else args["threads"],
        }


class SGLangEngine(LaunchedEngine):
    """An SGLang server launched here (GPU). Flush = ``POST /flush_cache`` (RadixAttention cache)."""

    kind = "sglang"
    server_class = SGLangServer

    def __init__(self, model_path: str, *, context_length: int | None, extra_args: Sequence[str]) -> None:
        super().__init__(model_path, model_path, context_length=context_length, extra_args=tuple(extra_args))

    def _flush(self) -> str:
        return self._flush_or_restart(self.client.flush_cache, "flush_cache", "/flush_cache")


class VLLMEngine(LaunchedEngine):
    """vLLM's OpenAI server launched here (CPU build, or GPU). Flush = ``POST /reset_prefix_cache``
    (every cached block), a restart when refused."""

    kind = "vllm"
    server_class = VLLMServer

    def __init__(self, model: str, *, max_model_len: int, block_size: int | None, extra_args: Sequence[str]) -> None:
        name = Path(model).name if Path(model).is_dir() else model
        super().__init__(
            name,
            model,
            served_model_name=name,
            max_model_len=max_model_len,
            block_size=block_size,
            extra_args=tuple(extra_args),
        )

    def _flush(self) -> str:
        return self._flush_or_restart(self.server.flush_cache, "reset_prefix_cache", "/reset_prefix_cache")

    @property
    def random_weights(self) -> bool:
        return Path(self.model_path).name.startswith("hf-random-")

    def describe(self) -> dict[str, Any]:
        args = self.server_args
        return {
            **super().describe(),
            "model_path": self.model_path,
            "random_weights": self.random_weights,
            "max_model_len": args["max_model_len"],
            "block_size": args["block_size"] or "vLLM default (128 on CPU, 16 on GPU)",
            "extra_args": list(args["extra_args"]),
        }
