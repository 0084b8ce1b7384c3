"""The gateway in front of a real llama-server (random-weight model, one slot, prompt cache on, a ChatML
template that renders tool calls): the official ``openai`` SDK streamed and not with tools, and the recorded
re-rendering sessions of the three protocols (llama-server serves chat completions, responses and messages),
measured on the engine's own cached-token counts: through the gateway they reuse more than sent directly.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cp_memory.gateway.protocols import Api
from cp_memory.providers.usage import read_usage

from .conftest import Running, running_gateway
from .recordings import TOOL, anthropic_session, chat_session, responses_session

pytestmark = pytest.mark.engine
#: ChatML that renders tool calls' arguments, as real models' templates do
TEMPLATE = Path(__file__).with_name("chatml_tools.jinja")
openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def llama(random_model: Path) -> Iterator[Any]:
    from cp_memory.engine import LlamaServer

    with LlamaServer(
        random_model,
        slots=1,
        ctx_size=8192,
        cache_ram_mib=256,
        extra_args=["--jinja", "--chat-template-file", str(TEMPLATE)],
    ) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(llama: Any) -> Iterator[Running]:
    with running_gateway(llama.base_url, "llamacpp") as running:
        yield running


def _flush(llama: Any) -> None:
    llama.flush_cache()


def test_openai_sdk_through_the_gateway_streamed_and_not_with_tools(gateway: Running) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-local", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read the notes file."}]
    tools: list[Any] = [{"type": "function", "function": TOOL}]
    raw = client.chat.completions.with_raw_response.create(model="m", messages=messages, tools=tools, max_tokens=8)
    answer = raw.parse()
    assert answer.usage is not None and raw.headers["x-cp-input-tokens"] == str(answer.usage.prompt_tokens)
    messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "And the plan?"}]
    stream = client.chat.completions.create(
        model="m", messages=messages, tools=tools, max_tokens=8, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens > answer.usage.prompt_tokens
    assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens > 0


def _send_all(url: str, path: str, bodies: list[dict[str, Any]], key: str) -> list[tuple[int, int]]:
    """(prompt tokens, cached tokens) of each request, from the engine's own usage."""
    out = []
    for body in bodies:
        headers = {"authorization": f"Bearer {key}", "x-api-key": key}
        answer = httpx.post(url + path, json=body, headers=headers, timeout=300)
        assert answer.status_code == 200, answer.text
        usage = read_usage(answer.json())
        out.append((usage.input_tokens, usage.cache_read_tokens))
    return out


SESSIONS = {"/v1/chat/completions": chat_session, "/v1/responses": responses_session, "/v1/messages": anthropic_session}


@pytest.mark.parametrize("path", list(SESSIONS))
def test_a_re_rendering_client_gets_more_prefix_hits_through_the_gateway(
    llama: Any, gateway: Running, path: str
) -> None:
    """The same recorded session (tool arguments re-encoded every other turn, ...) sent directly and through
    the gateway, on the same cold engine: the engine's cached tokens."""
    bodies = SESSIONS[path](rerender=True)
    _flush(llama)
    direct = _send_all(llama.base_url, path, bodies, "sk-direct")
    _flush(llama)
    through = _send_all(gateway.url, path, bodies, "sk-gateway-" + path)
    cached_direct = sum(c for _, c in direct[1:])
    cached_through = sum(c for _, c in through[1:])
    prompts = sum(p for p, _ in through[1:])
    print(
        f"llama-server {path}, {len(bodies)} requests: cached {cached_direct} direct vs {cached_through} "
        f"through the gateway of {prompts}"
    )
    assert cached_through > cached_direct
    # through the gateway each request reuses (almost) all of the previous one: what it sent is still its prefix
    for (prev, _), (_, cached) in zip(through, through[1:]):
        assert cached >= prev - 16, (prev, cached)
    session = next(iter(gateway.gateway.store.sessions_of(_tenant(gateway, "sk-gateway-" + path), 5)))
    assert session.attribution.rewritten_segments > 0 and session.attribution.gateway_tokens > 0


def _tenant(gateway: Running, key: str) -> str:
    return gateway.gateway.identify(Api.OTHER, {"authorization": f"Bearer {key}", "x-api-key": key}, {}).tenant


def test_the_engine_answer_passes_through_byte_for_byte(llama: Any, gateway: Running) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "seed": 1, "temperature": 0}
    direct = httpx.post(llama.base_url + "/v1/chat/completions", json=body, timeout=120).json()
    through = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=120).json()
    for payload in (direct, through):
        for volatile in ("id", "created", "timings", "usage", "system_fingerprint"):
            payload.pop(volatile, None)
    assert json.dumps(direct, sort_keys=True) == json.dumps(through, sort_keys=True)
