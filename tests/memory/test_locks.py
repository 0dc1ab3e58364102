"""Writers of workspace files take turns, across threads and processes, without leaving a
lock file in the user's tree."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from orchestrator.memory.db import make_engine
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.schema import PersonalDraft
from orchestrator.memory.versions.file import VersionedFile
from orchestrator.memory.versions.store import VersionStore
from tests.processes import process_context

NOW = datetime(2025, 3, 4, 12, 0, tzinfo=UTC)


def _memory_md(workspaces: Path, database_url: str) -> tuple[VersionedFile, object]:
    engine = make_engine(database_url)
    path = workspaces / "dev" / "MEMORY.md"
    return VersionedFile(VersionStore(engine), "memory_md", "dev", path, len), engine


def _grow(workspaces: str, database_url: str, writer: str, count: int) -> None:
    """Add ``count`` lines to MEMORY.md, each by read-then-replace, again on a conflict."""
    file, engine = _memory_md(Path(workspaces), database_url)
    for index in range(count):
        while True:
            text = file.read()
            line = f"- {writer}-{index}\n"
            if file.replace(text, text + line, trigger="t", now=NOW, source={}) is not None:
                break
    engine.dispose()  # type: ignore[attr-defined]


def test_writes_leave_no_lock_file(tmp_path: Path):
    """A daily-log append and a MEMORY.md version leave only the files themselves."""
    workspaces = tmp_path / "workspaces"
    log = PersonalLog(workspaces, ZoneInfo("UTC"))
    log.append("dev", PersonalDraft(content="a note", type="note"), source="g/m", now=NOW)
    file, engine = _memory_md(workspaces, f"sqlite:///{tmp_path / 'arena.db'}")
    (workspaces / "dev" / "MEMORY.md").write_text("- by hand\n", encoding="utf-8")
    assert file.sync(NOW) is not None
    assert file.replace("- by hand\n", "- by hand\n- learnt\n", trigger="t", now=NOW, source={})
    engine.dispose()  # type: ignore[attr-defined]
    left = sorted(str(p.relative_to(workspaces)) for p in workspaces.rglob("*"))
    assert left == ["dev", "dev/MEMORY.md", "dev/memory", "dev/memory/2025-03-04.md"]


def test_threads_replacing_one_file_lose_no_update(tmp_path: Path):
    """4 threads x 10 read-then-replace: every line is there."""
    url = f"sqlite:///{tmp_path / 'arena.db'}"
    make_engine(url).dispose()  # the schema, once
    threads = [
        threading.Thread(target=_grow, args=(str(tmp_path), url, f"t{n}", 10)) for n in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = (tmp_path / "dev" / "MEMORY.md").read_text(encoding="utf-8").splitlines()
    assert sorted(lines) == sorted(f"- t{n}-{i}" for n in range(4) for i in range(10))


@pytest.mark.slow
def test_processes_replacing_one_file_lose_no_update(tmp_path: Path):
    """3 processes x 10 read-then-replace: every line is there (the folder lock holds
    across processes)."""
    url = f"sqlite:///{tmp_path / 'arena.db'}"
    make_engine(url).dispose()  # the schema, once
    context = process_context()
    processes = [
        context.Process(target=_grow, args=(str(tmp_path), url, f"p{n}", 10)) for n in range(3)
    ]
    for process in processes:
        process.start()
    try:
        for process in processes:
            process.join(timeout=40)
            assert process.exitcode == 0
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
    lines = (tmp_path / "dev" / "MEMORY.md").read_text(encoding="utf-8").splitlines()
    assert sorted(lines) == sorted(f"- p{n}-{i}" for n in range(3) for i in range(10))
