"""One (router, mode) run of the scale-out benchmark: every user's questions, users concurrently.

Each user asks its questions in order (one at a time, as a person would); ``concurrency`` users are
served at once, so all users' questions interleave over the replicas. Each user has its own
:class:`~benchmarks.locomo.modes.ModeBuilder` (for ``aligned``: its own ContextPilotMemory index, cold at
the start of the run), prompts use the LoCoMo benchmark's template, and every request records the
engine-reported prompt and cached tokens, TTFT and the engine's own prefill time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from benchmarks.common.locomo import QA
from benchmarks.locomo.modes import CachedSearch, KSpec, ModeBuilder
from benchmarks.locomo.runner import PROMPT_TEMPLATE
from cp_memory.core.render import build_prompt

from .dispatch import Dispatcher

logger = logging.getLogger("benchmarks.scale")

__all__ = ["Request", "User", "serve_users"]


@dataclass(frozen=True)
class User:
    user_id: str
    sample_id: str
    questions: tuple[QA, ...]


@dataclass(frozen=True)
class Request:
    router: str
    mode: str
    rep: int
    user: str
    turn: int  # 1-based question number of the user
    replica: int  # -1: chosen by the external router
    reason: str
    prompt_tokens: int | None
    cached_tokens: int | None
    ttft_s: float | None
    server_prompt_ms: float | None
    prefix_len: int | None  # aligned: blocks ContextPilot expects cached
    error: str | None = None


def serve_users(
    dispatcher: Dispatcher,
    mode: str,
    rep: int,
    users: Sequence[User],
    search: CachedSearch,
    k: KSpec,
    *,
    concurrency: int,
    max_tokens: int,
    token_len: int = 4,
) -> tuple[list[Request], float]:
    """Serve every user's questions; returns the requests (completion order) and the wall time."""
    out: list[Request] = []
    lock = threading.Lock()

    def one_user(user: User) -> None:
        builder = ModeBuilder(mode, search, user_id=user.user_id, k=k, mem0_kwargs={"threshold": 0.0})
        for turn, qa in enumerate(user.questions, start=1):
            built = builder.build(qa.question)
            prompt = build_prompt(
                qa.question, {"results": [], "context_pilot": {"context": built.context}}, template=PROMPT_TEMPLATE
            )
            d = dispatcher.dispatch(user.user_id, len(prompt) // token_len)
            try:
                reply = d.client.complete(prompt, max_tokens=max_tokens)
            except Exception as exc:  # noqa: BLE001 - recorded, the run goes on (a failed request is counted)
                dispatcher.done(d, ok=False)
                builder.sent(built, False)
                logger.error("%s turn %d on %s: %s", user.user_id, turn, dispatcher.name, exc)
                rec = Request(
                    dispatcher.name,
                    mode,
                    rep,
                    user.user_id,
                    turn,
                    d.replica,
                    d.reason,
                    None,
                    None,
                    None,
                    None,
                    built.prefix_len,
                    str(exc),
                )
            else:
                dispatcher.done(d, ok=True)
                builder.sent(built, True)
                rec = Request(
                    dispatcher.name,
                    mode,
                    rep,
                    user.user_id,
                    turn,
                    d.replica,
                    d.reason,
                    reply.prompt_tokens,
                    reply.cached_tokens,
                    reply.ttft_s,
                    reply.server_prompt_ms,
                    built.prefix_len,
                )
            with lock:
                out.append(rec)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="user") as ex:
        list(ex.map(one_user, users))
    return out, time.perf_counter() - t0
