"""`arena knowledge` as a person uses it: add a folder for a group, list, search, show a
locator, list chunks, reindex after an edit, remove; lorebook entries added, edited in place
and removed; and clear errors."""

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
    assert "its 1 new chunks embedded: found by meaning too" in said  # a small source, at once
    code, listed = arena("knowledge", "list", "--json")
    (row,) = [json.loads(line) for line in listed.splitlines()]
    assert (row["name"], row["owner"], row["files"], row["chunks"]) == (
        "team-docs",
        "group demo",
        1,
        1,
    )
    assert row["embedded"] == 1
    code, found = arena("knowledge", "search", "postgres database url", "--group", "demo", "--json")
    (hit,) = [json.loads(line) for line in found.splitlines()]
    assert hit["locator"].startswith("team-docs/setup.md#L1-5@")
    assert hit["why"].startswith("matched database, url (relevance 0.90); meaning 0.")
    code, found = arena(
        "knowledge", "search", "how to connect to a relational db", "--group", "demo"
    )
    assert "team-docs/setup.md#L1-5@" in found  # no word in common: by meaning
    assert "close in meaning; meaning 0." in found
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
        (["knowledge", "lore", "edit", "99", "new text"], "no lore entry 99"),
        (["knowledge", "lore", "edit", "1"], "say what to change"),
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


def test_a_lore_entry_is_edited_in_place(docs: Path):
    arena("knowledge", "lore", "add", "--group", "demo", "--keys", "freeze", "Freeze on the 20th.")
    code, said = arena(
        "knowledge",
        "lore",
        "edit",
        "1",
        "--keys",
        "freeze, code freeze",
        "--pattern",
        r"\bfrozen\b",
        "--priority",
        "90",
        "The code freeze starts on the 21st.",
    )
    assert code == 0, said
    assert said.splitlines()[1:] == [
        "  keys: freeze, code freeze",
        "  pattern: \\bfrozen\\b",
        "  priority: 90",
        "  text: The code freeze starts on the 21st.",
    ]
    assert said.startswith("edited lore lore-demo#1 (")
    assert said.splitlines()[0].endswith(" tokens) for group demo")
    code, listed = arena("knowledge", "lore", "list", "--json")
    (row,) = [json.loads(line) for line in listed.splitlines()]
    assert (row["id"], row["keys"], row["pattern"], row["priority"], row["text"]) == (
        1,
        ["freeze", "code freeze"],
        r"\bfrozen\b",
        90,
        "The code freeze starts on the 21st.",
    )

    code, said = arena("knowledge", "lore", "edit", "1", "--text", "-", "--json", input="Moved.\n")
    assert code == 0, said
    assert json.loads(said) == {**row, "text": "Moved.", "tokens": json.loads(said)["tokens"]}
    code, said = arena("knowledge", "lore", "edit", "1", "--keys", "", "--json")
    assert (json.loads(said)["keys"], json.loads(said)["pattern"]) == ([], r"\bfrozen\b")

    refused = [
        (["--pattern", ""], 1, "keys: give at least one key or a pattern"),
        (["--pattern", "(a+)+"], 1, "pattern: a repeated group that itself repeats"),
        (["--keys", "x" * 81], 1, "keys: a key is at most 80 characters"),
        (["  "], 1, "text: must be 1 to 2000 characters"),
        (["--priority", "101"], 2, "not in the range"),
        (["text", "--text", "other"], 2, "give the new text once"),
        ([], 2, "say what to change"),
    ]
    for args, exit_code, words in refused:
        code, said = arena("knowledge", "lore", "edit", "1", *args)
        assert (code, "Traceback" in said) == (exit_code, False), (args, said)
        assert words in said, (args, said)
    code, listed = arena("knowledge", "lore", "list", "--json")
    assert json.loads(listed)["text"] == "Moved.", "a refused edit leaves the entry as it was"
    code, helped = arena("knowledge", "lore", "edit", "--help")
    assert "what is not given stays as it was" in helped
    assert "arena knowledge lore edit 1 --keys" in helped
