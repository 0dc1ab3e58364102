"""Session memory: add, reinforce, supersede, archive, export and scoped search."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, text

from orchestrator.errors import ValidationError
from orchestrator.memory.corrections import Corrections
from orchestrator.memory.db import make_engine
from orchestrator.memory.gate.rules import GateConfig
from orchestrator.memory.session.entries import ENTRIES, to_record
from orchestrator.memory.session.sqlite_rows import SqliteRows
from orchestrator.memory.session.store import Citation, MemoryEntry, NewMemory, SessionMemory
from tests.databases import on_each_database

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SCOPES_A = [("session", "alpha"), ("personal", "ping"), ("global", "")]
SCOPES_B = [("session", "beta"), ("personal", "ping"), ("global", "")]


@pytest.fixture
def memory(engine):
    """A session memory store without embeddings."""
    return SessionMemory(engine)


def new(content: str, *, group: str = "alpha", now: datetime = T0, **fields) -> NewMemory:
    values: dict[str, Any] = {
        "scope": "session",
        "scope_id": group,
        "type": "decision",
        "content": content,
        "now": now,
        "confidence": 0.8,
        "agent": "ping",
        "group_id": group,
        "source_message_id": f"msg-{uuid.uuid4().hex[:8]}",
    }
    values.update(fields)
    return NewMemory(**values)


class WordEmbedder:
    """Counts words into a small hashed vector: equal word bags give cosine 1."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = []
        for value in texts:
            vector = [0.0] * 64
            for word in value.lower().split():
                vector[sum(map(ord, word.strip(".,!?"))) % 64] += 1.0
            vectors.append(vector)
        return vectors


@on_each_database
def test_write_adds_an_entry_with_its_provenance(memory):
    """A new memory is added with its citation, writer and timestamps, and reads back equal."""
    citation = Citation(
        kind="message", ref="m1", locator="groups/alpha/messages/m1", scope="session"
    )
    outcome = memory.write(new("We use JWT for sessions", citation=citation, tags=["auth"]))
    assert outcome.action == "added"
    assert outcome.previous is None
    record = outcome.record
    assert (record.status, record.count, record.written_by, record.tags) == (
        "active",
        1,
        "agent",
        ("auth",),
    )
    assert record.citation == citation
    assert record.created_at == record.last_seen_at == T0
    assert memory.get(record.id) == record
    assert memory.get(record.id + 1000) is None


@on_each_database
def test_same_content_reinforces_instead_of_adding(memory):
    """Equal content after normalisation bumps count, last_seen_at and confidence."""
    first = memory.write(new("We use JWT for sessions.", confidence=0.8)).record
    later = T0 + timedelta(hours=3)
    outcome = memory.write(new("  we use JWT for   sessions", confidence=0.75, now=later))
    assert outcome.action == "reinforced"
    assert outcome.record.id == first.id
    assert outcome.record.count == 2
    assert outcome.record.last_seen_at == later
    assert math.isclose(outcome.record.confidence, 0.85)
    again = memory.write(new("We use JWT for sessions", confidence=1.0, verified=True))
    assert math.isclose(again.record.confidence, 1.0)
    assert again.record.verified
    assert len(memory.list(status=None)) == 1


@on_each_database
def test_same_content_in_another_group_is_its_own_entry(memory):
    """Duplicates are per scope: the same words in another group add a row."""
    a = memory.write(new("Deploys happen on Fridays", group="alpha"))
    b = memory.write(new("Deploys happen on Fridays", group="beta"))
    assert (a.action, b.action) == ("added", "added")
    assert a.record.id != b.record.id


@on_each_database
def test_same_key_with_new_content_supersedes_and_keeps_the_old_entry(memory):
    """A key rewritten supersedes the old entry, links both ways and deletes nothing."""
    old = memory.write(new("The database is MySQL", key="database")).record
    outcome = memory.write(new("The database is PostgreSQL", key="database"))
    assert outcome.action == "superseded"
    assert outcome.previous is not None
    assert outcome.previous.id == old.id
    assert outcome.previous.status == "superseded"
    assert outcome.previous.superseded_by == outcome.record.id
    assert outcome.record.supersedes == old.id
    assert [r.content for r in memory.list()] == ["The database is PostgreSQL"]
    assert len(memory.list(status=None)) == 2
    assert memory.get(old.id).status == "superseded"
    same = memory.write(new("The database is PostgreSQL", key="database"))
    assert same.action == "reinforced"


@on_each_database
def test_forget_archives_and_restore_brings_back(memory):
    """Forgetting is a reversible status change; archived entries are not searched."""
    entry = memory.write(new("The staging password rotates monthly")).record
    assert memory.forget(entry.id).status == "archived"
    assert memory.search("staging password", scopes=SCOPES_A) == []
    assert memory.get(entry.id) is not None
    assert memory.restore(entry.id).status == "active"
    assert [r.id for r, _ in memory.search("staging password", scopes=SCOPES_A)] == [entry.id]
    assert memory.forget(999_999) is None


@on_each_database
def test_restore_refuses_to_make_a_second_active_duplicate(memory):
    """Restoring is refused when an active entry now holds the same content."""
    entry = memory.write(new("Use blue for the logo")).record
    memory.forget(entry.id)
    again = memory.write(new("Use blue for the logo"))
    assert again.action == "added"
    with pytest.raises(ValidationError):
        memory.restore(entry.id)
    assert memory.get(entry.id).status == "archived"


@on_each_database
def test_export_and_stats(memory):
    """Export gives a group's entries of every status as JSON; stats count them."""
    memory.write(new("Release on the 5th", key="release", type="event"))
    memory.write(new("Release on the 9th", key="release", type="event"))
    memory.write(new("Tabs, not spaces", group="beta", type="preference"))
    memory.write(new("Be concise", scope="global", scope_id="", group_id=None))
    exported = memory.export("alpha")
    assert [e["status"] for e in exported] == ["superseded", "active"]
    assert json.loads(json.dumps(exported)) == exported
    assert exported[0]["citation"] is None
    assert exported[0]["created_at"] == T0.isoformat()
    stats = memory.stats()
    assert stats["total"] == 4
    assert stats["by_scope"] == {"global": 1, "session": 3}
    assert stats["by_type"] == {"decision": 1, "event": 2, "preference": 1}
    assert stats["by_status"] == {"active": 3, "superseded": 1}


@on_each_database
def test_count_written_since_counts_an_agents_rows_in_a_group(memory):
    """The daily limit counts rows the agent added in the group from a given time."""
    memory.write(new("one thing", now=T0 - timedelta(days=1)))
    memory.write(new("two things"))
    memory.write(new("three things", agent="pong"))
    memory.write(new("four things", group="beta"))
    assert memory.count_written_since("ping", "alpha", T0 - timedelta(hours=1)) == 1
    assert memory.count_written_since("ping", "alpha", T0 - timedelta(days=2)) == 2


@on_each_database
def test_concurrent_duplicate_writes_store_one_row(memory):
    """Eight threads writing the same content at once leave one row, reinforced seven times."""
    barrier = threading.Barrier(8)
    actions: list[str] = []
    errors: list[BaseException] = []

    def write() -> None:
        try:
            barrier.wait()
            actions.append(memory.write(new("We ship on Thursdays")).action)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(actions) == ["added"] + ["reinforced"] * 7
    rows = memory.list(status=None)
    assert len(rows) == 1
    assert rows[0].count == 8


@on_each_database
def test_concurrent_writes_of_one_key_leave_one_active_entry(memory):
    """Racing writers of one key leave exactly one active entry and a chain of the rest."""
    barrier = threading.Barrier(5)

    def write(n: int) -> None:
        barrier.wait()
        memory.write(new(f"The launch date is March {n + 1}", key="launch"))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rows = memory.list(status=None)
    assert len(rows) == 5
    assert [r.status for r in rows].count("active") == 1
    assert sum(1 for r in rows if r.superseded_by is not None) == 4


@on_each_database
def test_search_never_returns_another_groups_memory(memory):
    """A canary stored in group alpha is found there and never from beta's scopes."""
    canary = f"canary{uuid.uuid4().hex[:10]}"
    memory.write(new(f"The vault word is {canary}", group="alpha"))
    memory.write(new("The vault word is secret", group="beta"))
    memory.write(new("Vault words change weekly", scope="personal", scope_id="ping"))
    found_b = memory.search(f"vault word {canary}", scopes=SCOPES_B, limit=50)
    assert found_b
    assert all(canary not in r.content for r, _ in found_b)
    assert {r.scope_id for r, _ in found_b} == {"beta", "ping"}
    found_a = memory.search(f"vault word {canary}", scopes=SCOPES_A, limit=50)
    assert canary in found_a[0][0].content
    assert memory.search("vault", scopes=[], limit=5) == []


@on_each_database
def test_search_ranks_by_relevance_and_handles_cjk_and_syntax(memory):
    """Full text: better matches first, stemmed, Chinese by bigrams, FTS syntax inert."""
    memory.write(new("Deploying needs two approvals"))
    memory.write(new("The deploy approval process is documented in the wiki"))
    memory.write(new("我们决定使用PostgreSQL作为主数据库"))
    hits = memory.search("deploy approvals", scopes=SCOPES_A)
    assert len(hits) == 2
    assert hits[0][1] >= hits[1][1] > 0
    cjk = memory.search("用什么数据库", scopes=SCOPES_A)
    assert [r.content for r, _ in cjk] == ["我们决定使用PostgreSQL作为主数据库"]
    assert memory.search('deploy" OR NEAR(* -- )', scopes=SCOPES_A)


@on_each_database
def test_records_reads_entries_in_full_whatever_their_status(memory):
    """records reads the entries that exist by id, archived ones too."""
    memory.write(new("Deploying needs two approvals", tags=["ops"], key="deploy_rule"))
    memory.write(new("The deploy approval process is documented in the wiki"))
    archived = memory.write(new("Old deploy approvals note")).record
    memory.forget(archived.id)
    full = memory.search("deploy approvals", scopes=SCOPES_A)
    records = memory.records([r.id for r, _ in full] + [archived.id, 10**9])
    assert set(records) == {r.id for r, _ in full} | {archived.id}
    assert records[archived.id].status == "archived"
    assert [(records[r.id].content, records[r.id].tags) for r, _ in full] == [
        (r.content, r.tags) for r, _ in full
    ]
    assert memory.records([]) == {}


@on_each_database
def test_write_many_is_one_batch_with_the_same_rules(memory):
    """The bulk path applies dedupe and supersede in order, within the batch too."""
    items = [new(f"fact number {n}") for n in range(100)]
    items += [new("fact number 7"), new("rule A", key="r"), new("rule B", key="r")]
    outcomes = memory.write_many(items)
    assert [o.action for o in outcomes[-3:]] == ["reinforced", "added", "superseded"]
    assert memory.stats()["by_status"] == {"active": 101, "superseded": 1}
    assert memory.write_many([]) == []


@on_each_database
def test_mark_used_sets_last_used_at(memory):
    """mark_used records when entries were recalled."""
    entry = memory.write(new("Standup is at 10")).record
    assert entry.last_used_at is None
    memory.mark_used([entry.id], T0 + timedelta(minutes=5))
    assert memory.get(entry.id).last_used_at == T0 + timedelta(minutes=5)


def test_marks_asked_for_together_are_written_as_mark_used_writes_them(memory, engine):
    """Turns marking at about the same moment on the event loop are written together (on
    SQLite in one statement): each entry at the latest time it was marked, stored as the
    thread's path stores it; the others are left alone."""
    a, b, c, d, e = (memory.write(new(f"Standup number {n} is at 10")).record for n in range(5))
    at = T0 + timedelta(minutes=5, microseconds=7)
    later = at + timedelta(seconds=3)

    async def turns() -> None:
        await asyncio.gather(
            memory.mark_used_soon([a.id, c.id], at),
            memory.mark_used_soon([c.id, e.id], later),
            memory.mark_used_soon([], later),
        )

    asyncio.run(turns())
    memory.mark_used([d.id], at)
    marked = [memory.get(entry.id).last_used_at for entry in (a, b, c, d, e)]
    assert marked == [at, None, later, at, later]
    with engine.connect() as conn:
        stored = dict(conn.exec_driver_sql("SELECT id, last_used_at FROM memory_entries").all())
    assert stored[a.id] == stored[d.id]
    assert stored[c.id] == stored[e.id] != stored[a.id]


def test_new_memory_validates_itself():
    """Bad scopes, empty content, confidence out of range and naive times are refused."""
    with pytest.raises(ValidationError):
        new("x", scope="global", scope_id="alpha")
    with pytest.raises(ValidationError):
        new("x", scope="team")
    with pytest.raises(ValidationError):
        new("   ")
    with pytest.raises(ValidationError):
        new("x", confidence=1.5)
    with pytest.raises(ValidationError):
        new("x", now=datetime(2026, 1, 1))


def test_similar_meaning_counts_as_duplicate_with_embeddings(tmp_path):
    """With an embedder, cosine >= 0.85 in the same scope reinforces; vectors are searchable."""
    engine = make_engine(f"sqlite:///{tmp_path / 'arena.db'}")
    memory = SessionMemory(engine, embedder=WordEmbedder())
    first = memory.write(new("ship the release on friday"))
    second = memory.write(new("on friday ship the release!"))
    third = memory.write(new("postgres is the database"))
    assert (first.action, second.action, third.action) == ("added", "reinforced", "added")
    vector = WordEmbedder().embed(["database postgres"])[0]
    hits = memory.search_similar(vector, scopes=SCOPES_A, limit=1)
    assert hits[0][0].id == third.record.id
    assert hits[0][1] > 0.7
    assert memory.search_similar(vector, scopes=SCOPES_B, limit=5) == []
    engine.dispose()


def test_full_text_index_survives_a_second_start(tmp_path):
    """Opening the same database again keeps the index and its rows (idempotent DDL)."""
    url = f"sqlite:///{tmp_path / 'arena.db'}"
    engine = make_engine(url)
    SessionMemory(engine).write(new("Retro every second Tuesday"))
    engine.dispose()
    engine = make_engine(url)
    assert SessionMemory(engine).search("retro tuesday", scopes=SCOPES_A)
    engine.dispose()


# The full-text index as the previous version created it, to test the migration on start.
OLD_SQLITE_INDEX = (
    "DROP TRIGGER memory_fts_ai",
    "DROP TRIGGER memory_fts_ad",
    "DROP TRIGGER memory_fts_au",
    "DROP TABLE memory_fts",
    "DROP VIEW memory_fts_source",
    """
    CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5(
        search_body, search_meta,
        content='memory_entries', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TRIGGER IF NOT EXISTS memory_fts_ai AFTER INSERT ON memory_entries BEGIN
        INSERT INTO memory_fts(rowid, search_body, search_meta)
        VALUES (new.id, new.search_body, new.search_meta);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS memory_fts_ad AFTER DELETE ON memory_entries BEGIN
        INSERT INTO memory_fts(memory_fts, rowid, search_body, search_meta)
        VALUES ('delete', old.id, old.search_body, old.search_meta);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS memory_fts_au AFTER UPDATE OF search_body, search_meta
    ON memory_entries BEGIN
        INSERT INTO memory_fts(memory_fts, rowid, search_body, search_meta)
        VALUES ('delete', old.id, old.search_body, old.search_meta);
        INSERT INTO memory_fts(rowid, search_body, search_meta)
        VALUES (new.id, new.search_body, new.search_meta);
    END
    """,
)
OLD_POSTGRES_INDEX = (
    "DROP INDEX ix_memory_entries_search_scope_tsv",
    "ALTER TABLE memory_entries DROP COLUMN search_scope",
    "CREATE INDEX IF NOT EXISTS ix_memory_entries_search_tsv "
    "ON memory_entries USING GIN (search_tsv)",
)


@pytest.fixture(params=["sqlite", "postgres"])
def fresh_url(request, tmp_path):
    """The URL of an empty database of its own (on PostgreSQL: created, dropped after)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'arena.db'}"
        return
    server = request.getfixturevalue("postgres_url")
    name = f"arena_{uuid.uuid4().hex[:12]}"
    admin = make_engine(server).execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    yield server.rsplit("/", 1)[0] + f"/{name}"
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE {name} WITH (FORCE)"))
    admin.engine.dispose()


def rows_of(engine) -> list[dict[str, Any]]:
    columns = ", ".join(c.name for c in MemoryEntry.__table__.columns)  # type: ignore[attr-defined]
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT {columns} FROM memory_entries ORDER BY id"))
        return [dict(row) for row in rows.mappings()]


def test_an_old_full_text_index_is_migrated_on_start(fresh_url):
    """A database whose index has the previous shape is rebuilt on start; no entry changes."""
    engine = make_engine(fresh_url)
    with engine.begin() as conn:
        old = OLD_SQLITE_INDEX if engine.dialect.name == "sqlite" else OLD_POSTGRES_INDEX
        for statement in old:
            conn.execute(text(statement))
    memory = SessionMemory(engine)
    kept = memory.write(new("Deploys happen on Thursday afternoons")).record
    memory.write(new("Deploys are frozen in December", group="beta"))
    memory.write(new("We use MySQL", key="db"))
    current = memory.write(new("We use Postgres", key="db")).record
    forgotten = memory.write(new("Lunch is at noon on Fridays")).record
    memory.forget(forgotten.id)
    before = rows_of(engine)
    engine.dispose()

    engine = make_engine(fresh_url)
    memory = SessionMemory(engine)

    assert rows_of(engine) == before
    assert [r.id for r, _ in memory.search("when do deploys happen", scopes=SCOPES_A)] == [kept.id]
    assert [r.id for r, _ in memory.search("MySQL or Postgres", scopes=SCOPES_A)] == [current.id]
    assert memory.search("lunch", scopes=SCOPES_A) == []
    assert memory.restore(forgotten.id) is not None
    assert [r.id for r, _ in memory.search("lunch", scopes=SCOPES_A)] == [forgotten.id]
    if engine.dialect.name == "sqlite":  # raises if the index lost track of a row
        with engine.connect() as conn:
            conn.execute(text("INSERT INTO memory_fts(memory_fts) VALUES ('integrity-check')"))
    after = rows_of(engine)
    engine.dispose()
    # A third start finds nothing to do and changes nothing.
    engine = make_engine(fresh_url)
    assert rows_of(engine) == after
    assert len(SessionMemory(engine).search("deploys lunch", scopes=SCOPES_A)) == 2
    engine.dispose()


@on_each_database
def test_search_keeps_to_scopes_with_any_scope_id(memory):
    """Group ids of any length, script or punctuation keep their entries to themselves."""
    odd = ["g-1", "g-1.x", "g 1", "数据库组", "x" * 200, "global", "session:alpha"]
    for group in odd:
        memory.write(new(f"The release train leaves at noon for {group}", group=group))
    for group in odd:
        scopes = [("session", group)]
        hits = memory.search("release train", scopes=scopes)
        assert [(r.scope_id, r.content.endswith(group)) for r, _ in hits] == [(group, True)]


@on_each_database
def test_pinned_gives_only_the_scopes_pins_newest_first(engine):
    """Each group's pinned entries, and the shared scopes', never another group's; a pin
    whose entry is no longer active is not given."""
    memory = SessionMemory(engine)
    corrections = Corrections(engine, gate=GateConfig())
    ids = {}
    written = [
        ("alpha", "we ship on fridays"),
        ("beta", "beta uses rust"),
        ("alpha", "alpha keeps a changelog"),
        ("alpha", "alpha drops it"),
    ]
    for group, content in written:
        record = memory.write(new(content, group=group)).record
        ids[content] = record.id
        corrections.pin(record.id, by="user", now=T0)
    corrections.forget(ids["alpha drops it"], by="user", now=T0)
    alpha = [r.content for r in memory.pinned(SCOPES_A)]
    assert alpha == ["alpha keeps a changelog", "we ship on fridays"]
    assert [r.content for r in memory.pinned(SCOPES_B)] == ["beta uses rust"]
    assert memory.pinned([]) == []


def test_rows_read_straight_from_sqlite_are_what_sqlalchemy_gives(engine):
    """Every column of entries written with tags, a citation, extras, a confidence, a pin and
    a use reads the same through the driver as through SQLAlchemy's types (zones, JSON, None)."""
    memory = SessionMemory(engine)
    citation = Citation(
        kind="message", ref="m1", locator="groups/alpha/messages/m1", scope="session"
    )
    first = memory.write(new("we ship on fridays", citation=citation, tags=["release"])).record
    second = memory.write(new("beta keeps a changelog", group="beta", extra={"speaker": "Ada"}))
    third = memory.write(new("nothing else", confidence=0.55)).record
    memory.mark_used([first.id], T0 + timedelta(minutes=3))
    Corrections(engine, gate=GateConfig()).pin(third.id, by="user", now=T0)
    ids = [first.id, second.record.id, third.id]
    columns = list(ENTRIES.c)
    rows = SqliteRows(columns)
    with engine.connect() as conn:
        expected = {
            row["id"]: dict(row)
            for row in conn.execute(select(*columns).where(ENTRIES.c.id.in_(ids))).mappings()
        }
        fast = rows.by_ids(conn, ids)
        pinned = rows.pinned(conn, SCOPES_A)
    assert fast is not None
    assert {row["id"]: row for row in fast} == expected
    assert pinned == [expected[third.id]]
    assert memory.records(ids) == {i: to_record(row) for i, row in expected.items()}
