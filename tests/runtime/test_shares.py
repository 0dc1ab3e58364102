"""How daemons split the partitions between them: the plan, and rounds of it converging."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.runtime.shares import fair_share, plan


@pytest.mark.parametrize(
    ("daemons", "share"), [(0, 16), (1, 16), (2, 8), (3, 6), (5, 4), (16, 1), (40, 1)]
)
def test_fair_share_of_sixteen(daemons: int, share: int):
    assert fair_share(16, daemons) == share


def test_a_lone_daemon_takes_everything_and_gives_back_half_when_another_joins():
    alone = plan(set(), "a", ["a"], 16)
    assert alone.release == ()
    assert alone.take == 16
    assert sorted(alone.order) == list(range(16))
    crowded = plan(set(range(16)), "a", ["a", "b"], 16)
    assert len(crowded.release) == 8
    assert crowded.take == 0
    newcomer = plan(set(), "b", ["a", "b"], 16)
    assert newcomer.take == 8
    # The newcomer reaches first for the partitions the other gives back.
    assert set(newcomer.order[:8]) == set(crowded.release)


def test_a_daemon_not_yet_in_the_member_list_counts_itself():
    assert plan(set(), "z", ["a"], 16).take == 8


def _round(holders: dict[int, str], daemons: list[str]) -> None:
    """Every daemon in turn plans, gives back (its work in hand assumed done) and takes."""
    for me in daemons:
        mine = {p for p, owner in holders.items() if owner == me}
        decision = plan(mine, me, daemons, 16)
        for p in decision.release:
            del holders[p]
        free = [p for p in decision.order if p not in holders][: decision.take]
        for p in free:
            holders[p] = me


@settings(max_examples=300, deadline=None)
@given(
    daemons=st.integers(min_value=1, max_value=20),
    start=st.dictionaries(st.integers(0, 15), st.integers(0, 19)),
)
def test_rounds_converge_to_every_partition_owned_and_a_fair_spread(daemons, start):
    """From any split (daemons that left included), two rounds leave every partition owned
    by exactly one live daemon and nobody over its fair share."""
    names = [f"d{n:02d}" for n in range(daemons)]
    holders = {p: f"d{owner:02d}" for p, owner in start.items() if owner < daemons}
    for _ in range(2):
        _round(holders, names)
    assert sorted(holders) == list(range(16))
    share = fair_share(16, daemons)
    counts = [list(holders.values()).count(n) for n in names]
    assert max(counts) <= share
