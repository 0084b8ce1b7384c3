"""The engines the LoCoMo benchmark can measure, behind one small interface.

==================  =============================================================  ======================
``kind``            what it is                                                     cold cache between modes
==================  =============================================================  ======================
``llama.cpp``       a ``llama-server`` launched here (CPU; SmolLM2-135M by default)  server restart
``vllm``            vLLM's OpenAI server launched here (CPU build or GPU)          ``POST /reset_prefix_cache``
``sglang``          ``python -m sglang.launch_server`` launched here (GPU)           ``POST /flush_cache``
``openai-compatible`` any server at ``--engine-url`` (SGLang, vLLM, llama.cpp ...)   ``/flush_cache`` (SGLang),
                                                                                   ``/reset_prefix_cache`` (vLLM);
                                                                                   llama.cpp: slots erased only
``model-cache``     no LLM: ``benchmarks.common.cache_model`` scores prompts (.model_cache)   a new cache object
==================  =============================================================  ======================

The HTTP engines (``llama.cpp``, ``vllm``, ``sglang``, ``openai-compatible``) are in :mod:`.http_engines`, the
model-cache engine in :mod:`.model_cache`. Every engine answers with a :class:`Reply`; a request that fails
is a ``Reply`` with ``error`` set (the run goes on and the failure is counted in the table), never an exception.
"""

from __future__ import annotations

import inspect
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.common.reply import Reply

logger = logging.getLogger(__name__)

__all__ = ["WARMUP_PROMPT", "BenchEngine", "Reply", "library_default", "messages_text", "slug"]

#: Sent after every flush/restart and left out of all statistics. Shares nothing with the benchmark
#: prompts beyond the first few template tokens, the same in every mode.
WARMUP_PROMPT = "Warm-up request; answer with one word. Question: What colour is the sky?\nAnswer:"


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

    def start(self) -> None:  # noqa: B027 - optional hook: engines that need no start keep this no-op
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

    def close(self) -> None:  # noqa: B027 - optional hook: engines that launched nothing keep this no-op
        """Stop what was launched."""

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "model": self.model,
            "measures_ttft": self.measures_ttft,
            "flushes": dict(self.flushes),
        }


def library_default(f: Callable[..., Any], name: str) -> Any:
    """The default of keyword ``name`` of ``f`` (a library class or function): options the benchmark passes on
    take their default from there, never retyped."""
    return inspect.signature(f).parameters[name].default


def slug(text: str) -> str:
    """A folder-name-safe version of ``text``."""
    text = text.rstrip("/").split("/")[-1] if "/" in text else text
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "unknown"
