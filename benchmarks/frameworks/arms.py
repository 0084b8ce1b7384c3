"""What the frameworks share in the benchmark: the mem0 store as the baseline arms see it, and the runner API.

Every framework runs the same arms on the same store and questions:

* ``mem0``: mem0's documented integration pattern for that framework (the page is cited in the runner);
* ``cp-append`` / ``cp-late``: the cp_memory integration in its two layouts (openai-agents: ``cp``, a tool
  whose outputs stay in the history, i.e. append-only by construction).

Both arms search the same ``top_k`` (the guides' defaults differ: 3, 10, mem0's 20) and the store is
read-only (the guides also ``add`` each exchange to mem0; left out in both arms so every arm searches the
same memories; it is off the prompt path).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from .probe import EngineProbe, Exchange
from .workload import Chat, TurnRecord, count_shown

__all__ = ["FrameworkRunner", "ReadOnlyStore"]


class ReadOnlyStore:
    """The baseline arms' view of mem0: ``search`` with the benchmark's ``top_k``; ``add`` does nothing.

    Records how many memories the last search returned (what the baseline prompt shows).
    """

    def __init__(self, memory: Any, top_k: int) -> None:
        self.memory = memory
        self.top_k = top_k
        self.last_count = 0

    def search(self, query: str, **kwargs: Any) -> Any:
        kwargs["top_k"] = self.top_k
        if "user_id" in kwargs:  # the guides' hosted-client style: search(query, user_id=...)
            kwargs["filters"] = {"user_id": kwargs.pop("user_id")}
        out = self.memory.search(query, **kwargs)
        self.last_count = len(out.get("results", [])) if isinstance(out, dict) else len(out)
        return out

    def add(self, *args: Any, **kwargs: Any) -> None:
        return None


class FrameworkRunner(ABC):
    """Runs one chat of one arm against one engine and returns its turns."""

    name: str = ""
    arms: tuple[str, ...] = ()

    def __init__(self, store: Any, user_id: str, *, top_k: int, max_tokens: int, overfetch: int = 0) -> None:
        self.store = store
        self.overfetch = overfetch
        self.user_id = user_id
        self.top_k = top_k
        self.max_tokens = max_tokens
        self.baseline_store = ReadOnlyStore(store, top_k)
        self.cp: dict[str, Any] = {}

    def new_block(self) -> None:
        """Fresh ContextPilot wrappers (indexes, dedup records) for a new (framework, answers) block."""
        from cp_memory.integrations.chat import CHAT_CONFIG
        from cp_memory.memory import ContextPilotMemory

        # the integrations' settings (what a plain mem0 Memory gets wrapped with), over-fetch as asked
        config = CHAT_CONFIG.model_copy(update={"max_overfetch": self.overfetch})
        self.cp = {arm: ContextPilotMemory(self.store, config=config) for arm in self.arms if arm != "mem0"}

    @abstractmethod
    def chat(self, arm: str, base_url: str, probe: EngineProbe, chat: Chat, answers: str) -> list[TurnRecord]:
        """All turns of ``chat`` for ``arm`` against the engine at ``base_url``."""

    def record(self, arm: str, answers: str, chat: Chat, turn: int, ex: Exchange, answer: str) -> TurnRecord:
        memories, pointers = self.shown(arm, ex)
        chars = sum(len(str(m.get("content") or "")) for m in ex.messages)
        return TurnRecord(
            framework=self.name,
            arm=arm,
            answers=answers,
            chat=chat.index,
            turn=turn,
            prompt_tokens=ex.prompt_tokens,
            cached_tokens=ex.cached_tokens,
            prefilled=ex.prefilled,
            server_prompt_ms=ex.server_prompt_ms,
            ttft_s=ex.ttft_s,
            total_s=ex.total_s,
            messages=len(ex.messages),
            prompt_chars=chars,
            memories=memories,
            pointers=pointers,
            answer=answer[:200],
        )

    def shown(self, arm: str, ex: Exchange) -> tuple[int, int]:
        """(memories in full, pointers) this turn put into the prompt."""
        if arm == "mem0":
            return self.baseline_store.last_count, 0
        return count_shown(self.newest_memory_text(ex))

    @staticmethod
    def newest_memory_text(ex: Exchange) -> str:
        """The text that carried this turn's memories (the last user message, for the chat layouts)."""
        users = [m for m in ex.messages if m.get("role") == "user"]
        return str(users[-1].get("content") or "") if users else ""

    @staticmethod
    def answer_exchange(probe: EngineProbe, mark: int) -> Exchange:
        calls = probe.since(mark)
        if not calls:
            raise RuntimeError("the framework made no chat-completion call this turn")
        ex = calls[-1]
        if ex.status != 200:
            raise RuntimeError(f"the engine answered HTTP {ex.status}")
        return ex
