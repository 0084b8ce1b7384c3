"""The paper's worked examples (ALGORITHMS.md), as tests."""

from cp_memory.core.annotations import order_annotation
from cp_memory.core.dedup import Deduplicator
from cp_memory.core.distance import context_distance, pairwise_distances
from cp_memory.core.index import ContextIndex
from cp_memory.core.scheduling import schedule

A, B, C, D = (3, 5, 1, 7), (2, 6, 3, 5), (3, 5, 8, 9), (2, 6, 4, 0)


def test_eq1_prefers_shared_blocks_at_the_same_positions():
    # overlap alone gives 0.5 to A-B, B-C and B-D; Eq. 1 must make B-D the closest pair
    ab, bc, bd = context_distance(A, B), context_distance(B, C), context_distance(B, D)
    assert bd == 0.5
    assert bd < ab and bd < bc
    assert abs(ab - (0.5 + 0.001 * 2)) < 1e-12  # {3,5} shifted by 2 positions each
    assert context_distance(A, (10, 11)) == 1.0
    condensed = pairwise_distances([A, B, C, D])
    assert condensed.tolist() == [
        context_distance(x, y) for i, x in enumerate((A, B, C, D)) for y in (A, B, C, D)[i + 1 :]
    ]


def fig4_index() -> tuple[ContextIndex, object]:
    index = ContextIndex()
    plan = index.build([[2, 1, 3], [2, 6, 1], [4, 1, 0]], request_ids=["C1", "C2", "C3"])
    return index, plan


def test_fig4_batch_build_intersections_and_prefix_inheritance():
    # C1, C2 merge into C4 {1,2}; C3 + C4 into C5 {1}; leaves inherit their parents' order
    _, plan = fig4_index()
    assert plan.orders == ((1, 2, 3), (1, 2, 6), (1, 4, 0))
    assert plan.search_paths == ((0, 0, 0), (0, 0, 1), (0, 1))
    assert plan.request_ids == ("C1", "C2", "C3")


def test_fig5_online_alignment_and_algorithm1_search_path():
    index, _ = fig4_index()
    c6 = index.insert([2, 1, 4], "C6")
    assert c6.order == (1, 2, 4)
    assert c6.search_path == (0, 0, 2)  # stops at C4 ({1,2}), inserted as its third child
    assert c6.prefix_len == 2
    c7 = index.insert([5, 7, 8], "C7")
    assert c7.order == (5, 7, 8) and c7.prefix_len == 0 and c7.search_path == (1,)  # new branch
    c8 = index.insert([1, 2, 9], "C8")
    assert c8.order == (1, 2, 9) and c8.prefix_len == 2
    assert len(index) == 6


def test_fig6_scheduling_groups_prefix_sharing_requests():
    index, plan = fig4_index()
    c6 = index.insert([2, 1, 4], "C6")
    c7 = index.insert([5, 7, 8], "C7")
    c8 = index.insert([1, 2, 9], "C8")
    c3 = plan.search_paths[2]
    arrival = [c6, c3, c7, c8]
    assert [["C6", "C3", "C7", "C8"][i] for i in schedule(arrival)] == ["C6", "C8", "C3", "C7"]


def test_order_annotation_example():
    text = order_annotation((2, 1, 4), (1, 2, 4))
    assert text == (
        "Please read the context in the following priority order: [Doc 2] > [Doc 1] > [Doc 4] and answer the question."
    )


def test_order_annotation_of_the_top_few_states_the_same_ranking():
    """The paper's C6 (retrieved {2, 1, 4}, aligned to {1, 2, 4}) with only the top two named: the named
    blocks keep their true order and the rest follow them; naming all three is the paper's annotation."""
    assert order_annotation((2, 1, 4), (1, 2, 4), top=2) == (
        "Please read the context in the following priority order: [Doc 2] > [Doc 1] > the rest and answer the question."
    )
    assert order_annotation((2, 1, 4), (1, 2, 4), top=3) == order_annotation((2, 1, 4), (1, 2, 4))


def test_algorithm3_dedup_example():
    dedup = Deduplicator()
    first = dedup.dedup("conv", [1, 2, 4])
    assert first.kept_ids == (1, 2, 4) and first.duplicates == ()
    second = dedup.dedup("conv", [1, 5, 2])
    assert second.kept_ids == (5,)
    assert second.duplicates == (1, 2)
    assert tuple(d.annotation for d in second.dropped) == (
        "Please refer to [Doc 1] in the previous conversation (turn 1).",
        "Please refer to [Doc 2] in the previous conversation (turn 1).",
    )
