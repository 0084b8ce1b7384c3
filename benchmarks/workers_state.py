"""``python -m benchmarks.workers_state``: N worker processes behind round-robin, with the local state store
and with Redis — pointer correctness, the engine's cache hits, and what the shared store adds per search.

LoCoMo users (one per conversation, its observations as mem0 memories) ask their questions in order, the
users interleaved, in two workloads: ``conversation`` (every question a turn of the user's one conversation,
``conversation_id`` = the user; the engine's prompt is every earlier turn as sent, then this one: the
paper's multi-turn layout) and ``single`` (one-shot searches: only the context index is shared). A
round-robin load balancer sends request *i* to worker ``(i + i // N) % N`` (every worker gets every N-th request; the
offset of one per round keeps a user from landing on the same worker every time when the number of users
is a multiple of N, as plain ``i % N`` would do with 4 users on 4 workers). A worker is a process with its
own ``ContextPilotMemory``; it searches, the prompt goes to **one shared engine** and the worker commits
the turn. Four runs per workload: 1 and ``--workers`` processes, each with ``state_store=None`` (the local
default) and ``state_store="redis://..."`` (a private redis-server this command starts on a free loopback
port, or ``--redis-url``).

mem0 is searched once here, in this process (the embedded default: local Qdrant + MiniLM), for every
question at ``k + --max-overfetch``; the workers wrap a replay of those answers (a search for ``top_k=n``
returns the first n), so every worker sees the same memory ids in the same order, as workers sharing one
Qdrant server do, and the embedder's cost is not part of the numbers.

The engine is the deterministic cache model (:class:`benchmarks.common.cache_model.BlockPrefixCache`, vLLM's
16-token blocks, no capacity bound): hit ratio and prefilled tokens are machine-independent. Each turn is
the LoCoMo benchmark's template around the turn's context (fresh memories + location annotations).
Pointers are checked against each user's history (:mod:`benchmarks.common.pointers`): a pointer naming a turn
the history numbers twice, or a memory the named turn did not show there, is wrong. Search latency is
measured inside the workers (``search`` + ``commit``), and the time spent in store calls separately, with
their number: round trips per turn, the search's own in brackets (a pipelined read of several keys is one).

    nice -n 19 timeout 1800 .venv/bin/python -m benchmarks.workers_state --conversations 0-3 --questions 20 --k 20

``--arms gateway`` (no mem0, seconds): the gateway's sessions behind round-robin. Each LoCoMo conversation's
dialogue is a chat session (speaker A the user, speaker B the assistant) whose client re-renders its
history on every request (earlier ``content`` strings as one text block, then back; keys in another order:
form-only changes prefix replay undoes). The requests, sessions interleaved, go round-robin (request *i* of
round *j* to replica ``(i + j) % N``: a session's requests alternate over the replicas) over 1 and 2
in-process :class:`~cp_memory.gateway.flow.Gateway` replicas, each with its sessions local and in Redis;
the bytes they forward are served by one shared engine model (the same 16-token block cache). Reported:
segments replayed and rewritten, the engine's hit ratio and prefilled tokens, and the gateway's own time
per request (plan + commit + booking, Redis included). ``passthrough`` (replay off) is the reference.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import harness
from benchmarks.common.cache_model import BlockPrefixCache
from benchmarks.common.config import LocomoOptions, OutOptions, VerboseOptions, parse_config, split_commas
from benchmarks.common.pointers import History

logger = logging.getLogger("benchmarks.workers_state")

#: "conversation": each user's questions are the turns of one conversation (dedup, the append layout: the
#: engine sees every earlier turn as sent, then this one); "single": one-shot searches (the index alone)
WORKLOADS = ("conversation", "single")

PROMPT_TEMPLATE = (
    "Memories:\n{context}\n\nBased on the memories above, answer the question in as few words "
    "as possible.\nQuestion: {query}\nAnswer:"
)


# ---------------------------------------------------------------------------------------------- mem0 replay
class Replay:
    """mem0's recorded answers, per user and query (``search(top_k=n)``: the first n of the recording)."""

    def __init__(self, answers: Mapping[str, Mapping[str, list[dict[str, Any]]]]) -> None:
        self.answers = answers

    def search(self, query: str, *, top_k: int = 100, filters: Mapping[str, Any] | None = None, **_: Any) -> Any:
        user = str((filters or {}).get("user_id"))
        return {"results": [dict(r) for r in self.answers[user][query][:top_k]]}

    def get(self, memory_id: str) -> Any:
        return None


def record_answers(a: WorkersStateConfig) -> tuple[dict[str, list[str]], dict[str, dict[str, list[dict[str, Any]]]]]:
    """Ingest the users' memories into the embedded mem0 and search each question once."""
    from benchmarks.common.ingest import ingest, make_memory
    from benchmarks.common.locomo import load_locomo
    from benchmarks.common.locomo_select import select_conversations
    from benchmarks.locomo.runner import select_questions

    convs = [c for _, c in select_conversations(a.conversations, load_locomo(a.locomo))]
    memory = make_memory()
    ingested = ingest(memory, convs, "observations", max_memories=a.max_memories, progress=False)
    questions: dict[str, list[str]] = {}
    answers: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for ing, conv in zip(ingested, convs):
        qs = list(dict.fromkeys(q.question for q in select_questions(conv, a.questions)))
        questions[ing.user_id] = qs
        answers[ing.user_id] = {}
        for q in qs:
            out = memory.search(q, top_k=a.k + a.max_overfetch, filters={"user_id": ing.user_id}, threshold=0.0)
            answers[ing.user_id][q] = [
                {k: r.get(k) for k in ("id", "memory", "score", "user_id")} for r in out["results"]
            ]
    return questions, answers


# ---------------------------------------------------------------------------------------------- workers
#: the store calls TimedStore times (each one round trip)
_TIMED = frozenset({"read", "write", "delete", "read_many", "count", "read_counts", "read_recent"})


class TimedStore:
    """A state store that adds up the time its calls take (the store's share of a search)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.calls = 0

    def _timed(self, name: str, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return getattr(self.inner, name)(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1

    def __getattr__(self, name: str) -> Any:
        """The store's calls (read, write, delete, read_many, the counters), each timed and counted as one round
        trip (a pipelined ``read_many`` too)."""
        if name not in _TIMED:
            raise AttributeError(name)
        return lambda *args, **kwargs: self._timed(name, *args, **kwargs)

    def close(self) -> None:
        self.inner.close()


def worker_main(conn: Any, answers_file: str, store_url: str | None, k: int, max_overfetch: int) -> None:
    """One worker process: requests (user, question) in, the turn's context and timings out."""
    from cp_memory.memory import ContextPilotMemory

    answers = json.loads(Path(answers_file).read_text())
    cp = ContextPilotMemory(Replay(answers), state_store=store_url, max_overfetch=max_overfetch)
    timed = None
    shared = cp._cp_pipeline.shared
    if shared is not None:
        timed = TimedStore(shared.state.store)
        shared.state.store = timed
    while True:
        job = conn.recv()
        if job is None:
            break
        user, query, conversation = job
        before = (timed.seconds, timed.calls) if timed else (0.0, 0)
        t0 = time.perf_counter()
        response = cp.search(query, filters={"user_id": user}, top_k=k, conversation_id=conversation)
        search_calls = timed.calls - before[1] if timed else 0
        turn = cp.commit(response)
        search_s = time.perf_counter() - t0
        store = (timed.seconds - before[0], timed.calls - before[1]) if timed else (0.0, 0)
        conn.send(
            {
                "response": {"context_pilot": response["context_pilot"]},
                "turn": turn,
                "search_s": search_s,
                "store_s": store[0],
                "store_calls": store[1],
                "search_store_calls": search_calls,
            }
        )
    conn.close()


@contextmanager
def workers(n: int, answers_file: Path, store_url: str | None, k: int, max_overfetch: int) -> Iterator[list[Any]]:
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for _ in range(n):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=worker_main, args=(child, str(answers_file), store_url, k, max_overfetch))
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    try:
        yield pipes
    finally:
        for p in pipes:
            try:
                p.send(None)
            except OSError:
                pass
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()


# ---------------------------------------------------------------------------------------------- redis
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server on a free loopback port in a temporary folder (no persistence), stopped at the end."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (scripts/setup.sh installs it; or pass --redis-url)")
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="cp-redis-") as folder:
        args = [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", folder, "--save", "", "--appendonly", "no"]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def given_redis(url: str) -> Iterator[str]:
    yield url


# ---------------------------------------------------------------------------------------------- one run
@dataclass
class Run:
    workers: int
    store: str
    workload: str
    requests: int = 0
    pointers: int = 0
    wrong_pointers: int = 0
    unrecorded_turns: int = 0
    prompt_tokens: int = 0
    prefilled_tokens: int = 0
    hit_ratio: float = 0.0
    search_ms_p50: float = 0.0
    search_ms_p99: float = 0.0
    store_ms_p50: float = 0.0
    store_ms_p99: float = 0.0
    store_calls_per_search: float = 0.0  # round trips of search + commit (a pipelined read of several keys: one)
    search_round_trips: float = 0.0  # of these, the search's own (the commit runs after the prompt is sent)
    wrong_examples: list[str] = field(default_factory=list)


def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _prompt(out: Mapping[str, Any], query: str, transcript: list[str] | None) -> str:
    """The engine's prompt: the turn alone, or (a conversation) every earlier turn as sent, then this one."""
    turn = PROMPT_TEMPLATE.format(context=out["response"]["context_pilot"]["context"], query=query)
    if transcript is None:
        return turn
    transcript.append(turn)
    return "\n\n".join(transcript)


def run_once(
    n: int,
    store_url: str | None,
    workload: str,
    questions: Mapping[str, list[str]],
    a: WorkersStateConfig,
    answers: Path,
) -> Run:
    """All users' turns, round-robin over ``n`` fresh workers, one shared (cold) engine model."""
    engine = BlockPrefixCache(None, block_size=16)
    histories = {u: History() for u in questions}
    transcripts: dict[str, list[str]] = {u: [] for u in questions}
    search_s: list[float] = []
    store_s: list[float] = []
    calls = search_calls = 0
    with workers(n, answers, store_url, a.k, a.max_overfetch) as pipes:
        i = 0
        for j in range(max(len(qs) for qs in questions.values())):
            for user, qs in questions.items():
                if j >= len(qs):
                    continue
                pipe = pipes[(i + i // n) % n]  # round-robin, offset by one each round (module doc)
                i += 1
                pipe.send((user, qs[j], user if workload == "conversation" else None))
                out = pipe.recv()
                if workload == "conversation":
                    histories[user].check(out["response"])
                    histories[user].sent(out["response"], out["turn"])
                engine.serve(_prompt(out, qs[j], transcripts[user] if workload == "conversation" else None))
                search_s.append(out["search_s"])
                store_s.append(out["store_s"])
                calls += out["store_calls"]
                search_calls += out["search_store_calls"]
    run = Run(n, "redis" if store_url else "local", workload, requests=len(search_s))
    run.pointers = sum(h.pointers for h in histories.values())
    run.wrong_pointers = sum(len(h.wrong) for h in histories.values())
    run.unrecorded_turns = sum(h.unrecorded for h in histories.values())
    run.wrong_examples = [w for h in histories.values() for w in h.wrong][:5]
    stats = engine.stats
    run.prompt_tokens, run.prefilled_tokens = stats.prompt_tokens, stats.prefill_tokens
    run.hit_ratio = round(stats.hit_ratio, 4)
    run.search_ms_p50, run.search_ms_p99 = round(_pct(search_s, 0.5) * 1e3, 3), round(_pct(search_s, 0.99) * 1e3, 3)
    run.store_ms_p50, run.store_ms_p99 = round(_pct(store_s, 0.5) * 1e3, 3), round(_pct(store_s, 0.99) * 1e3, 3)
    run.store_calls_per_search = round(calls / max(1, len(search_s)), 2)
    run.search_round_trips = round(search_calls / max(1, len(search_s)), 2)
    return run


def markdown(runs: Sequence[Run], header: str) -> str:
    lines = [
        header,
        "",
        "| workload | workers | store | requests | pointers | wrong pointers | hit ratio | prefilled tokens "
        "| search p50 / p99 (ms) | store p50 / p99 per search (ms) | store round trips / turn (search) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in runs:
        lines.append(
            f"| {r.workload} | {r.workers} | {r.store} | {r.requests} | {r.pointers} | {r.wrong_pointers} | "
            f"{r.hit_ratio:.1%} | "
            f"{r.prefilled_tokens:,} | {r.search_ms_p50:.2f} / {r.search_ms_p99:.2f} | "
            f"{r.store_ms_p50:.2f} / {r.store_ms_p99:.2f} | {r.store_calls_per_search} ({r.search_round_trips}) |"
        )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- gateway arm
@dataclass
class GatewayRun:
    replicas: int
    store: str
    requests: int = 0
    replayed_segments: int = 0
    rewritten_segments: int = 0
    prompt_tokens: int = 0
    prefilled_tokens: int = 0
    hit_ratio: float = 0.0
    gateway_ms_p50: float = 0.0
    gateway_ms_p99: float = 0.0
    store_round_trips_per_request: float = 0.0  # the shared store's calls (each one round trip)
    store_ms_per_request: float = 0.0


def chat_sessions(a: WorkersStateConfig) -> dict[str, list[dict[str, Any]]]:
    """Per LoCoMo conversation, the bodies a re-rendering chat client sends (module doc)."""
    from benchmarks.common.locomo import load_locomo
    from benchmarks.common.locomo_select import select_conversations

    sessions: dict[str, list[dict[str, Any]]] = {}
    for _, conv in select_conversations(a.conversations, load_locomo(a.locomo)):
        history: list[tuple[str, str]] = []
        bodies: list[dict[str, Any]] = []
        system = f"You are {conv.speakers[1]}, talking with {conv.speakers[0]}."
        for t in conv.turns:
            role = "user" if t.speaker == conv.speakers[0] else "assistant"
            history.append((role, t.text))
            if role == "user" and len(bodies) < a.questions:
                flip = len(bodies) % 2 == 1  # this request's rendering of the earlier messages
                messages = [{"role": "system", "content": system}]
                for j, (r, text) in enumerate(history):
                    content: Any = [{"type": "text", "text": text}] if flip and j < len(history) - 1 else text
                    messages.append({"content": content, "role": r} if flip else {"role": r, "content": content})
                bodies.append({"model": "model", "messages": messages, "max_tokens": 16})
        sessions[conv.sample_id] = bodies
    return sessions


def gateway_once(
    n: int, store_url: str | None, sessions: Mapping[str, list[dict[str, Any]]], replay: bool = True
) -> GatewayRun:
    """Every session's requests round-robin over ``n`` fresh replicas; one shared (cold) engine model."""
    from cp_memory.gateway import GatewayConfig, UpstreamKind
    from cp_memory.gateway.flow import Gateway
    from cp_memory.gateway.protocols import Api
    from cp_memory.providers.usage import CacheUsage

    kind = UpstreamKind.COMPATIBLE
    settings: dict[str, Any] = {"secret": "workers-state-benchmark", "replay": replay}
    if store_url is not None:
        settings["state_store"] = store_url
    config = GatewayConfig(upstream="http://127.0.0.1:1", upstream_kind=kind, **settings)
    gws = [Gateway(config, kind) for _ in range(n)]
    timed = []
    for gw in gws:
        client = getattr(gw.store, "client", None)
        if client is not None:  # a shared store: its calls counted and timed
            client.store = TimedStore(client.store)
            timed.append(client.store)
    engine, run, times = BlockPrefixCache(None, block_size=16), GatewayRun(n, "redis" if store_url else "local"), []
    i = 0
    for j in range(max(len(b) for b in sessions.values())):
        for sample, bodies in sessions.items():
            if j >= len(bodies):
                continue
            gw = gws[(i + j) % n]  # every replica gets every n-th request, offset by one each round
            i += 1
            headers = {"authorization": f"Bearer key-{sample}"}
            t0 = time.perf_counter()
            plan = gw.plan(Api.CHAT, headers, json.dumps(bodies[j]).encode())
            gw.commit(plan)
            gw.record(plan, CacheUsage(provider="compatible", model="model"))
            times.append(time.perf_counter() - t0)
            engine.serve(plan.content.decode())
            run.replayed_segments += plan.replayed
            run.rewritten_segments += plan.rewritten
    stats = engine.stats
    run.requests, run.prompt_tokens, run.prefilled_tokens = len(times), stats.prompt_tokens, stats.prefill_tokens
    run.hit_ratio = round(stats.hit_ratio, 4)
    run.gateway_ms_p50, run.gateway_ms_p99 = round(_pct(times, 0.5) * 1e3, 3), round(_pct(times, 0.99) * 1e3, 3)
    if timed and times:
        run.store_round_trips_per_request = round(sum(t.calls for t in timed) / len(times), 3)
        run.store_ms_per_request = round(sum(t.seconds for t in timed) / len(times) * 1e3, 3)
    return run


def gateway_markdown(runs: Sequence[GatewayRun], header: str) -> str:
    lines = [
        header,
        "",
        "| replicas | sessions | requests | replayed segments | rewritten segments restored | hit ratio "
        "| prefilled tokens | gateway p50 / p99 (ms) | store round trips / ms a request |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in runs:
        store = f"{r.store_round_trips_per_request:.2f} / {r.store_ms_per_request:.2f}" if r.store == "redis" else "-"
        lines.append(
            f"| {r.replicas} | {r.store} | {r.requests} | {r.replayed_segments} | {r.rewritten_segments} | "
            f"{r.hit_ratio:.1%} | {r.prefilled_tokens:,} | {r.gateway_ms_p50:.2f} / {r.gateway_ms_p99:.2f} | {store} |"
        )
    return "\n".join(lines) + "\n"


def gateway_arm(a: WorkersStateConfig, argv: list[str] | None, url: str) -> None:
    import redis

    sessions = chat_sessions(a)
    runs = [gateway_once(1, None, sessions, replay=False)]
    runs[-1].store = "passthrough (replay off)"
    for n in (1, a.gateway_replicas):
        for store in (None, url):
            if store is not None:
                redis.Redis.from_url(store).flushdb()
            runs.append(gateway_once(n, store, sessions))
            logger.info("%s", runs[-1])
    header = (
        f"{len(sessions)} LoCoMo dialogues as chat sessions x {a.questions} requests, a client re-rendering its "
        f"history, round-robin; one shared engine (cache model, 16-token blocks); {harness.machine().summary}"
    )
    payload = harness.envelope("benchmarks.workers_state", argv, config=asdict(a), summary=[asdict(r) for r in runs])
    harness.write_outputs(Path(a.out), "workers_state_gateway", payload, markdown=gateway_markdown(runs, header))
    print(gateway_markdown(runs, header))


@dataclass(frozen=True, kw_only=True)
class WorkersStateConfig(LocomoOptions, OutOptions, VerboseOptions):
    """The run's options (:func:`parse_args`)."""

    workers: int
    conversations: str
    questions: int
    k: int
    max_overfetch: int
    max_memories: int | None
    redis_url: str | None
    arms: str
    gateway_replicas: int

    @property
    def arm_names(self) -> set[str]:
        """``--arms`` as a set: ``workers``, ``gateway`` or both."""
        return set(split_commas(self.arms))

    def __post_init__(self) -> None:
        if not self.arm_names or self.arm_names - {"workers", "gateway"}:
            raise ValueError(f"--arms takes workers, gateway or both, got {self.arms!r}")


def parse_args(argv: list[str] | None) -> WorkersStateConfig:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.workers_state",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--workers", type=int, default=4, help="processes behind round-robin (and 1)")
    ap.add_argument("--conversations", default="0-3", help="LoCoMo conversations (one user each): all, 0-3, 0,5")
    ap.add_argument("--questions", type=int, default=20, help="questions (turns) per user")
    ap.add_argument("--k", type=int, default=20, help="top_k of every search")
    ap.add_argument("--max-overfetch", type=int, default=20, help="ContextPilotConfig.max_overfetch")
    ap.add_argument("--max-memories", type=int, default=None, help="first N memories per user")
    ap.add_argument("--redis-url", default=None, help="a Redis to use (default: a private redis-server)")
    ap.add_argument("--arms", default="workers,gateway", help="workers (mem0 wrapper processes), gateway, or both")
    ap.add_argument("--gateway-replicas", type=int, default=2, help="gateway replicas behind round-robin (and 1)")
    harness.add_locomo(ap)
    harness.add_out(ap, "results")
    harness.add_verbose(ap)
    return parse_config(ap, WorkersStateConfig, argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    harness.setup_logging(a.verbose)
    arms = a.arm_names
    Path(a.out).mkdir(parents=True, exist_ok=True)
    with given_redis(a.redis_url) if a.redis_url else private_redis() as url:
        if "gateway" in arms:
            gateway_arm(a, argv, url)
        if "workers" in arms:
            workers_arm(a, argv, url)
    return 0


def workers_arm(a: WorkersStateConfig, argv: list[str] | None, url: str) -> None:
    """The mem0 wrapper's workers (module doc): 1 and N processes, local store and Redis, two workloads."""
    questions, answers = record_answers(a)
    out = Path(a.out)
    runs: list[Run] = []
    import redis

    with tempfile.TemporaryDirectory(prefix="cp-workers-") as tmp:
        answers_file = Path(tmp) / "answers.json"
        answers_file.write_text(json.dumps(answers))
        for workload in WORKLOADS:
            for n in (1, a.workers):
                for store in (None, url):
                    if store is not None:
                        redis.Redis.from_url(store).flushdb()
                    runs.append(run_once(n, store, workload, questions, a, answers_file))
                    logger.info("%s", runs[-1])
    m = harness.machine()
    header = (
        f"{len(questions)} LoCoMo users x {a.questions} turns, k={a.k}, round-robin; one shared engine "
        f"(cache model, 16-token blocks); {m.summary}"
    )
    payload = harness.envelope("benchmarks.workers_state", argv, config=asdict(a), summary=[asdict(r) for r in runs])
    harness.write_outputs(out, "workers_state", payload, markdown=markdown(runs, header))
    print(markdown(runs, header))


if __name__ == "__main__":
    raise SystemExit(main())
