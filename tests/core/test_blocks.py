"""The one mem0-result converter and the one token estimate; duplicate ids in a mem0 response."""

from __future__ import annotations

import logging

import pytest

from cp_memory.core.blocks import ContextBlock, Mem0Blocks, blocks_from_mem0, estimate_tokens


def test_mem0_results_become_blocks_in_mem0s_order():
    got = blocks_from_mem0(
        {
            "results": [
                {"id": "m2", "memory": "Bob likes tea", "score": 0.9},
                {"id": 7, "memory": None},
                {"id": "m3"},
                {"id": "m4", "memory": 42},
            ]
        }
    )
    assert got.blocks == (
        ContextBlock("m2", "Bob likes tea"),
        ContextBlock(7, ""),
        ContextBlock("m3", ""),
        ContextBlock("m4", "42"),
    )
    assert got.ids == ("m2", 7, "m3", "m4") and got.indices == (0, 1, 2, 3) and got.collapsed == ()
    assert got.results[0]["score"] == 0.9
    assert blocks_from_mem0([]) == Mem0Blocks((), (), ())


def test_duplicate_ids_collapse_to_the_first_with_a_warning(caplog):
    # duplicate ids must not lose one result and double another ("[Doc 2] > [Doc 2] > [Doc 3]")
    results = [{"id": "a", "memory": "one"}, {"id": "b", "memory": "two"}, {"id": "a", "memory": "one again"}]
    with caplog.at_level(logging.WARNING, logger="cp_memory.core.blocks"):
        got = blocks_from_mem0(results)
    assert got.ids == ("a", "b") and got.blocks[0].text == "one"
    assert got.indices == (0, 1) and got.collapsed == (2,)
    assert "'a'" in caplog.text and "more than once" in caplog.text


@pytest.mark.parametrize(
    "bad, where",
    [
        ([{"id": ["unhashable"], "memory": "x"}], "result 0"),
        ([{"id": "ok", "memory": "x"}, {"id": None, "memory": "y"}], "result 1"),
        ([{"id": "ok"}, {"id": {"a": 1}}], "result 1"),
        ([{"id": True}], "result 0"),
        ([{"id": 1.5}], "result 0"),
        ([{"memory": "no id"}], "result 0"),
        (["not a dict"], "result 0"),
    ],
)
def test_bad_ids_name_the_result(bad, where):
    with pytest.raises(ValueError, match=where):
        blocks_from_mem0(bad)


@pytest.mark.parametrize("bad", [None, "results", {"results": "x"}, {"results": None}, 5])
def test_not_a_result_list(bad):
    with pytest.raises(TypeError, match="mem0 results"):
        blocks_from_mem0(bad)


def test_estimate_tokens_is_chars_over_four_rounded_up():
    assert [estimate_tokens(t) for t in ("", "a", "abcd", "abcde", "a" * 40)] == [1, 1, 1, 2, 10]
    with pytest.raises(TypeError):
        estimate_tokens(None)  # type: ignore[arg-type]
