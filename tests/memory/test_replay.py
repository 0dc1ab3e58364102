"""A turn replayed after a crash writes nothing twice, and leaves no temporary files."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from orchestrator.memory.db import make_engine
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.schema import PersonalDraft
from orchestrator.memory.session.store import NewMemory, SessionMemory

T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)


def test_same_note_from_the_same_reply_is_logged_once(tmp_path: Path):
    """The same note with the same source is appended once, even a minute later; a note from
    another reply is appended."""
    log = PersonalLog(tmp_path, ZoneInfo("UTC"))
    note = PersonalDraft(content="index every foreign key", type="lesson")
    path = log.append("dev", note, source="demo/1-0:1:dev", now=T0)
    log.append("dev", note, source="demo/1-0:1:dev", now=T0.replace(minute=1))
    log.append("dev", note, source="demo/2-0:1:dev", now=T0.replace(minute=2))
    lines = [line for line in path.read_text().splitlines() if line.startswith("- ")]
    assert [line.split("(source: ")[1] for line in lines] == ["demo/1-0:1:dev)", "demo/2-0:1:dev)"]


def test_stale_temporary_files_are_removed(tmp_path: Path):
    """A temporary file left by a writer that was killed is removed by the next append."""
    log = PersonalLog(tmp_path, ZoneInfo("UTC"))
    path = log.append("dev", PersonalDraft(content="first note"), source="g/1", now=T0)
    stale = path.parent / f".{path.name}.abc123.tmp"
    stale.write_text("half a fi")
    log.append("dev", PersonalDraft(content="second note"), source="g/2", now=T0)
    assert not stale.exists()
    assert "second note" in path.read_text()


def test_reinforcement_counts_each_source_once(tmp_path: Path):
    """The same memory from the same message reinforces nothing; from another message it
    does, once."""
    engine = make_engine(f"sqlite:///{tmp_path / 'arena.db'}")
    memory = SessionMemory(engine)

    def write(source: str):
        return memory.write(
            NewMemory(
                scope="session",
                scope_id="demo",
                type="decision",
                content="We use JWT",
                now=T0,
                agent="dev",
                group_id="demo",
                source_message_id=source,
                confidence=0.8,
            )
        )

    first = write("1-0:1:dev")
    replay = write("1-0:1:dev")
    other = write("2-0:1:dev")
    again = write("2-0:1:dev")
    engine.dispose()
    assert first.action == "added"
    assert replay.record.count == 1
    assert replay.record.confidence == first.record.confidence
    assert other.record.count == 2
    assert again.record.count == 2
