"""What the ``arena`` commands open: the database, in its data folder."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import Engine

from orchestrator.memory.db import open_engine
from orchestrator.settings import Settings

__all__ = ["database"]


@contextmanager
def database(settings: Settings) -> Iterator[Engine]:
    """The configured database for one ``with`` block (the data folder is made first).

    Raises:
        ServiceError: when the database cannot be opened.
    """
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with open_engine(settings.effective_database_url) as engine:
        yield engine
