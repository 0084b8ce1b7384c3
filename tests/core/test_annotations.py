import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cp_memory.core.annotations import (
    DEFAULT_ANNOTATE_TOP,
    doc_label,
    location_annotation,
    order_annotation,
    order_differs,
    owed_order_annotation,
)
from cp_memory.core.blocks import ContextBlock, blocks_from_mem0, normalize_text
from cp_memory.core.index import ContextIndex


@given(st.lists(st.integers(0, 50), min_size=1, max_size=20, unique=True), st.randoms())
def test_order_annotation_maps_back_to_the_original_ranking(original, rnd):
    aligned = list(original)
    rnd.shuffle(aligned)
    labels = {b: doc_label(i + 1) for i, b in enumerate(aligned)}  # labels the prompt shows
    text = order_annotation(original, aligned, label=labels)
    shown = re.findall(r"\[Doc (\d+)\]", text)
    assert [aligned[int(n) - 1] for n in shown] == original


@given(st.lists(st.integers(0, 200), min_size=1, max_size=120, unique=True), st.integers(1, 10), st.randoms())
def test_an_order_annotation_of_the_top_n_names_the_true_top_n_then_the_rest(original, top, rnd):
    aligned = list(original)
    rnd.shuffle(aligned)
    labels = {b: doc_label(i + 1) for i, b in enumerate(aligned)}
    text = order_annotation(original, aligned, label=labels, top=top)
    named = re.findall(r"\[Doc (\d+)\]", text)
    assert [aligned[int(n) - 1] for n in named] == original[:top]
    assert text.endswith(" > the rest and answer the question.") == (top < len(original))


def test_the_top_n_annotation_is_owed_unless_the_prompt_starts_with_the_top_n_in_rank_order():
    ranking = ["a", "b", "c", "d"]
    assert not order_differs(ranking, ["a", "b", "d", "c"], top=2)  # the ranks named are already first
    assert order_differs(ranking, ["b", "a", "c", "d"], top=2)
    assert order_differs(ranking, ["x", "a", "b", "c", "d"], top=2)  # an extra ahead of the top two
    assert not order_differs(ranking, ["a", "b", "c", "d", "x"], top=2)
    assert order_differs(ranking, ["a", "b", "c", "d", "x"], top=4)  # full ranking: the extra is unranked
    labels = {b: doc_label(i + 1) for i, b in enumerate(["a", "b", "d", "c"])}
    assert owed_order_annotation(["a", "b", "d", "c"], ranking, labels, top=2) == ""
    assert owed_order_annotation(["a", "b", "d", "c"], ranking, labels, top=None).endswith(
        "[Doc 1] > [Doc 2] > [Doc 4] > [Doc 3] and answer the question."
    )
    with pytest.raises(ValueError, match="top"):
        order_annotation(ranking, ranking, top=0)


def test_the_default_annotation_costs_a_few_tokens_where_the_full_one_costs_hundreds_at_k100():
    """k=100 memories in the reverse of mem0's ranking (every label has two or three digits), counted
    with the test model's tokenizer (SmolLM2's)."""
    tokenizers = pytest.importorskip("tokenizers")
    from cp_memory.engine import hf_model_dir

    try:
        model = hf_model_dir()
    except (FileNotFoundError, ImportError) as exc:
        pytest.skip(f"no test model tokenizer: {exc}")
    tok = tokenizers.Tokenizer.from_file(str(model / "tokenizer.json"))
    ranking = list(range(100))
    shown = ranking[::-1]
    labels = {b: doc_label(i + 1) for i, b in enumerate(shown)}
    cost = {
        top: len(tok.encode(owed_order_annotation(shown, ranking, labels, top=top)).ids)
        for top in (DEFAULT_ANNOTATE_TOP, None)
    }
    assert cost[DEFAULT_ANNOTATE_TOP] <= 60 and cost[None] >= 600, cost


def test_order_annotation_with_index_placement_and_extra_blocks():
    index = ContextIndex(extra_budget=0.5)
    index.insert(["x", "a", "b", "c"])
    p = index.insert(["c", "b", "a"])
    assert p.extra == ("x",)
    labels = {b: doc_label(i + 1) for i, b in enumerate(p.order)}
    text = order_annotation(["c", "b", "a"], p.order, label=labels)
    assert "[Doc 1]" not in text  # the extra block is shown but not ranked
    assert text.count("[Doc") == 3


def test_order_annotation_rejects_a_lost_block_and_bad_labels():
    with pytest.raises(ValueError, match="lost"):
        order_annotation([1, 2], [1])
    with pytest.raises(ValueError, match="no label"):
        order_annotation([1, 2], [2, 1], label={1: "[Doc 1]"})
    with pytest.raises(TypeError):
        order_annotation([1], [1], label=3)


def test_templates_are_configurable():
    assert order_annotation([2, 1], [1, 2], template="Rank: {ranking}") == "Rank: [Doc 2] > [Doc 1]"
    assert location_annotation(7) == "Please refer to [Doc 7] in the previous conversation."
    assert (
        location_annotation(7, label="[Doc 3]", turn=2)
        == "Please refer to [Doc 3] in the previous conversation (turn 2)."
    )
    assert location_annotation(7, template="see {label}") == "see [Doc 7]"


def test_context_block():
    b = ContextBlock("m1", "Hello   World")
    assert b.key == ("m1", b.digest) and len(b.digest) == 16
    assert b.digest == ContextBlock("m2", " Hello \n World ").digest
    assert b.digest != ContextBlock("m2", "hello world").digest  # case is part of the text
    assert normalize_text(" A\n b ") == "A b"
    with pytest.raises(TypeError):
        ContextBlock(["x"], "t")
    with pytest.raises(TypeError):
        ContextBlock(None, "t")
    with pytest.raises(ValueError):
        ContextBlock("x", "t", tokens=-1)
    got = blocks_from_mem0({"results": [{"id": "a", "memory": "likes tea", "score": 0.3}]})
    assert got.blocks == (ContextBlock("a", "likes tea"),)
    with pytest.raises(ValueError, match="no 'id'"):
        blocks_from_mem0([{"memory": "x"}])


def test_an_order_annotation_is_owed_only_when_the_prompt_order_is_not_the_ranking():
    from cp_memory.core.annotations import order_differs

    assert not order_differs(["a", "b", "c"], ["a", "b", "c"])
    assert not order_differs(["a", "x", "b"], ["a", "b"])  # x not shown (a pointer): a, b still in rank order
    assert order_differs(["a", "b", "c"], ["b", "a", "c"])


def test_the_numbered_style_puts_every_pointer_of_a_turn_on_one_line():
    from cp_memory.core.annotations import block_label, grouped_locations

    assert (block_label(3), block_label(3, "number")) == ("[Doc 3]", "3")
    assert grouped_locations([(1, 3), (2, 1), (1, 7)], turn=3) == (
        "Also relevant, shown before: turn 1 items 3, 7; turn 2 item 1."
    )
    assert grouped_locations([(2, 1)], turn=2) == "Also relevant, shown before: item 1 above."
    assert grouped_locations([], turn=1) == ""


def test_the_bullet_style_names_items_by_their_position():
    """Bullets are mem0's ``- memory`` lines: no number is written, so the order annotation and the pointers
    name an item by its position in the list, as the numbered style names it by its number."""
    from cp_memory.core.annotations import block_label, owed_order_annotation

    assert [block_label(i, "bullet") for i in (1, 10)] == ["-", "-"]
    bullets = {"a": "-", "b": "-", "c": "-"}
    assert owed_order_annotation(["a", "b", "c"], ["b", "a", "c"], bullets, style="bullet") == (
        "Read the items in this priority order: 2 > 1 > 3, then answer the question."
    )
    assert owed_order_annotation(["a", "b", "c"], ["a", "b", "c"], bullets, style="bullet") == ""
