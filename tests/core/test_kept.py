"""Values kept by an object's identity: found for that object only, bounded, and a working set
smaller than the size is never made again."""

from __future__ import annotations

import gc

import pytest

from orchestrator.core.kept import Bounded, Kept


class _Thing:
    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Thing) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


def test_a_value_is_found_for_its_object_and_key_only() -> None:
    kept: Kept[_Thing, str] = Kept(8)
    one, twin = _Thing("a"), _Thing("a")
    kept.keep(one, 1, "made for one")
    assert kept.find(one, 1) == "made for one"
    assert kept.find(one, 2) is None
    assert kept.find(twin, 1) is None  # equal, but another object


def test_an_id_taken_over_by_a_new_object_finds_nothing() -> None:
    kept: Kept[object, str] = Kept(8)
    made = 0
    for _ in range(50):  # freed objects' ids are reused; only their own entry may answer
        thing = _Thing("x")
        if kept.find(thing, None) is None:
            made += 1
            kept.keep(thing, None, "v")
        assert kept.find(thing, None) == "v"
    # Each object is kept alive by its entry, so no two live ones share an id: every new
    # one was made afresh.
    assert made == 50


def test_bounded_by_two_generations() -> None:
    kept: Kept[_Thing, int] = Kept(10)
    things = [_Thing(str(i)) for i in range(100)]
    for n, thing in enumerate(things):
        kept.keep(thing, None, n)
    assert len(kept) <= 20
    assert kept.find(things[-1], None) == 99
    assert kept.find(things[0], None) is None
    del things
    gc.collect()


def test_a_working_set_smaller_than_the_size_survives_turnover() -> None:
    kept: Kept[_Thing, int] = Kept(10)
    working = [_Thing(f"w{i}") for i in range(6)]
    for n, thing in enumerate(working):
        kept.keep(thing, None, n)
    for round_ in range(20):  # each round uses the working set and brings two new things
        for n, thing in enumerate(working):
            assert kept.find(thing, None) == n, f"lost in round {round_}"
        for extra in range(2):
            kept.keep(_Thing(f"new{round_}-{extra}"), None, -1)


def test_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Kept(0)


def test_bounded_keeps_at_most_its_size_and_lets_all_go_when_full():
    """Up to ``size`` values by key; one more lets every earlier one go; a key kept already
    is replaced in place, without letting the others go."""
    kept: Bounded[str, int] = Bounded(2)
    assert kept.put("a", 1) == 1
    kept.put("b", 2)
    kept.put("b", 3)
    assert (kept.get("a"), kept.get("b"), len(kept)) == (1, 3, 2)
    kept.put("c", 4)
    assert (kept.get("a"), kept.get("b"), kept.get("c"), len(kept)) == (None, None, 4, 1)
    with pytest.raises(ValueError, match="at least 1"):
        Bounded(0)
