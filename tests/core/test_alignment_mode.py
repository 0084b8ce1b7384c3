"""One alignment mode — exact, superset(budget) or swap(budget, protect) — with one source of defaults,
used alike by the index, its snapshots and the wrapper's configuration (the LoCoMo benchmark's use is
tested in tests/benchmarks/test_locomo.py)."""

from __future__ import annotations

import inspect

import pytest

from cp_memory.core.alignment import DEFAULT_TAIL_ORDER, align_request
from cp_memory.core.alignment_mode import DEFAULT_PROTECT, AlignmentKind, AlignmentMode
from cp_memory.core.distance import DEFAULT_ALPHA
from cp_memory.core.index import ContextIndex
from cp_memory.memory.config import ContextPilotConfig


def test_the_three_modes_and_their_flat_form():
    assert AlignmentMode.from_options() == AlignmentMode.exact() == AlignmentMode()
    assert AlignmentMode.from_options(extra_budget=0.1) == AlignmentMode.superset(0.1)
    assert AlignmentMode.from_options(swap_budget=0.25, protect=0.5) == AlignmentMode.swap(0.25, 0.5)
    assert AlignmentMode.from_options(protect=0.5) == AlignmentMode.exact()  # protect only matters for swap
    swap = AlignmentMode.swap(0.1)
    assert (swap.kind, swap.budget, swap.protect) == (AlignmentKind.SWAP, 0.1, DEFAULT_PROTECT)
    assert swap.options() == {"extra_budget": 0.0, "swap_budget": 0.1, "protect": DEFAULT_PROTECT}
    assert AlignmentMode.from_options(**swap.options()) == swap
    assert [str(m) for m in (AlignmentMode(), AlignmentMode.superset(0.1), swap)] == [
        "exact",
        "superset(0.1)",
        "swap(0.1, protect=0.75)",
    ]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: AlignmentMode.from_options(extra_budget=0.1, swap_budget=0.1), "exclusive"),
        (lambda: AlignmentMode.superset(0), "budget"),
        (lambda: AlignmentMode.swap(1.5), "fraction"),
        (lambda: AlignmentMode.swap(0.1, protect=float("nan")), "protect"),
        (lambda: AlignmentMode.swap(True), "fraction"),  # type: ignore[arg-type]
        (lambda: AlignmentMode(AlignmentKind.EXACT, 0.2), "no budget"),
        (lambda: AlignmentMode(AlignmentKind.SUPERSET, 0.2, protect=0.5), "swap alignment only"),
        (lambda: AlignmentMode("sideways", 0.2), "kind"),  # type: ignore[arg-type]
    ],
)
def test_invalid_modes_are_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_the_index_takes_a_mode_or_its_flat_form_not_both():
    assert (
        ContextIndex(mode=AlignmentMode.swap(0.2, 0.7)).options()
        == ContextIndex(swap_budget=0.2, protect=0.7).options()
    )
    index = ContextIndex(extra_budget=0.3)
    assert index.mode == AlignmentMode.superset(0.3) and (index.extra_budget, index.swap_budget) == (0.3, 0.0)
    with pytest.raises(TypeError, match="not both"):
        ContextIndex(mode=AlignmentMode.superset(0.1), protect=0.5)
    with pytest.raises(TypeError, match="AlignmentMode"):
        ContextIndex(mode="swap")  # type: ignore[arg-type]


def test_restore_takes_the_callers_mode_whole():
    warm = ContextIndex(mode=AlignmentMode.swap(1.0, protect=0.0))
    warm.insert(list(range(10)), "warm")
    data = warm.snapshot()
    assert ContextIndex.restore(data).mode == AlignmentMode.swap(1.0, 0.0)  # no override: the stored mode
    # any alignment override replaces the stored mode, never merges with it
    assert ContextIndex.restore(data, mode=AlignmentMode.exact()).mode == AlignmentMode.exact()
    assert ContextIndex.restore(data, extra_budget=0.0).mode == AlignmentMode.exact()
    assert ContextIndex.restore(data, protect=0.5).mode == AlignmentMode.exact()
    plain = ContextIndex.restore(data, mode=AlignmentMode.exact())
    assert plain.insert([1, 2, 3, 4, 5, 6, 7, 8, 50, 51]).dropped == ()


def test_the_wrappers_configuration_validates_into_one_mode():
    assert ContextPilotConfig().alignment == AlignmentMode.exact()
    assert ContextPilotConfig(extra_budget=0.2).alignment == AlignmentMode.superset(0.2)
    assert ContextPilotConfig(swap_budget=0.1).alignment == AlignmentMode.swap(0.1, DEFAULT_PROTECT)
    with pytest.raises(ValueError, match="exclusive"):
        ContextPilotConfig(extra_budget=0.1, swap_budget=0.1)


def test_every_default_has_one_source():
    fields = ContextPilotConfig.model_fields
    index = inspect.signature(ContextIndex).parameters
    align = inspect.signature(align_request).parameters
    assert fields["protect"].default == DEFAULT_PROTECT == AlignmentMode.swap(0.1).protect
    assert fields["alpha"].default == DEFAULT_ALPHA == index["alpha"].default
    assert (
        fields["tail_order"].default == DEFAULT_TAIL_ORDER == index["tail_order"].default == align["tail_order"].default
    )
