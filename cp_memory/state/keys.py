"""Key names in a shared store: namespaced by tenant, one key per full mem0 scope and per conversation.

    cpm:v1:<tenant>:idx:<user>.<agent>.<run>.<conditions>          a scope's context index
    cpm:v1:<tenant>:conv:<user>.<agent>.<run>:<conversation>       a conversation's committed dedup turns
    cpm:v1:<tenant>:gw:<gateway tenant>:s:<session>                 a gateway session's record (logs, content, mem0)
    cpm:v1:<tenant>:gw:<gateway tenant>:s:<session>:n               its savings (counters)
    cpm:v1:<tenant>:gw:<gateway tenant>:t                           a gateway tenant's savings
    cpm:v1:<tenant>:gw:<gateway tenant>:z                           its sessions by last use (a sorted set)
    cpm:v1:<tenant>:rt:<router>.<workers>:w                         a CoA router's pool: intake, load, epochs
    cpm:v1:<tenant>:rt:<router>.<workers>:h:<home key>              a segment's home worker in that pool

Each field is the first 20 hex digits of SHA-256 over ``key NUL value`` (``_`` when absent), as the snapshot
file names are (:mod:`cp_memory.memory.snapshots`): no id can make two scopes, two tenants or two
conversations share a key, and no id can inject a separator. Each value also carries its :meth:`owner`
(a digest of the whole key's meaning), so a value planted under a key that is not its own is recognised.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.scope import ENTITY_KEYS, Scope

__all__ = ["KEY_PREFIX", "StateKeys"]

KEY_PREFIX = "cpm:v1"


def _field(key: str, value: str | None) -> str:
    if value is None or value == "":
        return "_"
    return hashlib.sha256(f"{key}\0{value}".encode()).hexdigest()[:20]


def _entities(scope: Scope) -> str:
    return ".".join(_field(k, v) for k, v in zip(ENTITY_KEYS, (scope.user_id, scope.agent_id, scope.run_id)))


@dataclass(frozen=True)
class StateKeys:
    """The key names of one tenant (one application sharing a store with others)."""

    tenant: str = "default"

    def __post_init__(self) -> None:
        if not isinstance(self.tenant, str) or not self.tenant.strip():
            raise ValueError(f"the state store tenant must be a non-empty str, got {self.tenant!r}")

    @property
    def prefix(self) -> str:
        return f"{KEY_PREFIX}:{_field('tenant', self.tenant)}"

    def index(self, scope: Scope) -> str:
        """The key of ``scope``'s context index (the full scope: entity ids and other conditions)."""
        return f"{self.prefix}:idx:{_entities(scope)}.{_field('conditions', scope.conditions)}"

    def conversation(self, scope: Scope, conversation: str) -> str:
        """The key of a conversation's dedup record (entity ids + conversation id, as the local record)."""
        return f"{self.prefix}:conv:{_entities(scope.entities)}:{_field('conversation', conversation)}"

    def gateway_session(self, tenant: str, session: str) -> str:
        """The key of a gateway session (``tenant``, ``session``: the gateway's own hashes)."""
        return f"{self.prefix}:gw:{_field('gw-tenant', tenant)}:s:{_field('gw-session', session)}"

    def gateway_session_savings(self, tenant: str, session: str) -> str:
        """The key of a gateway session's savings counters."""
        return f"{self.gateway_session(tenant, session)}:n"

    def gateway_tenant(self, tenant: str) -> str:
        return f"{self.prefix}:gw:{_field('gw-tenant', tenant)}:t"

    def gateway_sessions(self, tenant: str) -> str:
        return f"{self.prefix}:gw:{_field('gw-tenant', tenant)}:z"

    def router_pool(self, router: str, workers: Sequence[str]) -> str:
        """The key of a CoA router's pool record: its name and its workers' names (in order) scope it."""
        return f"{self._router(router, workers)}:w"

    def router_home(self, router: str, workers: Sequence[str], home: str) -> str:
        """The key of one segment's home in that pool (``home``: the segment's home key, as a stable str)."""
        return f"{self._router(router, workers)}:h:{_field('home', home)}"

    def _router(self, router: str, workers: Sequence[str]) -> str:
        return f"{self.prefix}:rt:{_field('router', router)}.{_field('workers', chr(0).join(workers))}"

    @staticmethod
    def owner(key: str) -> str:
        """What a value stored under ``key`` must carry: a digest of the key (hence of tenant and scope)."""
        return hashlib.sha256(f"owner\0{key}".encode()).hexdigest()[:32]
