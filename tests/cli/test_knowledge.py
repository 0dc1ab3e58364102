"""`arena knowledge` as a person uses it: add a folder for a group, list, search, show a
locator, list chunks, reindex after an edit, remove; lorebook entries; and clear errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import main
from tests.arena_helpers import set_team_environment
from tests.documents import pdf_bytes


@pytest.fixture
def docs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    set_team_environment(tmp_path, monkeypatch)
    folder = tmp_path / "team-docs"
    folder.mkdir()
    (folder / "setup.md").write_text(
        "# Setup\n\n## Database\n\nPoint the arena at PostgreSQL with `DATABASE_URL`.\n",
        encoding="utf-8",
    )
    return folder


def arena(*args: str, input: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), input=input)
    return result.exit_code, result.output


def test_add_list_search_show_and_remove(docs: Path):
    code, said = arena("knowledge", "add", "--group", "demo", str(docs))
    assert code == 0, said
    assert "added team-docs (folder, trusted) for group demo" in said
    assert "team-docs: 1 files, 1 new" in said
    code, listed = arena("knowledge", "list", "--json")
    (row,) = [json.loads(line) for line in listed.splitlines()]
    assert (row["name"], row["owner"], row["files"], row["chunks"]) == (
        "team-docs",
        "group demo",
        1,
        1,
    )
    code, found = arena("knowledge", "search", "postgres database url", "--group", "demo", "--json")
    (hit,) = [json.loads(line) for line in found.splitlines()]
    assert hit["locator"].startswith("team-docs/setup.md#L1-5@")
    code, shown = arena("knowledge", "show", hit["locator"])
    assert code == 0
    assert "(trusted, current)" in shown
    assert "     5  Point the arena at PostgreSQL" in shown
    code, chunks = arena("knowledge", "chunks", "team-docs")
    assert "Setup > Database" in chunks
    code, removed = arena("knowledge", "remove", "team-docs")
    assert code == 0
    assert "its files are untouched" in removed
    assert (docs / "setup.md").exists()
    assert arena("knowledge", "list")[1].startswith("no knowledge sources")


def test_reindex_picks_up_an_edit(docs: Path):
    arena("knowledge", "add", "--group", "demo", str(docs))
    page = docs / "setup.md"
    page.write_text(page.read_text() + "\n## Cache\n\nRedis holds the streams.\n")
    info = page.stat()
    os.utime(page, ns=(info.st_atime_ns, info.st_mtime_ns + 2_000_000_000))
    code, said = arena("knowledge", "reindex")
    assert code == 0
    assert "0 new, 1 changed" in said
    code, found = arena("knowledge", "search", "where are the streams kept", "--group", "demo")
    assert "team-docs/setup.md#L7-9@" in found


def test_a_pdf_is_added_searched_and_shown_by_its_page(docs: Path):
    (docs / "report.pdf").write_bytes(
        pdf_bytes([["Summary"], ["Operations", "", "The cache server listens on port 6380."]])
    )
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4\nnot really a PDF")
    code, said = arena("knowledge", "add", "--group", "demo", str(docs))
    assert code == 0, said
    assert "team-docs: 3 files, 3 new" in said
    assert "skipped broken.pdf: not a readable PDF (PDFSyntaxError" in said
    code, found = arena("knowledge", "search", "cache server port", "--group", "demo", "--json")
    (hit,) = [json.loads(line) for line in found.splitlines()]
    assert hit["locator"].startswith("team-docs/report.pdf#p2:L1-3@")
    code, shown = arena("knowledge", "show", hit["locator"])
    assert code == 0, shown
    assert shown.startswith(f"{hit['locator']} (trusted, current)")
    assert "     3  The cache server listens on port 6380." in shown
    code, listed = arena("knowledge", "list")
    assert "team-docs/broken.pdf: skipped, not a readable PDF (PDFSyntaxError" in listed
    code, rows = arena("knowledge", "list", "--json")
    (row,) = [json.loads(line) for line in rows.splitlines()]
    assert [file["path"] for file in row["skipped"]] == ["broken.pdf"]
    code, said = arena("knowledge", "show", "team-docs/report.pdf#L1")
    assert code != 0
    assert "a PDF's locator names its page" in said
    assert "Traceback" not in said


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["knowledge", "add", "PATH"], "one of --group G, --agent A, --everyone"),
        (["knowledge", "add", "--group", "demo", "/no/such/folder"], "no such file or folder"),
        (["knowledge", "add", "--group", "Bad Group", "PATH"], "not a valid group id"),
        (["knowledge", "add", "--agent", "nobody", "PATH"], "no agent 'nobody'"),
        (
            ["knowledge", "add", "--group", "demo", "--name", "../x", "PATH"],
            "not a valid source name",
        ),
        (["knowledge", "remove", "nosuch"], "no knowledge source 'nosuch'"),
        (["knowledge", "reindex", "nosuch"], "no knowledge source 'nosuch'"),
        (["knowledge", "show", "team-docs/../../etc/passwd#L1"], "'..'"),
        (["knowledge", "show", "nosuch/a.md#L1"], "no knowledge source holds"),
        (
            ["knowledge", "lore", "add", "--group", "demo", "no keys"],
            "at least one key or a pattern",
        ),
        (["knowledge", "lore", "add", "--group", "demo", "--pattern", "(", "x"], "not a regular"),
        (["knowledge", "lore", "remove", "99"], "no lore entry 99"),
    ],
)
def test_bad_input_is_a_clear_error_not_a_traceback(docs: Path, args, message):
    code, said = arena(*[str(docs) if a == "PATH" else a for a in args])
    assert code != 0
    assert message in said
    assert "Traceback" not in said


def test_a_refused_lore_entry_makes_no_lorebook(docs: Path):
    code, said = arena("knowledge", "lore", "add", "--group", "demo", "no keys")
    assert code != 0
    assert "at least one key or a pattern" in said
    assert arena("knowledge", "list")[1].startswith("no knowledge sources")


def test_lore_entries_are_added_listed_and_removed(docs: Path):
    code, said = arena(
        "knowledge",
        "lore",
        "add",
        "--group",
        "demo",
        "--keys",
        "freeze, code freeze",
        "--priority",
        "80",
        "The code freeze starts on the 20th.",
    )
    assert code == 0, said
    assert said.startswith("added lore lore-demo#1 (")
    code, listed = arena("knowledge", "lore", "list", "--json")
    (row,) = [json.loads(line) for line in listed.splitlines()]
    assert (row["book"], row["keys"], row["priority"]) == (
        "lore-demo",
        ["freeze", "code freeze"],
        80,
    )
    code, other = arena(
        "knowledge", "lore", "add", "--agent", "ping", "--book", "lore-demo", "--keys", "x", "t"
    )
    assert code != 0
    assert "lorebook 'lore-demo' is for group demo" in other
    assert arena("knowledge", "lore", "remove", "1")[0] == 0
    assert arena("knowledge", "lore", "list")[1].startswith("no lore entries")
