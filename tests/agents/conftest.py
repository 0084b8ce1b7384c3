"""Fixtures for the agents tests.

* :class:`FakeEngine` / :class:`AsyncFakeEngine`: tiny in-process engines implementing the engine
  client's ``complete`` interface, with a prefix cache modelled on the served prompts (longest common
  prefix, in characters / 4). Routing and chain logic are tested against them; they are engines, not
  mocks of the code under test.
* ``failing_url``: a loopback HTTP server answering 500 to everything, so a real
  :class:`~cp_memory.engine.EngineClient` retries and then raises (failure injection).
* ``llama_pool``: real llama-server instances on the random-weight model (``@pytest.mark.engine``);
  skipped with the reason when the binary is absent, failed in strict mode (``tests.support``).
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from cp_memory.engine import CompletionResult

from ..loopback import json_error, loopback_engine
from ..support import missing

_QUESTION = re.compile(r"\nQuestion: (.*)\n")
_PREVIOUS = re.compile(r"Here is the summary of the previous source text: (.*)\nQuestion:", re.DOTALL)
_MANAGER_CU = re.compile(r"answer based on the summary: (.*)\nQuestion:", re.DOTALL)


def _lcp(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class FakeEngine:
    """Deterministic engine: a worker's CU is ``<previous CU> > <question tag>#<n>`` so a chain's trace is
    checkable; the manager answers ``answer(<question tag>)``. ``cached_tokens`` = longest common prefix
    with any prompt served before, in characters // 4."""

    def __init__(self, name: str = "fake", delay: float = 0.0) -> None:
        self.name = name
        self.delay = delay
        self.prompts: list[str] = []
        self.request_ids: list[str | None] = []
        self._lock = threading.Lock()

    def _serve(self, prompt: str, request_id: str | None) -> CompletionResult:
        with self._lock:
            cached = max((_lcp(prompt, p) for p in self.prompts), default=0) // 4
            self.prompts.append(prompt)
            self.request_ids.append(request_id)
        m = _QUESTION.search(prompt)
        tag = m.group(1).split()[0] if m else "?"
        if prompt.startswith("The following are given passages."):
            cu = _MANAGER_CU.search(prompt)
            text = f"answer({tag}) from [{cu.group(1) if cu else ''}]"
        else:
            prev = _PREVIOUS.search(prompt)
            prev_cu = prev.group(1) if prev else ""
            n = prev_cu.count(">") + 1
            text = f"{prev_cu} > {tag}#{n}@{self.name}"
        return CompletionResult(
            text=text,
            ttft_s=0.001,
            total_s=0.002,
            prompt_tokens=len(prompt) // 4,
            cached_tokens=cached,
            completion_tokens=4,
            request_id=request_id,
            finish_reason="stop",
        )

    def complete(
        self,
        prompt: str,
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        request_id: str | None = None,
        stop: Any = None,
    ) -> CompletionResult:
        if self.delay:
            threading.Event().wait(self.delay)
        return self._serve(prompt, request_id)

    def chat(self, messages: list[dict[str, str]], **kw: Any) -> CompletionResult:
        (msg,) = messages
        assert msg["role"] == "user"
        self.chat_calls = getattr(self, "chat_calls", 0) + 1
        return self.complete(msg["content"], **kw)


class AsyncFakeEngine(FakeEngine):
    async def complete(
        self,
        prompt: str,
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,  # type: ignore[override]
        request_id: str | None = None,
        stop: Any = None,
    ) -> CompletionResult:
        await asyncio.sleep(self.delay)
        return self._serve(prompt, request_id)


@pytest.fixture()
def failing_url() -> Iterator[tuple[str, list[Any]]]:
    """(url, requests seen) of a loopback server that answers HTTP 500 to every request."""
    with loopback_engine(json_error(500, "injected failure")) as engine:
        yield engine.url, engine.requests


_missing = missing


@pytest.fixture(scope="module")
def llama_pool() -> Iterator[list[Any]]:
    """Two llama-server instances (1 slot, 1 thread each) on the random-weight model."""
    from cp_memory.engine import LlamaServer, find_llama_server, random_model_path, running

    try:
        find_llama_server()
    except FileNotFoundError as exc:
        _missing(f"llama-server binary absent: {exc}")
    try:
        model = random_model_path()
    except (FileNotFoundError, ImportError) as exc:
        _missing(f"cannot build the random test model: {exc}")
    with running(
        [LlamaServer(model, slots=1, ctx_size=4096, threads=1, cache_ram_mib=64) for _ in range(2)]
    ) as servers:
        yield servers
