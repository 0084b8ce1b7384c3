"""One (router, mode) run of the scale-out benchmark: every user's questions, users concurrently.

Each user asks its questions in order (one at a time, as a person would); ``concurrency`` users are
served at once, so all users' questions interleave over the replicas. Each user has its own
:class:`~benchmarks.common.modes.ModeBuilder` (for ``aligned``: its own ContextPilotMemory index, cold at
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
from benchmarks.common.modes import CachedSearch, KSpec, ModeBuilder
from benchmarks.locomo.runner import PROMPT_TEMPLATE
from cp_memory.core.render import build_prompt
from cp_memory.engine import CompletionResult

from .dispatch import Dispatcher

logger = logging.getLogger("benchmarks.scale")

__all__ = ["Request", "User", "serve_users"]


@dataclass(frozen=True)
class User:
    user_id: str
    questions: tuple[QA, ...]


@dataclass(frozen=True, kw_only=True)
class Request:
    router: str
    mode: str
    rep: int
    user: str
    turn: int  # 1-based question number of the user
    replica: int  # -1: chosen by the external router
    reason: str
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    ttft_s: float | None = None
    server_prompt_ms: float | None = None
    prefix_len: int | None = None  # aligned: blocks ContextPilot expects cached
    error: str | None = None


def _ask(
    dispatcher: Dispatcher,
    builder: ModeBuilder,
    user: User,
    turn: int,
    qa: QA,
    *,
    mode: str,
    rep: int,
    max_tokens: int,
    token_len: int,
) -> Request:
    """One question of ``user``: its prompt built by the user's mode, dispatched, answered (or failed:
    recorded, the run goes on), and the builder and the dispatcher told how it went."""
    built = builder.build(qa.question)
    context = {"results": [], "context_pilot": {"context": built.context}}
    prompt = build_prompt(qa.question, context, template=PROMPT_TEMPLATE)
    d = dispatcher.dispatch(user.user_id, len(prompt) // token_len)
    reply: CompletionResult | None = None
    error: str | None = None
    try:
        reply = d.client.complete(prompt, max_tokens=max_tokens)
    except Exception as exc:  # noqa: BLE001 - recorded, the run goes on (a failed request is counted)
        error = str(exc)
        logger.error("%s turn %d on %s: %s", user.user_id, turn, dispatcher.name, exc)
    dispatcher.done(d, ok=reply is not None)
    builder.sent(built, reply is not None)
    return Request(
        router=dispatcher.name,
        mode=mode,
        rep=rep,
        user=user.user_id,
        turn=turn,
        replica=d.replica,
        reason=d.reason,
        prompt_tokens=None if reply is None else reply.prompt_tokens,
        cached_tokens=None if reply is None else reply.cached_tokens,
        ttft_s=None if reply is None else reply.ttft_s,
        server_prompt_ms=None if reply is None else reply.server_prompt_ms,
        prefix_len=built.prefix_len,
        error=error,
    )


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
            rec = _ask(
                dispatcher, builder, user, turn, qa, mode=mode, rep=rep, max_tokens=max_tokens, token_len=token_len
            )
            with lock:
                out.append(rec)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="user") as ex:
        list(ex.map(one_user, users))
    return out, time.perf_counter() - t0
