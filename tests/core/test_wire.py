"""The wire format: validation of posts and inbound entries, outbound items."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.core.wire import Outbound, entry_time, parse_inbound, validate_post
from orchestrator.errors import ValidationError

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("group", "text", "sender", "field"),
    [
        ("", "hi", "user", "group"),
        ("..", "hi", "user", "group"),
        ("a/b", "hi", "user", "group"),
        ("a\x00b", "hi", "user", "group"),
        ("UPPER", "hi", "user", "group"),
        ("a" * 65, "hi", "user", "group"),
        ("demo", "", "user", "text"),
        ("demo", " \n\t ", "user", "text"),
        ("demo", "bell \x07", "user", "text"),
        ("demo", "x" * 101, "user", "text"),
        ("demo", "hi", "", "sender"),
        ("demo", "hi", "../root", "sender"),
        ("demo", "hi", "a" * 65, "sender"),
    ],
)
def test_bad_posts_name_the_field(group, text, sender, field):
    """Each bad part is refused with an error naming it."""
    with pytest.raises(ValidationError) as caught:
        validate_post(group, text, sender, max_bytes=100)
    assert caught.value.field == field


def test_size_limit_counts_bytes_and_cjk_is_fine():
    """The size limit is in bytes of UTF-8; CJK text is accepted up to it."""
    assert validate_post("demo", "设计" * 16, "user", max_bytes=96).text == "设计" * 16
    with pytest.raises(ValidationError, match="97 bytes"):
        validate_post("demo", "设计" * 16 + "x", "user", max_bytes=96)


def test_invalid_utf8_entry_is_refused():
    """Raw bytes that are not UTF-8 are refused, not decoded with replacement characters."""
    with pytest.raises(ValidationError, match="UTF-8"):
        parse_inbound("1-0", {b"group": b"demo", b"text": b"\xff\xfe"}, 100, NOW)


def test_entry_time_comes_from_the_entry_id():
    """A message's time is the stream entry's, so a re-read keeps it."""
    message = parse_inbound("1767225600000-3", {b"group": b"g", b"text": b"hi"}, 100, NOW)
    assert message.created_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert message.sender == "user"
    assert entry_time("not-an-id") is None


@settings(max_examples=150, deadline=None)
@given(
    fields=st.dictionaries(
        st.sampled_from([b"group", b"text", b"sender", b"other"]),
        st.one_of(st.binary(max_size=80), st.text(max_size=80).map(str.encode)),
    )
)
def test_parse_inbound_accepts_or_refuses_clearly(fields):
    """Any entry either parses to a valid message or raises ValidationError, nothing else."""
    try:
        message = parse_inbound("5-0", fields, 64, NOW)
    except ValidationError as exc:
        assert exc.field in {"group", "text", "sender", "other"}  # noqa: PT017 - either outcome
    else:
        assert message.text.strip()
        assert len(message.text.encode()) <= 64


@given(text=st.text(max_size=200), hop=st.integers(0, 9))
def test_outbound_round_trips_through_stream_fields(text, hop):
    """An outbound item read back from its stream fields is the same item."""
    item = Outbound(
        type="reply",
        id="1-0:1:ping",
        group="demo",
        in_reply_to="1-0",
        sender="ping",
        kind="agent",
        text=text,
        hop=hop,
        created_at=NOW.isoformat(),
    )
    assert Outbound.from_fields(item.fields()) == item
