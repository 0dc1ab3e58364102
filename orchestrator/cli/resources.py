"""What the ``arena`` commands open: the database, in its data folder, and the stores on it
(through the one :class:`~orchestrator.runtime.wiring.Wiring`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import Engine

from orchestrator.memory.db import open_engine
from orchestrator.runtime.wiring import Wiring
from orchestrator.settings import Settings

__all__ = ["database", "wired"]


@contextmanager
def database(settings: Settings) -> Iterator[Engine]:
    """The configured database for one ``with`` block (the data folder is made first).

    Raises:
        ServiceError: when the database cannot be opened.
    """
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with open_engine(settings.effective_database_url) as engine:
        yield engine


@contextmanager
def wired(settings: Settings) -> Iterator[Wiring]:
    """The stores on the configured database, each built when first used, for one ``with``
    block.

    Raises:
        ServiceError: when the database cannot be opened.
    """
    with database(settings) as engine:
        yield Wiring(settings, engine)
