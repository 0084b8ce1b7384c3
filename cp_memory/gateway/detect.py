"""What the upstream is, when ``--upstream-kind auto``: the URL's host first, then the engine's own answer.

``api.anthropic.com`` is Anthropic, ``api.openai.com`` OpenAI. Otherwise ``GET /v1/models`` is asked once at
start-up: vLLM, llama.cpp's llama-server and SGLang name themselves in ``owned_by``. An upstream that does not
answer, or answers something else, is ``compatible`` (forwarded, no cache field added) and a log line says so.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

import httpx

from .config import GatewayConfig, UpstreamKind

__all__ = ["detect_kind", "kind_from_models", "kind_from_url"]

logger = logging.getLogger(__name__)

_HOSTS = {"api.anthropic.com": UpstreamKind.ANTHROPIC, "api.openai.com": UpstreamKind.OPENAI}
_OWNERS = {"vllm": UpstreamKind.VLLM, "llamacpp": UpstreamKind.LLAMACPP, "sglang": UpstreamKind.SGLANG}


def kind_from_url(url: str) -> UpstreamKind:
    """The kind a URL names by its host alone; ``compatible`` when it names none."""
    return _HOSTS.get((urlsplit(url).hostname or "").lower(), UpstreamKind.COMPATIBLE)


def kind_from_models(payload: object) -> UpstreamKind:
    """The kind an OpenAI-style ``/v1/models`` answer names in its ``owned_by`` fields."""
    data = payload.get("data") if isinstance(payload, dict) else None
    for model in data if isinstance(data, list) else []:
        owner = str(model.get("owned_by", "")).lower() if isinstance(model, dict) else ""
        if owner in _OWNERS:
            return _OWNERS[owner]
    return UpstreamKind.COMPATIBLE


def detect_kind(config: GatewayConfig, *, timeout_s: float = 5.0) -> UpstreamKind:
    """The configured kind, or for ``auto`` the URL's host, else one ``GET /v1/models`` probe."""
    if config.upstream_kind is not UpstreamKind.AUTO:
        return config.upstream_kind
    by_url = kind_from_url(config.upstream)
    if by_url is not UpstreamKind.COMPATIBLE:
        return by_url
    try:
        answer = httpx.get(config.upstream_base + "/v1/models", timeout=timeout_s)
        kind = kind_from_models(answer.json()) if answer.is_success else UpstreamKind.COMPATIBLE
    except (httpx.HTTPError, ValueError) as exc:
        logger.warning(
            "gateway: could not ask %s what it is (%s); treating it as OpenAI-compatible", config.upstream, exc
        )
        return UpstreamKind.COMPATIBLE
    if kind is UpstreamKind.COMPATIBLE:
        logger.warning(
            "gateway: %s did not name itself; pass --upstream-kind to apply its cache rules", config.upstream
        )
    return kind
