"""A locator resolved to the lines it names, as they are now: ``docs/guide.md#L12-40@digest``
is the source ``docs``, the file ``guide.md`` in its folder, lines 12 to 40.

An HTML page's lines are its text's (:mod:`orchestrator.core.html_text`). When those lines no
longer hold what was cited (their digest differs), the chunk that does hold it is looked for in
the index (lines added above it moved it); failing that, the lines now at that place are given,
marked as changed since.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from orchestrator.core.chunking import digest, format_locator, parse_locator
from orchestrator.core.html_text import HTML_SUFFIXES, html_text
from orchestrator.errors import ValidationError
from orchestrator.memory.knowledge.store import KnowledgeStore
from orchestrator.memory.knowledge.tables import CHUNKS

__all__ = ["MAX_LINES", "Resolved", "resolve"]

MAX_LINES = 400  # the most lines one locator gives


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolved:
    """What a locator names now: ``locator`` (where it is now), its text, its source's trust,
    and ``state``: ``current`` (as cited), ``moved`` (the cited text, at other lines now),
    ``changed`` (the lines now at that place differ from what was cited) or ``unversioned``
    (a locator without a digest: the lines now)."""

    locator: str
    text: str
    trust: str
    state: str
    start: int
    end: int


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
        raw = path.read_text(encoding="utf-8-sig")
        lines = _lines(html_text(raw) if path.name.lower().endswith(HTML_SUFFIXES) else raw)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ValidationError("locator", f"cannot read {locator.path}: {exc}") from exc
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
        moved = _moved(store, locator.path, locator.digest)
        if (
            moved is not None
            and digest("\n".join(lines[moved[0] - 1 : moved[1]])) == locator.digest
        ):
            start, stop = moved
            return Resolved(
                locator=format_locator(locator.path, start, stop, locator.digest),
                text="\n".join(lines[start - 1 : stop]),
                trust=source.trust,
                state="moved",
                start=start,
                end=stop,
            )
        state = "changed"
    now = format_locator(locator.path, locator.start, end, digest(text))
    return Resolved(
        locator=now, text=text, trust=source.trust, state=state, start=locator.start, end=end
    )


def _lines(text: str) -> list[str]:
    """A file's lines as an editor numbers them (a final line break ends the last line)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


def _moved(store: KnowledgeStore, path: str, wanted: str) -> tuple[int, int] | None:
    """Where the indexed chunk of ``path`` with digest ``wanted`` is now, if one is."""
    query = (
        select(CHUNKS.c.start_line, CHUNKS.c.end_line)
        .where(CHUNKS.c.path == path, CHUNKS.c.digest == wanted)
        .limit(1)
    )
    with store.engine.connect() as conn:
        row = conn.execute(query).first()
    return (int(row[0]), int(row[1])) if row is not None else None
