import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cp_memory.core.blocks import ContextBlock
from cp_memory.core.dedup import Deduplicator

turns = st.lists(st.lists(st.integers(0, 12), max_size=8), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.lists(st.integers(0, 12), max_size=8)),
        min_size=1,
        max_size=12,
    )
)
def test_dedup_never_reports_a_block_not_sent_earlier_in_the_same_conversation(stream):
    dedup = Deduplicator()
    sent: dict[str, dict[int, tuple[int, int]]] = {}
    turn_no: dict[str, int] = {}
    for conv, blocks in stream:
        r = dedup.dedup(conv, [ContextBlock(b, f"text {b}") for b in blocks])
        turn_no[conv] = turn_no.get(conv, 0) + 1
        assert r.turn == turn_no[conv]
        seen = sent.setdefault(conv, {})
        kept_here: dict[int, int] = {}
        for b in blocks:
            if b in seen or b in kept_here:
                continue
            kept_here[b] = len(kept_here) + 1
        # every duplicate was sent before: in an earlier turn of this conversation, or earlier in this turn
        for d in r.dropped:
            dup, loc = d.block_id, d.location
            if dup in seen:
                assert (loc.turn, loc.position) == seen[dup]
            else:
                assert loc.turn == r.turn and kept_here[dup] == loc.position
        assert [b.id for b in r.blocks] == list(kept_here)
        assert len(r.blocks) + len(r.duplicates) == len(blocks)
        assert r.duplicates == tuple(d.block_id for d in r.dropped)
        for b, pos in kept_here.items():
            seen[b] = (r.turn, pos)


def test_no_dedup_across_conversations():
    d = Deduplicator()
    d.dedup("a", [ContextBlock(1, "x")])
    assert d.dedup("b", [ContextBlock(1, "x")]).duplicates == ()


def test_edited_block_is_sent_again_not_pointed_to():
    d = Deduplicator()
    d.dedup("c", [ContextBlock("m1", "Alice lives in Paris")])
    r = d.dedup("c", [ContextBlock("m1", "Alice lives in Berlin")])
    assert r.duplicates == () and r.blocks[0].text == "Alice lives in Berlin"
    r = d.dedup("c", [ContextBlock("m1", "Alice  lives in\n  Berlin ")])  # same text up to whitespace
    assert r.duplicates == ("m1",) and r.dropped[0].location.turn == 2
    r = d.dedup("c", [ContextBlock("m1", "Alice lives in BERLIN")])  # edited in case only: sent again
    assert r.duplicates == () and r.blocks[0].text == "Alice lives in BERLIN"


def test_content_level_duplicates_under_other_ids():
    d = Deduplicator()
    d.dedup("c", [ContextBlock("a", "Bob likes tea.")])
    r = d.dedup("c", [ContextBlock("b", "  Bob likes\ttea. "), ContextBlock("c", "new"), ContextBlock("d", " new")])
    assert r.duplicates == ("b", "d")
    assert r.dropped[0].location.turn == 1 and r.dropped[1].location.turn == 2
    assert r.dropped[1].location.position == 1
    assert r.dropped[1].annotation == "[Doc 1] above has the same content."
    off = Deduplicator(content=False)
    off.dedup("c", [ContextBlock("a", "Bob likes tea.")])
    assert off.dedup("c", [ContextBlock("b", "Bob likes tea.")]).duplicates == ()


def test_memories_differing_only_in_case_are_different_facts():
    """Only the same text (up to whitespace) is a copy: "Apple" the company is not "apple" the fruit, so
    content dedup shows both, in one turn and across turns."""
    d = Deduplicator()
    r = d.dedup("c", [ContextBlock("a", "Bob works at Apple."), ContextBlock("b", "Bob works at apple.")])
    assert r.kept_ids == ("a", "b") and r.duplicates == ()
    r = d.dedup("c", [ContextBlock("c", "BOB WORKS AT APPLE."), ContextBlock("d", "Bob  works at Apple.")])
    assert r.kept_ids == ("c",) and r.duplicates == ("d",) and r.dropped[0].location == d.sent("c")["a"]
    assert ContextBlock("x", "Apple").digest != ContextBlock("x", "apple").digest


def test_forget_and_lru_bound():
    d = Deduplicator(max_conversations=2)
    for c in ("a", "b", "c"):
        d.dedup(c, [1])
    assert len(d) == 2 and "a" not in d
    assert d.forget("b") is True and d.forget("b") is False
    assert d.dedup("b", [1]).duplicates == ()


@pytest.mark.parametrize("bad", [None, "abc", 5])
def test_bad_input(bad):
    with pytest.raises(TypeError):
        Deduplicator().dedup("c", bad)
    with pytest.raises(TypeError):
        Deduplicator().dedup(None, [1])
    with pytest.raises(ValueError):
        Deduplicator(max_conversations=0)


def _check_conversation(d: Deduplicator, results: list, *, sent_once: bool) -> None:
    """Exact invariants of one conversation's committed turns."""
    by_turn = {r.turn: r for r in results}
    assert sorted(by_turn) == list(range(1, len(results) + 1))  # turns 1..n, no gaps, no repeats
    first_send: dict = {}
    for t in sorted(by_turn):
        r = by_turn[t]
        for pos, b in enumerate(r.blocks, start=1):
            first_send.setdefault(b.id, (t, pos))
        for drop in r.dropped:  # points to a real earlier send
            loc = drop.location
            assert loc.turn <= t and loc.block_id == drop.block_id
            assert by_turn[loc.turn].blocks[loc.position - 1].id == drop.block_id
            assert loc.label in drop.annotation
            assert f"(turn {loc.turn})" in drop.annotation if loc.turn < t else "above" in drop.annotation
    kept = [b.id for r in results for b in r.blocks]
    if sent_once:
        assert len(kept) == len(set(kept))  # each block sent once
    assert {b: (loc.turn, loc.position) for b, loc in d.sent(results[0].conversation_id).items()} == first_send


def test_thread_safety_exact_invariants_under_concurrent_plan_commit_and_dedup():
    d = Deduplicator()
    committed: dict[str, list] = {c: [] for c in ("c0", "c1", "c2", "c3")}
    lock = threading.Lock()
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def blocks_for(t: int, i: int) -> list[ContextBlock]:
        ids = [(t * 7 + i * 3 + j) % 23 for j in range(4)]
        return [ContextBlock(b, f"fact number {b}") for b in ids]

    def run(t: int) -> None:
        try:
            start.wait()
            for i in range(150):
                conv = f"c{(t + i) % 4}"
                if conv in ("c0", "c1"):  # one-phase: atomic
                    r = d.dedup(conv, blocks_for(t, i))
                else:  # two-phase, some turns fail
                    plan = d.plan(
                        conv,
                        blocks_for(t, i) + [ContextBlock(("poison", t, i), "never sent")]
                        if i % 5 == 0
                        else blocks_for(t, i),
                    )
                    if i % 5 == 0:
                        d.rollback(plan)
                        continue
                    r = d.commit(plan)
                with lock:
                    committed[conv].append(r)
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: plans and commits interleave
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    for conv, results in committed.items():
        assert results and all(r.committed and r.conversation_id == conv for r in results)
        _check_conversation(d, results, sent_once=conv in ("c0", "c1"))
        assert not any(isinstance(b, tuple) and b[0] == "poison" for b in d.sent(conv))


def test_peek_reports_earlier_turns_without_registering():
    d = Deduplicator()
    d.dedup("c", [ContextBlock(1, "a"), ContextBlock(2, "b")])
    got = d.peek("c", [ContextBlock(2, "b"), ContextBlock(3, "c"), ContextBlock(4, " a "), ContextBlock(1, "edited")])
    assert [None if g is None else (g.turn, g.position) for g in got] == [(1, 2), None, (1, 1), None]
    assert d.peek("other", [1]) == (None,)
    assert d.sent_count("c") == 2 and d.sent_count("other") == 0
    assert d.dedup("c", [ContextBlock(3, "c")]).duplicates == ()  # peek registered nothing


CLAUSE_A = "This agreement is governed by the laws of the State of New York."
CLAUSE_B = "Any dispute shall be settled by binding arbitration in New York City."


def test_span_dedup_is_off_by_default():
    d = Deduplicator()
    d.dedup("c", [ContextBlock("a", f"Acme sells widgets. {CLAUSE_A} {CLAUSE_B}")])
    r = d.dedup("c", [ContextBlock("b", f"Zeta leases trucks. {CLAUSE_A} {CLAUSE_B}")])
    assert r.trims == () and r.blocks[0].text.endswith(CLAUSE_B)


def test_span_dedup_removes_sentences_sent_before_and_says_where():
    d = Deduplicator(spans=True)
    d.dedup("c", [ContextBlock("a", f"Acme sells widgets. {CLAUSE_A} {CLAUSE_B}")])
    r = d.dedup(
        "c",
        [
            ContextBlock("b", f"Zeta leases trucks to Carol. {CLAUSE_A} {CLAUSE_B}"),
            ContextBlock("t", f"{CLAUSE_A} {CLAUSE_B}"),
        ],
    )
    assert r.blocks[0].text == "Zeta leases trucks to Carol."
    assert r.trims[0].removed == (CLAUSE_A, CLAUSE_B)
    assert {(loc.block_id, loc.turn) for loc in r.trims[0].locations} == {("a", 1)}
    assert r.trims[0].annotation == "Parts of [Doc 1] repeat [Doc 1] of turn 1."
    assert r.duplicates == ("t",)  # every sentence of it was sent: a whole duplicate
    # short sentences never count as repeated spans
    r = d.dedup("c", [ContextBlock("s", "Acme sells widgets. Something new and long enough to count here.")])
    assert r.trims == () and r.blocks[0].text.startswith("Acme sells widgets.")
    # the trimmed block is registered with its original text: retrieving it again points back to it
    r = d.dedup("c", [ContextBlock("b", f"Zeta leases trucks to Carol. {CLAUSE_A} {CLAUSE_B}")])
    assert r.duplicates == ("b",) and r.dropped[0].location.turn == 2
    with pytest.raises(ValueError):
        Deduplicator(min_span_chars=0)
