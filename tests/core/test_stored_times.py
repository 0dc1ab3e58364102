"""Times as the database stores them, read back with their zone."""

from __future__ import annotations

from datetime import datetime

import pytest

from orchestrator.core.models import assume_utc, utc_from_text


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
    """A time as stored on SQLite reads as the same moment in UTC, with its zone: as taking
    the naive value SQLAlchemy reads and giving it UTC (an aware one keeps its own)."""
    read = utc_from_text(stored)
    assert read == assume_utc(datetime.fromisoformat(stored))
    assert read.tzinfo is not None
    assert read.utcoffset() == assume_utc(datetime.fromisoformat(stored)).utcoffset()
