"""A knowledge document split along its structure into chunks, and the locators that cite them.

A chunk is a run of whole lines of a document, with the heading path it sits under, and is cited
by a locator ``docs/guide.md#L12-40@3f2a9c1b0d4e``: the path, the lines (``#L12`` for one line)
and the digest of the chunk's text, so a citation whose lines have changed since can be told.
A PDF's locator names the page too, its lines those of that page's text:
``docs/report.pdf#p3:L4-20@3f2a9c1b0d4e``.

Lines are numbered as an editor shows them (:func:`split_lines`): ``\\r\\n`` and ``\\r`` end a
line like ``\\n``, a byte order mark at the start is not part of line 1, and a text ending in a
line break has an empty last line. How a document splits depends on its path's extension:

- **Markdown** (``.md``, ``.markdown``, ``.mdx``): a section per ATX heading (``#`` to ``######``,
  up to 3 spaces of indent) or setext heading (a paragraph underlined by ``===`` or ``---``),
  never inside a fenced code block (an unclosed fence runs to the end). A chunk's heading is the
  path of headings it sits under, its own last. A heading with nothing under it joins the next
  section's chunk (which carries that section's path), or stands alone at the end. Front matter
  (``---`` on line 1 up to the next ``---`` or ``...``) is a chunk of its own with no heading.
  Short sections are not merged with their neighbours.
- **Python** and **other code**: definitions, see :mod:`orchestrator.core.chunk_code`.
- **Anything else**, ``.rst`` and ``.txt`` included: paragraphs, merged while they fit.

Whatever is longer than ``max_chars`` is cut at blank lines (outside fenced code) into pieces
filled greedily, each keeping its heading and kind; a paragraph, fence or block still too long
is cut into windows of whole lines (kind ``lines``), and a single line longer than the limit is
a chunk of its own. A Python file that does not parse is cut into windows alone. Every non-blank
line is in exactly one chunk, chunks are in order, and none starts or ends with a blank line.

Nothing here raises on any text; only a ``max_chars`` below 1 is refused.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import NoReturn

from orchestrator.core.chunk_code import (
    CODE_SUFFIXES,
    PYTHON_SUFFIXES,
    Unit,
    code_units,
    python_units,
)
from orchestrator.errors import ValidationError

__all__ = [
    "CHUNKER_VERSION",
    "Chunk",
    "Locator",
    "chunk_document",
    "digest",
    "format_locator",
    "parse_locator",
    "split_lines",
]

CHUNKER_VERSION = "1"
"""Changes whenever the same document would split differently, so indexes are rebuilt."""

_MARKDOWN_SUFFIXES = frozenset({".md", ".markdown", ".mdx"})
_HEADING_CHARS = 200  # a heading longer than this is shortened in the path
_DIGEST_CHARS = 12
_MAX_LOCATOR = 1000
_MAX_LINE = 10_000_000
_MAX_PAGE = 1_000_000

_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_FENCE_CLOSE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*")
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]|$)")
_SETEXT = re.compile(r" {0,3}(?:=+|-+)[ \t]*")
# What starts a block other than a paragraph: a list item, a quote, HTML, a table, a rule.
_NOT_PARAGRAPH = re.compile(
    r" {0,3}(?:[-+*](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|[>|<]|(?:[-*_][ \t]*){3,}$)"
)
_LOCATOR = re.compile(
    r"(?P<path>.*)#(?:p(?P<page>\d+):)?L(?P<start>\d+)(?:-(?P<end>\d+))?(?:@(?P<digest>.*))?"
)
_HEX = re.compile(r"[0-9a-fA-F]{4,64}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Chunk:
    """A run of whole lines of a document: where it is, what it sits under, and its text.

    ``start`` and ``end`` are 1-based and inclusive; ``text`` is exactly those lines joined with
    ``\\n``; ``heading`` is the path of Markdown headings or code definitions it sits under (empty
    for plain text); ``kind`` is ``section``, ``paragraph``, ``definition`` or ``lines`` (the
    code between definitions, and windows cut from a block too long to keep whole).
    """

    start: int
    end: int
    heading: tuple[str, ...]
    text: str
    kind: str


@dataclass(frozen=True, slots=True)
class Locator:
    """A citation of lines ``start..end`` (1-based, inclusive) of ``path``, with the digest of
    their text when it was given; ``page`` (from 1) when they are lines of a PDF's page."""

    path: str
    start: int
    end: int
    digest: str | None
    page: int | None = None


def split_lines(text: str) -> list[str]:
    """A document's lines as an editor numbers them (the first is line 1)."""
    text = text.removeprefix("\ufeff")
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def chunk_document(path: str, text: str, *, max_chars: int = 1600) -> list[Chunk]:
    """The chunks of a document, in order, split by the rules of its path's extension."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, not {max_chars}")
    lines = split_lines(text)
    suffix = PurePosixPath(path).suffix.lower()
    units: list[Unit] = []
    fenced: list[bool] = []
    if suffix in _MARKDOWN_SUFFIXES:
        units, fenced = _markdown_units(lines)
    packer = _Packer(lines, fenced, max_chars)
    if suffix in PYTHON_SUFFIXES:
        parsed = python_units(lines, packer.fits)
        if parsed is None:
            packer.windows(0, len(lines) - 1, ())
        units = parsed or []
    elif suffix in CODE_SUFFIXES:
        units = code_units(lines, suffix)
    elif suffix not in _MARKDOWN_SUFFIXES:
        units = [Unit(0, len(lines) - 1, (), "paragraph")]
    for unit in units:
        packer.pack(unit)
    return packer.chunks


def digest(text: str) -> str:
    """The first 12 hex digits of the SHA-256 of a chunk's text (UTF-8)."""
    data = text.encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()[:_DIGEST_CHARS]


def format_locator(path: str, start: int, end: int, digest: str, page: int | None = None) -> str:
    """``path#L12-40@digest``, or ``path#L12@digest`` for one line, the digest in lower case;
    ``path#p3:L12-40@digest`` for lines of page 3; what :func:`parse_locator` would refuse
    raises :class:`ValidationError`."""
    lines = f"L{start}" if start == end else f"L{start}-{end}"
    at = "" if page is None else f"p{page}:"
    value = f"{path}#{at}{lines}@{digest.lower()}"
    parse_locator(value)
    return value


def parse_locator(value: str) -> Locator:
    """The locator ``path#L12-40@hex``, ``path#L12-40`` or ``path#L12`` (its digest in lower
    case), each with a page before the lines when it names one (``path#p3:L12-40@hex``).
    Anything else raises :class:`ValidationError`: a path that is empty, absolute (``/``,
    ``~``, a drive letter), has a ``..`` segment, a backslash or a control character; lines
    below 1, reversed or beyond 10,000,000; a page below 1 or beyond 1,000,000; a digest that
    is not 4 to 64 hex digits; more than 1,000 characters."""
    if len(value) > _MAX_LOCATOR:
        _refuse(value, f"longer than {_MAX_LOCATOR} characters")
    if any(unicodedata.category(char) == "Cc" for char in value):
        _refuse(value, "contains a control character")
    if "\\" in value:
        _refuse(value, "contains a backslash")
    match = _LOCATOR.fullmatch(value)
    if match is None:
        _refuse(value, "expected path#[p<page>:]L<start>[-<end>][@<digest>]")
    path, hex_digest = match["path"], match["digest"]
    _check_path(value, path)
    start = int(match["start"])
    end = int(match["end"]) if match["end"] is not None else start
    if start < 1:
        _refuse(value, "lines are numbered from 1")
    if end < start:
        _refuse(value, "the last line is before the first")
    if end > _MAX_LINE:
        _refuse(value, f"lines beyond {_MAX_LINE:,}")
    page = int(match["page"]) if match["page"] is not None else None
    if page is not None and not 1 <= page <= _MAX_PAGE:
        _refuse(value, f"pages are numbered from 1 to {_MAX_PAGE:,}")
    if hex_digest is not None and not _HEX.fullmatch(hex_digest):
        _refuse(value, "the digest must be 4 to 64 hex digits")
    lowered = hex_digest.lower() if hex_digest is not None else None
    return Locator(path, start, end, lowered, page)


def _check_path(value: str, path: str) -> None:
    if not path:
        _refuse(value, "the path is empty")
    if path.startswith(("/", "~")) or re.match(r"[A-Za-z]:", path):
        _refuse(value, "the path is absolute")
    if ".." in path.split("/"):
        _refuse(value, "the path has a '..' segment")


def _refuse(value: str, problem: str) -> NoReturn:
    shown = value if len(value) <= 80 else value[:77] + "..."
    raise ValidationError("locator", f"{problem}: {shown!r}")


class _Packer:
    """Cuts the units of one document to size, and collects its chunks."""

    def __init__(self, lines: Sequence[str], fenced: Sequence[bool], max_chars: int) -> None:
        self.lines = lines
        self.max_chars = max_chars
        self.blank = [not line.strip() for line in lines]
        self.fenced = fenced
        self.offsets = list(itertools.accumulate((len(line) + 1 for line in lines), initial=0))
        self.chunks: list[Chunk] = []

    def fits(self, start: int, end: int) -> bool:
        """Whether lines ``start..end`` (0-based, inclusive) fit in one chunk."""
        return self.offsets[end + 1] - self.offsets[start] - 1 <= self.max_chars

    def pack(self, unit: Unit) -> None:
        """A unit as one chunk if it fits, else its blocks filled greedily into pieces."""
        start, end = self._trim(unit.start, unit.end)
        if start > end:
            return
        if self.fits(start, end):
            self._emit(start, end, unit.heading, unit.kind)
            return
        piece: tuple[int, int] | None = None
        for first, last in self._blocks(start, end):
            if piece is not None and self.fits(piece[0], last):
                piece = (piece[0], last)
                continue
            if piece is not None:
                self._emit(*piece, unit.heading, unit.kind)
            piece = (first, last) if self.fits(first, last) else None
            if piece is None:
                self.windows(first, last, unit.heading)
        if piece is not None:
            self._emit(*piece, unit.heading, unit.kind)

    def windows(self, start: int, end: int, heading: tuple[str, ...]) -> None:
        """Lines ``start..end`` as consecutive windows of whole lines, each as long as fits."""
        first = start
        while first <= end:
            if self.blank[first]:
                first += 1
                continue
            last = first
            while last < end and self.fits(first, last + 1):
                last += 1
            self._emit(*self._trim(first, last), heading, "lines")
            first = last + 1

    def _blocks(self, start: int, end: int) -> list[tuple[int, int]]:
        """The runs of lines between blank lines outside fenced code, without blank edges."""
        blocks: list[tuple[int, int]] = []
        first: int | None = None
        for i in range(start, end + 2):
            cut = i > end or (self.blank[i] and not (self.fenced and self.fenced[i]))
            if cut and first is not None:
                blocks.append(self._trim(first, i - 1))
                first = None
            elif not cut and first is None and not self.blank[i]:
                first = i
        return blocks

    def _trim(self, start: int, end: int) -> tuple[int, int]:
        while start <= end and self.blank[start]:
            start += 1
        while end >= start and self.blank[end]:
            end -= 1
        return start, end

    def _emit(self, start: int, end: int, heading: tuple[str, ...], kind: str) -> None:
        text = "\n".join(self.lines[start : end + 1])
        self.chunks.append(
            Chunk(start=start + 1, end=end + 1, heading=heading, text=text, kind=kind)
        )


def _markdown_units(lines: Sequence[str]) -> tuple[list[Unit], list[bool]]:
    """A Markdown document's sections, and which of its lines are fenced code."""
    body = _front_matter_end(lines) + 1
    scan = _HeadingScan(lines, body)
    heads = scan.run()
    units = [Unit(0, body - 1, (), "section")] if body else []
    units.append(Unit(body, heads[0][0] - 1 if heads else len(lines) - 1, (), "section"))
    pending: int | None = None
    for k, (first, content, path) in enumerate(heads):
        last = heads[k + 1][0] - 1 if k + 1 < len(heads) else len(lines) - 1
        start = first if pending is None else pending
        if k + 1 < len(heads) and all(not line.strip() for line in lines[content : last + 1]):
            pending = start  # a heading with nothing under it joins the next section
            continue
        units.append(Unit(start, last, path, "section"))
        pending = None
    return units, scan.fenced


def _front_matter_end(lines: Sequence[str]) -> int:
    """The line that closes front matter opened on the first line, or -1 if there is none."""
    if lines[0].rstrip() != "---":
        return -1
    return next((i for i in range(1, len(lines)) if lines[i].rstrip() in ("---", "...")), -1)


class _HeadingScan:
    """One pass over a Markdown document: its headings, and the lines inside fenced code."""

    def __init__(self, lines: Sequence[str], start: int) -> None:
        self.lines = lines
        self.start = start
        self.fenced = [False] * len(lines)
        self.heads: list[tuple[int, int, tuple[str, ...]]] = []  # first line, content, path
        self.stack: list[tuple[int, str]] = []  # the enclosing headings' levels and titles

    def run(self) -> list[tuple[int, int, tuple[str, ...]]]:
        """Each heading's first line, the line after it, and its heading path."""
        fence: tuple[str, int] | None = None
        paragraph: int | None = None  # the first line of the paragraph being read
        fresh = True  # whether the line read next starts a block
        for i in range(self.start, len(self.lines)):
            line = self.lines[i]
            if fence is not None:
                self.fenced[i] = True
                fence = None if _closes(line, fence) else fence
                fresh = fence is None
                continue
            fence = _opens(line)
            if fence is not None or not line.strip():
                self.fenced[i] = fence is not None
                paragraph, fresh = None, True
                continue
            fresh, paragraph = self._line(i, paragraph, fresh)
        return self.heads

    def _line(self, i: int, paragraph: int | None, fresh: bool) -> tuple[bool, int | None]:
        """Reads a line outside fences that is not blank: whether the next starts a block, and
        the paragraph being read after it."""
        line = self.lines[i]
        if atx := _ATX.match(line):
            self._push(i, i + 1, len(atx[1]), _atx_title(line[atx.end() :]))
            return True, None
        if paragraph is not None and _SETEXT.fullmatch(line):
            title = " ".join(part.strip() for part in self.lines[paragraph:i])
            self._push(paragraph, i + 1, 1 if "=" in line else 2, title)
            return True, None
        if _SETEXT.fullmatch(line):
            return True, None  # a rule, or "===" read as text: either way, a block ends
        if fresh or _NOT_PARAGRAPH.match(line):  # a list item or a quote ends a paragraph
            return False, i if _starts_paragraph(line) else None
        return False, paragraph

    def _push(self, first: int, content: int, level: int, title: str) -> None:
        while self.stack and self.stack[-1][0] >= level:
            self.stack.pop()
        self.stack.append((level, title[:_HEADING_CHARS]))
        self.heads.append((first, content, tuple(text for _, text in self.stack)))


def _opens(line: str) -> tuple[str, int] | None:
    """The character and length of the code fence a line opens, if it opens one."""
    match = _FENCE_OPEN.match(line)
    if match is None or (match[1][0] == "`" and "`" in match[2]):
        return None
    return match[1][0], len(match[1])


def _closes(line: str, fence: tuple[str, int]) -> bool:
    match = _FENCE_CLOSE.fullmatch(line)
    return match is not None and match[1][0] == fence[0] and len(match[1]) >= fence[1]


def _atx_title(rest: str) -> str:
    """An ATX heading's text: what follows the opening ``#``s, without a closing run of them."""
    text = rest.strip(" \t")
    bare = text.rstrip("#")
    if not bare or bare.endswith((" ", "\t")):
        return bare.rstrip(" \t")
    return text


def _starts_paragraph(line: str) -> bool:
    indent = len(line) - len(line.lstrip(" "))
    return indent < 4 and not line.startswith("\t") and not _NOT_PARAGRAPH.match(line)
