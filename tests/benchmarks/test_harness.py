"""The one benchmark harness: every result says what machine and which exact command made it, the shared
options take their defaults from the library, and one resolver names every model."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

import pytest

from benchmarks.common import harness
from cp_memory.core.alignment_mode import DEFAULT_PROTECT


def test_the_envelope_carries_the_exact_command_the_machine_and_the_commit() -> None:
    payload = harness.envelope("benchmarks.locomo", ["--quick", "--top-k", "20"], summary=[1, 2])
    assert payload["command"] == "python -m benchmarks.locomo --quick --top-k 20"
    assert payload["summary"] == [1, 2]
    described = payload["machine"]
    assert described["cores"] >= 1 and described["python"] and described["cpu"]
    assert described["summary"].startswith(described["cpu"])
    assert "GPU" in described["summary"]  # "no GPU" or the GPU's name: never silent
    assert payload["git_commit"] is None or len(payload["git_commit"]) == 40


def test_the_command_is_quoted_so_it_re_runs_as_written() -> None:
    cmd = harness.command("benchmarks.coa", ["--engine", "vllm", "--vllm-args=--block-size 32"])
    assert cmd == "python -m benchmarks.coa --engine vllm '--vllm-args=--block-size 32'"
    assert shlex.split(cmd)[3:] == ["--engine", "vllm", "--vllm-args=--block-size 32"]


def test_a_field_of_the_benchmark_overrides_the_envelope() -> None:
    assert harness.envelope("benchmarks.x", [], machine="described elsewhere")["machine"] == "described elsewhere"


def test_write_outputs_writes_json_markdown_and_the_plot(tmp_path: Path) -> None:
    drawn: list[Path] = []

    def plot(path: Path) -> Path:
        path.write_bytes(b"png")
        drawn.append(path)
        return path

    out = harness.write_outputs(
        tmp_path / "run", "foo", {"command": "c", "n": 1}, markdown="| a |", plot=plot, also_json=tmp_path / "c.json"
    )
    assert json.loads(out["json"].read_text()) == {"command": "c", "n": 1}
    assert json.loads((tmp_path / "c.json").read_text()) == {"command": "c", "n": 1}
    assert out["markdown"].read_text() == "| a |\n"
    assert drawn == [tmp_path / "run" / "foo.png"] and out["plot"] == drawn[0]


def test_a_missing_plotter_writes_no_png(tmp_path: Path) -> None:
    out = harness.write_outputs(tmp_path, "foo", {}, plot=lambda path: None)
    assert "plot" not in out and not (tmp_path / "foo.png").exists()


def test_shared_options_take_the_library_defaults() -> None:
    ap = argparse.ArgumentParser()
    for add in (harness.add_locomo, harness.add_json, harness.add_swap_protect, harness.add_verbose):
        add(ap)
    harness.add_out(ap, "docs/results")
    harness.add_model(ap)
    harness.add_engine(ap)
    harness.add_threads(ap, 1, "worker")
    args = ap.parse_args([])
    assert args.swap_protect == DEFAULT_PROTECT
    assert (args.out, args.model, args.engine, args.threads, args.locomo, args.json) == (
        "docs/results",
        "random",
        "llama",
        1,
        None,
        None,
    )
    with pytest.raises(SystemExit):
        ap.parse_args(["--model", "gpt-5"])  # a closed list unless the benchmark takes paths


def test_one_resolver_names_every_model(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"")
    assert harness.resolve_model(str(gguf)) == gguf
    assert harness.resolve_model("Org/Model", "vllm") == Path("Org/Model")  # vLLM resolves an id itself
    with pytest.raises(ValueError, match="vllm only"):
        harness.resolve_model("smollm2-random", "llama")
    with pytest.raises(FileNotFoundError, match="no such path"):
        harness.resolve_model(str(tmp_path / "absent.gguf"))
    with pytest.raises(ValueError, match="unknown engine"):
        harness.resolve_model("random", "sglang-on-cpu")
