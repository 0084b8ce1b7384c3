"""A LoCoMo user's chat with mem0 memories: through the gateway (memories placed after the cached prefix) vs
mem0's proxy pattern (memories rewritten into the last user message each turn), prefilled tokens per turn.

Both arms talk to the same engine (llama-server, one slot, prompt cache on; flushed between arms), with the
same system prompt (mem0's proxy's ``MEMORY_ANSWER_PROMPT``), the same scripted history (the user asks the
conversation's first LoCoMo questions; the assistant's turns are LoCoMo's gold answers, so both arms carry
the same history) and the same mem0 store (the user's LoCoMo observations, embedded mem0):

* ``mem0``: what ``mem0.proxy.main.Mem0`` does each turn — search on the last 6 messages
  (``"role: content"`` lines), the newest user message replaced by ``- Relevant Memories/Facts: ...
  - Entities: [] - User Question: ...``; the history goes out as the client holds it (without memories);
* ``gateway``: the client's plain messages sent to the cp_memory gateway (``mem0="embedded"``, the user in
  ``user``); it searches through ContextPilotMemory on the recent user turns, places the memories at the
  start of the newest user message and replays earlier turns as it sent them (memories included), with
  location annotations for memories already sent.

Prefilled tokens are the engine's own counts (llama-server's ``timings.prompt_n``: prompt tokens not served
from its cache); prompt tokens are ``usage.prompt_tokens``. No turn is added to mem0 in either arm (the store
stays the LoCoMo observations). ``python -m benchmarks.gateway_chat --json docs/results/gateway_chat.json``
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import harness

logger = logging.getLogger("benchmarks.gateway_chat")

MEM0_QUERY_MESSAGES = 6  # mem0's proxy searches on the last 6 messages


@dataclass(frozen=True)
class TurnCount:
    arm: str
    turn: int
    prompt_tokens: int
    prefilled: int
    cached: int


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gateway_chat", description=__doc__)
    ap.add_argument("--conversation", type=int, default=0, help="LoCoMo conversation (its first speaker chats)")
    ap.add_argument("--turns", type=int, default=8, help="user turns")
    ap.add_argument("--k", type=int, default=10, help="memories per turn (mem0's proxy default: 10)")
    ap.add_argument("--max-memories", type=int, default=200, help="the user's first N LoCoMo observations")
    ap.add_argument("--max-tokens", type=int, default=1, help="tokens generated per turn (prefill is measured)")
    ap.add_argument(
        "--system-rules", type=int, default=0, help="numbered rules (~15 tokens each) after the system prompt"
    )
    harness.add_model(ap, "random")
    harness.add_threads(ap, 2)
    harness.add_locomo(ap)
    harness.add_out(ap, "results")
    harness.add_json(ap)
    harness.add_verbose(ap)
    return ap.parse_args(argv)


def load_chat(a: argparse.Namespace) -> tuple[list[str], list[str], list[str]]:
    """(questions, gold answers, observations) of the conversation's first speaker."""
    from benchmarks.common.locomo import LocomoNotFound, load_locomo

    try:
        convs = load_locomo(a.locomo)
    except LocomoNotFound as exc:
        raise SystemExit(
            f"LoCoMo is missing: {exc}. Pass --locomo PATH (locomo10.json) or set CP_MEMORY_LOCOMO."
        ) from None
    conv = convs[a.conversation]
    qa = [q for q in conv.qa if q.category != 5][: a.turns]
    observations = [o.text for o in conv.observations][: a.max_memories]
    return [q.question for q in qa], [str(q.answer) for q in qa], observations


@contextmanager
def serve_gateway(upstream: str, memory: Any, k: int) -> Iterator[tuple[str, Any]]:
    """The gateway (uvicorn in a thread) in front of ``upstream`` with ``memory`` as its mem0 store."""
    import uvicorn

    from cp_memory.gateway import GatewayConfig, build_app
    from cp_memory.gateway.runner import bind

    config = GatewayConfig(
        upstream=upstream,
        upstream_kind="llamacpp",
        port=0,
        mem0="embedded",
        secret="bench",
        memories_add=False,
        memories_top_k=k,
    )
    app = build_app(config, config.upstream_kind, memory=memory)
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", app.state.gateway
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


def system_prompt(rules: int) -> str:
    """mem0's proxy's system prompt, plus ``rules`` numbered house rules (a longer, app-like system prompt)."""
    from mem0.configs.prompts import MEMORY_ANSWER_PROMPT

    extra = [
        f"Rule {i}: answer briefly, in plain words, and use only the memories you were given." for i in range(rules)
    ]
    return "\n".join([MEMORY_ANSWER_PROMPT, *extra])


def _count(arm: str, turn: int, answer: dict[str, Any]) -> TurnCount:
    usage, timings = answer.get("usage") or {}, answer.get("timings") or {}
    prompt = int(usage.get("prompt_tokens", 0))
    prefilled = int(timings.get("prompt_n", prompt))
    return TurnCount(arm, turn, prompt, prefilled, prompt - prefilled)


def mem0_arm(url: str, memory: Any, user: str, questions: list[str], answers: list[str], a: Any) -> list[TurnCount]:
    """mem0's proxy pattern, as ``mem0.proxy.main.Completions.create`` builds its request."""
    history: list[dict[str, str]] = [{"role": "system", "content": system_prompt(a.system_rules)}]
    out = []
    for i, (question, gold) in enumerate(zip(questions, answers), start=1):
        history.append({"role": "user", "content": question})
        query = "\n".join(f"{m['role']}: {m['content']}" for m in history[1:][-MEM0_QUERY_MESSAGES:])
        found = memory.search(query, filters={"user_id": user}, top_k=a.k)
        memories = "\n".join(r["memory"] for r in found["results"])
        text = f"- Relevant Memories/Facts: {memories}\n\n- Entities: []\n\n- User Question: {question}"
        sent = [*history[:-1], {"role": "user", "content": text}]
        body = {"model": "m", "messages": sent, "max_tokens": a.max_tokens, "temperature": 0}
        answer = httpx.post(url + "/v1/chat/completions", json=body, timeout=600).json()
        out.append(_count("mem0", i, answer))
        history.append({"role": "assistant", "content": gold})
    return out


def gateway_arm(url: str, user: str, questions: list[str], answers: list[str], a: Any) -> list[TurnCount]:
    """The client's plain chat, through the gateway (memories searched, placed and replayed there)."""
    history: list[dict[str, str]] = [{"role": "system", "content": system_prompt(a.system_rules)}]
    headers = {"authorization": "Bearer bench", "x-cp-session": "chat-1"}
    out = []
    for i, (question, gold) in enumerate(zip(questions, answers), start=1):
        history.append({"role": "user", "content": question})
        body = {"model": "m", "messages": history, "user": user, "max_tokens": a.max_tokens, "temperature": 0}
        answer = httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=600).json()
        out.append(_count("gateway", i, answer))
        history.append({"role": "assistant", "content": gold})
    return out


def run(a: argparse.Namespace) -> list[TurnCount]:
    from cp_memory.core.chat_memories import CHAT_MEMORY_OPTIONS
    from cp_memory.embedded import default_memory
    from cp_memory.engine import LlamaServer
    from cp_memory.gateway.protocols import Api
    from cp_memory.memory import ContextPilotMemory

    questions, answers, observations = load_chat(a)
    memory = ContextPilotMemory(default_memory(), **CHAT_MEMORY_OPTIONS)  # what the gateway opens
    model = harness.resolve_model(a.model, "llama")
    with LlamaServer(model, slots=1, ctx_size=16384, cache_ram_mib=512, threads=a.threads) as llama:
        with serve_gateway(llama.base_url, memory, a.k) as (gw_url, gateway):
            tenant = gateway.identify(Api.CHAT, {"authorization": "Bearer bench"}, {}).tenant
            user = f"{tenant}:locomo-{a.conversation}"
            for text in observations:
                memory.wrapped.add(text, user_id=user, infer=False)
            logger.info("%d memories stored for %s", len(observations), user)
            llama.flush_cache()
            rows = mem0_arm(llama.base_url, memory.wrapped, user, questions, answers, a)
            llama.flush_cache()
            rows += gateway_arm(gw_url, "locomo-" + str(a.conversation), questions, answers, a)
    memory.close()
    return rows


def modelled_costs(rows: list[TurnCount]) -> dict[str, dict[str, float]]:
    """Input cost in uncached-token units on the providers' documented rules (cp_memory.providers.rules),
    estimated from the engine's counts: a turn's cacheable prefix is what the engine reused from the turn
    before. OpenAI (GPT-5 prices): nothing below 1,024 tokens, hits in 128-token steps. Anthropic
    (claude-sonnet-4-5, one 5-minute breakpoint at the end of every request, both arms): the previous
    request is read back only when it is a prefix of this one and was long enough to be written."""
    from cp_memory.providers.rules import (
        ANTHROPIC_READ_RATIO,
        ANTHROPIC_WRITE_RATIO,
        OPENAI_MIN_TOKENS,
        OPENAI_STEP_TOKENS,
        anthropic_min_tokens,
        openai_prices,
    )

    read_ratio = openai_prices("gpt-5")[0].read
    minimum = anthropic_min_tokens("claude-sonnet-4-5")[0]
    out: dict[str, dict[str, float]] = {}
    for arm in ("mem0", "gateway"):
        mine = sorted((r for r in rows if r.arm == arm), key=lambda r: r.turn)
        openai_cost = anthropic_cost = 0.0
        previous: TurnCount | None = None
        for r in mine:
            hit = 0 if r.cached < OPENAI_MIN_TOKENS else r.cached - (r.cached - OPENAI_MIN_TOKENS) % OPENAI_STEP_TOKENS
            openai_cost += (r.prompt_tokens - hit) + read_ratio * hit
            whole = previous is not None and previous.prompt_tokens >= minimum and r.cached >= previous.prompt_tokens
            read = previous.prompt_tokens if whole and previous is not None else 0
            write = r.prompt_tokens - read if r.prompt_tokens >= minimum else 0
            anthropic_cost += (r.prompt_tokens - read - write) + ANTHROPIC_WRITE_RATIO["5m"] * write
            anthropic_cost += ANTHROPIC_READ_RATIO * read
            previous = r
        out[arm] = {"openai_gpt5": round(openai_cost, 1), "anthropic_sonnet45": round(anthropic_cost, 1)}
    return out


def markdown(rows: list[TurnCount], header: str, command: str) -> str:
    turns = sorted({r.turn for r in rows})
    by = {(r.arm, r.turn): r for r in rows}
    lines = [
        "# Gateway chat with mem0 memories: prefilled tokens per turn",
        "",
        header,
        "",
        f"Command: `{command}`",
        "",
        "| turn | mem0 pattern: prompt / prefilled | gateway: prompt / prefilled | prefilled, gateway - mem0 |",
        "|---:|---:|---:|---:|",
    ]
    for t in turns:
        m, g = by[("mem0", t)], by[("gateway", t)]
        diff = g.prefilled - m.prefilled
        lines.append(f"| {t} | {m.prompt_tokens} / {m.prefilled} | {g.prompt_tokens} / {g.prefilled} | {diff:+d} |")
    tm = sum(by[("mem0", t)].prefilled for t in turns)
    tg = sum(by[("gateway", t)].prefilled for t in turns)
    lines.append(f"| all | {tm} prefilled | {tg} prefilled | {tg - tm:+d} ({(tg - tm) / max(tm, 1):+.1%}) |")
    costs = modelled_costs(rows)
    lines += [
        "",
        "Input cost of the 8 turns in uncached-token units, **modelled** on the providers' documented rules "
        "from the engine's counts (`modelled_costs`):",
        "",
        "| rules | mem0 pattern | gateway |",
        "|---|---:|---:|",
        f"| OpenAI (GPT-5: >= 1,024 tokens, 128-token steps, reads 0.1x) | {costs['mem0']['openai_gpt5']:,.1f} "
        f"| {costs['gateway']['openai_gpt5']:,.1f} |",
        f"| Anthropic (claude-sonnet-4-5: a 5-minute breakpoint per request, writes 1.25x, reads 0.1x) "
        f"| {costs['mem0']['anthropic_sonnet45']:,.1f} | {costs['gateway']['anthropic_sonnet45']:,.1f} |",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    harness.setup_logging(a.verbose)
    rows = run(a)
    m = harness.machine()
    header = (
        f"LoCoMo conversation {a.conversation}, {a.turns} user turns, k={a.k}, {a.max_memories} memories, "
        f"{a.system_rules} extra system rules; "
        f"llama-server (model {a.model}, 1 slot, prompt cache on), engine counts (timings.prompt_n); {m.summary}"
    )
    payload = harness.envelope(
        "benchmarks.gateway_chat", argv, config=vars(a), rows=[asdict(r) for r in rows], costs=modelled_costs(rows)
    )
    md = markdown(rows, header, payload["command"])
    stem = Path(a.json).stem if a.json else "gateway_chat"
    harness.write_outputs(Path(a.out), stem, payload, markdown=md, also_json=a.json)
    if a.json:
        Path(a.json).with_suffix(".md").write_text(md, encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
