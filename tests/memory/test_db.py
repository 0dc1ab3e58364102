"""Opening the database: daemons started together on a new SQLite file, and the reason given
when it cannot be opened."""

from __future__ import annotations

from multiprocessing.queues import SimpleQueue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

from orchestrator.errors import ServiceError
from orchestrator.memory.db import make_engine
from tests.processes import process_context


def _open(database: Path, start: Barrier, errors: SimpleQueue[str]) -> None:
    """Open ``database`` once every process is ready; its error, if any, goes to ``errors``."""
    start.wait(timeout=60)
    try:
        make_engine(f"sqlite:///{database}").dispose()
    except ServiceError as exc:
        errors.put(str(exc))
        raise SystemExit(1) from None


@pytest.mark.slow
def test_processes_opening_a_new_database_together_all_succeed(tmp_path: Path):
    """Several processes creating the tables of one new SQLite file at the same moment all
    open it (the one that loses the race to create a table looks again): four per file, three
    files at once."""
    databases = [tmp_path / f"arena-{n}.db" for n in range(3)]
    context = process_context()
    start = context.Barrier(len(databases) * 4)  # lets them all go at once
    errors: SimpleQueue[str] = context.SimpleQueue()
    procs = [
        context.Process(target=_open, args=(database, start, errors))
        for database in databases
        for _ in range(4)
    ]
    for proc in procs:
        proc.start()
    try:
        for proc in procs:
            proc.join(timeout=120)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
    said = []
    while not errors.empty():
        said.append(errors.get())
    assert [p.exitcode for p in procs] == [0] * len(procs), said


def test_a_database_that_cannot_be_opened_says_why(tmp_path: Path):
    """The error names the database and SQLite's reason, not only the exception's class."""
    missing = tmp_path / "no" / "such" / "folder" / "arena.db"
    with pytest.raises(ServiceError) as caught:
        make_engine(f"sqlite:///{missing}")
    assert str(caught.value) == (
        f"database: cannot open sqlite:///{missing}:"
        " OperationalError (unable to open database file)"
    )
