"""Running a test on each database the arena supports: a SQLite file, then PostgreSQL."""

from __future__ import annotations

import pytest

__all__ = ["on_each_database"]

on_each_database = pytest.mark.parametrize("engine", ["sqlite", "postgres"], indirect=True)
"""Runs the test on SQLite and on PostgreSQL: the ``engine`` fixture (and ``store``, built on
it) is on each in turn (PostgreSQL is skipped when it is not installed)."""
