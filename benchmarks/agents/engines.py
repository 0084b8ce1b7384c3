"""The engines a trace is replayed on: a real prefix cache (vLLM CPU, llama-server) or the local modelled
provider rules (:class:`benchmarks.hosted.server.ProviderServer`: Anthropic's documented cache rules, labelled
"modelled").

:func:`start_engine` yields an :class:`Engine`: its URL, the headers it needs (vLLM's key), the gateway's
``--upstream-kind`` for it, the model name bodies get, and ``flush`` (an empty cache before each arm: vLLM's
``/reset_prefix_cache``, llama-server's slot erase; on the modelled server a fresh cache per run name, sent as
its ``x-bench-run`` header).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ENGINES", "Engine", "start_engine"]

ENGINES = ("vllm", "llama", "modelled")
#: ChatML that renders the tool definitions (a ``# Tools`` / ``<tools>`` section in the system turn, one JSON
#: object a tool, as Qwen's and Hermes' templates do) and tool calls' arguments: what the arms do to the tool
#: list reaches the engine's prompt, as it does on a real model
TEMPLATE = Path(__file__).with_name("chatml_tools.jinja")
#: a Claude Code request is ~12-16 K tokens with SmolLM2's tokenizer; its longest session ends near 20 K (the
#: document-analysis traces reach ~50 K: ``--context 65536`` there)
CONTEXT = 32768
SERVED_NAME = "replay"


@dataclass
class Engine:
    """A running engine (see the module docstring)."""

    name: str
    label: str
    url: str
    kind: str
    model: str | None
    flush: Callable[[str], object]
    headers: dict[str, str] = field(default_factory=dict)
    modelled: bool = False


@contextmanager
def _vllm(block_size: int, context: int) -> Iterator[Engine]:
    from cp_memory.engine import VLLMServer, hf_model_dir
    from cp_memory.engine.random_model import RandomModelSpec

    model = hf_model_dir(RandomModelSpec(context_length=context))
    tools = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--chat-template", str(TEMPLATE)]
    server = VLLMServer(
        model,
        served_model_name=SERVED_NAME,
        block_size=block_size,
        max_model_len=context,
        max_num_seqs=2,
        enforce_eager=True,
        extra_args=tools,
    )
    with server:
        label = f"vLLM CPU (random-weight llama, {block_size}-token blocks, automatic prefix caching)"
        yield Engine(
            "vllm", label, server.base_url, "vllm", SERVED_NAME, lambda _: server.flush_cache(), server.headers
        )


@contextmanager
def _llama(context: int) -> Iterator[Engine]:
    from cp_memory.engine import LlamaServer, random_model_path
    from cp_memory.engine.random_model import RandomModelSpec

    extra = ["--jinja", "--chat-template-file", str(TEMPLATE)]
    model = random_model_path(RandomModelSpec(context_length=context))  # llama-server caps n_ctx at the model's
    with LlamaServer(model, slots=1, ctx_size=context, cache_ram_mib=1024, extra_args=extra) as server:
        label = "llama-server (random-weight llama, 1 slot, prompt cache)"
        yield Engine("llama", label, server.base_url, "llamacpp", SERVED_NAME, lambda _: server.flush_cache())


@contextmanager
def _modelled() -> Iterator[Engine]:
    from benchmarks.hosted.server import ProviderServer

    with ProviderServer() as server:
        engine = Engine("modelled", "", server.url, "anthropic", None, lambda _: None, modelled=True)
        engine.label = "modelled Anthropic prompt cache (documented rules, local server)"
        engine.flush = lambda run: engine.headers.__setitem__("x-bench-run", run)
        yield engine


@contextmanager
def start_engine(name: str, *, block_size: int = 32, context: int = CONTEXT) -> Iterator[Engine]:
    """Start engine ``name`` (one of :data:`ENGINES`) with ``context`` tokens of context (a real engine); yields it
    and stops it afterwards."""
    if name == "vllm":
        with _vllm(block_size, context) as engine:
            yield engine
    elif name == "llama":
        with _llama(context) as engine:
            yield engine
    elif name == "modelled":
        with _modelled() as engine:
            yield engine
    else:
        raise ValueError(f"unknown engine {name!r}: choose from {', '.join(ENGINES)}")
