"""benchmarks.quality: the arms, the position test's prompts, the paired bootstrap, the resumable answer
cache, the 1.5B model's fetch checks, and five LoCoMo questions through SmolLM2-135M on llama-server end to
end (answers scored, every arm and the position test reported; a second run answers from the cache)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from benchmarks.common.locomo import QA
from benchmarks.common.model_fetch import QWEN25_CODER_15B, ModelMissing, _check_header, gguf_header, model_path
from benchmarks.locomo.evidence import EvidenceIndex
from benchmarks.quality.arms import ARMS, DECISIVE, Arm, arms_for, parse_arms
from benchmarks.quality.cache import Answer, AnswerCache
from benchmarks.quality.cli import label, main, parse_questions
from benchmarks.quality.labelled import rank_labelled_context
from benchmarks.quality.position import VARIANTS, position_prompts, single_evidence
from benchmarks.quality.report import harness_speed
from benchmarks.quality.stats import exact_match, paired_diff
from benchmarks.quality.timing import HarnessClock, read_runs, write_run
from cp_memory.memory.config import ContextPilotConfig
from tests.support import llama_server_binary, locomo_file


def test_arms_pairs_and_chat_limit() -> None:
    assert [a.name for a in parse_arms("decisive")] == list(DECISIVE)
    assert DECISIVE == ("baseline", "default", "aligned-noann", "swap@0.1/0.75", "labelled", "chat", "chat+dedup")
    assert ARMS["default"].library_defaults and not ARMS["default"].options
    assert ARMS["chat+dedup"].options == ARMS["chat"].options == {"align": False, "labels": "bullet"}
    assert ARMS["chat-doc+dedup"].pair == "chat-doc"
    assert [a.name for a in parse_arms("chat+dedup")] == ["chat", "chat+dedup"]
    assert [a.name for a in parse_arms("aligned-full")] == ["baseline", "aligned-full"]
    assert ARMS["aligned-full"].options == {"annotate_top": None}
    assert ARMS["aligned-noann"].options == {"annotate": False}
    # the library default has no order annotation since the k=20 result (docs/quality.md); swap follows it
    assert ContextPilotConfig().annotate is False
    assert ARMS["swap@0.1/0.75"].options == {"annotate": False} and ARMS["swap+ann"].options == {}
    assert ARMS["chat+dedup"].pair == "chat" and ARMS["swap@0.1/0.75"].pair == "baseline"
    assert all(not a.chat for a in arms_for(tuple(ARMS.values()), 100, chat_max_k=20))
    with pytest.raises(ValueError, match="unknown arm"):
        parse_arms("aligned,nonsense")
    assert parse_questions("20=300,100=100") == {20: 300, 100: 100}
    with pytest.raises(ValueError, match="K=N"):
        parse_questions("20:300")


def test_each_engine_has_its_own_cache_name() -> None:
    assert label("smollm2", "llama") == "smollm2"
    assert label("qwen2.5-1.5b", "torch") == "qwen2.5-1.5b@torch"
    assert label("/models/foo.gguf", "vllm") == "foo@vllm"


def test_exact_match_uses_locomo_normalisation() -> None:
    assert exact_match("The 7 May, 2023.", "7 May 2023", 2) == 1.0
    assert exact_match("Sweden", "Sweden; her home country", 3) == 1.0
    assert exact_match("Norway", "Sweden", 4) == 0.0


def test_paired_bootstrap_is_seeded_and_brackets_the_mean() -> None:
    base = {i: 0.5 for i in range(40)}
    better = {i: (1.0 if i % 4 else 0.5) for i in range(40)}  # +0.5 on 30 of 40 questions: +37.5 points
    d = paired_diff(better, base)
    assert d is not None and d.n == 40 and d.mean == 37.5
    assert d.lo <= d.mean <= d.hi and d.significant
    assert paired_diff(better, base) == d  # fixed seed: the same interval every time
    same = paired_diff(base, base)
    assert same is not None and (same.mean, same.lo, same.hi, same.significant) == (0.0, 0.0, 0.0, False)
    assert paired_diff({1: 1.0}, {2: 1.0}) is None  # nothing paired


def test_position_prompts_move_only_the_evidence() -> None:
    qa = QA("When did Ann move?", "2019", 2, ("D1:3",))
    index = EvidenceIndex({"ev": ("D1:3",), "a": ("D1:1",), "b": ("D2:1",), "c": (), "d": ("D1:9",)})
    assert single_evidence(qa, index) == "ev"
    assert single_evidence(QA("q", "a", 1, ("D1:3", "D1:1")), index) is None
    texts = {m: f"fact {m}" for m in ("ev", "a", "b", "c", "d")}
    prompts = dict(position_prompts(qa, index, ["a", "ev", "b", "c", "d"], texts, 5))
    assert tuple(prompts) == VARIANTS
    lines = {v: [ln for ln in p.splitlines() if ln.startswith("[Doc")] for v, p in prompts.items()}
    assert lines["first"][0] == "[Doc 1] fact ev"
    assert lines["middle"][2] == "[Doc 3] fact ev" and lines["last"][4] == "[Doc 5] fact ev"
    assert lines["middle"] == lines["middle+ann"] and "priority order" not in prompts["middle"]
    # the annotation ranks the evidence first, then mem0's order of the others (top five)
    assert (
        prompts["last+ann"]
        .splitlines()[-1]
        .startswith("Please read the context in the following priority order: [Doc 5]")
    )


def _row(arm: str, q: int, f1: float, sha: str = "s") -> Answer:
    return Answer("m", "arms", 20, arm, "conv-1", q, 4, "x", f1, f1, sha)


def test_answer_cache_resumes_and_checks_the_prompt(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    cache = AnswerCache(path)
    cache.add(_row("baseline", 1, 1.0))
    cache.add(_row("aligned", 1, 0.0))
    with path.open("a") as f:
        f.write('{"model": "m", "cut sh')  # a line cut short by a kill
    again = AnswerCache(path)
    assert len(again) == 2
    assert again.get(_row("baseline", 1, 1.0).key, "s") is not None
    assert again.get(_row("baseline", 1, 1.0).key, "other prompt") is None


def test_identical_request_is_found_under_any_key(tmp_path: Path) -> None:
    cache = AnswerCache(tmp_path / "m.jsonl")
    cache.add(_row("baseline", 1, 1.0))
    assert cache.by_sha("m", "s") is not None and cache.by_sha("m", "other") is None
    assert AnswerCache(tmp_path / "m.jsonl").by_sha("m", "s") is not None  # rebuilt on load


def test_labelled_blocks_move_with_their_rank_labels() -> None:
    """mem0 ranked m1 > m2 > m3; alignment put m3 first. Each block keeps its rank label, and the annotation
    names the labels in rank order because the prompt no longer starts with them in that order."""
    texts = {"m1": "Alice likes tea", "m2": "Bob runs", "m3": "Carol paints"}
    ctx = rank_labelled_context(["m3", "m1", "m2"], ["m1", "m2", "m3"], texts)
    assert ctx.splitlines()[:3] == ["[Doc 3] Carol paints", "[Doc 1] Alice likes tea", "[Doc 2] Bob runs"]
    assert "[Doc 1]" in ctx.splitlines()[-1] and ctx.splitlines()[-1].index("[Doc 1]") < ctx.splitlines()[-1].index(
        "[Doc 2]"
    )
    in_order = rank_labelled_context(["m1", "m2", "m3"], ["m1", "m2", "m3"], texts)
    assert in_order == "[Doc 1] Alice likes tea\n[Doc 2] Bob runs\n[Doc 3] Carol paints"  # nothing owed
    with pytest.raises(ValueError, match="permutation"):
        rank_labelled_context(["m1", "m4"], ["m1", "m2"], {**texts, "m4": "x"})


def test_library_defaults_arm_takes_no_options() -> None:
    with pytest.raises(ValueError, match="no options"):
        Arm("x", "aligned", {"annotate": False}, library_defaults=True)


def test_harness_clock_charges_the_innermost_phase_and_reports_speed(tmp_path: Path) -> None:
    clock = HarnessClock()
    with clock.phase("build"):
        with clock.phase("engine"):
            pass
    clock.engine_reply(500.0, 1000, 400)
    clock.k_done(20, 30, 45.0)
    with pytest.raises(ValueError, match="unknown phase"):
        with clock.phase("nap"):
            pass
    record = clock.summary(30)
    assert record["prefilled_tokens"] == 600 and record["prefill_tokens_per_s"] == 1200.0
    assert record["by_k"]["20"] == {"answers": 30, "seconds": 45.0, "answers_per_minute": 40.0}
    cache = tmp_path / "quality_answers" / "m.jsonl"
    write_run(cache, record)
    write_run(cache, record)
    speed = harness_speed(read_runs(cache))
    assert speed is not None and speed["runs"] == 2 and speed["answers"] == 60
    assert speed["by_k"]["20"]["answers_per_minute"] == 40.0 and speed["prefilled_tokens_per_answer"] == 20
    assert harness_speed([]) is None


def _gguf(path: Path, kv: dict[str, str | int]) -> Path:
    def s(x: str) -> bytes:
        return struct.pack("<Q", len(x.encode())) + x.encode()

    body = b"".join(
        s(k) + (struct.pack("<I", 8) + s(v) if isinstance(v, str) else struct.pack("<II", 4, v)) for k, v in kv.items()
    )
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)) + body)
    return path


def test_fetched_model_checks_header_and_names_the_fetch_command(tmp_path: Path) -> None:
    good = gguf_header(
        _gguf(
            tmp_path / "a.gguf",
            {
                "general.architecture": "qwen2",
                "general.name": "Qwen2.5 Coder 1.5B Instruct GGUF",
                "general.file_type": 15,
            },
        )
    )
    _check_header(QWEN25_CODER_15B, good)
    wrong = gguf_header(
        _gguf(tmp_path / "b.gguf", {"general.architecture": "llama", "general.name": "SmolLM2", "general.file_type": 3})
    )
    with pytest.raises(ValueError, match="not Qwen2.5-Coder-1.5B-Instruct"):
        _check_header(QWEN25_CODER_15B, wrong)
    (tmp_path / "c.bin").write_bytes(b"nope")
    with pytest.raises(ValueError, match="GGUF magic"):
        gguf_header(tmp_path / "c.bin")
    with pytest.raises(ModelMissing, match="python -m benchmarks.common.model_fetch qwen2.5-1.5b"):
        model_path("qwen2.5-1.5b", root=tmp_path)


def test_missing_model_is_a_clear_error_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CP_MEMORY_CACHE", str(tmp_path / "empty-cache"))
    assert main(["--model", "qwen2.5-1.5b", "--out", str(tmp_path), "--no-report"]) == 2
    assert "python -m benchmarks.common.model_fetch qwen2.5-1.5b" in caplog.text


def test_five_questions_through_smollm2_end_to_end(tmp_path: Path) -> None:
    """Five LoCoMo questions, every arm at k=5 (chats of three), the position test on two questions:
    real mem0, real llama-server, real SmolLM2-135M-Instruct answers, scored and reported."""
    llama_server_binary()
    locomo = str(locomo_file())
    argv = ["--locomo", locomo, "--conversations", "0", "--questions", "5=5", "--position", "2", "--position-k", "5",
            "--chat-turns", "3", "--max-tokens", "12", "--out", str(tmp_path),
            "--mem0-dir", str(tmp_path / "mem0")]  # fmt: skip
    assert main(argv) == 0
    result = json.loads((tmp_path / "quality.json").read_text())
    arms = result["models"]["smollm2"]["arms"]["5"]
    assert list(arms) == list(DECISIVE)
    for name, cell in arms.items():
        assert cell["n"] == 5 and 0 <= cell["f1"] <= 100 and 0 <= cell["em"] <= 100
        assert sum(c["n"] for c in cell["categories"].values()) == 5
        assert (cell["d_f1"] is None) == (name in ("baseline", "chat"))
    assert arms["chat+dedup"]["pair"] == "chat"
    position = result["models"]["smollm2"]["position"]["5"]
    assert list(position) == list(VARIANTS) and position["first"]["n"] == 2
    assert result["counts"]["smollm2"] == {"k=5": 5, "position k=5": 2}
    assert (tmp_path / "quality.md").read_text().startswith("# LoCoMo answer quality")
    lines = (tmp_path / "quality_answers" / "smollm2.jsonl").read_text().splitlines()
    assert len(lines) == 7 * 5 + 5 * 2
    speed = result["harness_speed"]["smollm2"]
    assert speed["runs"] == 1 and 0 < speed["answers"] <= 45 and speed["by_k"]["5"]["answers"] <= 35
    # resumable: a second run rebuilds the same prompts and answers every one of them from the cache
    assert main(argv) == 0
    assert (tmp_path / "quality_answers" / "smollm2.jsonl").read_text().splitlines() == lines
