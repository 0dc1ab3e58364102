"""The table of memory tool calls already applied (``memory_tool_calls``): a ``memory_store``
or ``memory_forget`` call and what it returned, kept so that a turn replayed after a crash gets
the kept result instead of writing again (:mod:`orchestrator.memory.tools` reads and writes it).

The table lives apart from the tools so that opening the database (which creates every table)
does not import the tools' recall and write path.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Table
from sqlmodel import Field, SQLModel

__all__ = ["APPLIED", "AppliedToolCallRow"]


class AppliedToolCallRow(SQLModel, table=True):
    """A ``memory_store`` or ``memory_forget`` call already applied, and what it returned."""

    __tablename__ = "memory_tool_calls"

    call_id: str = Field(primary_key=True, max_length=128)
    agent: str = Field(max_length=64)
    name: str = Field(max_length=32)
    input: str
    result: str
    is_error: bool = False
    at: datetime


APPLIED: Table = AppliedToolCallRow.__table__  # type: ignore[attr-defined]
