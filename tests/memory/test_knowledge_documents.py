"""PDF and DOCX knowledge sources (the ``[documents]`` extra): a PDF indexed page by page with
its page in every locator, a DOCX at its headings, both found, shown and re-indexed as other
files are; a broken, encrypted or slow file, or the extra missing, recorded as a problem."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from orchestrator.errors import ValidationError
from orchestrator.memory.db import make_engine
from orchestrator.memory.knowledge import documents
from orchestrator.memory.knowledge.indexer import Indexer
from orchestrator.memory.knowledge.locate import resolve
from orchestrator.memory.knowledge.store import KnowledgeStore, Source, turn_scopes
from orchestrator.memory.session.fts import query_terms
from tests.databases import on_each_database
from tests.documents import docx_bytes, pdf_bytes

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
NEEDS = "PDF needs the [documents] extra: pip install 'agent-arena[documents]'"

REPORT = [
    ["Quarterly report", "", "Revenue grew in every region this quarter."],
    ["Operations", "", "The cache server listens on port 6380 in production.", "Restarts are rare"],
]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "report.pdf").write_bytes(pdf_bytes(REPORT))
    (docs / "guide.docx").write_bytes(
        docx_bytes(
            [
                ("Heading1", "Setup"),
                ("", "Install the arena with pip."),
                ("Heading2", "Database"),
                ("", "Point the arena at PostgreSQL with DATABASE_URL & restart it."),
            ]
        )
    )
    return docs


def _indexed(engine: Engine, root: Path) -> tuple[KnowledgeStore, Source]:
    store = KnowledgeStore(engine)
    source = store.add(
        name="docs",
        kind="folder",
        root=root,
        scope="group",
        scope_id="demo",
        trust="trusted",
        now=T0,
    )
    Indexer(store).sync(store.get("docs") or source, now=T0)
    return store, source


def _search(store: KnowledgeStore, query: str):
    return store.search(query_terms(query), turn_scopes("demo", "dev"), 10)


def _bump(path: Path, data: bytes) -> None:
    """Write ``data`` and move the modification time on, as an edit a while later would."""
    path.write_bytes(data)
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 2_000_000_000))


@on_each_database
def test_a_pdf_is_indexed_page_by_page_and_its_locators_name_the_page(engine: Engine, folder: Path):
    store, _ = _indexed(engine, folder)
    (hit,) = _search(store, "which port does the cache server listen on")
    assert hit.locator.startswith("docs/report.pdf#p2:L1-4@")
    assert hit.page == 2
    assert hit.heading == "page 2"
    assert hit.text == (
        "Operations\n\nThe cache server listens on port 6380 in production.\nRestarts are rare"
    )
    found = resolve(store, hit.locator)
    assert (found.state, found.page, found.start, found.end) == ("current", 2, 1, 4)
    assert found.text == hit.text
    assert found.locator == hit.locator
    chunks = store.chunks("docs", path="docs/report.pdf")
    assert [c.locator.split("@")[0] for c in chunks] == [
        "docs/report.pdf#p1:L1-3",
        "docs/report.pdf#p2:L1-4",
    ]


def test_a_docx_is_split_at_its_headings_and_its_locators_name_lines(engine: Engine, folder: Path):
    store, _ = _indexed(engine, folder)
    (hit,) = _search(store, "postgres database url")
    assert hit.locator.startswith("docs/guide.docx#L5-7@")
    assert hit.page is None
    assert hit.heading == "Setup > Database"
    assert hit.text == (
        "## Database\n\nPoint the arena at PostgreSQL with DATABASE_URL & restart it."
    )
    found = resolve(store, hit.locator)
    assert (found.state, found.text) == ("current", hit.text)


def test_a_changed_pdf_is_indexed_again_and_an_old_citation_is_found_on_its_new_page(
    engine: Engine, folder: Path
):
    store, source = _indexed(engine, folder)
    (hit,) = _search(store, "which port does the cache server listen on")
    _bump(folder / "report.pdf", pdf_bytes([["A new first page", "", "Contents."], *REPORT]))
    report = Indexer(store).sync(store.get("docs") or source, now=T0)
    assert (report.changed, report.unchanged) == (1, 1)
    (again,) = _search(store, "which port does the cache server listen on")
    assert again.locator.startswith("docs/report.pdf#p3:L1-4@")
    moved = resolve(store, hit.locator)
    assert (moved.state, moved.page, moved.locator) == ("moved", 3, again.locator)
    assert moved.text == hit.text
    changed = resolve(store, hit.locator.replace("#p2:", "#p1:"))
    assert changed.state == "moved"  # the digest is looked for, whichever page was named
    _bump(folder / "report.pdf", pdf_bytes([["Only one page now."]]))
    Indexer(store).sync(store.get("docs") or source, now=T0)
    assert not _search(store, "which port does the cache server listen on")
    with pytest.raises(ValidationError, match="it has 1 pages, not 2"):
        resolve(store, hit.locator)


def test_a_pdf_locator_names_its_page_and_only_a_pdf_has_pages(engine: Engine, folder: Path):
    store, _ = _indexed(engine, folder)
    with pytest.raises(ValidationError, match="names its page"):
        resolve(store, "docs/report.pdf#L1")
    with pytest.raises(ValidationError, match="only a PDF"):
        resolve(store, "docs/guide.docx#p1:L1")
    found = resolve(store, "docs/report.pdf#p1:L1-3")
    assert (found.state, found.locator.split("@")[0]) == ("unversioned", "docs/report.pdf#p1:L1-3")
    assert found.text == "Quarterly report\n\nRevenue grew in every region this quarter."


@pytest.mark.parametrize(
    ("name", "data", "problem"),
    [
        ("broken.pdf", b"%PDF-1.4\nnot really a PDF", "not a readable PDF (PDFSyntaxError"),
        ("cut.pdf", pdf_bytes(REPORT)[:300], "not a readable PDF"),
        ("locked.pdf", pdf_bytes(REPORT, encrypted=True), "an encrypted PDF"),
        ("blank.pdf", pdf_bytes([[]]), "no text in it (a scan?"),
        ("broken.docx", b"PK\x03\x04 not a zip", "not a readable DOCX (BadZipFile"),
    ],
)
def test_a_document_that_gives_no_text_is_a_problem_not_a_crash(
    engine: Engine, folder: Path, name: str, data: bytes, problem: str
):
    (folder / name).write_bytes(data)
    store, _ = _indexed(engine, folder)
    (skipped,) = store.skipped("docs")
    assert skipped[0] == name
    assert skipped[1].startswith(problem)
    found = store.get("docs")
    assert found is not None
    assert (found.files, found.problem) == (3, None)
    assert _search(store, "cache server port"), "the readable files are indexed all the same"
    with pytest.raises(ValidationError, match=f"cannot read docs/{name}"):
        resolve(store, f"docs/{name}#{'p1:' if name.endswith('.pdf') else ''}L1")


def test_without_the_extra_a_document_is_listed_with_how_to_install_it(
    engine: Engine, folder: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setitem(sys.modules, "pdfminer", None)  # `import pdfminer` fails
    store, source = _indexed(engine, folder)
    assert store.skipped("docs") == [("report.pdf", NEEDS)]
    assert not _search(store, "cache server port")
    assert _search(store, "postgres database url"), "a DOCX is read by another library"
    with pytest.raises(ValidationError, match=r"needs the \[documents\] extra"):
        resolve(store, "docs/report.pdf#p1:L1")
    monkeypatch.delitem(sys.modules, "pdfminer")
    report = Indexer(store).sync(store.get("docs") or source, now=T0)
    assert report.changed == 1, "a file unread for want of the extra is read once it is there"
    assert store.skipped("docs") == []
    assert _search(store, "cache server port")


def test_a_conversion_that_takes_too_long_is_stopped(
    engine: Engine, folder: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(documents, "CONVERT_S", 0.001)
    store, _ = _indexed(engine, folder)
    assert sorted(store.skipped("docs")) == [
        ("guide.docx", "its conversion took longer than 0.001 s"),
        ("report.pdf", "its conversion took longer than 0.001 s"),
    ]
    monkeypatch.setattr(documents, "CONVERT_S", 60.0)  # the machine is less busy later
    source = store.get("docs")
    assert source is not None
    soon = Indexer(store).sync(source, now=T0 + timedelta(seconds=documents.RETRY_S - 1))
    assert soon.changed == 0, "a file that timed out is not tried again at every check"
    later = Indexer(store).sync(source, now=T0 + timedelta(seconds=documents.RETRY_S))
    assert later.changed == 2, "but it is, a while later"
    assert store.skipped("docs") == []


def test_a_document_over_the_size_limit_is_not_read(
    engine: Engine, folder: Path, monkeypatch: pytest.MonkeyPatch
):
    import orchestrator.memory.knowledge.indexer as indexer

    monkeypatch.setattr(indexer, "MAX_DOCUMENT_BYTES", 1_000_000)
    (folder / "big.pdf").write_bytes(b"%PDF-1.4\n" + b"%" * 1_000_000)
    store, _ = _indexed(engine, folder)
    assert store.skipped("docs") == [("big.pdf", "larger than 1 MB")]


def test_a_database_from_before_pages_gains_the_column(tmp_path: Path, folder: Path):
    """A database whose chunks have no page column gets one when opened; the chunks it held
    keep their locators."""
    (folder / "notes.md").write_text("# Notes\n\nThe cache is Redis.\n", encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE knowledge_chunks DROP COLUMN page"))
    engine.dispose()
    old = make_engine(url)
    try:
        store, _ = _indexed(old, folder)
        (hit,) = _search(store, "redis")
        assert hit.locator.startswith("docs/notes.md#L1-3@")
        assert hit.page is None
        assert _search(store, "cache server port")[0].page == 2
    finally:
        old.dispose()
