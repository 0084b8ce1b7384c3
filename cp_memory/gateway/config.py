"""The gateway's settings: one validated :class:`GatewayConfig`, one default for each bound.

Every number the gateway enforces is a field here with its default; the CLI (:mod:`cp_memory.gateway.cli`)
reads its defaults from this model and docs/gateway.md quotes them.
"""

from __future__ import annotations

import ipaddress
import json
import os
from enum import Enum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from ..core.chat_memories import DEFAULT_QUERY_TURNS
from ..state.store import STATE_RETRY_S, STATE_TIMEOUT_S
from .content.switches import DEFAULT_STEPS, ContentStep

__all__ = ["GATEWAY_KEY_ENV", "STATE_STORE_ENV", "GatewayConfig", "Mem0Source", "UpstreamKind", "is_loopback"]

#: the environment variable that holds the gateway's own key (``--gateway-key`` overrides it)
GATEWAY_KEY_ENV = "CP_GATEWAY_KEY"
#: the environment variable that holds the secret of the gateway's keyed hashes (tenants, cache keys)
GATEWAY_SECRET_ENV = "CP_GATEWAY_SECRET"
#: the shortest secret the keyed hashes accept (:class:`~cp_memory.providers.openai.PromptCacheKeys`' own bound)
MIN_SECRET_BYTES = 16
#: the environment variable that may name the state store (``--state-store`` overrides it; it may hold a password)
STATE_STORE_ENV = "CP_GATEWAY_STATE_STORE"


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


class Mem0Source(str, Enum):
    """Where the gateway's mem0 memories live (docs/gateway.md, "mem0 memories"); ``off`` by default.

    ``embedded``: cp_memory's offline default (:func:`cp_memory.embedded.default_memory`, in memory or under
    ``mem0_path``); ``config``: ``Memory.from_config(mem0_config)``; ``hosted``: mem0's ``MemoryClient``
    (``mem0_api_key``, else ``MEM0_API_KEY``)."""

    OFF = "off"
    EMBEDDED = "embedded"
    CONFIG = "config"
    HOSTED = "hosted"


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
    openai_key_shards: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="OpenAI: prompt_cache_key values per tenant, a session keeping one (raise it past ~15 requests "
        "a minute per tenant and shared prefix)",
    )
    state_store: SecretStr | None = Field(
        default=None,
        description="redis://host:6379/0: sessions (sent logs for replay, savings) shared by gateway replicas; "
        "needs a shared secret (the replicas' tenant and session hashes must agree)",
    )
    state_timeout_s: float = Field(
        default=STATE_TIMEOUT_S, gt=0, description="bound on one state-store call; past it the local state serves"
    )
    state_retry_s: float = Field(
        default=STATE_RETRY_S, ge=0, description="after a state-store failure, the local state serves this long"
    )
    mem0: Mem0Source = Field(default=Mem0Source.OFF, description="mem0 memories for requests that name a user")
    mem0_config: dict[str, Any] | None = Field(
        default=None, description="mem0=config: a mem0 config dict (or a JSON file's path), as Memory.from_config"
    )
    mem0_path: str | None = Field(default=None, description="mem0=embedded: its folder (None: in memory)")
    mem0_api_key: SecretStr | None = Field(default=None, description="mem0=hosted: the platform key")
    mem0_host: str | None = Field(default=None, description="mem0=hosted: the platform's URL")
    memories_top_k: int = Field(default=5, ge=1, le=100, description="memories searched per request")
    memories_query_turns: int = Field(default=DEFAULT_QUERY_TURNS, ge=1, description="recent user messages searched on")
    memories_add: bool = Field(default=True, description="add each answered turn to mem0 (in the background)")
    memories_infer: bool = Field(default=False, description="mem0 add with infer=True (needs the store's LLM)")
    memories_queue: int = Field(default=256, ge=1, description="turns waiting to be added; more are dropped")
    memories_add_attempts: int = Field(default=3, ge=1, le=10, description="attempts of one add (tenacity)")
    content_steps: frozenset[ContentStep] = Field(
        default=DEFAULT_STEPS, description="content rules on the new part of each request (docs/gateway.md)"
    )
    content_tenants: dict[str, frozenset[ContentStep]] = Field(
        default_factory=dict, description="per tenant (the id /cp/savings reports): its content steps instead"
    )
    tool_schema: bool = Field(
        default=True, description="remove $schema from tool input schemas (docs/gateway.md, X-CP-Schema per request)"
    )
    tool_schema_tenants: dict[str, bool] = Field(
        default_factory=dict, description="per tenant (the id /cp/savings reports): the tool-schema step on or off"
    )

    @field_validator("upstream")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"upstream must be an http(s) URL such as http://127.0.0.1:8000, got {value!r}")
        return value.rstrip("/")

    @field_validator("state_store")
    @classmethod
    def _state_store_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().startswith(("redis://", "rediss://", "unix://")):
            scheme = value.get_secret_value().split(":")[0]
            raise ValueError(f"state_store must be a redis://, rediss:// or unix:// URL, got {scheme!r}")
        return value

    @field_validator("secret")
    @classmethod
    def _secret_length(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and 0 < len(value.get_secret_value().encode("utf-8")) < MIN_SECRET_BYTES:
            raise ValueError(
                f"secret must be at least {MIN_SECRET_BYTES} bytes (it keys the tenant, session and OpenAI "
                "prompt_cache_key hashes)"
            )
        return value

    @model_validator(mode="after")
    def _shared_secret(self) -> GatewayConfig:
        if self.state_store is not None and self.secret is None:
            raise ValueError(
                "state_store needs secret (CP_GATEWAY_SECRET): replicas sharing sessions must hash tenants and "
                "sessions with the same key"
            )
        return self

    @field_validator("mem0_config", mode="before")
    @classmethod
    def _mem0_file(cls, value: Any) -> Any:
        if isinstance(value, (str, Path)):
            try:
                return json.loads(Path(value).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise ValueError(f"mem0_config: cannot read the JSON file {str(value)!r}: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _mem0(self) -> GatewayConfig:
        if self.mem0 is Mem0Source.CONFIG and self.mem0_config is None:
            raise ValueError("mem0='config' needs mem0_config (a mem0 config dict or a JSON file)")
        if self.mem0_config is not None and self.mem0 is not Mem0Source.CONFIG:
            raise ValueError(f"mem0_config is given but mem0={self.mem0.value!r}: set mem0='config'")
        return self

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
