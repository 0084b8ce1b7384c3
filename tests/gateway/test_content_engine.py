"""The content rules in front of a real llama-server (random-weight model, one slot, prompt cache on), on the
recorded Claude Code session that reads the March minutes, the April minutes, then March again: the tokens the
engine prefilled (its own prompt minus cached counts) through the gateway are fewer than sent directly, and
fewer than through the gateway with the content rules off. The recorded bodies are sent without their 12 tool
definitions (36 KB: beyond the test model's context) and non-streamed; everything else as recorded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks.agents.trace import load_trace, session_of
from cp_memory.providers.usage import read_usage

from .conftest import Running, running_gateway

pytestmark = pytest.mark.engine
TRACE = Path(__file__).with_name("traces") / "claude_code_2.1.328_docs_code.jsonl.xz"
TEMPLATE = Path(__file__).with_name("chatml_tools.jinja")


@pytest.fixture(scope="module")
def llama(random_model: Path) -> Iterator[Any]:
    from cp_memory.engine import LlamaServer

    with LlamaServer(
        random_model,
        slots=1,
        ctx_size=16384,
        cache_ram_mib=256,
        extra_args=["--jinja", "--chat-template-file", str(TEMPLATE)],
    ) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(llama: Any) -> Iterator[Running]:
    with running_gateway(llama.base_url, "llamacpp") as running:
        yield running


def _docs_session() -> list[tuple[dict[str, str], dict[str, Any]]]:
    """The first docs session's requests: (its Claude Code headers, the body without tools, not streamed)."""
    records = load_trace(TRACE)
    session = next(session_of(r) for r in records if "claude/docs-0/" in str(r["body"]))
    out = []
    for r in records:
        if session_of(r) == session:
            body = {k: v for k, v in r["body"].items() if k not in ("tools", "stream")}
            headers = {k: v for k, v in r["headers"].items() if k.startswith("x-claude")}
            out.append((headers, {**body, "max_tokens": 4}))
    return out


def _prefilled(url: str, requests: list[tuple[dict[str, str], dict[str, Any]]], **extra: str) -> list[int]:
    out = []
    for headers, body in requests:
        answer = httpx.post(
            url + "/v1/messages", json=body, headers={**headers, **extra, "x-api-key": "sk-cc"}, timeout=600
        )
        assert answer.status_code == 200, answer.text
        usage = read_usage(answer.json())
        out.append(usage.input_tokens - usage.cache_read_tokens)
    return out


def test_a_recorded_claude_code_session_prefills_less_through_the_content_rules(llama: Any, gateway: Running) -> None:
    requests = _docs_session()
    llama.flush_cache()
    direct = _prefilled(llama.base_url, requests)
    llama.flush_cache()
    off = _prefilled(gateway.url, requests, **{"x-cp-content": "off", "x-cp-tenant": "off"})
    llama.flush_cache()
    on = _prefilled(gateway.url, requests, **{"x-cp-tenant": "on"})
    print(f"prefilled tokens per request: direct {direct}, gateway without content rules {off}, with {on}")
    assert sum(on) < sum(off) <= sum(direct)
