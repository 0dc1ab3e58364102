"""Knowledge sources: indexing a folder, searching what a turn may see, keeping the index in
step with the files, and resolving locators; on SQLite and on PostgreSQL."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from orchestrator.errors import ValidationError
from orchestrator.memory.knowledge.common import MIN_CHUNKS
from orchestrator.memory.knowledge.indexer import Indexer
from orchestrator.memory.knowledge.locate import resolve
from orchestrator.memory.knowledge.store import HOLDING_S, KnowledgeStore, Source, turn_scopes
from orchestrator.memory.session.fts import query_terms
from tests.databases import on_each_database

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)

GUIDE = """# Guide

Intro text about the product.

## Configuration

To configure the cache connection, set `CACHE_URL` to the server's address.
Without it, an embedded server starts.

## Timeouts

Requests give up after 30 seconds by default; set `ARENA_TIMEOUT` to change it.
"""


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "guide.md").write_text(GUIDE, encoding="utf-8")
    (folder / "sub" / "app.py").write_text('def hello():\n    return "hi"\n', encoding="utf-8")
    return folder


def _add(store: KnowledgeStore, root: Path, name: str = "docs", group: str = "demo") -> Source:
    return store.add(
        name=name,
        kind="folder",
        root=root,
        scope="group",
        scope_id=group,
        trust="trusted",
        now=T0,
    )


def _search(store: KnowledgeStore, query: str, group: str = "demo", agent: str = "dev"):
    return store.search(query_terms(query), turn_scopes(group, agent), 10)


def _bump(path: Path, text: str) -> None:
    """Write ``text`` and move the modification time on, as an edit a while later would."""
    path.write_text(text, encoding="utf-8")
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 2_000_000_000))


@on_each_database
def test_a_folder_is_indexed_and_found_with_its_locator(engine: Engine, docs: Path):
    store = KnowledgeStore(engine)
    source = _add(store, docs)
    report = Indexer(store).sync(source, now=T0)
    assert (report.files, report.added, report.removed) == (2, 2, 0)
    hits = _search(store, "how do I set the cache server address?")
    assert hits, "the configuration section should be found"
    best = hits[0]
    assert best.locator.startswith("docs/guide.md#L5-8@")
    assert "CACHE_URL" in best.text
    assert best.heading == "Guide > Configuration"
    assert best.trust == "trusted"
    listed = store.get("docs")
    assert listed is not None
    assert (listed.files, listed.chunks) == (2, report.chunks_written)


@on_each_database
def test_a_group_sees_only_its_own_sources_and_everyones(engine: Engine, docs: Path, tmp_path):
    store = KnowledgeStore(engine)
    indexer = Indexer(store)
    indexer.sync(_add(store, docs, group="alpha"), now=T0)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "policy.md").write_text("# Policy\n\nDeploys happen on Tuesdays.\n")
    everyone = store.add(
        name="policy",
        kind="folder",
        root=shared,
        scope="everyone",
        scope_id="ignored",
        trust="external",
        now=T0,
    )
    indexer.sync(everyone, now=T0)
    assert _search(store, "cache server address", group="alpha")
    assert not _search(store, "cache server address", group="beta")
    found = _search(store, "when do deploys happen", group="beta")
    assert [h.source for h in found] == ["policy"]
    assert found[0].trust == "external"


@on_each_database
def test_a_changed_file_replaces_its_chunks_and_a_removed_one_loses_them(
    engine: Engine, docs: Path
):
    store = KnowledgeStore(engine)
    indexer = Indexer(store)
    source = _add(store, docs)
    indexer.sync(source, now=T0)
    _bump(docs / "guide.md", GUIDE.replace("CACHE_URL", "CACHE_ADDRESS"))
    report = indexer.sync(store.get("docs"), now=T0)  # type: ignore[arg-type]
    assert (report.changed, report.unchanged) == (1, 1)
    texts = [c.text for c in store.chunks("docs")]
    assert any("CACHE_ADDRESS" in t for t in texts)
    assert not any("CACHE_URL" in t for t in texts), "the old text must not stay beside the new"
    (docs / "sub" / "app.py").unlink()
    report = indexer.sync(store.get("docs"), now=T0)  # type: ignore[arg-type]
    assert report.removed == 1
    assert all(not c.path.endswith("app.py") for c in store.chunks("docs"))
    assert not _search(store, "hello")


@on_each_database
def test_an_unchanged_folder_is_not_read_again(engine: Engine, docs: Path):
    store = KnowledgeStore(engine)
    indexer = Indexer(store)
    indexer.sync(_add(store, docs), now=T0)
    report = indexer.sync(store.get("docs"), now=T0)  # type: ignore[arg-type]
    assert (report.unchanged, report.chunks_written, report.touched) == (2, 0, False)


def test_a_different_chunker_or_tokeniser_rebuilds_the_index(engine: Engine, docs: Path):
    store = KnowledgeStore(engine)
    indexer = Indexer(store)
    source = _add(store, docs)
    indexer.sync(source, now=T0)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE knowledge_sources SET built_with = 'chunker 0'")
    report = indexer.sync(store.get("docs"), now=T0)  # type: ignore[arg-type]
    assert report.rebuilt
    assert report.changed == 2
    assert len(store.chunks("docs")) == report.chunks_written


def test_binary_and_foreign_files_are_skipped_with_their_reason(engine: Engine, docs: Path):
    (docs / "blob.txt").write_bytes(b"\x00\x01\x02binary")
    (docs / "latin.txt").write_bytes("caf\xe9".encode("latin-1"))
    (docs / "image.png").write_bytes(b"\x89PNG")
    (docs / ".hidden.md").write_text("# secret\n")
    (docs / "node_modules").mkdir()
    (docs / "node_modules" / "x.md").write_text("# vendored\n")
    store = KnowledgeStore(engine)
    report = Indexer(store).sync(_add(store, docs), now=T0)
    assert sorted(report.problems) == ["blob.txt: not text (binary)", "latin.txt: not UTF-8 text"]
    paths = {c.path for c in store.chunks("docs")}
    assert paths == {"docs/guide.md", "docs/sub/app.py"}


def test_a_link_out_of_the_folder_is_not_followed(engine: Engine, docs: Path, tmp_path: Path):
    outside = tmp_path / "private.md"
    outside.write_text("# Private\n\nThe vault code is 1234.\n")
    (docs / "private.md").symlink_to(outside)
    store = KnowledgeStore(engine)
    Indexer(store).sync(_add(store, docs), now=T0)
    assert not _search(store, "vault code")


def test_a_missing_folder_is_reported_and_its_chunks_go(engine: Engine, docs: Path):
    store = KnowledgeStore(engine)
    indexer = Indexer(store)
    indexer.sync(_add(store, docs), now=T0)
    for path in sorted(docs.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    docs.rmdir()
    report = indexer.sync(store.get("docs"), now=T0)  # type: ignore[arg-type]
    assert report.problems
    assert "no such folder" in report.problems[0]
    assert store.chunks("docs") == []
    source = store.get("docs")
    assert source is not None
    assert source.problem
    assert source.chunks == 0


def test_names_scopes_and_duplicates_are_checked(engine: Engine, docs: Path):
    store = KnowledgeStore(engine)
    _add(store, docs)
    with pytest.raises(ValidationError, match="exists already"):
        _add(store, docs)
    with pytest.raises(ValidationError, match="not a valid source name"):
        _add(store, docs, name="../etc")
    with pytest.raises(ValidationError, match="not a valid group id"):
        _add(store, docs, name="other", group="Bad Group")


def test_remove_forgets_the_chunks_never_the_files(engine: Engine, docs: Path):
    store = KnowledgeStore(engine)
    Indexer(store).sync(_add(store, docs), now=T0)
    assert store.remove("docs")
    assert not store.remove("docs")
    assert store.chunks("docs") == []
    assert not _search(store, "cache server")
    assert (docs / "guide.md").read_text() == GUIDE


def test_a_locator_resolves_to_its_lines_now(engine: Engine, docs: Path):
    store = KnowledgeStore(engine)
    indexer = Indexer(store)
    indexer.sync(_add(store, docs), now=T0)
    locator = _search(store, "cache server address")[0].locator
    found = resolve(store, locator)
    assert found.state == "current"
    assert found.text.splitlines()[0] == "## Configuration"
    # Two lines added above it: the cited text is found where it is now, once re-indexed.
    _bump(docs / "guide.md", GUIDE.replace("# Guide\n", "# Guide\n\nNew first paragraph.\n"))
    indexer.sync(store.get("docs"), now=T0)  # type: ignore[arg-type]
    moved = resolve(store, locator)
    assert moved.state == "moved"
    assert (moved.start, moved.end) == (7, 10)
    assert "CACHE_URL" in moved.text
    # The text itself changed: the lines at that place are given, marked as changed.
    _bump(docs / "guide.md", GUIDE.replace("CACHE_URL", "CACHE_ADDRESS"))
    changed = resolve(store, locator)
    assert changed.state == "changed"
    assert "CACHE_ADDRESS" in changed.text


@pytest.mark.parametrize(
    ("locator", "problem"),
    [
        ("docs/../guide.md#L1", "'..'"),
        ("/etc/passwd#L1", "absolute"),
        ("nosuch/guide.md#L1-2", "no knowledge source"),
        ("docs/missing.md#L1", "cannot read"),
        ("docs/guide.md#L999", "has 12 lines"),
        ("docs/guide.md", "locator"),
    ],
)
def test_bad_locators_are_refused_clearly(engine: Engine, docs: Path, locator, problem):
    store = KnowledgeStore(engine)
    Indexer(store).sync(_add(store, docs), now=T0)
    with pytest.raises(ValidationError, match=problem):
        resolve(store, locator)


def test_only_scopes_with_chunks_are_searched_and_a_change_is_seen_soon(engine: Engine, docs: Path):
    now = [0.0]
    store = KnowledgeStore(engine, clock=lambda: now[0])
    other = KnowledgeStore(engine, clock=lambda: now[0])  # as another process sees it
    assert not store.holds_any(turn_scopes("demo", "dev"))
    assert not other.holds_any(turn_scopes("demo", "dev"))
    Indexer(store).sync(_add(store, docs), now=T0)
    assert store.holds_any(turn_scopes("demo", "dev")), "this process's change is seen at once"
    assert not other.holds_any(turn_scopes("demo", "dev"))
    now[0] += HOLDING_S
    assert other.holds_any(turn_scopes("demo", "dev")), "another's within HOLDING_S"
    assert not other.holds_any(turn_scopes("other", "dev"))
    store.remove("docs")
    assert not store.holds_any(turn_scopes("demo", "dev"))
    now[0] += HOLDING_S
    assert not other.holds_any(turn_scopes("demo", "dev"))


def test_a_folder_with_too_many_files_is_refused_and_keeps_its_index(
    engine: Engine, docs: Path, monkeypatch: pytest.MonkeyPatch
):
    store = KnowledgeStore(engine)
    indexer = Indexer(store)
    indexer.sync(_add(store, docs), now=T0)
    before = {c.locator for c in store.chunks("docs")}
    for n in range(3):
        (docs / f"extra{n}.md").write_text(f"# Extra {n}\n\nMore.\n")
    monkeypatch.setattr("orchestrator.memory.knowledge.walk.MAX_FILES", 4)
    monkeypatch.setattr("orchestrator.memory.knowledge.indexer.MAX_FILES", 4)
    report = indexer.sync(store.get("docs"), now=T0)  # type: ignore[arg-type]
    assert report.problems == ["more than 4 readable files: add a narrower folder"]
    assert {c.locator for c in store.chunks("docs")} == before
    listed = store.get("docs")
    assert listed is not None
    assert listed.problem == report.problems[0]


def test_a_source_removed_while_it_is_indexed_leaves_no_chunks(engine: Engine, docs: Path):
    for n in range(5):
        (docs / f"page{n}.md").write_text(f"# Page {n}\n\nText {n}.\n")
    store = KnowledgeStore(engine)
    source = _add(store, docs)

    def remove_half_way(progress) -> None:
        if progress.done == 3:
            store.remove("docs")

    report = Indexer(store).sync(source, now=T0, progress=remove_half_way)
    assert report.problems == ["docs was removed while it was indexed"]
    assert store.chunks("docs") == []
    again = _add(store, docs)  # the same name again starts from nothing
    assert (again.files, again.chunks) == (0, 0)
    assert store.chunks("docs") == []


def test_an_html_page_is_indexed_as_its_text_and_its_locators_name_its_lines(
    engine: Engine, docs: Path
):
    (docs / "page.html").write_text(
        "<html><body>\n<h1>Proxy</h1>\n<p>Behind a proxy, set <code>FORWARDED_ALLOW_IPS</code>"
        " &amp; restart.</p>\n<script>var secret = 1;</script>\n</body></html>\n",
        encoding="utf-8",
    )
    store = KnowledgeStore(engine)
    Indexer(store).sync(_add(store, docs), now=T0)
    (hit,) = _search(store, "running behind a proxy forwarded ips")
    assert hit.locator.startswith("docs/page.html#L2-3@")
    assert hit.heading == "Proxy"
    assert hit.text == "# Proxy\nBehind a proxy, set FORWARDED_ALLOW_IPS & restart."
    assert not _search(store, "secret")
    found = resolve(store, hit.locator)
    assert found.state == "current"
    assert found.text == hit.text


def test_a_word_in_most_chunks_is_left_out_when_the_query_has_rarer_ones(
    engine: Engine, tmp_path: Path
):
    folder = tmp_path / "many"
    folder.mkdir()
    for n in range(MIN_CHUNKS + 50):
        (folder / f"page{n}.md").write_text(f"# Page {n}\n\nThe app serves page number {n}.\n")
    (folder / "hooks.md").write_text("# Hooks\n\nThe app calls a webhook on every deploy.\n")
    store = KnowledgeStore(engine)
    Indexer(store).sync(_add(store, folder, name="many"), now=T0)
    hits = store.search(["app", "webhook"], turn_scopes("demo", "dev"), 10)
    assert [h.path for h in hits] == ["many/hooks.md"]
    alone = store.search(["app"], turn_scopes("demo", "dev"), 10)
    assert len(alone) == 10, "a query of common words only still searches them"
