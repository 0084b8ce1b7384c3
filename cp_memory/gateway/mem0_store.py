"""The gateway's mem0 I/O: the store (opened once), the search per request, the turn added after the answer.

The search runs mem0 through :class:`~cp_memory.memory.wrappers.ContextPilotMemory` (alignment with the
user's context index, dedup per (tenant, user, session) conversation, the prompt contract rendered once) in a
worker thread, so the event loop never waits on mem0. Fail open: any error of the store, the search or the
contract logs one line and the request goes out without memories. The memories' dedup turn is committed once
the upstream answered 2xx (rolled back otherwise), and the turn (the user's message, the answer's text) is
added to mem0 by a :class:`~cp_memory.memory.background.TurnWriter`: off the request path, bounded, retried,
logged.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from ..core.chat_memories import CHAT_MEMORY_OPTIONS, text_of
from ..core.prompt import contract_of
from .config import GatewayConfig, Mem0Source
from .memories import Memories, MemoryQuery

if TYPE_CHECKING:
    from ..memory.background import TurnWriter

__all__ = ["Mem0Link", "open_memory"]

logger = logging.getLogger(__name__)


def open_memory(config: GatewayConfig) -> Any:
    """The configured store as a :class:`~cp_memory.memory.wrappers.ContextPilotMemory` with
    :data:`~cp_memory.core.chat_memories.CHAT_MEMORY_OPTIONS` and the gateway's ``state_store`` (a config's own
    ``context_pilot`` part wins);
    slow (loads mem0 and its embedder): run it in a thread."""
    from ..memory.wrappers import ContextPilotMemory

    options: dict[str, Any] = dict(CHAT_MEMORY_OPTIONS)
    if config.state_store is not None:  # replicas share the dedup conversations and indexes, as their sessions
        options["state_store"] = config.state_store.get_secret_value()
    if config.mem0 is Mem0Source.EMBEDDED:
        from ..embedded import default_memory

        return ContextPilotMemory(default_memory(config.mem0_path), **options)
    if config.mem0 is Mem0Source.CONFIG:
        given = dict(config.mem0_config or {})
        split = "mem0" in given or "context_pilot" in given
        if split:  # the config's own context_pilot part, with the gateway's state store unless it names one
            own = dict(given.get("context_pilot") or {})
            if "state_store" in options:
                own.setdefault("state_store", options["state_store"])
            return ContextPilotMemory.from_config({**given, "context_pilot": own})
        return ContextPilotMemory.from_config({"mem0": given, "context_pilot": options})
    if config.mem0 is Mem0Source.HOSTED:
        from mem0 import MemoryClient

        key = config.mem0_api_key.get_secret_value() if config.mem0_api_key is not None else None
        return ContextPilotMemory(MemoryClient(api_key=key, host=config.mem0_host), **options)
    raise ValueError("mem0 is off: there is no store to open")


class Mem0Link:
    """The app's side of the mem0 stage: ``open`` once, then ``search`` / ``sent`` / ``add_turn`` per request."""

    def __init__(self, config: GatewayConfig, memory: Any = None) -> None:
        self.config = config
        self.memory = memory
        self.owned = memory is None  # closed with the app only when the app opened it
        self.writer: TurnWriter | None = None
        self.failures = 0

    def open(self) -> None:
        from ..memory.background import TurnWriter

        if self.memory is None:
            self.memory = open_memory(self.config)
        self.writer = TurnWriter(
            self.memory.add, capacity=self.config.memories_queue, attempts=self.config.memories_add_attempts
        )
        if self.config.secret is None:
            logger.warning(
                "gateway: mem0 memories are stored under the tenant's keyed hash, and this process's hash key is "
                "random: set CP_GATEWAY_SECRET to find them again after a restart"
            )

    async def search(self, query: MemoryQuery) -> Memories | None:
        """The memories for ``query``, or None (nothing found, or a failure: logged, fail open)."""
        if self.memory is None:
            return None
        try:
            response = await asyncio.to_thread(
                self.memory.search,
                query.query,
                filters=query.filters,
                top_k=self.config.memories_top_k,
                conversation_id=query.conversation_id,
            )
            contract = contract_of(response)
        except Exception:
            self.failures += 1
            logger.exception("gateway: the mem0 search failed; the request goes out without memories")
            return None
        if contract is None or not contract.shows_memories:
            self._settle(response, False)
            return None
        return Memories(query, response, contract)

    def sent(self, found: Memories | None, ok: bool) -> None:
        """The request carrying ``found`` was answered (``ok``: 2xx, commit the dedup turn) or not (rollback)."""
        if found is not None:
            self._settle(found.response, ok)

    def _settle(self, response: Any, ok: bool) -> None:
        try:
            if ok:
                self.memory.commit(response)
            else:
                self.memory.rollback(response)
        except Exception:
            logger.exception("gateway: settling a mem0 dedup turn failed")

    def add_turn(self, query: MemoryQuery, answer: str) -> None:
        """Queue the turn (the user's newest message and the answer) for mem0; never blocks, never raises."""
        if self.writer is None or not query.messages_tail or not self.config.memories_add:
            return
        user = text_of(query.messages_tail[-1].get("content")).strip()
        messages = [{"role": "user", "content": user}] if user else []
        if answer.strip():
            messages.append({"role": "assistant", "content": answer.strip()})
        if messages:
            from ..memory.background import Turn

            options = {"user_id": query.user_id, "infer": self.config.memories_infer}
            self.writer.submit(Turn(tuple(messages), options))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        closer = getattr(self.memory, "close", None)
        if self.owned and callable(closer) and self.config.mem0 is not Mem0Source.HOSTED:
            try:
                closer()
            except Exception:
                logger.exception("gateway: closing the mem0 store failed")
