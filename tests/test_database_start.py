"""Opening the database: daemons started together on a new SQLite file, and the reason given
when it cannot be opened."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import ServiceError
from orchestrator.memory.db import make_engine
from tests.arena_helpers import REPO

_OPEN_AT = """
import os, sys
from orchestrator.errors import ServiceError
from orchestrator.memory.db import make_engine
print("imported", flush=True)
os.read(int(sys.argv[2]), 1)  # returns in every process at once when the test closes the pipe
try:
    make_engine(f"sqlite:///{sys.argv[1]}").dispose()
except ServiceError as exc:
    sys.exit(str(exc))
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_processes_opening_a_new_database_together_all_succeed(tmp_path: Path):
    """Several processes creating the tables of one new SQLite file at the same moment all
    open it (the one that loses the race to create a table looks again): four per file, three
    files at once."""
    databases = [tmp_path / f"arena-{n}.db" for n in range(3)]
    go, release = os.pipe()  # each process waits on it, having imported what it needs
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN_AT, str(database), str(go)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(go,),
            text=True,
        )
        for database in databases
        for _ in range(4)
    ]
    os.close(go)
    try:
        for proc in procs:
            assert proc.stdout is not None
            proc.stdout.readline()  # "imported" (or nothing, when it failed before)
        os.close(release)
        results = [proc.communicate(timeout=120) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    errors = [err for _out, err in results if err.strip()]
    assert [p.returncode for p in procs] == [0] * len(procs), errors


def test_a_database_that_cannot_be_opened_says_why(tmp_path: Path):
    """The error names the database and SQLite's reason, not only the exception's class."""
    missing = tmp_path / "no" / "such" / "folder" / "arena.db"
    with pytest.raises(ServiceError) as caught:
        make_engine(f"sqlite:///{missing}")
    assert str(caught.value) == (
        f"database: cannot open sqlite:///{missing}:"
        " OperationalError (unable to open database file)"
    )
