"""Times as the database stores them, read back with their zone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.sqlite import DATETIME
from sqlmodel.sql.sqltypes import UTCDateTime

from orchestrator.core.models import minute_text, utc_from_text


@pytest.mark.parametrize(
    "stored",
    [
        "2026-11-27 10:00:00.123456",
        "2026-11-27 10:00:00",
        "2028-02-29 23:59:59.000001",
        "2026-11-27T10:00:00",
        "2026-11-27 10:00:00.123",
        "2026-11-27 10:00:00+02:00",
    ],
)
def test_a_stored_time_reads_as_sqlalchemy_gives_it_with_its_zone(stored: str) -> None:
    """A time as stored on SQLite reads as SQLAlchemy's own column type gives it back: the
    same moment, in UTC."""
    column = UTCDateTime()
    sqlalchemy_gives = column.process_result_value(
        DATETIME().result_processor(sqlite.dialect(), None)(stored), sqlite.dialect()
    )
    read = utc_from_text(stored)
    assert read == sqlalchemy_gives
    assert read.utcoffset() == sqlalchemy_gives.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "moment",
    [
        datetime(2026, 11, 27, 9, 5, 59, 999999, tzinfo=UTC),
        datetime(2026, 3, 29, 1, 30, tzinfo=ZoneInfo("Europe/Berlin")),
        datetime(2025, 12, 31, 23, 59, tzinfo=ZoneInfo("Asia/Kolkata")),
        datetime(2026, 1, 1, 0, 0),
    ],
)
def test_a_moment_shown_to_the_minute_reads_as_strftime_writes_it(moment: datetime) -> None:
    """A prompt's times (``YYYY-MM-DD HH:MM`` in the moment's own zone) read as strftime
    would write them."""
    assert minute_text(moment) == moment.strftime("%Y-%m-%d %H:%M")
