"""A benchmark's typed configuration: its command line parsed once into a frozen dataclass.

A benchmark writes its ``argparse`` parser as before (the shared options from
:mod:`benchmarks.common.harness`'s ``add_*``, then its own) and declares one frozen dataclass whose
fields are the parser's destinations, inheriting the shared option groups it uses::

    @dataclass(frozen=True, kw_only=True)
    class FooConfig(LocomoOptions, OutOptions):
        users: int
        arms: tuple[str, ...]

    def parse_args(argv: Sequence[str] | None) -> FooConfig:
        ap = argparse.ArgumentParser(prog="python -m benchmarks.foo")
        harness.add_locomo(ap); harness.add_out(ap, "results")
        ap.add_argument("--users", type=int, default=4)
        ap.add_argument("--arms", default="a,b")
        return parse_config(ap, FooConfig, argv, arms=split_commas)

Everything after the parse step takes the config, never an ``argparse.Namespace``; the result's
``config`` is ``asdict(config)``, whose keys are the options' destinations as before.

Why this shape and not dataclass fields carrying argparse metadata: the parser stays the one source of
flags, defaults and help (what a user sees, unchanged, in the order the benchmark chose), the dataclass
the one source of names and types (what the code sees); :func:`parse_config` checks at every parse that
the two agree (every destination a field, every field a destination, every value of its field's type),
so neither can drift. Config fields carry no defaults of their own for the same reason (one source per
default). A value the benchmark converts or checks (a comma list, a choice among several options) is
converted by ``convert`` or checked in the config's ``__post_init__``; a ``ValueError`` from either is
reported as an argparse error (usage, the message, exit status 2).
"""

from __future__ import annotations

import argparse
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from .harness import Engine

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "EngineOptions",
    "JsonOptions",
    "LocomoOptions",
    "ModelOptions",
    "OutOptions",
    "SwapProtectOptions",
    "ThreadsOptions",
    "VerboseOptions",
    "parse_config",
    "split_commas",
]

C = TypeVar("C", bound="DataclassInstance")


# --- the shared option groups: the fields of what harness.add_* adds ----------------------------------------


@dataclass(frozen=True, kw_only=True)
class LocomoOptions:
    """``harness.add_locomo``: ``--locomo PATH`` (None: the default file)."""

    locomo: str | None


@dataclass(frozen=True, kw_only=True)
class ModelOptions:
    """``harness.add_model``: ``--model`` by name (or, ``free``, a path)."""

    model: str


@dataclass(frozen=True, kw_only=True)
class EngineOptions:
    """``harness.add_engine``: ``--engine`` and ``--vllm-args`` (one string)."""

    engine: Engine
    vllm_args: str


@dataclass(frozen=True, kw_only=True)
class ThreadsOptions:
    """``harness.add_threads``: ``--threads`` per engine process (None: all CPUs)."""

    threads: int | None


@dataclass(frozen=True, kw_only=True)
class OutOptions:
    """``harness.add_out``: ``--out FOLDER`` of the JSON, markdown and PNG."""

    out: str


@dataclass(frozen=True, kw_only=True)
class JsonOptions:
    """``harness.add_json``: ``--json FILE``, the committed copy of the JSON (None: none)."""

    json: str | None


@dataclass(frozen=True, kw_only=True)
class SwapProtectOptions:
    """``harness.add_swap_protect``: ``--swap-protect F``."""

    swap_protect: float


@dataclass(frozen=True, kw_only=True)
class VerboseOptions:
    """``harness.add_verbose``: ``-v/--verbose``."""

    verbose: bool


# --- the one conversion point -------------------------------------------------------------------------------


def split_commas(text: str) -> tuple[str, ...]:
    """``"a, b,,c"`` -> ``("a", "b", "c")``: a comma list option, blanks dropped."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def parse_config(
    parser: argparse.ArgumentParser,
    config: type[C],
    argv: Sequence[str] | None,
    /,
    **convert: Callable[[Any], Any],
) -> C:
    """Parse ``argv`` (None: this process's arguments) with ``parser`` into a ``config``: each option by its
    destination, ``convert[name]`` applied first where given. A ``ValueError`` from a converter or from the
    config's ``__post_init__`` exits as an argparse error; a parser and config that disagree (a destination
    without a field or the reverse, a value not of its field's type) raise ``TypeError`` naming them."""
    values = dict(vars(parser.parse_args(None if argv is None else list(argv))))
    names = {f.name for f in fields(config) if f.init}
    unknown = sorted(set(convert) - names)
    if values.keys() != names or unknown:
        raise TypeError(
            f"{config.__name__} and the parser of {parser.prog} disagree: options without a field "
            f"{sorted(values.keys() - names)}, fields without an option {sorted(names - values.keys())}, "
            f"converters without a field {unknown}"
        )
    try:
        for name, fn in convert.items():
            values[name] = fn(values[name])
        _check_types(config, values)
        return config(**values)
    except ValueError as exc:
        parser.error(str(exc))


def _check_types(config: type[Any], values: dict[str, Any]) -> None:
    hints = get_type_hints(config)
    for name, value in values.items():
        if not _fits(value, hints[name]):
            raise TypeError(f"{config.__name__}.{name} is {hints[name]}, the parser gave {value!r}")


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of type ``hint`` (classes, ``X | None``, ``Literal``, ``list[X]``, ``tuple[X, ...]``;
    ``bool`` is no ``int``; anything else is taken as it is)."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return True
    if origin is Literal:
        return value in args
    if origin in (Union, types.UnionType):
        return any(_fits(value, h) for h in args)
    if origin in (list, tuple, set, frozenset):
        inner = args[0] if args and (origin is not tuple or args[-1] is Ellipsis) else Any
        return isinstance(value, origin) and all(_fits(v, inner) for v in value)
    if hint in (int, float):
        return isinstance(value, (int, hint)) and not isinstance(value, bool)
    return not isinstance(hint, type) or isinstance(value, hint)
