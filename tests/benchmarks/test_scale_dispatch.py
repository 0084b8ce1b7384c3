"""benchmarks.scale's dispatchers: user affinity pins a user to one replica; round-robin rotates."""

from types import SimpleNamespace

import pytest

from benchmarks.scale.dispatch import Affinity, RoundRobin, make_dispatcher


def replicas(n):
    return [SimpleNamespace(base_url=f"http://127.0.0.1:{9000 + i}", alias="m") for i in range(n)]


def test_affinity_pins_each_user_to_one_replica_and_spreads_new_users():
    d = Affinity(replicas(3), capacity_tokens=100_000)
    try:
        seen = {}
        for turn in range(4):
            for user in ("alice", "bob", "carol"):
                x = d.dispatch(user, 2000)
                assert seen.setdefault(user, x.replica) == x.replica  # always the same replica
                assert x.reason == ("least_loaded" if turn == 0 else "affinity")
                d.done(x, ok=True)
        assert sorted(seen.values()) == [0, 1, 2]  # one user per replica
        assert d.router.loads() == (0, 0, 0)
    finally:
        d.close()


def test_round_robin_rotates_whoever_asks():
    d = RoundRobin(replicas(3))
    try:
        assert [d.dispatch("alice", 10).replica for _ in range(4)] == [0, 1, 2, 0]
    finally:
        d.close()


def test_unknown_router_is_rejected():
    with pytest.raises(ValueError, match="unknown router"):
        make_dispatcher("random", replicas(2), capacity_tokens=None, balance_abs_threshold=8)
