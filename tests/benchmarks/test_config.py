"""A benchmark's typed config: its parser (the harness's shared options plus its own) parsed once into a
frozen dataclass; a bad value is an argparse error, a parser and config that disagree a TypeError."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import asdict, dataclass

import pytest

from benchmarks.common import harness
from benchmarks.common.config import LocomoOptions, ModelOptions, OutOptions, parse_config, split_commas


@dataclass(frozen=True, kw_only=True)
class FooConfig(LocomoOptions, ModelOptions, OutOptions):
    users: int
    arms: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.users < 1:
            raise ValueError("--users must be >= 1")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.foo")
    harness.add_locomo(ap)
    harness.add_model(ap)
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--arms", default="a,b")
    harness.add_out(ap, "results/foo")
    return ap


def test_a_command_line_becomes_the_benchmarks_frozen_config() -> None:
    cfg = parse_config(_parser(), FooConfig, ["--users", "2", "--arms", "x, y", "--model", "tiny"], arms=split_commas)
    assert cfg == FooConfig(locomo=None, model="tiny", out="results/foo", users=2, arms=("x", "y"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.users = 3  # type: ignore[misc]


def test_the_results_config_has_the_options_destinations_as_keys() -> None:
    """``asdict(config)`` is what ``vars(args)`` was: the committed results' ``config`` keeps its keys."""
    cfg = parse_config(_parser(), FooConfig, [], arms=split_commas)
    assert set(asdict(cfg)) == set(vars(_parser().parse_args([]))) == {"locomo", "model", "out", "users", "arms"}
    assert asdict(cfg)["arms"] == ("a", "b")


def test_a_bad_value_is_an_argparse_error_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in ((["--users", "0"], "--users must be >= 1"), (["--users", "x"], "invalid int value")):
        with pytest.raises(SystemExit) as exited:
            parse_config(_parser(), FooConfig, argv, arms=split_commas)
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("usage: python -m benchmarks.foo") and message in err


def test_a_parser_and_config_that_disagree_are_refused_by_name() -> None:
    ap = _parser()
    ap.add_argument("--extra", default=None)
    with pytest.raises(TypeError, match=r"options without a field \['extra'\]"):
        parse_config(ap, FooConfig, [], arms=split_commas)
    with pytest.raises(TypeError, match=r"FooConfig.arms is tuple\[str, ...\], the parser gave 'a,b'"):
        parse_config(_parser(), FooConfig, [])  # the comma list not converted
    with pytest.raises(TypeError, match=r"converters without a field \['nope'\]"):
        parse_config(_parser(), FooConfig, [], arms=split_commas, nope=str)


def test_every_benchmark_parses_its_defaults_into_its_config() -> None:
    """Each converted benchmark's parser and config agree (a drift would be a TypeError here)."""
    from benchmarks.agents.bench import parse_args as agents_replay
    from benchmarks.coa.__main__ import parse_args as coa
    from benchmarks.coa.routers_state import parse_args as routers_state
    from benchmarks.engine_ttft import parse_args as engine_ttft
    from benchmarks.frameworks.cli import parse_args as frameworks
    from benchmarks.gateway_chat import parse_args as gateway_chat
    from benchmarks.gateway_latency import parse_args as gateway_latency
    from benchmarks.hosted.cli import parse_args as hosted
    from benchmarks.index_bench import parse_args as index_bench
    from benchmarks.index_reference import parse_args as index_reference
    from benchmarks.mem0_overhead import parse_args as mem0_overhead
    from benchmarks.quality.cli import parse_args as quality
    from benchmarks.replay.cli import parse_args as replay
    from benchmarks.scale.__main__ import parse_args as scale
    from benchmarks.swap_model import parse_args as swap_model
    from benchmarks.vllm_fidelity import parse_args as vllm_fidelity
    from benchmarks.workers_state import parse_args as workers_state

    configs = [
        *(agents_replay([]), coa([]), routers_state([]), frameworks([]), gateway_chat([]), gateway_latency([])),
        *(hosted([]), mem0_overhead([]), quality([]), replay(["p.json"]), scale([]), vllm_fidelity(["p.json"])),
        *(workers_state([]), engine_ttft([]), index_bench([]), index_reference([]), swap_model([])),
    ]
    for c in configs:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(c, "out", "elsewhere")  # noqa: B010 (any field: every config is frozen)
    assert hosted([]).providers == "openai,anthropic" and quality([]).model == "smollm2"
    assert replay(["p.json"]).flush == "per-run" and vllm_fidelity(["p.json"]).prompts == "p.json"
    assert coa(["--arms", "round_robin,agent_aware[a=1,b=2]"]).arms == ("round_robin", "agent_aware[a=1,b=2]")
    assert frameworks(["--quick"]).turns == 3 and mem0_overhead(["--quick"]).users == 4
