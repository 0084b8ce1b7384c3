"""The gateway in front of a real vLLM (CPU build, random-weight llama with SmolLM2's tokenizer, a ChatML
template that renders tool calls, automatic prefix caching, 32-token blocks): all three protocols, the official
SDKs, the per-tenant ``cache_salt``, and the recorded re-rendering sessions measured on vLLM's own
``cached_tokens``. One vLLM start for the whole module (1-3 minutes).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cp_memory.providers.usage import read_usage
from tests.support import missing

from .conftest import Running, running_gateway
from .recordings import TOOL, anthropic_session, chat_session, responses_session

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
BLOCK = 32
#: ChatML that renders tool calls' arguments, as real models' templates do (SmolLM2's own ignores them)
TEMPLATE = Path(__file__).with_name("chatml_tools.jinja")


@pytest.fixture(scope="module")
def vllm() -> Iterator[Any]:
    from cp_memory.engine import VLLMServer, hf_model_dir
    from cp_memory.engine.vllm import VLLMUnavailable, find_vllm_python

    try:
        find_vllm_python()
        model = hf_model_dir()
    except (VLLMUnavailable, FileNotFoundError, ImportError) as exc:
        missing(f"vLLM or its test model is unavailable: {exc}")
    server = VLLMServer(
        model,
        block_size=BLOCK,
        max_model_len=4096,
        max_num_seqs=4,
        enforce_eager=True,
        extra_args=["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--chat-template", str(TEMPLATE)],
    )
    with server:
        yield server


@pytest.fixture(scope="module")
def gateway(vllm: Any) -> Iterator[Running]:
    with running_gateway(vllm.base_url, "vllm") as running:
        yield running


def _key(vllm: Any) -> str:
    return getattr(vllm, "api_key", None) or "sk-local"


def _model(vllm: Any) -> str:
    return str(
        httpx.get(vllm.base_url + "/v1/models", headers={"authorization": f"Bearer {_key(vllm)}"}).json()["data"][0][
            "id"
        ]
    )


def _flush(vllm: Any) -> None:
    httpx.post(vllm.base_url + "/reset_prefix_cache", headers={"authorization": f"Bearer {_key(vllm)}"}, timeout=60)


def _post(url: str, path: str, body: dict[str, Any], key: str, tenant: str) -> tuple[int, int]:
    headers = {"authorization": f"Bearer {key}", "x-api-key": key, "x-cp-tenant": tenant}
    answer = httpx.post(url + path, json=body, headers=headers, timeout=300)
    assert answer.status_code == 200, answer.text[:500]
    usage = read_usage(answer.json())
    return usage.input_tokens, usage.cache_read_tokens


SESSIONS = {"/v1/chat/completions": chat_session, "/v1/responses": responses_session, "/v1/messages": anthropic_session}


@pytest.mark.parametrize("path", list(SESSIONS))
def test_a_re_rendering_client_gets_prefix_hits_on_vllm(vllm: Any, gateway: Running, path: str) -> None:
    """Each protocol's recorded session, re-rendering its history, sent directly and through the gateway on a
    cold cache: vLLM's own cached tokens. Through the gateway each request finds the previous one's blocks."""
    model = _model(vllm)
    bodies = [{**b, "model": model} for b in SESSIONS[path](rerender=True)]
    _flush(vllm)
    direct = [_post(vllm.base_url, path, b, _key(vllm), "t") for b in bodies]
    _flush(vllm)
    through = [_post(gateway.url, path, b, _key(vllm), "t") for b in bodies]
    cached_direct, cached_through = sum(c for _, c in direct), sum(c for _, c in through)
    print(
        f"vLLM {path}, {len(bodies)} requests, prompts {sum(p for p, _ in through)} tokens: "
        f"cached {cached_direct} direct, {cached_through} through the gateway"
    )
    assert cached_through > cached_direct
    for (prev, _), (_, cached) in zip(through, through[1:]):
        assert cached >= (prev // BLOCK) * BLOCK - BLOCK, (prev, cached)  # all of the previous prompt's full blocks


def test_tenants_get_their_own_cache_salt(vllm: Any, gateway: Running) -> None:
    """The same prompt from two tenants: the second is not served from the first one's blocks."""
    model = _model(vllm)
    body = {**chat_session(rerender=False)[2], "model": model}
    _flush(vllm)
    _post(gateway.url, "/v1/chat/completions", body, _key(vllm), "alice")
    _, alice_again = _post(gateway.url, "/v1/chat/completions", body, _key(vllm), "alice")
    _, bob = _post(gateway.url, "/v1/chat/completions", body, _key(vllm), "bob")
    assert alice_again > 0 and bob == 0


def test_official_sdks_through_the_gateway_on_vllm(vllm: Any, gateway: Running) -> None:
    model = _model(vllm)
    oa = openai.OpenAI(base_url=gateway.url + "/v1", api_key=_key(vllm), max_retries=0)
    tools: list[Any] = [{"type": "function", "function": TOOL}]
    chat = oa.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Read notes."}], tools=tools, max_tokens=8
    )
    assert chat.usage is not None and chat.usage.prompt_tokens > 0
    streamed = list(
        oa.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Read notes."}],
            tools=tools,
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert streamed[-1].usage is not None
    response = oa.responses.create(model=model, input="Say hi", max_output_tokens=8)
    assert response.usage is not None and response.usage.input_tokens > 0
    an = anthropic.Anthropic(base_url=gateway.url, api_key=_key(vllm), max_retries=0)
    message = an.messages.create(model=model, max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert message.usage.input_tokens > 0
    with an.messages.stream(model=model, max_tokens=8, messages=[{"role": "user", "content": "hi"}]) as stream:
        "".join(stream.text_stream)
        assert stream.get_final_message().usage.output_tokens > 0
