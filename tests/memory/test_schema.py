"""Tests for orchestrator.memory.schema: the shape of SAVE_MEMORY and SAVE_TO_PERSONAL payloads."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.errors import ValidationError
from orchestrator.memory.schema import (
    MEMORY_TYPES,
    PERSONAL_TYPES,
    MarkerSchemaError,
    MemoryDraft,
    PersonalDraft,
    validate_memory,
    validate_personal,
)

TAGS_PROBLEM = '"tags" must be a list of strings (at most 10, each at most 40 characters)'
CONFIDENCE_PROBLEM = '"confidence" must be a number between 0 and 1'


def memory(**fields: Any) -> dict[str, Any]:
    return {"type": "decision", "content": "We use JWT", **fields}


def reason_for(payload: Any, *, personal: bool = False) -> str:
    with pytest.raises(MarkerSchemaError) as caught:
        (validate_personal if personal else validate_memory)(payload)
    return caught.value.reason


# SAVE_MEMORY ------------------------------------------------------------------------------------


def test_minimal_memory_gets_defaults():
    """Only type and content are required; the rest take their defaults."""
    assert validate_memory({"type": "fact", "content": "Prod runs in eu-west-1"}) == MemoryDraft(
        type="fact", content="Prod runs in eu-west-1"
    )
    assert MemoryDraft(type="fact", content="x").confidence == 0.8


def test_full_memory_is_normalised():
    """Content, key, tags and task id are stripped; type is lower-cased; blank tags dropped."""
    draft = validate_memory(
        {
            "type": " Decision ",
            "content": "  We use JWT\n",
            "key": " auth.method ",
            "confidence": 1,
            "tags": [" auth ", "", "auth", "security"],
            "task_id": 42,
        }
    )
    assert draft == MemoryDraft(
        type="decision",
        content="We use JWT",
        key="auth.method",
        confidence=1.0,
        tags=("auth", "security"),
        task_id="42",
    )
    assert isinstance(draft.confidence, float)


@pytest.mark.parametrize("kind", MEMORY_TYPES)
def test_every_memory_type_is_accepted(kind: str):
    """Each of the ten memory types validates."""
    assert validate_memory(memory(type=kind)).type == kind


def test_nulls_count_as_absent():
    """null for an optional field gives the default."""
    draft = validate_memory(memory(key=None, confidence=None, tags=None, task_id=None))
    assert draft == MemoryDraft(type="decision", content="We use JWT")


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"type": "decision"}, 'missing "content"'),
        ({"content": "We use JWT"}, 'missing "type"'),
        (memory(content=None), 'missing "content"'),
        (memory(content=12), '"content" must be a string'),
        (memory(content=" \n\t"), '"content" must not be blank'),
        (memory(foo=1), 'unknown field "foo"'),
        (memory(Content="x"), 'unknown field "Content"'),
        (memory(type="opinion"), '"type" must be one of ' + ", ".join(MEMORY_TYPES)),
        (memory(type=["decision"]), '"type" must be one of ' + ", ".join(MEMORY_TYPES)),
        (memory(type="lesson"), '"type" must be one of ' + ", ".join(MEMORY_TYPES)),
    ],
)
def test_memory_reasons(payload: dict[str, Any], reason: str):
    """Each broken payload is refused with a short, precise reason."""
    assert reason_for(payload) == reason


@pytest.mark.parametrize("value", [True, False, "0.9", -0.01, 1.01, float("nan"), float("inf")])
def test_confidence_must_be_a_number_from_0_to_1(value: object):
    """Booleans, strings, NaN and out-of-range numbers are refused."""
    assert reason_for(memory(confidence=value)) == CONFIDENCE_PROBLEM


@pytest.mark.parametrize("value", [0, 0.0, 0.5, 1])
def test_confidence_bounds_are_inclusive(value: float):
    """0 and 1 themselves are valid confidences."""
    assert validate_memory(memory(confidence=value)).confidence == value


@pytest.mark.parametrize(
    "value",
    ["auth", ("auth",), [1], ["ok", None], ["x" * 41], [f"t{i}" for i in range(11)]],
)
def test_tags_must_be_a_short_list_of_short_strings(value: object):
    """Tags are a JSON list of at most 10 strings of at most 40 characters."""
    assert reason_for(memory(tags=value)) == TAGS_PROBLEM


def test_tag_limits_are_inclusive():
    """Ten tags of 40 characters each are accepted."""
    tags = [f"{i}".ljust(40, "x") for i in range(10)]
    assert validate_memory(memory(tags=tags)).tags == tuple(tags)


@pytest.mark.parametrize("value", [7, ["k"], "k" * 101])
def test_key_must_be_a_short_string(value: object):
    """A key is a string of at most 100 characters."""
    assert reason_for(memory(key=value)) == '"key" must be a string of at most 100 characters'


def test_key_of_100_characters_and_blank_key():
    """A 100-character key is kept; a blank one is no key at all."""
    assert validate_memory(memory(key="k" * 100)).key == "k" * 100
    assert validate_memory(memory(key="  ")).key is None


@pytest.mark.parametrize("value", [True, 1.5, ["T-1"], "t" * 101, 10**200])
def test_task_id_must_be_a_short_string_or_integer(value: object):
    """A task id is a string or an integer of at most 100 characters."""
    assert reason_for(memory(task_id=value)).startswith('"task_id" must be a string or an integer')


def test_error_is_a_validation_error_on_field_marker():
    """MarkerSchemaError is a ValidationError for the field "marker", problem = reason."""
    with pytest.raises(ValidationError) as caught:
        validate_memory({"content": "x", "type": "fact", "oops": 1})
    assert isinstance(caught.value, MarkerSchemaError)
    assert caught.value.field == "marker"
    assert caught.value.problem == caught.value.reason == 'unknown field "oops"'
    assert str(caught.value) == 'marker: unknown field "oops"'


def test_non_mapping_payload_is_refused():
    """Something other than a JSON object is refused, not crashed on."""
    assert reason_for([("content", "x")]) == "payload must be a JSON object"


def test_draft_checks_its_own_invariants():
    """Drafts built by hand refuse an unknown type, blank content or a bad confidence."""
    with pytest.raises(ValueError, match="unknown memory type"):
        MemoryDraft(type="opinion", content="x")
    with pytest.raises(ValueError, match="blank"):
        MemoryDraft(type="fact", content=" ")
    with pytest.raises(ValueError, match="confidence"):
        MemoryDraft(type="fact", content="x", confidence=2.0)
    with pytest.raises(ValueError, match="unknown personal type"):
        PersonalDraft(content="x", type="decision")


# SAVE_TO_PERSONAL -------------------------------------------------------------------------------


def test_personal_defaults_to_note():
    """Without a type, a personal entry is a note; content is stripped."""
    assert validate_personal({"content": " Ask for the load first "}) == PersonalDraft(
        content="Ask for the load first", type="note"
    )


@pytest.mark.parametrize("kind", PERSONAL_TYPES)
def test_every_personal_type_is_accepted(kind: str):
    """lesson, skill, habit and note all validate, in any letter case."""
    assert validate_personal({"content": "x", "type": kind.upper()}).type == kind


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({}, 'missing "content"'),
        ({"content": ["x"]}, '"content" must be a string'),
        ({"content": "x", "type": "decision"}, '"type" must be one of lesson, skill, habit, note'),
        ({"content": "x", "confidence": 0.9}, 'unknown field "confidence"'),
    ],
)
def test_personal_reasons(payload: dict[str, Any], reason: str):
    """Broken personal payloads are refused with a precise reason."""
    assert reason_for(payload, personal=True) == reason


# Properties -------------------------------------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=12) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
_FIELDS = st.sampled_from(["type", "content", "key", "confidence", "tags", "task_id", "x"])


@settings(max_examples=75, database=None)
@given(st.dictionaries(_FIELDS, _JSON | st.sampled_from(MEMORY_TYPES)))
def test_validation_either_returns_a_draft_or_raises_marker_schema_error(payload: dict[str, Any]):
    """Any JSON-shaped payload gives a draft or a MarkerSchemaError, never anything else."""
    for validate in (validate_memory, validate_personal):
        try:
            draft = validate(payload)
        except MarkerSchemaError as exc:
            assert exc.reason  # noqa: PT017 - either outcome is valid
        else:
            assert draft.content == draft.content.strip() != ""
