"""Codex's shell outputs and wrapped search results (issue 31 item 1, issue 30's left-over): a file read again
through a shell tool comes back with a new run header (chunk id, wall time) above the same output, so the
output, not the whole result, is what the history already shows.

* Codex runs ``cat calc.py``, ``grep``, then ``cat calc.py`` again: the third output becomes one pointer
  under its own (new) header;
* the file changed in the middle between the reads: pointers to its unchanged chunks plus the new lines;
* search results wrapped as ``{"results": [...]}``: a result sent before becomes a pointer, the JSON stays JSON;
* in every case the cached prefix is untouched and every pointer resolves, in the request the model sees, to
  the text the client sent.
"""

from __future__ import annotations

import json

import pytest

from cp_memory.gateway.content import BlockRule, find_context
from cp_memory.gateway.protocols import Api, segments
from cp_memory.gateway.replay import strip_marks

from .content_sessions import exec_output, numbered_file, pointers_in, resolve, tool_results, tool_session
from .test_content import APIS, drive, gateway

CALC = "".join(f"def f{i}(values):\n    return sorted(values)[{i}]  # the {i}th smallest\n" for i in range(4))
GREP = "./calc.py:1:def f0(values):\n"
BIG = numbered_file("minutes.md", 150)


def test_a_codex_shell_output_is_one_block_whose_body_is_the_command_output() -> None:
    text = exec_output(CALC, 1)
    found = find_context(text)
    assert found is not None and found.rule is BlockRule.EXEC_OUTPUT and not found.orderable
    assert [b.body(text) for b in found.blocks] == [CALC]
    older = f"Exit code: 0\nWall time: 0.2 seconds\nTotal output lines: 8\nOutput:\n{CALC}"  # Codex's older shell tool
    found_old = find_context(older)
    assert found_old is not None and found_old.blocks[0].body(older) == CALC


@pytest.mark.parametrize(
    "text",
    [
        f"Output:\n{CALC}",  # no run header at all
        f"Chunk ID: 1\nProcess exited with code 0\nOutput:\n{CALC}",  # no wall time
        f"note\nWall time: 0.1 seconds\nOutput:\n{CALC}",  # the header does not start the text
        "Wall time: 0.1 seconds\nOutput:\n",  # nothing after it
        f"Wall time: 0.1 seconds\nStatus: ok\nOutput:\n{CALC}",  # a line that is not a run header's
    ],
)
def test_text_that_is_not_exactly_a_shell_run_is_not_one(text: str) -> None:
    found = find_context(text)
    assert found is None or found.rule is not BlockRule.EXEC_OUTPUT


@pytest.mark.parametrize("api", APIS)
def test_a_file_catted_again_becomes_a_pointer_under_its_new_header(api: Api) -> None:
    reads = [exec_output(CALC, 1), exec_output(GREP, 2), exec_output(CALC, 3)]
    bodies = tool_session(api, reads)
    sent = drive(gateway(), api, bodies)
    assert sent[0] == json.dumps(bodies[0]).encode() and pointers_in(sent[1]) == 0
    last = json.loads(sent[2])
    results = tool_results(api, last)
    first_id = results[0][0]
    pointer = f"Please refer to the result of tool call {first_id} in the previous conversation."
    assert results[2][1] == exec_output(CALC, 3).replace(CALC, pointer)  # the new header stays, as run
    assert resolve(api, last) == dict(tool_results(api, bodies[2]))


@pytest.mark.parametrize("api", APIS)
def test_a_file_changed_in_the_middle_is_sent_as_chunk_pointers_and_its_new_lines(api: Api) -> None:
    edited = numbered_file("minutes.md", 150, changed=range(70, 72))
    reads = [exec_output(BIG, 1), exec_output(GREP, 2), exec_output(edited, 3)]
    bodies = tool_session(api, reads)
    last = json.loads(drive(gateway(), api, bodies)[2])
    text = tool_results(api, last)[2][1]
    header = reads[2][: -len(edited)]
    assert text.startswith(header) and "Please refer to lines" in text[len(header) :]
    assert "(edited)" in text and len(text) < len(reads[2]) / 2
    assert resolve(api, last) == dict(tool_results(api, bodies[2]))


@pytest.mark.parametrize("api", APIS)
def test_shell_pointers_never_touch_the_prefix_sent_before(api: Api) -> None:
    reads = [exec_output(CALC, 1), exec_output(BIG, 2), exec_output(CALC, 3), exec_output(BIG, 4), exec_output(GREP, 5)]
    sent = drive(gateway(), api, tool_session(api, reads))
    for before, after in zip(sent, sent[1:]):
        old = [json.dumps(strip_marks(s)) for s in segments(api, json.loads(before))[0]]
        new = [json.dumps(strip_marks(s)) for s in segments(api, json.loads(after))[0]]
        assert new[: len(old)] == old
    assert pointers_in(sent[-1]) == 2
    assert resolve(api, json.loads(sent[-1])) == dict(tool_results(api, tool_session(api, reads)[-1]))


def _hits(*texts: str) -> str:
    results = [{"url": f"https://example.org/{t.split()[-1].strip('.!')}", "text": t} for t in texts]
    return json.dumps({"query": "harbour budget", "results": results})


PASSAGE = "The harbour budget was discussed at length by the council, and the ledger moved to Tomas. " * 3


def test_results_wrapped_in_an_object_are_found_with_exact_element_spans() -> None:
    text = _hits(PASSAGE, PASSAGE + "!")
    found = find_context(text)
    assert found is not None and found.rule is BlockRule.JSON_RESULTS and found.orderable
    assert [json.loads(b.body(text))["text"] for b in found.blocks] == [PASSAGE, PASSAGE + "!"]
    for value in ({"results": [{"text": "a"}]}, {"hits": [{"text": "a"}, {"text": "b"}]}, {"results": "x"}):
        other = find_context(json.dumps(value))
        assert other is None or other.rule is not BlockRule.JSON_RESULTS


@pytest.mark.parametrize("api", APIS)
def test_a_wrapped_result_seen_before_becomes_a_pointer_and_the_json_stays_json(api: Api) -> None:
    other = PASSAGE.replace("Tomas", "Priya")
    bodies = tool_session(api, [_hits(PASSAGE, other), _hits("A new passage about the river. " * 8, PASSAGE)])
    last = json.loads(drive(gateway(), api, bodies)[1])
    second = json.loads(tool_results(api, last)[1][1])
    assert second["query"] == "harbour budget" and second["results"][0]["text"].startswith("A new passage")
    assert (
        second["results"][1]
        == "Please refer to result 1 in the result of tool call "
        + tool_results(api, last)[0][0]
        + " in the previous conversation."
    )  # a JSON string
