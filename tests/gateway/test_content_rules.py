"""The rules that find context blocks, each only where it is unambiguous, and the content-defined chunks."""

from __future__ import annotations

import json

import pytest

from cp_memory.gateway.content import BlockRule, find_context
from cp_memory.gateway.content.chunks import MAX_CHUNK_CHARS, MIN_CHUNK_CHARS, chunk_spans
from cp_memory.gateway.content.stage import MAX_HOLDER_CHARS
from cp_memory.gateway.content.switches import ContentStep, effective_steps, parse_header
from cp_memory.gateway.protocols import Api

from .content_sessions import numbered_file, tool_session
from .test_content import drive, gateway

PASSAGE = "The harbour budget was discussed at length by the council. "


def test_xml_documents_are_found_with_their_bodies_and_reorderable_without_numbers() -> None:
    text = f"Context:\n<document>\n{PASSAGE}\n</document>\n<document>\n{PASSAGE * 2}\n</document>\nQuestion?"
    found = find_context(text)
    assert found is not None and found.rule is BlockRule.XML_TAG and found.orderable
    assert [b.body(text).strip() for b in found.blocks] == [PASSAGE.strip(), (PASSAGE * 2).strip()]
    assert [b.label for b in found.blocks] == ["document 1", "document 2"]


def test_numbered_xml_documents_keep_their_order() -> None:
    text = '<document index="1">a</document>\n<document index="2">b</document>'
    found = find_context(text)
    assert found is not None and not found.orderable and found.blocks[0].label == '<document index="1">'


@pytest.mark.parametrize(
    "text",
    [
        "<document>only one</document>",
        "<document>a</document><document>b",  # not closed
        "<doc>a<doc>nested</doc></doc><doc>c</doc>",  # nested
        "<document>a</doc><doc>b</document>",  # interleaved names
    ],
)
def test_ambiguous_xml_is_left_alone(text: str) -> None:
    found = find_context(text)
    assert found is None or found.rule is not BlockRule.XML_TAG


def test_numbered_passages_from_one_without_gaps() -> None:
    text = f"[1] {PASSAGE}\n[2] {PASSAGE}more\n[3] last one\n\nAnswer with citations."
    found = find_context(text)
    assert found is not None and found.rule is BlockRule.NUMBERED and not found.orderable
    assert [b.label for b in found.blocks] == ["[1]", "[2]", "[3]"]
    assert found.blocks[2].body(text) == "last one"  # the question after the blank line is not a passage


@pytest.mark.parametrize("text", ["[1] a\n[3] b", "[2] a\n[3] b", "[1] a", "[1] a\n[2] b\n[1] c"])
def test_numbering_that_skips_or_restarts_finds_nothing(text: str) -> None:
    assert find_context(text) is None


def test_a_json_array_of_search_results_with_exact_element_spans() -> None:
    results = [{"title": "t1", "snippet": PASSAGE}, {"title": "t2", "snippet": PASSAGE + "!"}]
    text = json.dumps(results, indent=2)
    found = find_context(text)
    assert found is not None and found.rule is BlockRule.JSON_RESULTS and found.orderable
    assert [json.loads(b.body(text)) for b in found.blocks] == results


@pytest.mark.parametrize(
    "value",
    [
        [{"text": "a"}, {"title": "no text field"}],  # not every element has the field
        [{"text": "a"}, "a string"],
        [{"text": "a"}],  # one element
        {"hits": [{"text": "a"}, {"text": "b"}]},  # an object whose array is not ``results``
    ],
)
def test_json_that_is_not_a_result_array_finds_nothing(value: object) -> None:
    found = find_context(json.dumps(value))
    assert found is None or found.rule is not BlockRule.JSON_RESULTS


def test_ranked_results_are_not_reordered() -> None:
    found = find_context(json.dumps([{"rank": 1, "text": "a"}, {"rank": 2, "text": "b"}]))
    assert found is not None and not found.orderable


def test_markdown_sections_at_the_shallowest_level_outside_code_fences() -> None:
    text = "# Guide\nintro\n## Setup\nrun it\n```\n## not a heading\n```\n## Usage\ncall it\n"
    assert find_context(text) is None  # one heading at the shallowest level: not a list of sections
    text2 = "## Setup\nrun it\n```\n## not a heading\n```\n## Usage\ncall it\n"
    found2 = find_context(text2)
    assert found2 is not None and [b.label for b in found2.blocks] == ["## Setup", "## Usage"]
    assert "## not a heading" in found2.blocks[0].body(text2)


def test_chunks_cover_the_text_on_line_boundaries_within_their_bounds() -> None:
    text = numbered_file("big.py", 600)
    spans = chunk_spans(text)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert all(text[e - 1] == "\n" for _, e in spans)
    assert all(MIN_CHUNK_CHARS <= e - s <= MAX_CHUNK_CHARS for s, e in spans[:-1])
    assert chunk_spans(text) == spans  # deterministic


def test_an_edit_in_the_middle_changes_only_the_chunks_around_it() -> None:
    before = numbered_file("big.py", 600)
    after = numbered_file("big.py", 600, changed=range(300, 303))
    old = {before[s:e] for s, e in chunk_spans(before)}
    new = [after[s:e] for s, e in chunk_spans(after)]
    changed = [c for c in new if c not in old]
    assert 1 <= len(changed) <= 3 and sum(map(len, changed)) < len(after) / 5


def test_header_words() -> None:
    assert parse_header("no-dedup, no-chunks") == (frozenset({ContentStep.DEDUP, ContentStep.CHUNKS}), frozenset())
    assert parse_header("order-note") == (frozenset(), frozenset({ContentStep.ORDER_NOTE}))
    assert parse_header("off") is None and parse_header("nonsense") is None
    every = frozenset(ContentStep)
    assert effective_steps(every, {"x-cp-content": "no-dedup"}) == every - {ContentStep.DEDUP, ContentStep.CHUNKS}
    assert effective_steps(every, {"x-cp-content": "no-find"}) == frozenset()


def test_a_text_past_the_size_bound_is_left_alone() -> None:
    huge = numbered_file("huge.log", MAX_HOLDER_CHARS // 50)
    assert len(huge) > MAX_HOLDER_CHARS
    bodies = tool_session(Api.CHAT, [huge, "short", huge])
    assert drive(gateway(), Api.CHAT, bodies)[2] == json.dumps(bodies[2]).encode()
