"""The memories recall holds in memory: found as the full-text index finds them, and current
with every change, whoever made it (another process, a script with its own SQL)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from orchestrator.memory.corrections import Corrections
from orchestrator.memory.db import make_engine
from orchestrator.memory.gate.rules import GateConfig
from orchestrator.memory.quick import QuickReader
from orchestrator.memory.recall.recaller import RecallConfig, Recaller
from orchestrator.memory.session import fts, scope_log, terms
from orchestrator.memory.session.resident import ResidentMemory
from orchestrator.memory.session.store import NewMemory, SessionMemory
from tests.databases import on_each_database

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ALPHA = [("session", "alpha"), ("personal", "ping"), ("global", "")]


def new(content: str, *, group: str = "alpha", **fields: object) -> NewMemory:
    values: dict[str, object] = {
        "scope": "session",
        "scope_id": group,
        "type": "fact",
        "content": content,
        "agent": "ping",
        "group_id": group,
        "now": T0,
    }
    values.update(fields)
    return NewMemory(**values)  # type: ignore[arg-type]


@pytest.fixture
def other_engine(engine: Engine) -> Iterator[Engine]:
    """The same database through an engine of its own: another process's writes."""
    second = make_engine(engine.url.render_as_string(hide_password=False))
    yield second
    second.dispose()


@pytest.fixture
def other(other_engine: Engine) -> SessionMemory:
    return SessionMemory(other_engine)


def find(resident: ResidentMemory, query: str, scopes=ALPHA, limit: int = 50):
    found = resident.find(fts.query_terms(query), scopes, limit)
    return [record.content for record, _ in found.hits], [r.content for r in found.pinned]


@on_each_database
def test_finds_what_the_full_text_index_finds(engine):
    """The same entries as the index's search, best first; nothing of another group, nothing
    archived; stemmed and accent-blind as the index is."""
    memory = SessionMemory(engine)
    memory.write(new("Deploying needs two approvals", tags=["ops"], key="deploy_rule"))
    memory.write(new("The deploy approval process is documented in the wiki"))
    memory.write(new("Lunch is at noon on Fridays"))
    memory.write(new("Deploy approvals in beta", group="beta"))
    archived = memory.write(new("Old deploy approvals note")).record
    memory.forget(archived.id)
    memory.write(new("Answer in British English", scope="global", scope_id="", group_id=None))
    memory.write(new("Le café ouvre à huit heures"))
    found, _ = find(memory.resident, "deploy approvals")
    by_index = [r.content for r, _ in memory.search("deploy approvals", scopes=ALPHA)]
    assert (
        set(found)
        == set(by_index)
        == {
            "Deploying needs two approvals",
            "The deploy approval process is documented in the wiki",
        }
    )
    assert found[0] == "Deploying needs two approvals"  # both words, and the key's
    assert find(memory.resident, "which english spelling")[0] == ["Answer in British English"]
    assert find(memory.resident, "cafe")[0] == ["Le café ouvre à huit heures"]
    assert find(memory.resident, "deploy", limit=1)[0] == ["Deploying needs two approvals"]
    assert find(memory.resident, "nothing matches this")[0] == []
    assert find(memory.resident, "deploy", scopes=[])[0] == []


@on_each_database
def test_sees_every_change_made_elsewhere(engine, other, other_engine):
    """Writes, supersedes, forgets, restores, pins and a script's own SQL, made through
    another engine after the scope was held, are in the next search."""
    mine = SessionMemory(engine)
    resident = mine.resident
    assert find(resident, "backups") == ([], [])
    first = other.write(new("The database backups run nightly", key="backups")).record
    assert find(resident, "backups")[0] == ["The database backups run nightly"]
    other.write(new("The database backups run hourly", key="backups"))  # supersedes
    assert find(resident, "backups")[0] == ["The database backups run hourly"]
    corrections = Corrections(other_engine, gate=GateConfig())
    second = _id_of(other_engine, "The database backups run hourly")
    corrections.pin(second, by="user", now=T0)
    assert find(resident, "lunch") == ([], ["The database backups run hourly"])
    corrections.unpin(second, by="user", now=T0)
    assert find(resident, "lunch") == ([], [])
    other.forget(second)
    assert find(resident, "backups")[0] == []
    other.restore(second)
    assert find(resident, "backups")[0] == ["The database backups run hourly"]
    with other_engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE memory_entries SET content = 'Backups moved to the cloud', "
                "search_body = 'Backups moved to the cloud' WHERE id = :id"
            ),
            {"id": second},
        )
        conn.execute(
            text("UPDATE memory_entries SET scope_id = 'beta' WHERE id = :id"), {"id": first.id}
        )
    assert find(resident, "backups")[0] == ["Backups moved to the cloud"]
    assert find(resident, "backups", scopes=[("session", "beta")])[0] == []  # not active
    with other_engine.begin() as conn:
        conn.execute(text("DELETE FROM memory_entries WHERE id = :id"), {"id": second})
    assert find(resident, "backups")[0] == []


@on_each_database
def test_recording_use_is_not_a_change(engine):
    """Recall writes when it last used an entry at every turn: that logs nothing."""
    memory = SessionMemory(engine)
    entry = memory.write(new("The deploy needs two approvals")).record
    with engine.connect() as conn:
        before = conn.execute(text("SELECT count(*) FROM memory_scope_log")).scalar_one()
    memory.mark_used([entry.id], T0 + timedelta(hours=1))
    with engine.connect() as conn:
        after = conn.execute(text("SELECT count(*) FROM memory_scope_log")).scalar_one()
    assert after == before
    assert memory.get(entry.id).last_used_at == T0 + timedelta(hours=1)


def test_a_reader_left_behind_reads_everything_again(engine, other):
    """When the log no longer holds every change since a reader's last read (it keeps the
    newest rows only), the reader lets go of what it holds and reads it anew."""
    resident = SessionMemory(engine).resident
    other.write(new("The deploy needs two approvals"))
    assert find(resident, "deploy")[0] == ["The deploy needs two approvals"]
    with engine.begin() as conn:  # as if thousands of changes had been made and dropped
        conn.execute(text("UPDATE memory_entries SET content = 'The deploy needs three approvals'"))
        conn.execute(
            text("UPDATE sqlite_sequence SET seq = seq + 20000 WHERE name = 'memory_scope_log'")
        )
        conn.execute(text("DELETE FROM memory_scope_log"))
    other.write(new("Lunch is at noon"))
    assert find(resident, "deploy")[0] == ["The deploy needs three approvals"]


def test_the_log_tells_a_reader_what_it_lost_and_only_that(engine, other):
    """A reader whose next change the log still holds lost nothing, even when older rows were
    dropped; one whose next change was dropped is told so."""
    reader = QuickReader(engine)
    other.write(new("The deploy needs two approvals"))
    last = scope_log.newest(reader)
    other.write(new("Lunch is at noon"))
    with engine.begin() as conn:  # the rows up to the reader's last one dropped
        conn.execute(text("DELETE FROM memory_scope_log WHERE seq <= :last"), {"last": last})
    held = scope_log.changes(reader, last, set())
    assert not held.lost
    assert [c.seq for c in held.rows] == [held.last]
    other.write(new("Standup moved to ten"))
    with engine.begin() as conn:  # now the reader's next change is gone too
        conn.execute(text("DELETE FROM memory_scope_log WHERE seq <= :last"), {"last": held.last})
    assert scope_log.changes(reader, last, set()).lost


def test_lets_go_of_scopes_beyond_its_size_and_reads_them_again(engine):
    """Past ``max_entries`` the scopes searched longest ago are let go; searched again,
    they are read again."""
    memory = SessionMemory(engine)
    for group in ("a", "b", "c"):
        memory.write_many([new(f"{group} note {n} about deploys", group=group) for n in range(5)])
    resident = ResidentMemory(engine, max_entries=6)
    for group in ("a", "b", "c", "a"):
        hits, _ = find(resident, "deploys", scopes=[("session", group)])
        assert len(hits) == 5
        assert all(h.startswith(f"{group} note") for h in hits)
        assert resident.held == 5


def _id_of(engine: Engine, content: str) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT id FROM memory_entries WHERE content = :c AND status = 'active'"),
                {"c": content},
            ).scalar_one()
        )


def test_a_scope_too_large_to_hold_is_searched_in_the_index(engine):
    """Past ``max_scope`` active entries a scope is not held: find says so, and recall finds
    the same memories through the full-text index; the scope is counted again later."""
    memory = SessionMemory(engine)
    memory.write_many([new(f"note {n} about the deploy window") for n in range(4)])
    memory.write(new("Deploys need two approvals", key="deploy_rule"))
    now = [0.0]
    memory.resident = ResidentMemory(engine, max_scope=3, clock=lambda: now[0])
    assert memory.resident.find(["deploy"], ALPHA, 10) is None
    assert memory.resident.held == 0
    result = Recaller(memory).recall(
        "deploy approvals", group="alpha", agent="ping", config=RecallConfig(), now=T0
    )
    assert result.snippets[0].content == "Deploys need two approvals"
    with engine.begin() as conn:  # the group shrinks below the limit
        conn.execute(text("UPDATE memory_entries SET status = 'archived' WHERE key IS NULL"))
    assert memory.resident.find(["deploy"], ALPHA, 10) is None  # not counted again yet
    now[0] += 61
    found = memory.resident.find(["deploy"], ALPHA, 10)
    assert found is not None
    assert [r.content for r, _ in found.hits] == ["Deploys need two approvals"]


def test_reads_the_log_after_its_own_writes_and_now_and_then_for_others(engine):
    """A write committed in this process is seen by the next search at once; one made with a
    connection of another program is seen once :data:`scope_log.POLL_S` has passed (the log
    is not read at every search)."""
    now = [0.0]
    memory = SessionMemory(engine)
    memory.resident = ResidentMemory(engine, clock=lambda: now[0])
    assert find(memory.resident, "deploy") == ([], [])
    memory.write(new("Deploys need two approvals"))
    assert find(memory.resident, "deploy")[0] == ["Deploys need two approvals"]
    outside = sqlite3.connect(engine.url.database or "")
    with outside:  # not through SQLAlchemy: as another program would
        outside.execute("UPDATE memory_entries SET status = 'archived'")
    outside.close()
    assert find(memory.resident, "deploy")[0] == ["Deploys need two approvals"]
    now[0] += scope_log.POLL_S
    assert find(memory.resident, "deploy")[0] == []


@on_each_database
def test_a_scope_first_searched_holds_its_pins_and_only_its_own(engine):
    """A scope loaded by its first search holds the pins made before: its own pinned entry,
    not another scope's."""
    memory = SessionMemory(engine)
    corrections = Corrections(engine, gate=GateConfig())
    mine = memory.write(new("Releases go out on Thursdays")).record
    theirs = memory.write(new("Releases go out on Mondays", group="beta")).record
    memory.write(new("Lunch is at noon"))
    corrections.pin(mine.id, by="user", now=T0)
    corrections.pin(theirs.id, by="user", now=T0)
    fresh = SessionMemory(engine).resident
    assert find(fresh, "lunch") == (["Lunch is at noon"], ["Releases go out on Thursdays"])


def _hits(resident: ResidentMemory, query: str) -> list[tuple[str, float]]:
    found = resident.find(fts.query_terms(query), ALPHA, 50)
    return [(record.content, score) for record, score in found.hits]


@on_each_database
def test_a_scope_first_loaded_reads_the_words_counted_when_written(engine, monkeypatch):
    """A scope's first load takes each entry's words as counted when it was written, and
    ranks exactly as when counting them afresh: for an entry an older version wrote (no
    counts), for counts that do not read, and for a text a script changed with its own SQL."""
    memory = SessionMemory(engine)
    texts = [
        "Deploying needs two approvals from the ops team",
        "The deploy approval process is documented in the wiki",
        "Le café ouvre à huit heures, deploy after coffee",
        "数据库 deploy approvals need the DBA",
    ]
    for n, content in enumerate(texts):
        memory.write(new(content, tags=["ops"] if n % 2 else [], key=f"k{n}"))
    expected = _hits(SessionMemory(engine).resident, "deploy approvals cafe 数据库")
    assert len(expected) == len(texts)

    counted: list[str] = []
    tokens = fts.tokens

    def counting(value: str) -> list[str]:
        counted.append(value)
        return tokens(value)

    monkeypatch.setattr(fts, "tokens", counting)
    assert _hits(SessionMemory(engine).resident, "deploy approvals cafe 数据库") == expected
    assert [value for value in counted if len(value) > 20] == []  # only the query's words

    with engine.begin() as conn:
        conn.execute(text("UPDATE memory_entries SET search_terms = NULL WHERE id % 2 = 0"))
        conn.execute(text("UPDATE memory_entries SET search_terms = '[1, 2' WHERE id % 2 = 1"))
    assert _hits(SessionMemory(engine).resident, "deploy approvals cafe 数据库") == expected
    assert len([value for value in counted if len(value) > 20]) >= len(texts)

    memory.write(new("Lunch is at noon on Fridays", key="lunch"))
    with engine.begin() as conn:  # a script's own SQL: the texts change, the counts do not
        conn.execute(
            text(
                "UPDATE memory_entries SET content = 'Deploys happen at noon', "
                "search_body = 'Deploys happen at noon' WHERE key = 'lunch'"
            )
        )
    fresh = SessionMemory(engine).resident
    assert _hits(fresh, "fridays") == []
    assert [content for content, _ in _hits(fresh, "happen")] == ["Deploys happen at noon"]


def test_a_database_from_before_counted_words_gains_the_column(tmp_path):
    """A database whose entries have no counted words gets the column when opened, and its
    entries' words counted then; they are found as before, and a new one is stored with its
    words counted."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    SessionMemory(engine).write(new("Deploying needs two approvals"))
    with engine.begin() as conn:
        conn.execute(text("DROP TRIGGER memory_terms_au"))
        conn.execute(text("ALTER TABLE memory_entries DROP COLUMN search_terms"))
    engine.dispose()
    old = make_engine(url)
    try:
        memory = SessionMemory(old)
        memory.write(new("The deploy approval process is in the wiki"))
        with old.connect() as conn:
            stored = conn.execute(text("SELECT search_terms FROM memory_entries ORDER BY id"))
            first, second = (value for (value,) in stored)
        assert first == terms.packed("Deploying needs two approvals", "fact")
        assert second
        found = [content for content, _ in _hits(SessionMemory(old).resident, "approvals")]
        assert sorted(found) == sorted(
            ["Deploying needs two approvals", "The deploy approval process is in the wiki"]
        )
    finally:
        old.dispose()


def test_counts_a_text_changed_before_the_database_kept_counts_honest_are_counted_again(tmp_path):
    """A text a script changed while the database had no trigger to clear its counts (made
    by an older version) is counted again when the database is next opened: found by its new
    words, not its old ones."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    SessionMemory(engine).write(new("Lunch is at noon on Fridays"))
    with engine.begin() as conn:
        conn.execute(text("DROP TRIGGER memory_terms_au"))
        conn.execute(
            text(
                "UPDATE memory_entries SET content = 'Deploys happen at noon', "
                "search_body = 'Deploys happen at noon'"
            )
        )
        stale = conn.execute(text("SELECT search_terms FROM memory_entries")).scalar()
    assert '"lunch":' in stale  # counted from the text before
    engine.dispose()
    reopened = make_engine(url)
    try:
        resident = SessionMemory(reopened).resident
        assert _hits(resident, "lunch") == []
        assert [c for c, _ in _hits(resident, "deploys")] == ["Deploys happen at noon"]
        with reopened.begin() as conn:  # and from now on the trigger clears them at once
            conn.execute(text("UPDATE memory_entries SET search_body = 'Standup at nine'"))
            cleared = conn.execute(text("SELECT search_terms FROM memory_entries")).scalar()
        assert cleared is None
    finally:
        reopened.dispose()
