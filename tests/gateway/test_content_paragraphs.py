"""Documents that share paragraphs word for word (issue 43, the paper's document-analysis workload): claw-tasks'
contracts share 90 % of their paragraphs with another contract, each paragraph one long line. An agent reads
contract A, then contract B: B's shared paragraphs go out as pointers to the lines of A's result that hold
them (``Please refer to line 7 of ...``), B's own paragraphs as written; contract C, sharing paragraphs with
B's own ones, points into B's forwarded result. Every pointer resolves, in the request the model sees, to
the text the client sent; the prefix sent before never changes; a short line is never pointed to.
"""

from __future__ import annotations

import json

import pytest

from cp_memory.gateway.content.dedup import MIN_LINE_POINTER_CHARS
from cp_memory.gateway.protocols import Api, segments
from cp_memory.gateway.replay import strip_marks

from .content_sessions import pointers_in, resolve, tool_results, tool_session
from .test_content import APIS, drive, gateway


def _paragraph(topic: str, n: int) -> str:
    return (
        f"{n}.1 {topic}. Each party shall perform its obligations under this clause in good faith, with "
        f"reasonable skill and care, in accordance with the schedule agreed for clause {n}, and shall notify "
        f"the other party in writing within ten business days of any event that may affect {topic.lower()}."
    )


SHARED = [_paragraph(t, i) for i, t in enumerate(["Confidentiality", "Audit rights", "Data protection"], 3)]
OWN_B = [_paragraph(t, i) for i, t in enumerate(["Service credits", "Termination"], 7)]
A = "\n".join(["CONTRACT A", "Parties: Company A and Provider B", *SHARED, _paragraph("Payment terms", 2)]) + "\n"
B = "\n".join(["CONTRACT B", "Parties: Company A and Lab C", SHARED[0], *OWN_B, SHARED[2]]) + "\n"
OWN_C = _paragraph("Insurance", 9)
C = "\n".join(["CONTRACT C", "Parties: Company A and Firm D", OWN_B[1], SHARED[1], OWN_B[0], OWN_C, "Signed."]) + "\n"


def test_the_paragraphs_are_long_lines() -> None:
    assert all(len(p) >= MIN_LINE_POINTER_CHARS for p in SHARED + OWN_B)


@pytest.mark.parametrize("api", APIS)
def test_a_document_sharing_paragraphs_sends_them_as_line_pointers(api: Api) -> None:
    bodies = tool_session(api, [A, B, C])
    sent = drive(gateway(), api, bodies)
    assert pointers_in(sent[0]) == 0
    second = json.loads(sent[1])
    a_id, _ = tool_results(api, second)[0]
    b_text = tool_results(api, second)[1][1]
    assert f"Please refer to line 3 of the result of tool call {a_id} in the previous conversation." in b_text
    assert f"Please refer to line 5 of the result of tool call {a_id} in the previous conversation." in b_text
    assert all(p in b_text for p in OWN_B) and "Parties: Company A and Lab C" in b_text  # B's own lines stay
    assert resolve(api, second) == dict(tool_results(api, bodies[1]))
    third = json.loads(sent[2])
    b_id = tool_results(api, third)[1][0]
    c_text = tool_results(api, third)[2][1]
    assert f"of the result of tool call {b_id} in the previous conversation." in c_text  # into B's own lines
    assert f"line 4 of the result of tool call {a_id}" in c_text  # SHARED[1] is line 4 of A
    assert OWN_C in c_text and "Signed." in c_text and len(c_text) < 0.6 * len(C)
    assert resolve(api, third) == dict(tool_results(api, bodies[2]))


@pytest.mark.parametrize("api", APIS)
def test_paragraph_pointers_never_touch_the_prefix_sent_before(api: Api) -> None:
    sent = drive(gateway(), api, tool_session(api, [A, B, C, A]))
    for before, after in zip(sent, sent[1:]):
        old = [json.dumps(strip_marks(s)) for s in segments(api, json.loads(before))[0]]
        new = [json.dumps(strip_marks(s)) for s in segments(api, json.loads(after))[0]]
        assert new[: len(old)] == old
    last = json.loads(sent[-1])
    assert resolve(api, last) == dict(tool_results(api, tool_session(api, [A, B, C, A])[-1]))


@pytest.mark.parametrize("api", APIS)
def test_short_shared_lines_are_never_pointed_to(api: Api) -> None:
    short = "\n".join(f"clause {i}: the parties agree to the terms of schedule {i % 3}." for i in range(40)) + "\n"
    other = "PREFACE\n" + short
    sent = drive(gateway(), api, tool_session(api, [short, other]))
    text = tool_results(api, json.loads(sent[1]))[1][1]
    assert "Please refer to line " not in text  # lines under MIN_LINE_POINTER_CHARS; chunks may still point


def _numbered(text: str) -> str:
    """A file as Claude Code's ``Read`` shows it: ``N<tab>`` before every line."""
    return "".join(f"{i}\t{line}" for i, line in enumerate(text.splitlines(keepends=True), 1))


@pytest.mark.parametrize("api", APIS)
def test_a_numbered_read_keeps_its_numbers_and_points_past_them(api: Api) -> None:
    reads = [_numbered(A), _numbered(B)]
    bodies = tool_session(api, reads)
    second = json.loads(drive(gateway(), api, bodies)[1])
    a_id = tool_results(api, second)[0][0]
    b_text = tool_results(api, second)[1][1]
    # SHARED[0] is line 3 of A and line 3 of B; SHARED[2] is line 5 of A and line 6 of B: B's own numbers stay
    assert f"3\tPlease refer to line 3 of the result of tool call {a_id} in the previous conversation.\n" in b_text
    assert f"6\tPlease refer to line 5 of the result of tool call {a_id} in the previous conversation.\n" in b_text
    assert resolve(api, second) == dict(tool_results(api, bodies[1]))


def _filler(n: int) -> str:
    return f"Note {n}: " + " ".join(f"observation {n}.{k} on the quarterly figures" for k in range(12))


@pytest.mark.parametrize("api", APIS)
def test_one_known_paragraph_in_a_long_new_document_is_still_a_pointer(api: Api) -> None:
    """A report of 9,000 characters quoting one paragraph of an earlier contract: a small share of the text,
    but the paragraph is sent once."""
    report = "\n".join(["REPORT", *(_filler(i) for i in range(20)), SHARED[1], *(_filler(i) for i in range(20, 30))])
    bodies = tool_session(api, [A, report + "\n"])
    second = json.loads(drive(gateway(), api, bodies)[1])
    a_id = tool_results(api, second)[0][0]
    text = tool_results(api, second)[1][1]
    assert f"Please refer to line 4 of the result of tool call {a_id} in the previous conversation." in text
    assert SHARED[1] not in text and all(_filler(i) in text for i in range(30))
    assert resolve(api, second) == dict(tool_results(api, bodies[1]))


@pytest.mark.parametrize("api", APIS)
def test_a_sectioned_re_read_points_to_known_sections_and_to_known_paragraphs_in_the_others(api: Api) -> None:
    """A markdown document read whole, then a part re-read whose first section is cut: the section re-sent
    whole is one pointer, and the cut one still sends its known paragraphs as line pointers."""
    sections = [f"## {t}\n\n{SHARED[i]}\n\n{OWN_B[i % 2]}\n\n{_filler(i)}" for i, t in enumerate(["Scope", "Audit"])]
    whole = "MEMO\n\n" + "\n\n".join([*sections, "## Close\n\n" + _filler(9)]) + "\n"
    cut = f"## Scope (continued)\n\n{SHARED[0]}\n\n{_filler(20)}\n\n{_filler(0)}"  # not a whole known section
    part = "\n\n".join([cut, *sections[1:], "## Close\n\n" + _filler(9)]) + "\n"
    bodies = tool_session(api, [whole, part])
    second = json.loads(drive(gateway(), api, bodies)[1])
    first_id = tool_results(api, second)[0][0]
    text = tool_results(api, second)[1][1]
    assert f"Please refer to ## Audit in the result of tool call {first_id} in the previous conversation." in text
    assert f"Please refer to line 5 of the result of tool call {first_id} in the previous conversation." in text
    assert SHARED[0] not in text and SHARED[1] not in text and _filler(20) in text
    assert resolve(api, second) == dict(tool_results(api, bodies[1]))
