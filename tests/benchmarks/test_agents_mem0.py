"""``python -m benchmarks.agents replay --mem0`` on slices of the committed traces, on the modelled provider
rules: a LoCoMo user's memories (real embedded mem0) as the harness user's; the gateway by its own CLI with
``--mem0 embedded`` against passthrough given mem0's own proxy pattern; another tenant's memories (the same user
name) never reach the engine."""

from __future__ import annotations

from pathlib import Path

from benchmarks.agents.bench import TRACES, _generation_records, parse_args, run_trace
from benchmarks.agents.engines import start_engine
from benchmarks.agents.memories import prepare_memories
from tests.mem0_fixtures import require_mem0
from tests.support import locomo_file


def _replay(trace: Path, requests: int, workdir: Path) -> dict[str, object]:
    require_mem0()
    opts = parse_args(["--requests", str(requests), "--rounds", "1", "--max-tokens", "4", "--workdir", str(workdir)])
    records = _generation_records(trace, requests)
    setup = prepare_memories(records, workdir / "store", locomo=str(locomo_file()), conv=0, other=1, count=20)
    with start_engine("modelled") as engine:
        return run_trace(engine, trace, ["passthrough", "gateway"], opts, setup)


def test_claude_code_sessions_carry_no_memories_where_the_newest_message_is_no_user_text(tmp_path: Path) -> None:
    """Claude Code's first request ends with its ``system``-role reminder, every later one with tool results:
    neither arm has a user message to put memories into, and nothing of the other tenant's reaches the engine."""
    run = _replay(TRACES[0], 3, tmp_path)
    memories = run["memories"]
    assert isinstance(memories, dict) and memories["requests_searched_mem0_pattern"] == []
    for arm in ("passthrough", "gateway"):
        assert memories["seen_upstream"][arm] == {
            "requests_with_memories": 0,
            "own_memories_seen": 0,
            "foreign_memories_seen": 0,
        }
    arms = run["arms"]
    assert isinstance(arms, dict)
    assert arms["gateway"]["byte_stability"]["breaks"] == [] and arms["gateway"]["errors"] == 0


def test_codex_sessions_get_the_users_memories_and_only_the_gateway_keeps_them_cached(tmp_path: Path) -> None:
    """The Codex trace's sessions open with the user's prompt: both arms put the user's memories there; mem0's
    pattern sends the next request without them (its cached prefix breaks at that item), the gateway replays
    them (byte-stable); the other tenant's memories never appear."""
    run = _replay(TRACES[1], 6, tmp_path)
    memories = run["memories"]
    assert isinstance(memories, dict)
    seen = memories["seen_upstream"]
    assert seen["passthrough"]["own_memories_seen"] >= 1 and seen["gateway"]["own_memories_seen"] >= 1
    assert seen["passthrough"]["foreign_memories_seen"] == 0 and seen["gateway"]["foreign_memories_seen"] == 0
    arms = run["arms"]
    assert isinstance(arms, dict)
    assert arms["gateway"]["byte_stability"]["breaks"] == []
    assert arms["passthrough"]["byte_stability"]["breaks"]  # mem0's pattern drops them on the next request


def test_the_gateway_replays_memories_placed_as_a_block_of_their_own() -> None:
    """A list content gets the memories as a first block of its own: the client's next copy (without it) is
    sent again as it went out, the client's marks kept on its own blocks."""
    from cp_memory.gateway.protocols import Api
    from cp_memory.gateway.replay import SentLog, digest, replay

    client = {"role": "user", "content": [{"type": "text", "text": "Summarise the minutes."}]}
    sent = {
        "role": "user",
        "content": [{"type": "text", "text": "Memories about the user:\n1 ...\n\n"}, *client["content"]],
    }
    log = SentLog((sent,), (digest(Api.MESSAGES, client),), frozenset({0}))
    again = {
        "role": "user",
        "content": [{"type": "text", "text": "Summarise the minutes.", "cache_control": {"type": "ephemeral"}}],
    }
    out = replay(Api.MESSAGES, log, [again]).segments[0]
    assert out["content"][0] == sent["content"][0]
    assert out["content"][1] == again["content"][0]
