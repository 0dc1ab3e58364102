"""Tests for orchestrator.memory.gate.rules: what may be stored, when two memories are the same."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from orchestrator.core.wire import validate_text
from orchestrator.errors import ValidationError
from orchestrator.memory.gate.rules import GateConfig, Rejection, check, normalise

CONFIG = GateConfig()


def gate(
    content: str = "We use JWT for sessions", confidence: float = 0.9, written: int = 0
) -> Rejection | None:
    return check(content, confidence, config=CONFIG, written_today=written)


def reason(content: str = "We use JWT for sessions", confidence: float = 0.9, written: int = 0):
    result = gate(content, confidence, written)
    return None if result is None else result.reason


def test_defaults():
    """The defaults match the documented limits."""
    assert GateConfig(min_length=5, max_length=2000, min_confidence=0.7, daily_limit=50) == CONFIG


def test_ordinary_memory_passes():
    """A plain decision with good confidence under the limit is let through."""
    assert gate() is None


@pytest.mark.parametrize(
    ("length", "expected"), [(4, "too_short"), (5, None), (2000, None), (2001, "too_long")]
)
def test_length_boundaries(length: int, expected: str | None):
    """4 characters is too short, 5 and 2000 pass, 2001 is too long."""
    assert reason("a" * length) == expected


def test_length_counts_stripped_characters_not_bytes():
    """Surrounding whitespace does not count; a CJK character counts as one."""
    assert reason("  abcd \n") == "too_short"
    assert gate("我们用JWT") is None
    assert gate("  " + "é" * 2000 + "  ") is None


@pytest.mark.parametrize(("confidence", "passes"), [(0.69, False), (0.7, True), (1.0, True)])
def test_confidence_floor(confidence: float, passes: bool):
    """0.69 is below the floor, 0.7 is on it."""
    result = gate(confidence=confidence)
    assert (result is None) is passes
    if result is not None:
        assert result.reason == "low_confidence"
        assert str(result) == "low_confidence: confidence 0.69 is below 0.7"


def test_nan_confidence_is_low():
    """NaN is never above the floor."""
    assert reason(confidence=float("nan")) == "low_confidence"


def test_secret_is_refused_with_its_kind():
    """Content holding a credential is refused, naming what it looks like."""
    result = gate("the staging api_key = Zx8Qw2Er5Ty7Ui9Op1As")
    assert result == Rejection(reason="secret", detail="looks like an api key")
    assert str(result) == "secret: looks like an api key"
    card = gate("Pay with 4111 1111 1111 1111")
    assert str(card) == "secret: looks like a card number"


@pytest.mark.parametrize(("written", "passes"), [(0, True), (49, True), (50, False), (51, False)])
def test_rate_limit(written: int, passes: bool):
    """The 51st write of the day is refused: written_today >= daily_limit."""
    result = gate(written=written)
    assert (result is None) is passes
    if result is not None:
        assert result.reason == "rate_limited"
        assert str(result) == f"rate_limited: {written} memories written today, the limit is 50"


def test_zero_daily_limit_refuses_everything():
    """A daily limit of 0 turns memory writing off."""
    result = check("We use JWT", 1.0, config=GateConfig(daily_limit=0), written_today=0)
    assert result is not None
    assert result.reason == "rate_limited"


def test_reason_order():
    """Length beats secrets, secrets beat characters, characters beat confidence, confidence
    beats the rate limit."""
    assert reason("pw", confidence=0.1, written=99) == "too_short"
    assert reason("password: hunter2\x00", confidence=0.1, written=99) == "secret"
    assert reason("We use \x00 JWT", confidence=0.1, written=99) == "control_character"
    assert reason(confidence=0.1, written=99) == "low_confidence"


@pytest.mark.parametrize(
    ("char", "detail"),
    [
        ("\x00", "control character 0x00 is not allowed"),
        ("\x07", "control character 0x07 is not allowed"),
        ("\x1b", "control character 0x1b is not allowed"),
        ("\x7f", "control character 0x7f is not allowed"),
        ("\x9b", "control character 0x9b is not allowed"),
        ("\u202a", "bidirectional control character U+202A is not allowed"),
        ("\u202e", "bidirectional control character U+202E is not allowed"),
        ("\u2066", "bidirectional control character U+2066 is not allowed"),
        ("\u2069", "bidirectional control character U+2069 is not allowed"),
    ],
)
def test_forbidden_characters_are_refused(char: str, detail: str):
    """NUL, other C0 and C1 controls and bidirectional overrides and isolates are refused."""
    result = gate(f"We use {char}JWT for sessions")
    assert result == Rejection(reason="control_character", detail=detail)


def test_tab_newline_and_right_to_left_marks_pass():
    """Tab, line breaks and the marks right-to-left writing needs are ordinary text."""
    assert gate("We use JWT\tfor\nsessions\r\n") is None
    assert gate("\u05e9\u05dc\u05d5\u05dd JWT\u200f \u200e ok") is None


def _wire_problem(text: str) -> str | None:
    try:
        validate_text(text, max_bytes=100_000)
    except ValidationError as exc:
        return exc.problem
    return None


odd_characters = st.sampled_from(["\x00", "\x1b", "\x85", "\t", "\r", "\u202e", "\u2067", "\u200f"])


@settings(max_examples=100, database=None)
@given(st.lists(st.one_of(st.characters(), odd_characters), max_size=30).map("".join))
def test_same_character_rule_as_the_wire(text: str):
    """The gate refuses a memory's characters exactly as the wire refuses a message's."""
    content = f"Note: {text} ok"
    result = gate(content)
    assume(result is None or result.reason == "control_character")
    assert _wire_problem(content) == (None if result is None else result.detail)


def test_messages_read_well():
    """Length rejections say how long the content was and what is allowed."""
    assert str(gate("abc")) == "too_short: 3 characters, at least 5 needed"
    assert str(gate("a" * 2001)) == "too_long: 2001 characters, at most 2000 allowed"


@pytest.mark.parametrize(
    "fields",
    [
        {"min_length": -1},
        {"min_length": 10, "max_length": 5},
        {"min_confidence": 1.5},
        {"daily_limit": -1},
    ],
)
def test_config_validates_itself(fields: dict[str, Any]):
    """Impossible limits are refused when the config is built."""
    with pytest.raises(ValueError, match="must be"):
        GateConfig(**fields)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("We use JWT.", "we  use jwt"),
        ("  We use JWT...  ", "WE USE JWT"),
        ('"We use JWT!"', "we use jwt"),
        ("We\tuse\nJWT", "we use jwt"),
        ("\uff37\uff25 use \uff2a\uff37\uff34", "we use jwt"),  # full-width letters
        ("Straße", "STRASSE"),
        ("我们用 JWT。", "我们用 jwt"),
        ("- (We use JWT)", "we use jwt"),
    ],
)
def test_normalise_equal(left: str, right: str):
    """Case, width, whitespace and surrounding punctuation do not make memories different."""
    assert normalise(left) == normalise(right)


def test_normalise_values():
    """Inner punctuation stays; only the ends are trimmed."""
    assert normalise("We use JWT.") == "we use jwt"
    assert normalise("Use v1.2, not v1.1.") == "use v1.2, not v1.1"
    assert normalise("...") == ""
    assert normalise("We use JWT") != normalise("We use OAuth")


@settings(max_examples=100, database=None)
@given(
    st.text(max_size=2100),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-10, max_value=10**6),
)
def test_check_never_raises(content: str, confidence: float, written: int):
    """Any text and any float give None or a Rejection with a readable message."""
    result = check(content, confidence, config=CONFIG, written_today=written)
    assert result is None or str(result).startswith(f"{result.reason}: ")


@settings(max_examples=100, database=None)
@given(st.text(max_size=200))
def test_normalise_is_idempotent(text: str):
    """Normalising twice changes nothing."""
    assert normalise(normalise(text)) == normalise(text)
