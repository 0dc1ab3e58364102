"""``arena knowledge add|list|remove|reindex|search|show|chunks``: the documents, project files
and folders agents may read, found when relevant and cited to the line."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from orchestrator.cli.lore import lore
from orchestrator.cli.output import fail, json_text, out, printable
from orchestrator.cli.resources import wired
from orchestrator.core.wire import validate_group
from orchestrator.errors import ValidationError
from orchestrator.memory.knowledge.embedding import Embedded, embed_pending, embedded_counts
from orchestrator.memory.knowledge.indexer import Progress, SyncReport
from orchestrator.memory.knowledge.locate import resolve
from orchestrator.memory.knowledge.store import KnowledgeStore, Source, turn_scopes
from orchestrator.runtime.wiring import Wiring
from orchestrator.settings import Settings

__all__ = ["knowledge"]


@contextmanager
def _wiring(settings: Settings) -> Iterator[Wiring]:
    with wired(settings) as wiring:
        yield wiring


def _owner(group: str | None, agent: str | None, everyone: bool) -> tuple[str, str]:
    chosen = [c for c in (group is not None, agent is not None, everyone) if c]
    if len(chosen) != 1:
        raise click.UsageError("say who may read it: one of --group G, --agent A, --everyone")
    if group is not None:
        return "group", validate_group(group)
    if agent is not None:
        return "agent", agent
    return "everyone", ""


def _name_for(path: Path) -> str:
    base = path.name if path.name else path.resolve().name
    slug = re.sub(r"[^a-z0-9_-]+", "-", base.lower()).strip("-_")[:64]
    return slug or "source"


class _Shown:
    """Progress on the terminal while a source is indexed (only when stderr is one)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.live = sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, progress: Progress) -> None:
        if not self.live:
            return
        now = datetime.now(UTC).timestamp()
        if now - self.last < 0.2 and progress.done != progress.total:
            return
        self.last = now
        line = f"indexing {self.name}: {progress.done}/{progress.total} files"
        sys.stderr.write(f"\r{line[:100]:<100}")
        if progress.done == progress.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _said(report: SyncReport) -> str:
    parts = [
        f"{report.files} files",
        f"{report.added} new",
        f"{report.changed} changed",
        f"{report.removed} removed",
        f"{report.chunks_written} chunks written",
        f"{report.chunks_removed} removed",
    ]
    return f"{report.source}: " + ", ".join(parts) + f" in {report.seconds:.1f} s"


def _index(wiring: Wiring, source: Source) -> SyncReport:
    report = wiring.indexer.sync(source, now=datetime.now(UTC), progress=_Shown(source.name))
    out.print(printable(_said(report)))
    for problem in report.problems[:20]:
        out.print(printable(f"  skipped {problem}"))
    if len(report.problems) > 20:
        out.print(f"  … and {len(report.problems) - 20} more skipped")
    if wiring.knowledge_vectors is not None:
        _embed_some(wiring, source.name)
    return report


EMBED_HERE_S = 10.0  # what `add` and `reindex` embed themselves; a running daemon does the rest


def _embed_some(wiring: Wiring, name: str) -> None:
    """The source's new chunks embedded for up to :data:`EMBED_HERE_S` seconds (a small source
    is found by meaning at once), with progress on a terminal; what is left is said."""
    vectors = wiring.knowledge_vectors
    assert vectors is not None
    counts = embedded_counts(wiring.engine).get(name)
    if counts is None or not counts.pending:
        return
    total, done = counts.pending, 0
    live = sys.stderr.isatty()
    began = time.monotonic()
    try:
        while time.monotonic() - began < EMBED_HERE_S:
            # oldest first: a running daemon embeds newest first, so the two do not meet early
            step = embed_pending(wiring.engine, vectors, source=name, newest_first=False)
            done += step
            if not step and vectors.embedder() is None:
                break  # the model cannot be loaded (the reason was logged)
            if not (embedded_counts(wiring.engine).get(name) or counts).pending:
                break
            if live:
                sys.stderr.write(f"\rembedding {name}: {done}/{total} chunks"[:100].ljust(100))
                sys.stderr.flush()
    except KeyboardInterrupt:  # the source is indexed already: only the embedding stops
        pass
    if live:
        sys.stderr.write("\n")
    left = (embedded_counts(wiring.engine).get(name) or counts).pending
    if left:
        out.print(
            f"  found by its words now, and by meaning once a running daemon has embedded its "
            f"other {left:,} new chunks (`arena knowledge list` shows how far)"
        )
    else:
        out.print(f"  its {total:,} new chunks embedded: found by meaning too")


@click.group()
def knowledge() -> None:
    """Documents, project files and folders agents may read, cited to the line."""


knowledge.add_command(lore)


@knowledge.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--group", default=None, help="Only this group's agents read it.")
@click.option("--agent", default=None, help="Only this agent reads it.")
@click.option("--everyone", is_flag=True, help="Every agent in every group reads it.")
@click.option("--project", is_flag=True, help="The shared project workspace (no PATH).")
@click.option("--name", default=None, help="The source's name (default: the folder's name).")
@click.option(
    "--trust",
    type=click.Choice(["trusted", "external"]),
    default=None,
    help="How far its text is vouched for (default: trusted; external text is never instructions).",
)
@click.pass_obj
def add(
    settings: Settings,
    paths: tuple[Path, ...],
    group: str | None,
    agent: str | None,
    everyone: bool,
    project: bool,
    name: str | None,
    trust: str | None,
) -> None:
    """Add a folder or file (or --project) as a source and index it now. A running daemon
    keeps it fresh: a changed file is indexed again within seconds."""
    scope, scope_id = _owner(group, agent, everyone)
    if project:
        if paths:
            raise click.UsageError("--project takes no PATH")
        paths = (settings.project,)
    if len(paths) != 1:
        raise click.UsageError("give one PATH (a folder or a file), or --project")
    path = paths[0].expanduser()
    if project and not path.is_dir():
        fail(
            f"the shared project {printable(str(path))} does not exist yet: it is made when an "
            "agent first acts (or give its folder as PATH)"
        )
    if not path.exists():
        fail(f"{printable(str(path))}: no such file or folder")
    kind = "project" if project else ("folder" if path.is_dir() else "file")
    if kind == "file" and not path.is_file():
        fail(f"{printable(str(path))}: not a regular file or folder")
    with _wiring(settings) as wiring:
        if scope == "agent" and scope_id not in {a.id for a in wiring.team.agents}:
            fail(f"no agent {printable(scope_id)!r} (see `arena status`)")
        chosen = name if name is not None else ("project" if project else _name_for(path))
        try:
            source = wiring.knowledge.add(
                name=chosen,
                kind=kind,
                root=path.resolve(),
                scope=scope,
                scope_id=scope_id,
                trust=trust or "trusted",
                now=datetime.now(UTC),
            )
        except ValidationError as exc:
            if name is None and "exists already" in str(exc):
                fail(f"a source named {chosen!r} exists already: choose another with --name")
            raise
        out.print(f"added {source.name} ({source.kind}, {source.trust}) for {source.owner}")
        _index(wiring, source)


def _source_row(
    source: Source, embedded: Embedded | None, skipped: list[tuple[str, str]]
) -> dict[str, Any]:
    return {
        "name": source.name,
        "kind": source.kind,
        "owner": source.owner,
        "trust": source.trust,
        "root": source.root,
        "files": source.files,
        "chunks": source.chunks,
        "embedded": None if embedded is None else embedded.done,
        "checked_at": source.checked_at.isoformat() if source.checked_at else None,
        "problem": source.problem,
        "skipped": [{"path": path, "problem": problem} for path, problem in skipped],
    }


@knowledge.command(name="list")
@click.option("--group", default=None, help="Only the sources this group's agents read.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def list_(settings: Settings, group: str | None, as_json: bool) -> None:
    """List the sources: who reads them, their files and chunks, their last check, and the
    files skipped with why (with --json, their folders too)."""
    if group is not None:
        validate_group(group)
    with _wiring(settings) as wiring:
        sources = wiring.knowledge.sources()
        if group is not None:
            sources = [s for s in sources if s.scope != "group" or s.scope_id == group]
        meaning = wiring.knowledge_vectors is not None
        counts = embedded_counts(wiring.engine) if meaning else {}
        none = Embedded(done=0, chunks=0)
        rows = [
            _source_row(
                s, counts.get(s.name, none) if meaning else None, wiring.knowledge.skipped(s.name)
            )
            for s in sources
        ]
    if as_json:
        for row in rows:
            out.print(json_text(row))
        return
    if not rows:
        out.print("no knowledge sources (add one: arena knowledge add --group G PATH)")
        return
    table = Table("name", "kind", "read by", "trust", "files", "chunks", "checked")
    for r in rows:
        checked = (r["checked_at"] or "never")[:16].replace("T", " ")
        if r["problem"]:
            checked += f" ({r['problem']})"
        table.add_row(
            r["name"],
            r["kind"],
            r["owner"],
            r["trust"],
            str(r["files"]),
            _chunks(r),
            printable(checked),
        )
    out.print(table)
    for r in rows:
        _print_skipped(r["name"], r["skipped"])


def _print_skipped(name: str, skipped: list[dict[str, str]]) -> None:
    """A source's files indexed without chunks, and why (the first 20)."""
    for file in skipped[:20]:
        out.print(printable(f"{name}/{file['path']}: skipped, {file['problem']}"))
    if len(skipped) > 20:
        out.print(f"{name}: … and {len(skipped) - 20} more files skipped")


def _chunks(row: dict[str, Any]) -> str:
    """A source's chunks, and how many are found by meaning yet while some are not."""
    embedded = row["embedded"]
    if embedded is None or embedded >= row["chunks"]:
        return str(row["chunks"])
    return f"{row['chunks']} ({embedded} by meaning)"


@knowledge.command()
@click.argument("name")
@click.pass_obj
def remove(settings: Settings, name: str) -> None:
    """Forget source NAME and its chunks (its files are never touched)."""
    with _wiring(settings) as wiring:
        if not wiring.knowledge.remove(name):
            fail(f"no knowledge source {printable(name)!r} (see `arena knowledge list`)")
    out.print(f"removed {name}; its files are untouched")


@knowledge.command()
@click.argument("names", nargs=-1)
@click.pass_obj
def reindex(settings: Settings, names: tuple[str, ...]) -> None:
    """Compare the sources' files (NAMES, default all) with the index now and index what
    changed."""
    with _wiring(settings) as wiring:
        store: KnowledgeStore = wiring.knowledge
        sources = store.sources()
        known = {s.name: s for s in sources}
        for name in names:
            if name not in known:
                fail(f"no knowledge source {printable(name)!r} (see `arena knowledge list`)")
        for source in [known[n] for n in names] if names else sources:
            _index(wiring, source)
        if not sources:
            out.print("no knowledge sources")


@knowledge.command()
@click.argument("query")
@click.option("--group", default=None, help="As this group's agents see it.")
@click.option("--agent", default=None, help="As this agent sees it (with --group).")
@click.option("--limit", default=5, show_default=True, type=click.IntRange(1, 100))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def search(
    settings: Settings, query: str, group: str | None, agent: str | None, limit: int, as_json: bool
) -> None:
    """Search the chunks an agent would be given, best first, with their locators."""
    with _wiring(settings) as wiring:
        store = wiring.knowledge
        if group is None and agent is None:
            scopes = sorted({(s.scope, s.scope_id) for s in store.sources()})
        else:
            scopes = turn_scopes(validate_group(group) if group else "", agent or "")
        found = wiring.knowledge_search(query, scopes, limit)
    if as_json:
        for n, (hit, why) in enumerate(found, 1):
            row = {"rank": n, "locator": hit.locator, "heading": hit.heading, "trust": hit.trust}
            extra = {"score": hit.score, "why": why, "tokens": hit.tokens, "text": hit.text}
            out.print(json_text(row | extra))
        return
    if not found:
        out.print("no passages found")
    for n, (hit, why) in enumerate(found, 1):
        out.print(f"[{n}] {printable(hit.locator)} ({hit.trust}, {hit.tokens} tokens; {why})")
        if hit.heading:
            out.print(f"    {printable(hit.heading)}")
        for line in hit.text.splitlines()[:6]:
            out.print(f"    {printable(line)}")


@knowledge.command()
@click.argument("locator")
@click.pass_obj
def show(settings: Settings, locator: str) -> None:
    """Print the lines LOCATOR names (path#L12-40@digest), as they are in the file now."""
    with _wiring(settings) as wiring:
        found = resolve(wiring.knowledge, locator)
    notes = {
        "moved": "the cited text is at other lines now",
        "changed": "these lines changed since they were cited",
    }
    out.print(f"{printable(found.locator)} ({found.trust}, {found.state})")
    if found.state in notes:
        out.print(f"note: {notes[found.state]}")
    for n, line in enumerate(found.text.split("\n"), found.start):
        out.print(f"{n:>6}  {printable(line)}")


@knowledge.command()
@click.argument("name")
@click.option("--path", default=None, help="Only this file's chunks (as in its locators).")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 100_000))
@click.pass_obj
def chunks(settings: Settings, name: str, path: str | None, limit: int) -> None:
    """List source NAME's chunks: locator, heading and tokens."""
    with _wiring(settings) as wiring:
        if wiring.knowledge.get(name) is None:
            fail(f"no knowledge source {printable(name)!r} (see `arena knowledge list`)")
        found = wiring.knowledge.chunks(name, path=path, limit=limit)
    table = Table("locator", "kind", "heading", "tokens")
    for chunk in found:
        table.add_row(
            printable(chunk.locator), chunk.kind, printable(chunk.heading), str(chunk.tokens)
        )
    out.print(table if found else "no chunks")
