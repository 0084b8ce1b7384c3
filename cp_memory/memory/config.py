"""ContextPilotConfig: every tunable of the mem0 wrapper in one validated place.

    from cp_memory import ContextPilotConfig, ContextPilotMemory
    config = ContextPilotConfig(extra_budget=0.1, index_dir="/var/lib/app/cpidx")
    memory = ContextPilotMemory(mem0_memory, config=config)
    memory = ContextPilotMemory.from_config({"mem0": {...}, "context_pilot": {"extra_budget": 0.1}})

mem0 users know ``MemoryConfig``/``from_config``; this is the same idea for the ContextPilot side. Keyword
arguments to the wrappers (``ContextPilotMemory(memory, extra_budget=0.1)``) are a thin layer over it: they
are validated by the same model. ``config.model_dump()`` is safe to log (it holds no secrets).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from ..core.alignment import DEFAULT_TAIL_ORDER, TailOrder
from ..core.alignment_mode import DEFAULT_PROTECT, AlignmentMode
from ..core.annotations import DEFAULT_ANNOTATE_TOP, LabelStyle
from ..core.distance import DEFAULT_ALPHA
from ..core.index_snapshot import MAX_SNAPSHOT_BYTES
from ..core.special_tokens import SpecialTokens
from ..state.store import STATE_RETRY_S, STATE_TIMEOUT_S

__all__ = ["CommitMode", "ContextPilotConfig", "ResultsOrder", "TailOrder"]

ResultsOrder = Literal["aligned", "mem0"]
CommitMode = Literal["explicit", "on_search"]


class ContextPilotConfig(BaseModel):
    """Configuration of :class:`~cp_memory.memory.ContextPilotMemory` (and its async/hosted twins)."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    # --- alignment (paper §4-5) -------------------------------------------------------------------
    alpha: float = Field(DEFAULT_ALPHA, ge=0, description="positional weight of the index distance (paper Eq. 1)")
    annotate: bool = Field(
        False,
        description="add the order annotation restoring mem0's ranking (only when the prompt's order differs); off "
        "by default: on LoCoMo it cost SmolLM2-135M 2.2 F1 points over aligned order alone (docs/quality.md)",
    )
    annotate_top: int | None = Field(
        DEFAULT_ANNOTATE_TOP,
        ge=1,
        description="the order annotation names mem0's top annotate_top memories, then 'the rest' (~7 tokens "
        "per name, never cached); None: every retrieved memory (the paper's full ranking, ~700 tokens at "
        "top_k=100); omitted when the prompt already starts with them in rank order",
    )
    align: bool = Field(
        True,
        description="reorder memories so prompts share cached prefixes; off: mem0's order, no index (the chat "
        "integrations: their memories follow the history, where no reordering can create a prefix hit)",
    )
    labels: LabelStyle = Field(
        "doc",
        description="block labels: 'doc' ([Doc i], the paper's), 'number' (i, shorter) or 'bullet' (- like mem0's "
        "list, pointers name the position; the chat integrations)",
    )
    tail_order: TailOrder = Field(DEFAULT_TAIL_ORDER, description="order of blocks after the shared prefix")
    extra_budget: float = Field(
        0.0,
        ge=0,
        le=1,
        description="superset alignment: a cached prefix may bring in up to extra_budget*top_k other memories "
        "of the same scope that this query did not retrieve (prompt gets longer)",
    )
    swap_budget: float = Field(
        0.0,
        ge=0,
        le=1,
        description="length-neutral superset: adopt up to swap_budget*top_k cached memories of the same scope "
        "and drop as many of the lowest-ranked retrieved ones (prompt keeps top_k blocks)",
    )
    protect: float = Field(
        DEFAULT_PROTECT,
        ge=0,
        le=1,
        description="swap never drops a memory ranked in this top fraction of mem0's ranking "
        "(0.75: on LoCoMo the same front as 0.5 at swap_budget 0.1 and safer "
        "above it; docs/results/locomo_front_model.json)",
    )
    capacity_tokens: int | None = Field(None, gt=0, description="model the engine cache size per index")
    results_order: ResultsOrder = Field(
        "aligned",
        description="order of response['results']: 'aligned' (the prompt order, the product) or 'mem0' (mem0's "
        "ranking, for code that treats results[0] as the best match; the aligned order and the "
        "rendered context stay in response['context_pilot'])",
    )

    # --- multi-turn dedup (paper §6) ----------------------------------------------------------------
    dedup: bool = Field(True, description="replace memories sent earlier in a conversation by pointers")
    content_dedup: bool = Field(True, description="a different memory with the same text is a duplicate too")
    run_id_as_conversation: bool = Field(
        False,
        description="treat filters['run_id'] as the dedup conversation when no conversation_id is given "
        "(off: dedup needs an explicit conversation_id, so plain mem0 callers get every result)",
    )
    commit: CommitMode = Field(
        "explicit",
        description="'explicit': a turn counts as sent only after commit(response) (rollback on failure); "
        "'on_search': the search registers it at once (no protection against failed sends)",
    )
    max_overfetch: int = Field(50, ge=0, description="bound on extra results asked of mem0 to make up for dedup")
    max_conversations: int = Field(10_000, ge=1, description="conversations whose dedup record is kept (LRU)")
    max_pending_turns: int = Field(10_000, ge=1, description="uncommitted turns kept for commit/rollback (LRU)")

    # --- per-scope state ----------------------------------------------------------------------------
    max_scopes: int = Field(1024, ge=1, description="scopes whose index stays in memory (LRU)")
    max_requests_per_scope: int = Field(1024, ge=1, description="live requests per index before eviction")
    index_dir: Path | None = Field(
        None, description="folder for per-scope index snapshots (created 0700; a warning if others can write it)"
    )
    snapshot_every: int = Field(16, ge=1, description="inserts between two snapshots of a scope's index")
    max_snapshots: int = Field(
        10_000,
        ge=1,
        description="snapshot files kept in index_dir (the least recently used beyond it are deleted: "
        "those scopes start cold); also bounds the record of scopes this wrapper used",
    )
    max_snapshot_bytes: int = Field(
        MAX_SNAPSHOT_BYTES,
        ge=1024,
        description="a snapshot file, or its decompressed content, larger than this is not restored "
        "(one error, the scope starts cold); bounds the memory and time of a restore",
    )

    # --- shared state (several processes behind one load balancer; docs/scale.md) ----------------------
    state_store: SecretStr | None = Field(
        None,
        description="where scopes' indexes and conversations' committed dedup turns live: None (this process, "
        "the default), 'redis://host:6379/0' (shared by every process using it; the redis extra) or "
        "'memory://' (this wrapper only, through the store seam). Kept secret in logs (it may hold a password)",
    )
    state_tenant: str = Field(
        "default", min_length=1, description="namespace of this application's keys in a shared state store"
    )
    state_ttl_s: int = Field(
        7 * 86_400, ge=1, description="a shared index or dedup record unused this long expires (refreshed on use)"
    )
    state_timeout_s: float = Field(
        STATE_TIMEOUT_S,
        gt=0,
        description="bound on one shared-store call; past it the search falls back (full memories)",
    )
    state_retry_s: float = Field(
        STATE_RETRY_S,
        ge=0,
        description="after a shared-store failure, searches use the fallback this long before retrying",
    )

    # --- mem0 calls ---------------------------------------------------------------------------------
    retry_attempts: int = Field(3, ge=1, description="attempts for transient mem0 failures (network, rate limit)")
    retry_wait_s: float = Field(0.05, ge=0, description="first back-off between attempts (exponential, max 2 s)")

    # --- rendering ----------------------------------------------------------------------------------
    special_tokens: SpecialTokens = Field(
        default_factory=SpecialTokens,
        description="chat-template control tokens in memory texts (<|im_end|>, [INST], </s>, ...) get a space "
        "after their first character so the engine reads them as text (cp_memory.special_tokens); "
        '{"enabled": false} turns it off, {"extra_patterns": [...]} adds a model\'s own tokens (regexes)',
    )

    @field_validator("state_store")
    @classmethod
    def _state_store_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        url = value.get_secret_value()
        if not url.startswith(("redis://", "rediss://", "unix://", "memory://")):
            raise ValueError(
                f"state_store must be a redis://, rediss://, unix:// or memory:// URL, got {url.split(':')[0]!r}"
            )
        return value

    @model_validator(mode="after")
    def _one_alignment_mode(self) -> ContextPilotConfig:
        self.alignment  # noqa: B018 - validates extra_budget/swap_budget/protect into one mode (or raises)
        return self

    @property
    def alignment(self) -> AlignmentMode:
        """The :class:`~cp_memory.core.alignment_mode.AlignmentMode` that ``extra_budget``, ``swap_budget`` and
        ``protect`` describe: what every index of the wrapper aligns with, restored snapshots included."""
        return AlignmentMode.from_options(self.extra_budget, self.swap_budget, self.protect)

    @classmethod
    def from_kwargs(
        cls, config: ContextPilotConfig | dict[str, Any] | None = None, **kwargs: Any
    ) -> ContextPilotConfig:
        """``config`` (a model or a dict) updated with keyword arguments; everything validated here.

        Accepts the names used before the config object existed (``max_users``,
        ``max_requests_per_user``) as aliases of ``max_scopes`` / ``max_requests_per_scope``.
        """
        aliases = {"max_users": "max_scopes", "max_requests_per_user": "max_requests_per_scope"}
        for old, new in aliases.items():
            if old in kwargs:
                if new in kwargs:
                    raise TypeError(f"pass {new} or {old}, not both")
                kwargs[new] = kwargs.pop(old)
        if config is None:
            base: dict[str, Any] = {}
        elif isinstance(config, ContextPilotConfig):
            if not kwargs:
                return config
            base = config.model_dump()
        elif isinstance(config, dict):
            base = dict(config)
        else:
            raise TypeError(f"config must be a ContextPilotConfig or a dict, got {type(config).__name__}")
        return cls.model_validate({**base, **kwargs})
