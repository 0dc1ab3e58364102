"""A locator resolved to the lines it names, as they are now: ``docs/guide.md#L12-40@digest``
is the source ``docs``, the file ``guide.md`` in its folder, lines 12 to 40.

An HTML page's lines are its text's (:mod:`orchestrator.core.html_text`); a DOCX's are those of
its converted text, and a PDF's locator names its page, ``docs/report.pdf#p3:L4-20@digest``
being lines 4 to 20 of page 3's text (:mod:`orchestrator.memory.knowledge.documents`, converted
again now). When those lines no longer hold what was cited (their digest differs), the chunk
that does hold it is looked for in the index (lines added above it moved it); failing that, the
lines now at that place are given, marked as changed since.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from orchestrator.core.chunking import Locator, digest, format_locator, parse_locator
from orchestrator.core.html_text import HTML_SUFFIXES, html_text
from orchestrator.errors import ValidationError
from orchestrator.memory.knowledge.documents import (
    PAGED_SUFFIXES,
    Unreadable,
    converted,
    is_document,
)
from orchestrator.memory.knowledge.store import KnowledgeStore
from orchestrator.memory.knowledge.tables import CHUNKS

__all__ = ["MAX_LINES", "Resolved", "resolve"]

MAX_LINES = 400  # the most lines one locator gives


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolved:
    """What a locator names now: ``locator`` (where it is now), its text, its source's trust,
    and ``state``: ``current`` (as cited), ``moved`` (the cited text, at other lines now),
    ``changed`` (the lines now at that place differ from what was cited) or ``unversioned``
    (a locator without a digest: the lines now); ``page`` when they are a PDF's page's."""

    locator: str
    text: str
    trust: str
    state: str
    start: int
    end: int
    page: int | None = None


def resolve(store: KnowledgeStore, value: str) -> Resolved:
    """The lines ``value`` names, read from the file now.

    Raises:
        ValidationError: a malformed locator, an unknown source, a file it does not hold, or
            lines past the file's end.
    """
    locator = parse_locator(value)
    name, _, rel = locator.path.partition("/")
    source = store.get(name)
    if source is None or not rel:
        raise ValidationError("locator", f"no knowledge source holds {locator.path!r}")
    root = Path(source.root)
    path = root if source.kind == "file" else root / rel
    if source.kind == "file" and rel != root.name:
        raise ValidationError("locator", f"no knowledge source holds {locator.path!r}")
    inside = root.parent if source.kind == "file" else root
    try:
        path.resolve().relative_to(inside.resolve())
        texts = _texts(path)
        lines = _lines(_page(texts, path.name, locator.page))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ValidationError("locator", f"cannot read {locator.path}: {exc}") from exc
    except Unreadable as exc:
        raise ValidationError("locator", f"cannot read {locator.path}: {exc.problem}") from None
    if locator.start > len(lines):
        raise ValidationError(
            "locator", f"{locator.path} has {len(lines)} lines, not {locator.start}"
        )
    end = min(locator.end, len(lines), locator.start + MAX_LINES - 1)
    text = "\n".join(lines[locator.start - 1 : end])
    if locator.digest is None:
        state = "unversioned"
    elif digest(text) == locator.digest:
        state = "current"
    else:
        moved = _moved(store, locator, texts, source.trust)
        if moved is not None:
            return moved
        state = "changed"
    now = format_locator(locator.path, locator.start, end, digest(text), locator.page)
    return Resolved(
        locator=now,
        text=text,
        trust=source.trust,
        state=state,
        start=locator.start,
        end=end,
        page=locator.page,
    )


def _texts(path: Path) -> list[str]:
    """The text locators count lines in: the file's (an HTML page's text, a DOCX's converted
    text), or a PDF's page by page.

    Raises:
        OSError, UnicodeDecodeError: the file cannot be read as text.
        Unreadable: a document that cannot be converted.
    """
    name = path.name.lower()
    if is_document(name):
        return converted(name, path.read_bytes())
    raw = path.read_text(encoding="utf-8-sig")
    return [html_text(raw) if name.endswith(HTML_SUFFIXES) else raw]


def _page(texts: list[str], name: str, page: int | None) -> str:
    """The text of page ``page`` of a PDF, or the whole text of another file.

    Raises:
        ValueError: no page named in a PDF's locator, or one named in another file's, or a
            page the PDF does not have.
    """
    paged = name.lower().endswith(PAGED_SUFFIXES)
    if paged and page is None:
        raise ValueError("a PDF's locator names its page: path#p3:L4-20")
    if not paged and page is not None:
        raise ValueError("only a PDF's locators name a page")
    if page is None:
        return "".join(texts)
    if page > len(texts):
        raise ValueError(f"it has {len(texts)} pages, not {page}")
    return texts[page - 1]


def _lines(text: str) -> list[str]:
    """A file's lines as an editor numbers them (a final line break ends the last line)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


def _moved(
    store: KnowledgeStore, locator: Locator, texts: list[str], trust: str
) -> Resolved | None:
    """Where the cited text is now, when the index holds a chunk of the locator's file with its
    digest and the file's text (``texts``, page by page in a PDF) still has it there."""
    query = (
        select(CHUNKS.c.page, CHUNKS.c.start_line, CHUNKS.c.end_line)
        .where(CHUNKS.c.path == locator.path, CHUNKS.c.digest == locator.digest)
        .limit(1)
    )
    with store.engine.connect() as conn:
        row = conn.execute(query).first()
    if row is None or locator.digest is None:
        return None
    page, start, stop = (None if row[0] is None else int(row[0])), int(row[1]), int(row[2])
    if (page is None) != (locator.page is None) or (page or 1) > len(texts):
        return None
    lines = _lines(texts[page - 1] if page is not None else "".join(texts))
    found = "\n".join(lines[start - 1 : stop])
    if digest(found) != locator.digest:
        return None
    return Resolved(
        locator=format_locator(locator.path, start, stop, locator.digest, page),
        text=found,
        trust=trust,
        state="moved",
        start=start,
        end=stop,
        page=page,
    )
