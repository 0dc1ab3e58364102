"""quick_init: a frozen dataclass's quicker __init__ behaves as the dataclass's own."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import FrozenInstanceError, InitVar, dataclass, field
from typing import Any

import pytest

from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.core.quick_init import quick_init

_made: list[int] = []


def _counted() -> list[int]:
    _made.append(1)
    return []


def _shapes() -> list[tuple[str, tuple[type, type], dict[str, Any]]]:
    """Pairs of twin classes (the dataclass's own __init__, then quick_init's) and arguments."""

    def twins(**options: Any) -> tuple[type, type]:
        def make() -> type:
            @dataclass(frozen=True, **options)
            class Value:
                a: int
                b: str = "b"
                c: list[int] = field(default_factory=_counted)
                d: int = field(default=4, init=False)
                e: list[int] = field(default_factory=list, init=False)
                f: int = field(default=6, kw_only=True)

            return Value

        return make(), quick_init(make())

    plain, quick = twins()
    slotted, quick_slotted = twins(slots=True)
    keyword, quick_keyword = twins(slots=True, kw_only=True)
    calls: list[dict[str, Any]] = [{"a": 1}, {"a": 1, "b": "x", "c": [3], "f": 9}]
    return [
        (name, pair, call)
        for name, pair in (
            ("dict", (plain, quick)),
            ("slots", (slotted, quick_slotted)),
            ("kw_only", (keyword, quick_keyword)),
        )
        for call in calls
    ]


@pytest.mark.parametrize(("name", "pair", "call"), _shapes())
def test_fields_defaults_and_factories_are_set_as_the_dataclass_sets_them(
    name: str, pair: tuple[type, type], call: dict[str, Any]
) -> None:
    own, quick = pair
    expected, got = own(**call), quick(**call)
    assert dataclasses.asdict(got) == dataclasses.asdict(expected)
    assert repr(got).split("(", 1)[1] == repr(expected).split("(", 1)[1]
    assert got == quick(**call)
    assert quick(**call).e is not got.e  # a factory's value is made anew for each instance
    assert got.d == 4


def test_a_factory_runs_only_when_its_field_is_not_given() -> None:
    (_, (_own, quick), _call), *_ = _shapes()
    _made.clear()
    quick(a=1)
    quick(a=1, c=[5])
    assert len(_made) == 1


def test_the_signature_is_kept() -> None:
    (_, (_own, quick), _), *_ = _shapes()
    assert quick(1, "x").b == "x"  # positional where the dataclass allows it
    with pytest.raises(TypeError):
        quick(1, "x", [1], 9)  # f is keyword-only
    with pytest.raises(TypeError):
        quick()  # a is required
    with pytest.raises(TypeError):
        quick(a=1, d=3)  # d is not an argument
    *_, (_, (_own_kw, quick_kw), _) = _shapes()
    with pytest.raises(TypeError):
        quick_kw(1)  # every field keyword-only


def test_the_class_stays_frozen_and_works_with_replace_and_copy() -> None:
    for _, (_own, quick), call in _shapes():
        value = quick(**call)
        with pytest.raises(FrozenInstanceError):
            value.a = 2
        changed = dataclasses.replace(value, a=2)
        assert (changed.a, changed.b) == (2, value.b)
        assert copy.deepcopy(value) == value


def test_post_init_runs_after_the_fields_are_set() -> None:
    seen: list[int] = []

    @quick_init
    @dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            seen.append(self.a)
            if self.a < 0:
                raise ValueError("negative")

    Checked(3)
    assert seen == [3]
    with pytest.raises(ValueError, match="negative"):
        Checked(-1)


def test_fields_of_a_base_class_are_set_too() -> None:
    @dataclass(frozen=True, slots=True)
    class Base:
        a: int

    @quick_init
    @dataclass(frozen=True, slots=True)
    class Child(Base):
        b: int = 2

    child = Child(1)
    assert (child.a, child.b) == (1, 2)


def test_only_frozen_dataclasses_without_initvars_are_taken() -> None:
    @dataclass
    class Plain:
        a: int

    @dataclass(frozen=True)
    class WithInitVar:
        a: int
        b: InitVar[int]

    class NotADataclass:
        pass

    for cls in (Plain, WithInitVar, NotADataclass):
        with pytest.raises(TypeError):
            quick_init(cls)


def test_a_project_value_built_quickly_is_the_same_value() -> None:
    from datetime import UTC, datetime

    at = datetime(2026, 1, 1, tzinfo=UTC)
    message = ChatMessage(
        id="m1", group="g", sender="alex", kind=MessageKind.HUMAN, text="hi", created_at=at
    )
    assert (message.id, message.in_reply_to, message.hop) == ("m1", None, 0)
    with pytest.raises(ValueError, match="invalid group id"):  # its __post_init__ checks
        ChatMessage(
            id="m2", group="../g", sender="a", kind=MessageKind.HUMAN, text="x", created_at=at
        )
    assert dataclasses.replace(message, text="hello").text == "hello"
    with pytest.raises(FrozenInstanceError):
        message.text = "x"  # type: ignore[misc]


def test_the_fields_are_stored_without_the_frozen_setattr() -> None:
    for _, (own, quick), _ in _shapes():
        assert "__setattr__" in vars(own)["__init__"].__code__.co_names
        assert "__setattr__" not in vars(quick)["__init__"].__code__.co_names
