"""Two-phase dedup: plan against committed turns, commit once the prompt was sent."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cp_memory.core.blocks import ContextBlock
from cp_memory.core.dedup import Deduplicator, DedupResult, DroppedBlock, Location


def blocks(*ids):
    return [ContextBlock(i, f"text of {i}") for i in ids]


def test_plan_changes_nothing_and_includes_same_turn_duplicates():
    d = Deduplicator()
    d.dedup("c", blocks(1, 2, 4))
    plan = d.plan("c", blocks(1, 5, 2) + [ContextBlock(9, " text  of 5")])
    assert plan.committed is False and plan.turn == 2 and plan.kept_ids == (5,)
    assert plan.dropped == (
        DroppedBlock(1, Location(1, 1, 1), "Please refer to [Doc 1] in the previous conversation (turn 1)."),
        DroppedBlock(2, Location(2, 1, 2), "Please refer to [Doc 2] in the previous conversation (turn 1)."),
        DroppedBlock(9, Location(5, 2, 1), "[Doc 1] above has the same content."),
    )
    assert d.sent_count("c") == 3 and d.peek("c", blocks(5)) == (None,)
    assert d.plan("c", blocks(1, 5, 2)).kept_ids == (5,)  # planning again: same answer
    assert d.plan("new", blocks(1)).turn == 1 and "new" not in d


def test_a_failed_turn_does_not_poison_the_retry():
    # the documents of a turn that never reached the model must be sent again on retry
    d = Deduplicator()
    plan = d.plan("c", blocks(1, 2))
    d.rollback(plan)  # the worker failed
    retry = d.plan("c", blocks(1, 2))
    assert retry.kept_ids == (1, 2) and retry.dropped == () and retry.turn == 1
    done = d.commit(retry)
    assert done.committed is True and done.turn == 1 and done.kept_ids == (1, 2)
    assert d.plan("c", blocks(1, 2)).kept_ids == ()


def test_turn_context_manager_commits_on_success_only():
    d = Deduplicator()
    with pytest.raises(RuntimeError), d.turn("c", blocks(1, 2)) as plan:
        assert plan.committed is False
        raise RuntimeError("engine down")
    assert d.sent_count("c") == 0
    with d.turn("c", blocks(1, 2)) as plan:
        assert plan.kept_ids == (1, 2)
    assert d.sent_count("c") == 2 and d.plan("c", blocks(2)).turn == 2


def test_commit_and_rollback_misuse_raise_value_error():
    d, other = Deduplicator(), Deduplicator()
    plan = d.plan("c", blocks(1))
    with pytest.raises(ValueError, match="not a plan of this"):
        other.commit(plan)
    with pytest.raises(ValueError, match="not a plan of this"):
        other.rollback(plan)
    done = d.commit(plan)
    with pytest.raises(ValueError, match="committed"):
        d.commit(plan)  # twice
    with pytest.raises(ValueError, match="committed"):
        d.commit(done)
    with pytest.raises(ValueError, match="committed"):
        d.rollback(done)
    with pytest.raises(ValueError, match="committed"):
        d.rollback(plan)
    gone = d.plan("c", blocks(2))
    d.rollback(gone)
    d.rollback(gone)  # rolling back twice: no-op
    with pytest.raises(ValueError, match="rolled back"):
        d.commit(gone)
    with pytest.raises(ValueError, match="not a plan of this"):
        d.commit(DedupResult(turn=1, blocks=(), committed=False))
    with pytest.raises(TypeError):
        d.commit("plan")  # type: ignore[arg-type]
    assert d.sent_count("c") == 1


def test_a_plan_expires_after_max_pending_newer_plans():
    d = Deduplicator(max_pending=2)
    old = d.plan("c", blocks(1))
    d.plan("c", blocks(2))
    d.plan("c", blocks(3))
    with pytest.raises(ValueError, match="expired"):
        d.commit(old)
    d.rollback(old)  # nothing to forget: no-op
    with pytest.raises(ValueError, match="max_pending"):
        Deduplicator(max_pending=0)


def test_interleaved_commits_renumber_the_turn_but_keep_positions_and_labels():
    d = Deduplicator()
    d.dedup("c", blocks(1))
    a = d.plan("c", blocks(7, 1) + [ContextBlock(8, "text of  7")])  # 8 repeats 7 within the turn
    b = d.plan("c", blocks(7, 9))
    assert a.turn == b.turn == 2
    assert d.commit(b).turn == 2
    done = d.commit(a)
    assert done.turn == 3 and done.committed
    assert done.kept_ids == a.kept_ids == (7,)
    assert [(x.block_id, x.location) for x in done.dropped] == [(1, Location(1, 1, 1)), (8, Location(7, 3, 1))]
    assert [x.annotation for x in done.dropped] == [x.annotation for x in a.dropped]
    # 7 went out in both turns: it stays recorded at its earliest send (turn 2, as [Doc 1])
    assert d.sent("c")[7] == Location(7, 2, 1) and d.sent("c")[9] == Location(9, 2, 2)
    assert d.plan("c", []).turn == 4


turns = st.lists(
    st.tuples(
        st.sampled_from(["c1", "c2"]),
        st.lists(st.tuples(st.integers(0, 8), st.sampled_from(["a", "b", "A "])), max_size=6),
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=150, deadline=None)
@given(turns, st.booleans())
def test_dedup_is_plan_then_commit(stream, spans):
    one, two = Deduplicator(spans=spans), Deduplicator(spans=spans)
    for conv, items in stream:
        bs = [ContextBlock(i, f"{t} {i % 3}. Some sentence long enough to count as a span here.") for i, t in items]
        r1 = one.dedup(conv, bs)
        plan = two.plan(conv, bs)
        r2 = two.commit(plan)
        assert (r1.turn, r1.blocks, r1.dropped, r1.trims) == (r2.turn, r2.blocks, r2.dropped, r2.trims)
        assert (plan.turn, plan.blocks, plan.dropped, plan.trims) == (r2.turn, r2.blocks, r2.dropped, r2.trims)
        assert r1.committed and r2.committed and not plan.committed
    assert one.sent("c1") == two.sent("c1") and one.sent("c2") == two.sent("c2")


def test_dropped_records_and_deprecated_parallel_tuples():
    d = Deduplicator()
    d.dedup("c", blocks(1, 2))
    r = d.dedup("c", blocks(2, 3, 1))
    assert r.duplicates == (2, 1)
    assert all(isinstance(x, DroppedBlock) for x in r.dropped)
    with pytest.raises(AttributeError):
        r.dropped[0].annotation = "forged"  # type: ignore[misc]
    assert not hasattr(r, "locations") and not hasattr(r, "annotations")  # one record per dropped block
