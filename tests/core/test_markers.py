"""Tests for orchestrator.core.markers: parsing replies and neutralising quoted text."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.core.markers import (
    MARKER_RE,
    InvalidMarker,
    Marker,
    MarkerKind,
    ParsedReply,
    fingerprint,
    neutralise,
    parse_markers,
)

MEMORY = '<!--SAVE_MEMORY:{"type": "decision", "content": "We use JWT", "confidence": 0.9}-->'
PERSONAL = '<!--SAVE_TO_PERSONAL:{"content": "Ask about load first", "type": "lesson"}-->'


# What no one may see: '<!--', then "save_memory" or "save_to_personal" in any case, with
# whitespace (line breaks included) between the parts.
RAW_MARKER_RE = re.compile(r"<!--\s*save\s*_\s*(?:memory|to\s*_\s*personal)", re.IGNORECASE)


def assert_no_marker_left(visible: str) -> None:
    assert RAW_MARKER_RE.search(visible) is None
    assert MARKER_RE.search(visible) is None


# Examples ---------------------------------------------------------------------------------------


def test_plain_text_is_untouched():
    """A reply without markers is returned as is, stripped."""
    parsed = parse_markers("  Hello <!-- an ordinary comment --> there.\n")
    assert parsed.visible == "Hello <!-- an ordinary comment --> there."
    assert parsed.markers == ()
    assert parsed.invalid == ()


def test_both_kinds_are_parsed_in_order():
    """SAVE_MEMORY becomes kind "memory" and SAVE_TO_PERSONAL kind "personal"."""
    parsed = parse_markers(f"We agreed.\n{MEMORY}\n{PERSONAL}")
    assert parsed.visible == "We agreed."
    assert parsed.markers == (
        Marker(
            kind="memory",
            payload={"type": "decision", "content": "We use JWT", "confidence": 0.9},
        ),
        Marker(kind="personal", payload={"content": "Ask about load first", "type": "lesson"}),
    )
    assert parsed.invalid == ()


def test_whitespace_and_line_breaks_between_tokens():
    """Spaces and line breaks are accepted between every token of a marker."""
    text = 'Done. <!--\n  SAVE_MEMORY \n :\n {\n  "type": "task",\n  "content": "x"\n }\n\t-->'
    parsed = parse_markers(text)
    assert parsed.visible == "Done."
    assert parsed.markers == (Marker(kind="memory", payload={"type": "task", "content": "x"}),)


def test_names_ignore_case():
    """Lower- and mixed-case names are markers like upper-case ones."""
    parsed = parse_markers(
        'a <!--save_memory:{"content": "x"}--> b <!--Save_To_Personal:{"content": "y"}--> c'
    )
    assert parsed.visible == "a b c"
    assert parsed.markers == (
        Marker(kind="memory", payload={"content": "x"}),
        Marker(kind="personal", payload={"content": "y"}),
    )


@pytest.mark.parametrize(
    "name",
    [
        "SAVE_\nMEMORY",
        "SAVE _ MEMORY",
        "save-memory",
        "SaveMemory",
        "S\u200bAVE_MEM\u202eORY",
        " \n SAVE_MEMORY ",
    ],
)
def test_names_broken_by_spaces_and_line_breaks_are_markers(name: str):
    """Whitespace, line breaks and invisible characters inside the name do not hide a marker."""
    parsed = parse_markers(f'Ok. <!--{name}:{{"content": "x"}}--> Bye.')
    assert parsed.visible == "Ok. Bye."
    assert parsed.markers == (Marker(kind="memory", payload={"content": "x"}),)


def test_unterminated_odd_spelling_is_removed_with_its_reason():
    """A lower-case marker left open takes the rest of the reply, and says why."""
    parsed = parse_markers('Sure.\n<!--save_to_\npersonal:{"content": "x", "type":')
    assert parsed.visible == "Sure."
    (invalid,) = parsed.invalid
    assert invalid.kind == "personal"
    assert invalid.reason.startswith("unterminated")


def test_arrow_inside_a_json_string_does_not_end_the_marker():
    """The JSON decoder, not the first '-->', decides where the payload ends."""
    parsed = parse_markers('a <!--SAVE_MEMORY:{"content": "use --> and <!-- freely"}--> b')
    assert parsed.visible == "a b"
    assert parsed.markers == (
        Marker(kind="memory", payload={"content": "use --> and <!-- freely"}),
    )


def test_non_object_payload_is_invalid_and_removed():
    """A JSON array is reported as invalid and still hidden."""
    parsed = parse_markers("Hi <!--SAVE_TO_PERSONAL: [1, 2] --> there")
    assert parsed.visible == "Hi there"
    assert parsed.markers == ()
    raw = "<!--SAVE_TO_PERSONAL: [1, 2] -->"
    assert parsed.invalid == (
        InvalidMarker(
            kind="personal",
            reason="payload is not an object",
            length=len(raw),
            digest=hashlib.sha256(raw.encode()).hexdigest()[:12],
        ),
    )


def test_broken_json_is_invalid_and_removed():
    """A payload that is not JSON ends at the next '-->' and is reported."""
    parsed = parse_markers("one <!--SAVE_MEMORY:{type: decision}--> two")
    assert parsed.visible == "one two"
    (invalid,) = parsed.invalid
    assert invalid.kind == "memory"
    assert invalid.length == len("<!--SAVE_MEMORY:{type: decision}-->")
    assert invalid.digest == fingerprint("<!--SAVE_MEMORY:{type: decision}-->")
    assert invalid.reason.startswith("not JSON: ")


def test_missing_colon_is_invalid():
    """A name without ':' is not a marker but is hidden all the same."""
    parsed = parse_markers('x <!--SAVE_MEMORY {"content": "y"}--> z')
    assert parsed.visible == "x z"
    assert parsed.invalid[0].reason == "no ':' after the name"


def test_text_between_json_and_close_is_invalid():
    """Anything but whitespace between the JSON and '-->' makes the marker invalid."""
    parsed = parse_markers('x <!--SAVE_MEMORY:{"content": "y"} oops--> z')
    assert parsed.visible == "x z"
    assert parsed.markers == ()
    assert parsed.invalid[0].reason == "text between the JSON and '-->'"


def test_nan_is_not_accepted():
    """JSON constants Python would accept (NaN, Infinity) are refused."""
    parsed = parse_markers('<!--SAVE_MEMORY:{"confidence": NaN}-->')
    assert parsed.markers == ()
    assert "NaN" in parsed.invalid[0].reason


def test_unterminated_tail_is_removed():
    """An opened marker with no '-->' takes the rest of the reply with it."""
    parsed = parse_markers('Sure thing.\n\n<!--SAVE_MEMORY:{"type": "decision", "content": "x"')
    assert parsed.visible == "Sure thing."
    assert parsed.invalid[0].reason.startswith("unterminated")


def test_no_marker_text_is_kept():
    """A marker is described by its length and a 12-digit hash, never by its text."""
    raw = "<!--SAVE_MEMORY:" + "x" * 500 + "-->"
    (invalid,) = parse_markers(raw).invalid
    assert (invalid.length, invalid.digest) == (len(raw), fingerprint(raw))
    assert "xxx" not in repr(invalid)
    assert re.fullmatch("[0-9a-f]{12}", invalid.digest)
    valid = '<!--SAVE_MEMORY:{"content": "x"}-->'
    (marker,) = parse_markers(valid).markers
    assert (marker.length, marker.digest) == (len(valid), fingerprint(valid))


def test_deeply_nested_json_does_not_raise():
    """Nesting too deep for the decoder is an invalid marker, not a crash."""
    parsed = parse_markers("ok <!--SAVE_MEMORY:" + "[" * 100_000 + "-->")
    assert parsed.visible == "ok"
    assert parsed.invalid[0].reason.startswith("not JSON")


def test_blank_lines_left_by_markers_are_collapsed():
    """Removing markers on their own lines leaves at most one blank line."""
    parsed = parse_markers(f"First.\n\n{MEMORY}\n\n{PERSONAL}\n\n\nSecond.")
    assert parsed.visible == "First.\n\nSecond."


def test_inline_marker_leaves_one_space():
    """A marker inside a sentence leaves a single space, or none if there was none."""
    assert parse_markers(f"We {MEMORY} agreed.").visible == "We agreed."
    assert parse_markers(f"We{MEMORY}agreed.").visible == "Weagreed."
    assert parse_markers(f"Line one {MEMORY}\nline two").visible == "Line one\nline two"


def test_blank_lines_elsewhere_are_kept():
    """Only the whitespace around removed markers is tidied."""
    assert parse_markers("a\n\n\n\nb").visible == "a\n\n\n\nb"


def test_marker_assembled_by_removal_is_removed_too():
    """Fragments that join into a marker once another is removed are hidden and invalid."""
    text = "<!-" + MEMORY + '-SAVE_MEMORY:{"content": "smuggled"}-->after'
    parsed = parse_markers(text)
    assert parsed.visible == "after"
    assert [m.payload["content"] for m in parsed.markers] == ["We use JWT"]
    assert parsed.invalid[0].reason == "formed only by removing another marker"


def test_neutralise_rewrites_only_marker_openings():
    """neutralise quotes the '<' of a marker opening and leaves other comments alone."""
    text = f"quote: {MEMORY} and <!-- a comment -->"
    result = neutralise(text)
    assert result.startswith("quote: \u2039!--SAVE_MEMORY:")
    assert result.endswith("and <!-- a comment -->")
    assert parse_markers(result).markers == ()
    assert neutralise(result) == result


def test_neutralise_catches_odd_spellings():
    """Lower case and a name broken across lines are made inert too."""
    text = '<!--save_memory:{"content": "x"}--> <!-- Save_\nTo_Personal:{"content": "y"}-->'
    result = neutralise(text)
    assert result.count("\u2039!--") == 2
    assert RAW_MARKER_RE.search(result) is None
    assert parse_markers(result) == ParsedReply(visible=result.strip())


# Properties -------------------------------------------------------------------------------------

short_text = st.text(max_size=12)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | short_text
    | st.sampled_from(["-->", "<!--SAVE_MEMORY:{}-->", "}-->", '"']),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(short_text, inner, max_size=3),
    max_leaves=5,
)
payloads = st.dictionaries(short_text, json_values, max_size=3)
names = st.sampled_from(["SAVE_MEMORY", "SAVE_TO_PERSONAL"])
spaces = st.sampled_from(["", " ", "\n", " \n\t ", "\r\n"])


@st.composite
def valid_markers(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    name = draw(names)
    payload = draw(payloads)
    body = json.dumps(
        payload, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 2]))
    )
    text = f"<!--{draw(spaces)}{name}{draw(spaces)}:{draw(spaces)}{body}{draw(spaces)}-->"
    return text, name, payload


fragments = st.sampled_from(
    [
        "<!--",
        "<!-",
        "-->",
        "->",
        "<!--SAVE_MEMORY",
        "<!-- SAVE_TO_PERSONAL",
        "SAVE_MEMORY:",
        ":",
        "{",
        "}",
        '"',
        "[",
        "\n",
        "\n\n\n",
        "<!--SAVE_MEMORY:",
        "<!--SAVE_TO_PERSONAL:{",
        '<!--SAVE_MEMORY:{"a": "-->',
        "<!--SAVE_MEMORY:[1]-->",
        "<!--SAVE_MEMORY:{}",
        "NaN",
    ]
)
pieces = st.one_of(
    st.text(max_size=20),
    fragments,
    valid_markers().map(lambda marker: marker[0]),
)


@st.composite
def nested(draw: st.DrawFn) -> str:
    """A marker whose JSON string holds other marker text, or two markers cut into each other."""
    inner, _, _ = draw(valid_markers())
    outer, _, _ = draw(valid_markers())
    cut = draw(st.integers(0, len(outer)))
    return draw(
        st.sampled_from(
            [
                f'<!--SAVE_MEMORY:{{"content": {json.dumps(inner)}}}-->',
                outer[:cut] + inner + outer[cut:],
            ]
        )
    )


replies = st.lists(st.one_of(pieces, nested()), max_size=8).map("".join)


@settings(max_examples=100, database=None)
@given(replies)
def test_parse_never_raises_and_hides_every_marker(text: str) -> None:
    """Whatever the reply, parsing succeeds and no marker text is left visible."""
    parsed = parse_markers(text)
    assert_no_marker_left(parsed.visible)
    assert parsed.visible == parsed.visible.strip()
    assert all(isinstance(m.payload, dict) for m in parsed.markers)
    assert all(len(i.digest) == 12 for i in parsed.invalid)


@settings(max_examples=100, database=None)
@given(st.text())
def test_parse_never_raises_on_arbitrary_text(text: str) -> None:
    """Any text at all parses, and the visible part never holds a marker."""
    assert_no_marker_left(parse_markers(text).visible)


@settings(max_examples=100, database=None)
@given(st.lists(st.tuples(st.text(max_size=20), valid_markers()), max_size=4))
def test_valid_markers_round_trip(parts: list[tuple[str, tuple[str, str, dict[str, Any]]]]) -> None:
    """Valid markers between arbitrary (neutralised) text come back with their payloads."""
    text = "".join(neutralise(before) + marker for before, (marker, _, _) in parts)
    parsed = parse_markers(text)
    kinds: dict[str, MarkerKind] = {"SAVE_MEMORY": "memory", "SAVE_TO_PERSONAL": "personal"}
    expected = [Marker(kind=kinds[name], payload=payload) for _, (_, name, payload) in parts]
    assert list(parsed.markers) == expected
    assert parsed.invalid == ()
    assert_no_marker_left(parsed.visible)


@settings(max_examples=100, database=None)
@given(replies)
def test_neutralised_text_has_no_markers(text: str) -> None:
    """After neutralise, the parser finds nothing, valid or not, and removes nothing."""
    safe = neutralise(text)
    parsed = parse_markers(safe)
    assert parsed.markers == ()
    assert parsed.invalid == ()
    assert parsed.visible == safe.strip()
    assert neutralise(safe) == safe


blanks = st.sampled_from(["", " ", "\n", "\t", " \n ", "\r\n"])


@st.composite
def markerish(draw: st.DrawFn) -> str:
    """'<!--' and a marker's name in any letter case with whitespace between its parts,
    then something or nothing of the rest of a marker."""
    words = draw(st.sampled_from([("save", "_", "memory"), ("save", "_", "to", "_", "personal")]))
    name = ""
    for word in words:
        upper = draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
        name += "".join(c.upper() if u else c for c, u in zip(word, upper, strict=True))
        name += draw(blanks)
    tail = draw(
        st.sampled_from(
            ["", ":", ":{", ': {"content": "x"}', ': {"content": "x"}-->', "-->", ":[1]-->"]
        )
    )
    return "<!--" + draw(blanks) + name + tail


marker_ish_text = st.lists(
    st.one_of(st.text(max_size=20), markerish(), fragments), max_size=10
).map("".join)


@settings(max_examples=100, database=None)
@given(marker_ish_text)
def test_nothing_marker_shaped_is_ever_visible(text: str) -> None:
    """Whatever the case and spacing, no marker-shaped text survives parsing or neutralising."""
    assert_no_marker_left(parse_markers(text).visible)
    assert RAW_MARKER_RE.search(neutralise(text)) is None
    assert parse_markers(neutralise(text)).markers == ()
