"""The gateway's settings: one validated :class:`GatewayConfig`, one default for each bound.

Every number the gateway enforces is a field here with its default; the CLI (:mod:`cp_memory.gateway.cli`)
reads its defaults from this model and docs/gateway.md quotes them.
"""

from __future__ import annotations

import ipaddress
import os
from enum import Enum
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from .content.switches import DEFAULT_STEPS, ContentStep

__all__ = ["GATEWAY_KEY_ENV", "GatewayConfig", "UpstreamKind", "is_loopback"]

#: the environment variable that holds the gateway's own key (``--gateway-key`` overrides it)
GATEWAY_KEY_ENV = "CP_GATEWAY_KEY"
#: the environment variable that holds the secret of the gateway's keyed hashes (tenants, cache keys)
GATEWAY_SECRET_ENV = "CP_GATEWAY_SECRET"


class UpstreamKind(str, Enum):
    """What the upstream is; ``auto`` is resolved at start-up (:mod:`cp_memory.gateway.detect`).

    ``compatible`` is an OpenAI-compatible server auto-detection could not name: requests are forwarded and
    no cache field is added."""

    AUTO = "auto"
    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    VLLM = "vllm"
    LLAMACPP = "llamacpp"
    SGLANG = "sglang"
    COMPATIBLE = "compatible"

    @property
    def engine(self) -> bool:
        """A self-hosted engine (prefix cache shared by every client of that engine)."""
        return self in (UpstreamKind.VLLM, UpstreamKind.LLAMACPP, UpstreamKind.SGLANG, UpstreamKind.COMPATIBLE)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost``, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class GatewayConfig(BaseModel):
    """Everything the gateway needs; every default is the one the CLI and docs/gateway.md show."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    upstream: str = Field(description="base URL of the upstream, e.g. http://127.0.0.1:8000 (a /v1 suffix is fine)")
    upstream_kind: UpstreamKind = UpstreamKind.AUTO
    host: str = "127.0.0.1"
    port: int = Field(default=8787, ge=0, le=65535, description="0 picks a free port")
    allow_remote: bool = Field(default=False, description="needed to bind a non-loopback address")
    gateway_key: SecretStr | None = Field(default=None, description="clients must send it in X-CP-Gateway-Key")
    secret: SecretStr | None = Field(
        default=None, description="key of the tenant / cache-key hashes (random per process when unset)"
    )
    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024, description="larger request bodies get 413")
    max_response_bytes: int = Field(default=64 * 1024 * 1024, ge=1024, description="non-streamed answers larger fail")
    body_timeout_s: float = Field(default=60.0, gt=0, description="time to receive a request body")
    connect_timeout_s: float = Field(default=10.0, gt=0)
    read_timeout_s: float = Field(default=600.0, gt=0, description="longest silence of the upstream")
    header_timeout_s: float = Field(default=30.0, gt=0, description="keep-alive / header wait of the server")
    max_sessions: int = Field(default=1024, ge=1, description="sessions kept for prefix replay (LRU)")
    session_ttl_s: float = Field(default=3600.0, gt=0, description="idle sessions are forgotten after this")
    max_tenants: int = Field(default=4096, ge=1, description="tenants whose savings are kept (LRU)")
    max_sessions_per_tenant_report: int = Field(default=100, ge=1, description="sessions listed by /cp/savings")
    max_concurrency: int = Field(default=256, ge=1, description="requests served at once; more get 503")
    max_sse_event_bytes: int = Field(default=1024 * 1024, ge=1024, description="larger stream events: not read")
    replay: bool = Field(default=True, description="prefix replay: earlier messages forwarded as sent before")
    add_marks: bool = Field(default=True, description="Anthropic: add breakpoints within the 4 the API allows")
    content_steps: frozenset[ContentStep] = Field(
        default=DEFAULT_STEPS, description="content rules on the new part of each request (docs/gateway.md)"
    )
    content_tenants: dict[str, frozenset[ContentStep]] = Field(
        default_factory=dict, description="per tenant (the id /cp/savings reports): its content steps instead"
    )

    @field_validator("upstream")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"upstream must be an http(s) URL such as http://127.0.0.1:8000, got {value!r}")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _bind(self) -> GatewayConfig:
        if not is_loopback(self.host) and not self.allow_remote:
            raise ValueError(
                f"host {self.host!r} is not a loopback address: pass allow_remote=True (--allow-remote) to serve "
                "other machines, and set a gateway key"
            )
        return self

    @property
    def upstream_base(self) -> str:
        """The upstream URL without a trailing ``/v1``: request paths (``/v1/...``) are appended to it."""
        return self.upstream[: -len("/v1")] if self.upstream.endswith("/v1") else self.upstream

    @classmethod
    def key_from_env(cls) -> SecretStr | None:
        value = os.environ.get(GATEWAY_KEY_ENV)
        return SecretStr(value) if value else None

    @classmethod
    def secret_from_env(cls) -> SecretStr | None:
        value = os.environ.get(GATEWAY_SECRET_ENV)
        return SecretStr(value) if value else None
