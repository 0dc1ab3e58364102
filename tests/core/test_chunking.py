"""Tests for orchestrator.core.chunking: documents split into chunks, and locators citing them."""

from __future__ import annotations

import hashlib
import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from orchestrator.core.chunking import (
    CHUNKER_VERSION,
    Chunk,
    Locator,
    chunk_document,
    digest,
    format_locator,
    parse_locator,
    split_lines,
)
from orchestrator.errors import ValidationError


def _headings(chunks: list[Chunk]) -> list[tuple[str, ...]]:
    return [chunk.heading for chunk in chunks]


def _check_invariants(text: str, chunks: list[Chunk], max_chars: int) -> None:
    """Every non-blank line in exactly one chunk, in order, each chunk exactly its lines."""
    lines = split_lines(text)
    covered: list[int] = []
    previous_end = 0
    for chunk in chunks:
        assert 1 <= chunk.start <= chunk.end <= len(lines)
        assert chunk.start > previous_end
        previous_end = chunk.end
        assert chunk.text == "\n".join(lines[chunk.start - 1 : chunk.end])
        assert chunk.text.strip()
        assert lines[chunk.start - 1].strip()
        assert lines[chunk.end - 1].strip()
        assert len(chunk.text) <= max_chars or chunk.start == chunk.end
        assert chunk.kind in {"section", "paragraph", "definition", "lines"}
        covered.extend(range(chunk.start, chunk.end + 1))
    non_blank = [n for n, line in enumerate(lines, 1) if line.strip()]
    assert set(non_blank) <= set(covered)
    assert len(covered) == len(set(covered))


# --- lines ------------------------------------------------------------------------------------


def test_line_ends_and_a_byte_order_mark_are_numbered_as_an_editor_shows_them() -> None:
    text = "\ufeffone\r\ntwo\rthree\n\nfive"
    assert split_lines(text) == ["one", "two", "three", "", "five"]
    chunks = chunk_document("notes.txt", text, max_chars=14)
    assert [(c.start, c.end, c.text) for c in chunks] == [(1, 3, "one\ntwo\nthree"), (5, 5, "five")]


def test_chunker_version_is_a_non_empty_string() -> None:
    assert isinstance(CHUNKER_VERSION, str)
    assert CHUNKER_VERSION


def test_max_chars_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        chunk_document("a.txt", "x", max_chars=0)


# --- Markdown ---------------------------------------------------------------------------------


def test_markdown_sections_carry_their_nested_heading_path() -> None:
    text = "# Guide\nintro\n## Configuration\nc\n### Redis\nr\n## Running\nrun\n# Appendix\na"
    chunks = chunk_document("docs/guide.md", text)
    assert _headings(chunks) == [
        ("Guide",),
        ("Guide", "Configuration"),
        ("Guide", "Configuration", "Redis"),
        ("Guide", "Running"),
        ("Appendix",),
    ]
    assert [(c.start, c.end) for c in chunks] == [(1, 2), (3, 4), (5, 6), (7, 8), (9, 10)]
    assert {c.kind for c in chunks} == {"section"}


def test_text_before_the_first_heading_has_no_heading() -> None:
    chunks = chunk_document("README.MD", "Intro line.\n\n# First\nbody")
    assert [(c.heading, c.text) for c in chunks] == [
        ((), "Intro line."),
        (("First",), "# First\nbody"),
    ]


def test_atx_headings_allow_three_spaces_and_closing_hashes_but_not_more() -> None:
    text = "   ## Spaced ##\na\n    # indented code\nb\n#hashtag\nc\n# Trailing#\nd"
    chunks = chunk_document("a.md", text)
    assert _headings(chunks) == [("Spaced",), ("Trailing#",)]
    assert chunks[0].text == "   ## Spaced ##\na\n    # indented code\nb\n#hashtag\nc"


@pytest.mark.parametrize("fence", ["```", "~~~", "````python"])
def test_headings_inside_fenced_code_do_not_split(fence: str) -> None:
    close = fence.rstrip("python")
    text = f"# Real\ntext\n{fence}\n# not a heading\nTitle\n===\n{close}\n## Next\nn"
    chunks = chunk_document("a.md", text)
    assert _headings(chunks) == [("Real",), ("Real", "Next")]
    assert "# not a heading" in chunks[0].text


def test_a_fence_closes_only_with_its_own_character_and_at_least_its_length() -> None:
    text = "# A\n````\n```\n~~~~\n# inside\n````\n# B\nb"
    assert _headings(chunk_document("a.md", text)) == [("A",), ("B",)]


def test_an_unclosed_fence_runs_to_the_end() -> None:
    text = "# A\n```\n# inside\n## also inside"
    chunks = chunk_document("a.md", text)
    assert [(c.heading, c.end) for c in chunks] == [(("A",), 4)]


def test_setext_headings_underline_a_paragraph() -> None:
    text = "Title\n=====\nbody\n\nSub title\non two lines\n---\nmore\n\n---\nafter a rule"
    chunks = chunk_document("a.md", text)
    assert _headings(chunks) == [("Title",), ("Title", "Sub title on two lines")]
    assert chunks[1].start == 5  # the heading's paragraph starts the section
    assert chunks[1].text.endswith("---\nafter a rule")  # '---' after a blank line is a rule


def test_a_rule_after_a_list_item_is_not_a_heading() -> None:
    chunks = chunk_document("a.md", "# A\nbody\n- item\n---\nafter")
    assert _headings(chunks) == [("A",)]


def test_an_empty_section_joins_the_next_or_stays_if_last() -> None:
    text = "# Configuration\n\n## Redis\nhost\n## Empty\n\n"
    chunks = chunk_document("a.md", text)
    assert [(c.start, c.end, c.heading) for c in chunks] == [
        (1, 4, ("Configuration", "Redis")),
        (5, 5, ("Configuration", "Empty")),
    ]


def test_front_matter_is_a_chunk_of_its_own() -> None:
    text = "---\ntitle: Guide\n---\n# Guide\nbody"
    chunks = chunk_document("a.mdx", text)
    assert [(c.start, c.end, c.heading) for c in chunks] == [(1, 3, ()), (4, 5, ("Guide",))]


def test_a_long_section_is_cut_at_blank_lines_and_keeps_its_heading() -> None:
    paragraphs = [f"paragraph {n} " + "word " * 10 for n in range(6)]
    text = "# Intro\nshort\n## Long\n\n" + "\n\n".join(paragraphs)
    chunks = chunk_document("a.md", text, max_chars=140)
    long_chunks = [c for c in chunks if c.heading == ("Intro", "Long")]
    assert len(long_chunks) > 2
    assert all(len(c.text) <= 140 for c in long_chunks)
    assert all(c.kind == "section" for c in long_chunks)
    body = [c.text for c in long_chunks]
    assert body[0].startswith("## Long\n\nparagraph 0")
    assert all(text.startswith("paragraph") for text in body[1:])  # cut between paragraphs
    _check_invariants(text, chunks, 140)


def test_a_fence_with_blank_lines_is_not_cut_when_it_fits() -> None:
    fence = "```\nline one\n\nline two\n\nline three\n```"
    text = "# S\n" + "lead paragraph " * 5 + "\n\n" + fence + "\n\ntail"
    chunks = chunk_document("a.md", text, max_chars=60)
    assert any(fence in c.text for c in chunks)


def test_an_over_long_paragraph_becomes_line_windows() -> None:
    text = "# S\n\n" + "\n".join(f"line {n:02} of one paragraph" for n in range(20))
    chunks = chunk_document("a.md", text, max_chars=80)
    windows = [c for c in chunks if c.kind == "lines"]
    assert len(windows) > 3
    assert all(c.heading == ("S",) and len(c.text) <= 80 for c in windows)
    _check_invariants(text, chunks, 80)


# --- Python -----------------------------------------------------------------------------------

PYTHON = '''"""A module."""

import os

# Says hello.
# Twice.
@decorator
@other(1)
def hello() -> None:
    print("hello")


LIMIT = 3


async def fetch():
    return 1


class Small:
    x = 1
'''


def test_python_definitions_include_decorators_and_the_comment_above() -> None:
    chunks = chunk_document("pkg/mod.py", PYTHON)
    assert [(c.start, c.end, c.heading, c.kind) for c in chunks] == [
        (1, 3, (), "lines"),
        (5, 10, ("def hello",), "definition"),
        (13, 13, (), "lines"),
        (16, 17, ("async def fetch",), "definition"),
        (20, 21, ("class Small",), "definition"),
    ]
    assert chunks[1].text.startswith("# Says hello.\n# Twice.\n@decorator\n@other(1)\ndef hello")


def test_a_long_class_is_split_into_its_header_and_methods() -> None:
    body = "\n".join(f"        value_{n} = {n}" for n in range(6))
    text = (
        "class Store:\n"
        '    """Keeps values."""\n'
        "    limit = 10\n\n"
        "    def put(self):\n" + body + "\n\n"
        "    # Reads one.\n"
        "    @property\n"
        "    def get(self):\n" + body + "\n\n"
        "    class Inner:\n"
        "        pass\n"
    )
    chunks = chunk_document("store.py", text, max_chars=200)
    assert [(c.heading, c.kind) for c in chunks] == [
        (("class Store",), "definition"),
        (("class Store", "def put"), "definition"),
        (("class Store", "def get"), "definition"),
        (("class Store", "class Inner"), "definition"),
    ]
    assert chunks[0].text == 'class Store:\n    """Keeps values."""\n    limit = 10'
    assert chunks[2].text.startswith("    # Reads one.\n    @property\n    def get(self):")
    _check_invariants(text, chunks, 200)


def test_a_class_that_fits_stays_whole() -> None:
    text = "class A:\n    def m(self):\n        return 1\n"
    assert [(c.heading, c.end) for c in chunk_document("a.py", text)] == [(("class A",), 3)]


def test_python_that_does_not_parse_falls_back_to_line_windows() -> None:
    text = "def broken(:\n    pass\n\n" + "\n".join(f"x{n} = {n}" for n in range(30))
    chunks = chunk_document("broken.py", text, max_chars=50)
    assert len(chunks) > 1
    assert all(c.kind == "lines" and c.heading == () for c in chunks)
    _check_invariants(text, chunks, 50)


def test_python_the_parser_warns_about_is_still_parsed() -> None:
    text = 'PATTERN = "\\d+"\n\n\ndef f():\n    return 1 is 1\n'
    assert [c.heading for c in chunk_document("w.py", text)] == [(), ("def f",)]


# --- other code -------------------------------------------------------------------------------


def test_go_definitions_start_at_declarations_with_their_comments() -> None:
    text = (
        'package main\n\nimport "fmt"\n\n'
        "// Store keeps things.\ntype Store struct {\n\tx int\n}\n\n"
        "func (s *Store) Put(k string) error {\n\treturn nil\n}\n"
    )
    chunks = chunk_document("store.go", text)
    assert [(c.start, c.end, c.heading, c.kind) for c in chunks] == [
        (1, 3, (), "lines"),
        (5, 8, ("type Store struct",), "definition"),
        (10, 12, ("func (s *Store) Put(k string) error",), "definition"),
    ]


@pytest.mark.parametrize(
    ("path", "text", "headings"),
    [
        (
            "app.ts",
            "import x from 'y';\n\nexport default class App {\n}\n\n"
            "export const add = (a: number, b: number): number => a + b;\n\n"
            "async function main() {\n}\n",
            [
                (),
                ("export default class App",),
                ("export const add = (a: number, b: number): number => a + b;",),
                ("async function main()",),
            ],
        ),
        (
            "lib.rs",
            "use std::fmt;\n\n#[derive(Debug)]\npub struct Point {\n}\n\n"
            "impl fmt::Display for Point {\n}\n",
            [(), ("pub struct Point",), ("impl fmt::Display for Point",)],
        ),
        (
            "main.c",
            "#include <stdio.h>\n\nstatic int helper(int a);\n\n"
            "int main(void)\n{\n  return 0;\n}\n",
            [(), ("int main(void)",)],
        ),
        ("run.sh", "set -e\n\n# Builds it.\nbuild() {\n  make\n}\n", [(), ("build()",)]),
    ],
)
def test_other_languages_split_at_their_declarations(
    path: str, text: str, headings: list[tuple[str, ...]]
) -> None:
    chunks = chunk_document(path, text)
    assert _headings(chunks) == headings
    assert all(c.kind == "definition" for c in chunks[1:])


def test_a_rust_attribute_and_a_shell_comment_stay_with_their_definition() -> None:
    rust = chunk_document("lib.rs", "use a;\n\n#[derive(Debug)]\npub struct Point {\n}\n")
    assert rust[1].text.startswith("#[derive(Debug)]\npub struct Point")
    shell = chunk_document("run.sh", "set -e\n\n# Builds it.\nbuild() {\n  make\n}\n")
    assert shell[1].text.startswith("# Builds it.\nbuild()")


def test_a_long_definition_is_cut_into_windows_under_its_heading() -> None:
    text = "func Long() {\n" + "\n".join(f"\tx{n} := {n}" for n in range(40)) + "\n}\n"
    chunks = chunk_document("long.go", text, max_chars=100)
    assert len(chunks) > 3
    assert all(c.heading == ("func Long()",) for c in chunks)
    _check_invariants(text, chunks, 100)


# --- plain text -------------------------------------------------------------------------------


def test_text_paragraphs_are_merged_while_they_fit() -> None:
    text = "aaaa\n\nbbbb\n\ncccc\n\ndddd"
    chunks = chunk_document("notes.txt", text, max_chars=10)
    assert [(c.text, c.kind) for c in chunks] == [
        ("aaaa\n\nbbbb", "paragraph"),
        ("cccc\n\ndddd", "paragraph"),
    ]


def test_a_line_longer_than_the_limit_is_its_own_chunk_uncut() -> None:
    long_line = "x" * 500
    chunks = chunk_document("notes.rst", f"short\n{long_line}\nshort again", max_chars=50)
    assert [c.text for c in chunks] == ["short", long_line, "short again"]
    assert chunks[1].kind == "lines"


# --- robustness -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["a.md", "a.py", "a.go", "a.c", "a.ts", "a.txt", "a.sh"])
@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n  \n\t\n",
        "x" * 1_000_000,
        "# " + " " * 100_000 + "a" + " " * 100_000,
        "a\n" + "=" * 100_000 + "x",
        "\x00\x01\x02\ufffd\ud800 binary\x7f\n```\n\r\r\n" * 200,
        "\ufeff# Title\n\u00e9t\u00e9 \u4e2d\u6587\n\t\tdef f():\n",
        "int " * 50_000 + "(",
    ],
    ids=["empty", "blank", "1MB-line", "spaces", "underline", "binary", "unicode", "c-like"],
)
def test_any_text_splits_without_raising(path: str, text: str) -> None:
    chunks = chunk_document(path, text, max_chars=1600)
    _check_invariants(text, chunks, 1600)


def test_a_large_document_splits() -> None:
    section = "## Part\n\n" + "Some words in a paragraph.\n" * 5 + "\n```\n# code\n```\n\n"
    text = "# Big\n" + section * 10_000
    chunks = chunk_document("big.md", text)
    assert len(chunks) == 10_000
    _check_invariants(text, chunks, 1600)


_LINES = st.sampled_from(
    [
        "", "  ", "\t", "# Head", "## Sub", "### Deep ###", "text line", "another text line",
        "===", "---", "```", "~~~", "````", "- item", "> quote", "    indented",
        "def f():", "    return 1", "class C:", "    def m(self):", "@decorator", "# comment",
        "import os", "func F() {", "}", "fn main() {", "export function g() {", "int main(void)",
        "x" * 120, "\u00e9\u4e2d\ufeff", "\r", "\x00",
    ]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(_LINES, max_size=60),
    suffix=st.sampled_from([".md", ".py", ".go", ".rs", ".c", ".ts", ".sh", ".txt", ".rst", ""]),
    max_chars=st.integers(min_value=1, max_value=300),
)
def test_chunks_cover_every_non_blank_line_once_in_order(
    lines: list[str], suffix: str, max_chars: int
) -> None:
    text = "\n".join(lines)
    _check_invariants(text, chunk_document(f"doc{suffix}", text, max_chars=max_chars), max_chars)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=400), max_chars=st.integers(min_value=1, max_value=200))
def test_arbitrary_text_keeps_the_invariants(text: str, max_chars: int) -> None:
    for path in ("a.md", "a.py", "a.js", "a.txt"):
        _check_invariants(text, chunk_document(path, text, max_chars=max_chars), max_chars)


# --- digests and locators ---------------------------------------------------------------------


def test_digest_is_the_start_of_the_sha256_of_the_text() -> None:
    assert digest("hello") == hashlib.sha256(b"hello").hexdigest()[:12]
    assert len(digest("\ud800 lone surrogate")) == 12


def test_format_locator_writes_one_line_without_a_range() -> None:
    assert (
        format_locator("docs/guide.md", 12, 40, "3f2a9c1b0d4e")
        == "docs/guide.md#L12-40@3f2a9c1b0d4e"
    )
    assert (
        format_locator("docs/guide.md", 12, 12, "3f2a9c1b0d4e") == "docs/guide.md#L12@3f2a9c1b0d4e"
    )


def test_parse_locator_reads_each_form() -> None:
    assert parse_locator("docs/g.md#L12-40@3F2A") == Locator("docs/g.md", 12, 40, "3f2a")
    assert parse_locator("docs/g.md#L12-40") == Locator("docs/g.md", 12, 40, None)
    assert parse_locator("docs/g.md#L7") == Locator("docs/g.md", 7, 7, None)
    assert parse_locator("notes#L1.md#L3") == Locator("notes#L1.md", 3, 3, None)
    assert parse_locator("docs/r.pdf#p3:L4-20@ABCD") == Locator("docs/r.pdf", 4, 20, "abcd", 3)
    assert parse_locator("docs/r.pdf#p12:L7") == Locator("docs/r.pdf", 7, 7, None, 12)


def test_format_locator_names_a_page_before_the_lines() -> None:
    assert format_locator("docs/r.pdf", 4, 20, "3F2A", 3) == "docs/r.pdf#p3:L4-20@3f2a"
    assert format_locator("docs/r.pdf", 4, 4, "3f2a", 1) == "docs/r.pdf#p1:L4@3f2a"


def test_a_chunks_locator_resolves_to_its_text() -> None:
    text = "# A\na\n\n# B\nb1\nb2"
    chunk = chunk_document("d.md", text)[1]
    locator = parse_locator(format_locator("d.md", chunk.start, chunk.end, digest(chunk.text)))
    resolved = "\n".join(split_lines(text)[locator.start - 1 : locator.end])
    assert resolved == chunk.text
    assert digest(resolved) == locator.digest


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("#L1", "empty"),
        ("/etc/passwd#L1", "absolute"),
        ("~/notes.md#L1", "absolute"),
        ("C:/notes.md#L1", "absolute"),
        ("docs/../secret.md#L1", "'..'"),
        ("../secret.md#L1", "'..'"),
        ("docs/..#L1", "'..'"),
        ("docs\\guide.md#L1", "backslash"),
        ("docs/g\x00.md#L1", "control"),
        ("docs/g\n.md#L1", "control"),
        ("docs/g.md#L0", "from 1"),
        ("docs/g.md#L5-4", "before the first"),
        ("docs/g.md#L1-10000001", "beyond"),
        ("docs/g.md#L1@abc", "hex"),
        ("docs/g.md#L1@xyz1", "hex"),
        ("docs/g.md#L1@" + "a" * 65, "hex"),
        ("docs/g.md#L1@", "hex"),
        ("docs/g.md", "expected"),
        ("docs/g.md#L", "expected"),
        ("docs/g.md#L1-", "expected"),
        ("docs/g.md#12", "expected"),
        ("docs/r.pdf#p0:L1", "pages are numbered"),
        ("docs/r.pdf#p1000001:L1", "pages are numbered"),
        ("docs/r.pdf#p:L1", "expected"),
        ("docs/r.pdf#p3", "expected"),
        ("docs/r.pdf#p3L1", "expected"),
        ("", "expected"),
        ("a/" * 500 + "g.md#L1", "longer than 1000"),
    ],
)
def test_parse_locator_refuses_with_a_clear_message(value: str, problem: str) -> None:
    with pytest.raises(ValidationError, match="locator") as caught:
        parse_locator(value)
    assert problem in caught.value.problem


def test_format_locator_refuses_what_parse_refuses() -> None:
    with pytest.raises(ValidationError, match=r"'\.\.' segment"):
        format_locator("../x.md", 1, 2, "abcd")


_SEGMENT = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="/\\"),
    min_size=1,
    max_size=12,
).filter(lambda s: s not in {".", ".."} and not s.startswith("~"))


@settings(max_examples=200)
@given(
    segments=st.lists(_SEGMENT, min_size=1, max_size=5),
    start=st.integers(min_value=1, max_value=10_000_000),
    length=st.integers(min_value=0, max_value=1000),
    hex_digest=st.text(alphabet="0123456789abcdef", min_size=4, max_size=64),
    page=st.none() | st.integers(min_value=1, max_value=1_000_000),
)
def test_format_and_parse_locator_round_trip(
    segments: list[str], start: int, length: int, hex_digest: str, page: int | None
) -> None:
    path = "/".join(segments)
    assume(not re.match(r"[A-Za-z]:", path))  # a drive letter: refused as absolute
    end = min(start + length, 10_000_000)
    value = format_locator(path, start, end, hex_digest, page)
    assert parse_locator(value) == Locator(path, start, end, hex_digest, page)
