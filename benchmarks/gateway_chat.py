"""A LoCoMo user's chat with mem0 memories: through the gateway vs mem0's proxy pattern (memories rewritten into
the last user message each turn), prefilled tokens per turn on an engine and input cost on the providers' rules.

Every arm sends the same system prompt (mem0's proxy's ``MEMORY_ANSWER_PROMPT``, plus ``--system-rules``
numbered house rules for an app-sized one), the same scripted history (the user asks the conversation's first
LoCoMo questions; the assistant's turns are LoCoMo's gold answers, so every arm carries the same history) and
searches the same mem0 store (the user's LoCoMo observations, embedded mem0):

* ``mem0``: what ``mem0.proxy.main.Mem0`` does each turn — search on the last 6 messages
  (``"role: content"`` lines), the newest user message replaced by ``- Relevant Memories/Facts: ...
  - Entities: [] - User Question: ...``; the history goes out as the client holds it (without memories);
* ``gateway``: the client's plain messages sent to the cp_memory gateway (``mem0="embedded"``, the user in
  ``user`` / ``metadata.user_id``), which searches through ContextPilotMemory on the recent user turns and
  places the memories (docs/gateway.md, "mem0 memories": replayed with their turn where the upstream will
  cache the request, in the newest message only while a provider's request is below its cache minimum).

Two upstreams, each arm on each:

* the **engine** (``--engine llama``: llama-server, one slot, prompt cache on; ``--engine vllm``: vLLM CPU,
  automatic prefix caching), flushed between arms: prefilled tokens are the engine's own counts
  (llama-server's ``timings.prompt_n``; vLLM's ``prompt_tokens - prompt_tokens_details.cached_tokens``);
* the **modelled providers** (:class:`benchmarks.hosted.server.ProviderServer`, the documented cache rules
  of OpenAI and Anthropic on a local server, o200k tokens): OpenAI Chat Completions (``gpt-5``) and
  Anthropic Messages (``claude-sonnet-4-5``; both clients mark their system prompt, the one stable block of
  mem0's pattern), a fresh cache per arm; the gateway in front of them is configured for that provider
  (``upstream_kind`` openai / anthropic). Input cost in uncached-token units from the usage they report.

No turn is added to mem0 in any arm (the store stays the LoCoMo observations).
``python -m benchmarks.gateway_chat --json docs/results/gateway_chat.json``
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import harness
from benchmarks.common.config import (
    EngineOptions,
    JsonOptions,
    LocomoOptions,
    ModelOptions,
    OutOptions,
    ThreadsOptions,
    VerboseOptions,
    parse_config,
)

logger = logging.getLogger("benchmarks.gateway_chat")

MEM0_QUERY_MESSAGES = 6  # mem0's proxy searches on the last 6 messages
CLIENT_KEY = "bench-client-key-0001"  # every arm's key (vLLM's too): one tenant, one mem0 scope
GATEWAY_SECRET = "bench-gateway-secret-0001"  # 16 bytes or more: OpenAI prompt_cache_key hashes need it
OPENAI_MODEL = "gpt-5"
ANTHROPIC_MODEL = "claude-sonnet-4-5"
ENGINE_MODEL = "m"
TARGETS = ("engine", "openai", "anthropic")


@dataclass(frozen=True)
class TurnCount:
    """One turn of one arm on one target: prompt tokens, prefilled (not served from a cache), cached (read),
    written (Anthropic cache writes)."""

    arm: str
    turn: int
    prompt_tokens: int
    prefilled: int
    cached: int
    target: str = "engine"
    written: int = 0


@dataclass(frozen=True)
class Target:
    """Where an arm's requests go: ``url`` (the mem0 arm's, the gateway's upstream), the gateway's
    ``kind`` for it, the body's ``model``, and whether it speaks Anthropic Messages."""

    name: str
    url: str
    kind: str
    model: str
    messages_api: bool = False
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class GatewayChatConfig(
    EngineOptions, ModelOptions, ThreadsOptions, LocomoOptions, OutOptions, JsonOptions, VerboseOptions
):
    """The run's options (:func:`parse_args`)."""

    conversation: int
    turns: int
    k: int
    max_memories: int
    max_tokens: int
    system_rules: int
    block_size: int
    no_modelled: bool


def parse_args(argv: Sequence[str] | None) -> GatewayChatConfig:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gateway_chat", description=__doc__)
    ap.add_argument("--conversation", type=int, default=0, help="LoCoMo conversation (its first speaker chats)")
    ap.add_argument("--turns", type=int, default=8, help="user turns")
    ap.add_argument("--k", type=int, default=10, help="memories per turn (mem0's proxy default: 10)")
    ap.add_argument("--max-memories", type=int, default=200, help="the user's first N LoCoMo observations")
    ap.add_argument("--max-tokens", type=int, default=1, help="tokens generated per turn (prefill is measured)")
    ap.add_argument(
        "--system-rules", type=int, default=0, help="numbered rules (~15 tokens each) after the system prompt"
    )
    ap.add_argument("--block-size", type=int, default=32, help="vLLM's prefix-cache block in tokens (32)")
    ap.add_argument("--no-modelled", action="store_true", help="the engine only (no modelled provider arms)")
    harness.add_engine(ap)
    harness.add_model(ap, "random")
    harness.add_threads(ap, 2)
    harness.add_locomo(ap)
    harness.add_out(ap, "results")
    harness.add_json(ap)
    harness.add_verbose(ap)
    return parse_config(ap, GatewayChatConfig, argv)


def load_chat(a: GatewayChatConfig) -> tuple[list[str], list[str], list[str]]:
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
def serve_gateway(upstream: str, memory: Any, k: int, kind: str = "llamacpp") -> Iterator[tuple[str, Any]]:
    """The gateway (uvicorn in a thread) in front of ``upstream`` (``kind``) with ``memory`` as its mem0 store."""
    import uvicorn

    from cp_memory.gateway import GatewayConfig, build_app
    from cp_memory.gateway.runner import bind

    config = GatewayConfig(
        upstream=upstream,
        upstream_kind=kind,
        port=0,
        mem0="embedded",
        secret=GATEWAY_SECRET,
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


def request(
    target: Target, history: list[dict[str, str]], a: GatewayChatConfig, user: str | None = None
) -> tuple[str, Any]:
    """(path, body) of one turn: Chat Completions, or Anthropic Messages with the system prompt marked."""
    if target.messages_api:
        system = [{"type": "text", "text": history[0]["content"], "cache_control": {"type": "ephemeral"}}]
        body: dict[str, Any] = {"model": target.model, "system": system, "messages": history[1:]}
        body.update(max_tokens=a.max_tokens, temperature=0)
        if user is not None:
            body["metadata"] = {"user_id": user}
        return "/v1/messages", body
    body = {"model": target.model, "messages": history, "max_tokens": a.max_tokens, "temperature": 0}
    if user is not None:
        body["user"] = user
    return "/v1/chat/completions", body


def count(target: str, arm: str, turn: int, answer: dict[str, Any]) -> TurnCount:
    """One turn's counts from the answer: llama-server's ``timings``, else the usage the API reports
    (OpenAI's ``cached_tokens``, Anthropic's cache reads and writes)."""
    usage = answer.get("usage") or {}
    if "input_tokens" in usage:  # Anthropic: input_tokens are the uncached ones
        read, written = (
            int(usage.get("cache_read_input_tokens") or 0),
            int(usage.get("cache_creation_input_tokens") or 0),
        )
        prompt = int(usage["input_tokens"]) + read + written
        return TurnCount(arm, turn, prompt, prompt - read, read, target, written)
    prompt = int(usage.get("prompt_tokens", 0))
    if "timings" in answer:
        prefilled = int(answer["timings"].get("prompt_n", prompt))
    else:
        prefilled = prompt - int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return TurnCount(arm, turn, prompt, prefilled, prompt - prefilled, target)


def _headers(target: Target, session: str | None = None) -> dict[str, str]:
    out = {"authorization": f"Bearer {CLIENT_KEY}", **{k.lower(): v for k, v in target.headers.items()}}
    if session is not None:
        out["x-cp-session"] = session
    return out


def mem0_arm(
    target: Target, memory: Any, user: str, questions: list[str], answers: list[str], a: GatewayChatConfig
) -> list[TurnCount]:
    """mem0's proxy pattern, as ``mem0.proxy.main.Completions.create`` builds its request."""
    history: list[dict[str, str]] = [{"role": "system", "content": system_prompt(a.system_rules)}]
    out = []
    for i, (question, gold) in enumerate(zip(questions, answers), start=1):
        history.append({"role": "user", "content": question})
        query = "\n".join(f"{m['role']}: {m['content']}" for m in history[1:][-MEM0_QUERY_MESSAGES:])
        found = memory.search(query, filters={"user_id": user}, top_k=a.k)
        memories = "\n".join(r["memory"] for r in found["results"])
        text = f"- Relevant Memories/Facts: {memories}\n\n- Entities: []\n\n- User Question: {question}"
        path, body = request(target, [*history[:-1], {"role": "user", "content": text}], a)
        answer = httpx.post(target.url + path, json=body, headers=_headers(target), timeout=600).json()
        out.append(count(target.name, "mem0", i, answer))
        history.append({"role": "assistant", "content": gold})
    return out


def gateway_arm(
    url: str, target: Target, user: str, questions: list[str], answers: list[str], a: GatewayChatConfig
) -> list[TurnCount]:
    """The client's plain chat, through the gateway (memories searched and placed there)."""
    history: list[dict[str, str]] = [{"role": "system", "content": system_prompt(a.system_rules)}]
    headers = _headers(target, f"chat-{target.name}")
    out = []
    for i, (question, gold) in enumerate(zip(questions, answers), start=1):
        history.append({"role": "user", "content": question})
        path, body = request(target, history, a, user)
        answer = httpx.post(url + path, json=body, headers=headers, timeout=600).json()
        out.append(count(target.name, "gateway", i, answer))
        history.append({"role": "assistant", "content": gold})
    return out


@contextmanager
def engine(a: GatewayChatConfig) -> Iterator[tuple[Target, Any]]:
    """The engine target and its cache flush: llama-server (one slot) or vLLM CPU (prefix caching)."""
    if a.engine == "vllm":
        from cp_memory.engine import VLLMServer

        model = harness.resolve_model(a.model, "vllm")
        extra = a.vllm_args.split() if a.vllm_args else []
        with VLLMServer(
            model,
            served_model_name=ENGINE_MODEL,
            max_model_len=8192,
            block_size=a.block_size,
            max_num_seqs=2,
            enforce_eager=True,
            api_key=CLIENT_KEY,
            extra_args=extra,
        ) as vllm:
            yield Target("engine", vllm.base_url, "vllm", ENGINE_MODEL), vllm.flush_cache
        return
    from cp_memory.engine import LlamaServer

    model_path = harness.resolve_model(a.model, "llama")
    with LlamaServer(model_path, slots=1, ctx_size=16384, cache_ram_mib=512, threads=a.threads) as llama:
        yield Target("engine", llama.base_url, "llamacpp", ENGINE_MODEL), llama.flush_cache


def modelled_arms(
    memory: Any, user: str, questions: list[str], answers: list[str], a: GatewayChatConfig
) -> list[TurnCount]:
    """Both arms on the modelled OpenAI and Anthropic rules (a fresh cache per arm: ``x-bench-run``)."""
    from benchmarks.hosted.server import ProviderServer

    rows: list[TurnCount] = []
    with ProviderServer() as server:
        for name, model, messages in (("openai", OPENAI_MODEL, False), ("anthropic", ANTHROPIC_MODEL, True)):
            direct = Target(name, server.url, name, model, messages, {"x-bench-run": f"{name}-mem0"})
            rows += mem0_arm(direct, memory.wrapped, user, questions, answers, a)
            via = Target(name, server.url, name, model, messages, {"x-bench-run": f"{name}-gateway"})
            with serve_gateway(server.url, memory, a.k, name) as (gw_url, _):
                rows += gateway_arm(gw_url, via, "locomo-" + str(a.conversation), questions, answers, a)
    return rows


def run(a: GatewayChatConfig) -> list[TurnCount]:
    from cp_memory.core.chat_memories import CHAT_MEMORY_OPTIONS
    from cp_memory.embedded import default_memory
    from cp_memory.gateway import GatewayConfig, UpstreamKind
    from cp_memory.gateway.flow import Gateway
    from cp_memory.gateway.protocols import Api
    from cp_memory.memory import ContextPilotMemory

    questions, answers, observations = load_chat(a)
    memory = ContextPilotMemory(default_memory(), **CHAT_MEMORY_OPTIONS)  # what the gateway opens
    probe = Gateway(GatewayConfig(upstream="http://127.0.0.1:9", secret=GATEWAY_SECRET), UpstreamKind.COMPATIBLE)
    tenant = probe.identify(Api.CHAT, {"authorization": f"Bearer {CLIENT_KEY}"}, {}).tenant
    user = f"{tenant}:locomo-{a.conversation}"
    for text in observations:
        memory.wrapped.add(text, user_id=user, infer=False)
    logger.info("%d memories stored for %s", len(observations), user)
    rows: list[TurnCount] = []
    with engine(a) as (target, flush):
        flush()
        rows += mem0_arm(target, memory.wrapped, user, questions, answers, a)
        flush()
        with serve_gateway(target.url, memory, a.k, target.kind) as (gw_url, _):
            rows += gateway_arm(gw_url, target, "locomo-" + str(a.conversation), questions, answers, a)
    if not a.no_modelled:
        rows += modelled_arms(memory, user, questions, answers, a)
    memory.close()
    return rows


def costs(rows: list[TurnCount]) -> dict[str, dict[str, float]]:
    """Input cost of each arm in uncached-token units, from the usage the modelled providers reported:
    OpenAI (GPT-5 prices: cached reads 0.1x, writes free), Anthropic (claude-sonnet-4-5: writes 1.25x at the
    5-minute TTL, reads 0.1x). Ratios from :mod:`cp_memory.providers.rules`."""
    from cp_memory.providers.rules import ANTHROPIC_READ_RATIO, ANTHROPIC_WRITE_RATIO, openai_prices

    ratios = {
        "openai": (openai_prices(OPENAI_MODEL)[0].read, 1.0),
        "anthropic": (ANTHROPIC_READ_RATIO, ANTHROPIC_WRITE_RATIO["5m"]),
    }
    out: dict[str, dict[str, float]] = {}
    for arm in ("mem0", "gateway"):
        out[arm] = {}
        for target, (read, write) in ratios.items():
            mine = [r for r in rows if r.arm == arm and r.target == target]
            if mine:
                total = sum(r.prefilled - r.written + write * r.written + read * r.cached for r in mine)
                out[arm][target] = round(total, 1)
    return out


def _turn_table(rows: list[TurnCount], target: str, what: str) -> list[str]:
    by = {(r.arm, r.turn): r for r in rows if r.target == target}
    turns = sorted({t for _, t in by})
    lines = [
        f"| turn | mem0 pattern: prompt / {what} | gateway: prompt / {what} | {what}, gateway - mem0 |",
        "|---:|---:|---:|---:|",
    ]
    for t in turns:
        m, g = by[("mem0", t)], by[("gateway", t)]
        diff = g.prefilled - m.prefilled
        lines.append(f"| {t} | {m.prompt_tokens} / {m.prefilled} | {g.prompt_tokens} / {g.prefilled} | {diff:+d} |")
    tm = sum(by[("mem0", t)].prefilled for t in turns)
    tg = sum(by[("gateway", t)].prefilled for t in turns)
    lines.append(f"| all | {tm} {what} | {tg} {what} | {tg - tm:+d} ({(tg - tm) / max(tm, 1):+.1%}) |")
    return lines


def markdown(rows: list[TurnCount], header: str, command: str) -> str:
    lines = [
        "# Gateway chat with mem0 memories: prefilled tokens per turn, modelled input cost",
        "",
        header,
        "",
        f"Command: `{command}`",
        "",
        "Engine counts (prompt tokens not served from the engine's prefix cache):",
        "",
        *_turn_table(rows, "engine", "prefilled"),
    ]
    found = costs(rows)
    if "openai" not in found["mem0"]:
        return "\n".join(lines) + "\n"
    for target, title in (("openai", "OpenAI (gpt-5)"), ("anthropic", "Anthropic (claude-sonnet-4-5)")):
        lines += ["", f"**Modelled** {title}: prompt tokens not read from the cache, per turn:", ""]
        lines += _turn_table(rows, target, "uncached")
    lines += [
        "",
        "Input cost of the turns in uncached-token units, **modelled** (a local server applying the providers' "
        "documented cache rules; `costs`):",
        "",
        "| rules | mem0 pattern | gateway | gateway - mem0 |",
        "|---|---:|---:|---:|",
    ]
    for target, title in (
        ("openai", "OpenAI (GPT-5: >= 1,024 tokens, 128-token steps, reads 0.1x)"),
        ("anthropic", "Anthropic (claude-sonnet-4-5: >= 1,024 tokens, writes 1.25x, reads 0.1x)"),
    ):
        m, g = found["mem0"][target], found["gateway"][target]
        lines.append(f"| {title} | {m:,.1f} | {g:,.1f} | {(g - m) / max(m, 1):+.1%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    harness.setup_logging(a.verbose)
    rows = run(a)
    m = harness.machine()
    engine_label = (
        f"vLLM CPU (model {a.model}, {a.block_size}-token blocks, automatic prefix caching), engine counts "
        "(usage.prompt_tokens_details.cached_tokens)"
        if a.engine == "vllm"
        else f"llama-server (model {a.model}, 1 slot, prompt cache on), engine counts (timings.prompt_n)"
    )
    header = (
        f"LoCoMo conversation {a.conversation}, {a.turns} user turns, k={a.k}, {a.max_memories} memories, "
        f"{a.system_rules} extra system rules; {engine_label}; {m.summary}"
    )
    payload = harness.envelope(
        "benchmarks.gateway_chat", argv, config=asdict(a), rows=[asdict(r) for r in rows], costs=costs(rows)
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
