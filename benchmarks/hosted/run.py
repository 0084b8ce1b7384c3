"""Send the workload through the official ``openai`` / ``anthropic`` SDKs, arm by arm, and record usage.

Arms (same searches, same questions, same answers kept in the history):

* ``mem0`` — mem0's documented pattern: the memories in the system message (``User Memories:``), then the
  history with the plain questions, then the question. On Anthropic as documented, with no ``cache_control``.
* ``mem0+auto`` (Anthropic only) — the same messages with Anthropic's top-level automatic ``cache_control``:
  what a careful user of mem0's pattern would add.
* cp_memory: the stable system (and tools), the history, the memories late
  (:func:`cp_memory.providers.openai_request` with a per-scope ``prompt_cache_key`` /
  :func:`cp_memory.providers.anthropic_request` with its breakpoints): in chats ``cp-append`` (each turn stays
  in the history as sent, dedup pointers) and ``cp-late`` (the history keeps the plain questions); one-shot
  questions ``cp`` (aligned order) and ``cp-swap`` (swap alignment).

Chat turns are streamed (usage read by :class:`cp_memory.providers.UsageStream`), one-shot questions not
(:func:`cp_memory.providers.read_usage`): both paths are the SDKs' and cp_memory's real ones.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from cp_memory.providers import (
    CacheUsage,
    PromptCacheKeys,
    SavingsAccount,
    UsageStream,
    anthropic_request,
    openai_request,
    read_usage,
)
from cp_memory.providers.account import call_cost
from cp_memory.providers.rules import default_prices

from .prompts import SYSTEMS, mem0_system, tools_for
from .workload import Searched, Workload, fixed_answer

__all__ = ["ARMS", "Record", "run_provider"]

logger = logging.getLogger(__name__)

ARMS = {
    "openai": ("mem0", "cp-append", "cp-late", "cp", "cp-swap"),
    "anthropic": ("mem0", "mem0+auto", "cp-append", "cp-late", "cp", "cp-swap"),
}
CHAT_ONLY = ("cp-append", "cp-late")
QA_ONLY = ("cp", "cp-swap")
MAX_TOKENS = 16


@dataclass
class Record:
    provider: str
    model: str
    system: str  # "short" | "realistic"
    workload: str  # "chat" | "qa20" | "qa100" ...
    arm: str
    conversation: int
    chat: int
    turn: int  # 1-based turn (chats) or question index (qa)
    question: str  # digest only, never LoCoMo text
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cache_write_1h_tokens: int
    uncached_tokens: int
    cost: float  # input cost, uncached input token = 1
    stable_tokens: int  # tokens of the stable system (+ tools): what every request shares
    memories: int
    pointers: int
    breakpoints: int
    shared: int  # context_pilot["prefix_len"]: leading memories aligned with an earlier prompt (cp arms)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Caller:
    """One provider's SDK client (sync), with the run header that separates the server's caches."""

    def __init__(self, provider: str, base_url: str, api_key: str, model: str) -> None:
        self.provider = provider
        self.model = model
        if provider == "openai":
            from openai import OpenAI

            self.client: Any = OpenAI(base_url=base_url, api_key=api_key, max_retries=2)
        else:
            from anthropic import Anthropic

            self.client = Anthropic(base_url=base_url, api_key=api_key, max_retries=2)

    def send(self, kwargs: dict[str, Any], run: str, stream: bool) -> CacheUsage:
        if self.provider == "openai":
            create, limit = self.client.chat.completions.create, {"max_completion_tokens": MAX_TOKENS}
            streamed = {"stream": True, "stream_options": {"include_usage": True}}
        else:
            create, limit = self.client.messages.create, {"max_tokens": MAX_TOKENS}
            streamed = {"stream": True}
        reply = create(
            model=self.model, extra_headers={"x-bench-run": run}, **limit, **(streamed if stream else {}), **kwargs
        )
        if not stream:
            return read_usage(reply)
        usage = UsageStream(provider=self.provider)
        with reply as events:
            for _ in usage.wrap(events):
                pass
        return usage.usage


def _shown(response: Any) -> tuple[int, int, int]:
    """(memories in full, pointers, leading memories aligned with an earlier prompt) of a search response."""
    info = response.get("context_pilot") if isinstance(response, dict) else None
    if not isinstance(info, dict):
        return len(response.get("results", [])), 0, 0
    return len(info.get("blocks") or []), len(info.get("sent") or []), int(info.get("prefix_len") or 0)


class Arm:
    """Builds each request of one (provider, arm, system) combination; keeps a chat's history."""

    def __init__(
        self, provider: str, arm: str, variant: str, model: str, keys: PromptCacheKeys, counter: Callable[[str], int]
    ) -> None:
        self.provider, self.arm, self.variant, self.model = provider, arm, variant, model
        self.system = SYSTEMS[variant]
        self.tools = tools_for(variant, provider)
        self.keys = keys
        self.count = counter
        self.history: list[dict[str, Any]] = []

    def new_chat(self) -> None:
        self.history = []

    def stable_tokens(self) -> int:
        tools = sum(self.count(json.dumps(t, sort_keys=True)) for t in self.tools)
        return tools + self.count(self.system)

    def request(self, s: Searched, *, chat: bool) -> tuple[dict[str, Any], int]:
        """(SDK keyword arguments, breakpoints placed) for question ``s``."""
        if self.arm.startswith("cp"):
            r = s.cp[self.arm]
            if self.provider == "openai":
                return openai_request(
                    s.question, r, system=self.system, history=self.history, tools=self.tools, keys=self.keys
                ), 0
            layout = "oneshot" if not chat else ("late" if self.arm == "cp-late" else "append")
            req = anthropic_request(
                s.question,
                r,
                model=self.model,
                system=self.system,
                history=self.history,
                tools=self.tools,
                layout=layout,
            )
            return req.kwargs(), len(req.breakpoints)
        return self._mem0_request(s), 1 if self.arm == "mem0+auto" else 0

    def _mem0_request(self, s: Searched) -> dict[str, Any]:
        """mem0's documented pattern: the memories in the system message, then the history and the question."""
        system = mem0_system(self.system, s.mem0)
        messages = self.history + [{"role": "user", "content": s.question}]
        if self.provider == "openai":
            kw: dict[str, Any] = {"messages": [{"role": "system", "content": system}] + messages}
        else:
            kw = {"system": system, "messages": messages}
            if self.arm == "mem0+auto":
                kw["cache_control"] = {"type": "ephemeral"}
        if self.tools:
            kw["tools"] = self.tools
        return kw

    def sent(self, s: Searched, kwargs: dict[str, Any]) -> None:
        """Keep the turn in the history: cp-append as sent (memories included: append-only), the others the
        plain question."""
        if self.arm == "cp-append":
            last = kwargs["messages"][-1] if "messages" in kwargs else kwargs["input"][-1]
            content = last["content"]
            text = content if isinstance(content, str) else "".join(b["text"] for b in content)
            self.history.append({"role": "user", "content": text})
        else:
            self.history.append({"role": "user", "content": s.question})
        self.history.append({"role": "assistant", "content": fixed_answer(s.question)})


def _jobs(work: Workload, arm: str) -> list[tuple[str, int, int, list[Searched]]]:
    """(workload, conversation, chat, questions) of every chat and one-shot sequence ``arm`` takes part in."""
    jobs = [] if arm in QA_ONLY else [("chat", conv, c, turns) for (conv, c), turns in sorted(work.chats.items())]
    if arm not in CHAT_ONLY:
        for k, by_conv in sorted(work.qa.items()):
            jobs += [(f"qa{k}", conv, 0, rows) for conv, rows in sorted(by_conv.items())]
    return jobs


def _run_job(
    caller: Caller, arm: Arm, account: SavingsAccount, job: tuple[str, int, int, list[Searched]], run: str
) -> list[Record]:
    """Send one chat (streamed, its turns kept in the history) or one-shot sequence; one record a request."""
    workload, conv, c, rows = job
    chat, stable = workload == "chat", arm.stable_tokens()
    prices = default_prices(arm.provider, arm.model)
    arm.new_chat()
    out = []
    for t, s in enumerate(rows, 1):
        kwargs, breakpoints = arm.request(s, chat=chat)
        usage = replace(caller.send(kwargs, run, stream=chat), provider=arm.provider, model=arm.model)
        account.add(usage)
        if chat:
            arm.sent(s, kwargs)
        memories, pointers, shared = _shown(s.cp[arm.arm] if arm.arm.startswith("cp") else s.mem0)
        out.append(
            Record(
                provider=arm.provider,
                model=arm.model,
                system=arm.variant,
                workload=workload,
                arm=arm.arm,
                conversation=conv,
                chat=c,
                turn=t,
                question=s.digest,
                input_tokens=usage.input_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                cache_write_1h_tokens=usage.cache_write_1h_tokens,
                uncached_tokens=usage.uncached_tokens,
                cost=call_cost(usage, prices) if prices else float("nan"),
                stable_tokens=stable,
                memories=memories,
                pointers=pointers,
                breakpoints=breakpoints,
                shared=shared,
            )
        )
    return out


def run_provider(
    provider: str,
    model: str,
    work: Workload,
    *,
    base_url: str,
    api_key: str,
    systems: Sequence[str],
    keys: PromptCacheKeys,
    counter: Callable[[str], int],
) -> tuple[list[Record], dict[str, Any]]:
    """Every arm x system prompt x workload of one provider; returns the records and the accounts' totals."""
    caller = Caller(provider, base_url, api_key, model)
    records: list[Record] = []
    accounts: dict[str, Any] = {}
    for variant in systems:
        for arm_name in ARMS[provider]:
            arm = Arm(provider, arm_name, variant, model, keys, counter)
            account = SavingsAccount()
            for job in _jobs(work, arm_name):
                records += _run_job(caller, arm, account, job, f"{provider}/{variant}/{arm_name}/{job[0]}")
            if account.summary().calls:
                accounts[f"{variant}/{arm_name}"] = asdict(account.summary())
            logger.info("%s %s %s: %s", provider, variant, arm_name, account.summary().line())
    return records, accounts
