"""The console's API of knowledge sources (``/api/knowledge``, as ``arena knowledge``): the
sources with their counts and last check, a source's chunks, a locator resolved to the lines
it names now (and whether they changed since it was cited), search as a turn's recall makes
it, documents uploaded as a source of their own (indexed at once), and forgetting a source
(its files are kept).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, File, Form, HTTPException, Query, UploadFile

from orchestrator.core.chunking import parse_locator
from orchestrator.core.wire import validate_group
from orchestrator.errors import ValidationError
from orchestrator.memory.knowledge.documents import MAX_DOCUMENT_BYTES
from orchestrator.memory.knowledge.embedding import embedded_counts
from orchestrator.memory.knowledge.indexer import MAX_FILE_BYTES, SyncReport
from orchestrator.memory.knowledge.locate import resolve
from orchestrator.memory.knowledge.store import Source, turn_scopes, validate_source_name
from orchestrator.memory.session.fts import query_terms
from orchestrator.web.bodies import BodyLimit
from orchestrator.web.knowledge_uploads import (
    MAX_FILES,
    MAX_UPLOAD_BODY_BYTES,
    Refused,
    Upload,
    checked_file,
    default_source_name,
    save_and_index,
)
from orchestrator.web.schemas import errors
from orchestrator.web.schemas_knowledge import (
    ChunkRow,
    KnowledgeChunks,
    KnowledgeHitOut,
    KnowledgeSearch,
    KnowledgeSources,
    Located,
    LocatedLine,
    SourceOut,
    SourceRemoved,
    SyncOut,
    Uploaded,
    UploadedFile,
)
from orchestrator.web.state import Console, console

__all__ = ["BODY_LIMITS", "read_by", "router"]

router = APIRouter(prefix="/api/knowledge", tags=["knowledge"])

BODY_LIMITS = (
    BodyLimit(
        method="POST",
        path=f"{router.prefix}/uploads",
        max_bytes=MAX_UPLOAD_BODY_BYTES,
        what="upload",
        note=f"at most {MAX_UPLOAD_BODY_BYTES:,} bytes in one upload "
        f"({MAX_FILE_BYTES:,} a text file, {MAX_DOCUMENT_BYTES:,} a PDF or DOCX): "
        "send fewer files at once",
    ),
)
PREVIEW_LINES = 3

Running = Annotated[Console, Depends(console)]
Trust = Literal["trusted", "external"]


def source_out(source: Source, embedded: int | None = None) -> SourceOut:
    """A source as the API sends it (``embedded``: its chunks found by meaning too)."""
    return SourceOut(
        name=source.name,
        kind=source.kind,
        root=source.root,
        scope=source.scope,
        scope_id=source.scope_id,
        owner=source.owner,
        trust=source.trust,
        files=source.files,
        chunks=source.chunks,
        embedded=embedded,
        created_at=source.created_at.isoformat(),
        checked_at=source.checked_at.isoformat() if source.checked_at else None,
        problem=source.problem,
    )


def _sync_out(report: SyncReport) -> SyncOut:
    return SyncOut(
        files=report.files,
        added=report.added,
        changed=report.changed,
        removed=report.removed,
        unchanged=report.unchanged,
        chunks_written=report.chunks_written,
        chunks_removed=report.chunks_removed,
        seconds=round(report.seconds, 3),
        problems=list(report.problems),
    )


def _known(running: Console, name: str) -> Source:
    found = running.wiring.knowledge.get(name)
    if found is None:
        raise HTTPException(404, f"no knowledge source {name[:80]!r}")
    return found


@router.get("/sources", summary="The knowledge sources (`arena knowledge list`)")
async def sources(running: Running) -> KnowledgeSources:
    """Every source by name: who reads it, its trust, its files and chunks, when its files
    were last checked and why they could not be read, if they could not."""
    wiring = running.wiring
    found = await asyncio.to_thread(wiring.knowledge.sources)
    if wiring.knowledge_vectors is None:
        return KnowledgeSources(sources=[source_out(s) for s in found])
    counts = await asyncio.to_thread(embedded_counts, wiring.engine)
    return KnowledgeSources(
        sources=[source_out(s, counts[s.name].done if s.name in counts else 0) for s in found]
    )


@router.get(
    "/sources/{name}/chunks",
    summary="A source's chunks (`arena knowledge chunks`)",
    responses=errors(404, 422),
)
async def chunks(
    name: str,
    running: Running,
    path: Annotated[
        str | None,
        Query(max_length=1000, description="Only this file's (`guide.md` or `source/guide.md`)."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 200,
) -> KnowledgeChunks:
    """The chunks in file and line order: locator, heading, kind, tokens, first lines."""
    await asyncio.to_thread(_known, running, name)
    located = None
    if path:
        located = path if path.startswith(f"{name}/") else f"{name}/{path.lstrip('/')}"
    found = await asyncio.to_thread(
        running.wiring.knowledge.chunks, name, path=located, limit=limit + 1
    )
    rows = [
        ChunkRow(
            id=c.id,
            locator=c.locator,
            path=c.path,
            start=c.start,
            end=c.end,
            heading=c.heading,
            kind=c.kind,
            tokens=c.tokens,
            preview="\n".join(c.text.split("\n")[:PREVIEW_LINES]),
        )
        for c in found[:limit]
    ]
    return KnowledgeChunks(source=name, path=located, chunks=rows, more=len(found) > limit)


@router.get(
    "/locate",
    summary="The lines a locator names, as they are now (`arena knowledge show`)",
    responses=errors(404, 422),
)
async def locate(
    running: Running,
    locator: Annotated[str, Query(min_length=1, max_length=1000, description="path#L12-40@digest")],
) -> Located:
    """The lines now, numbered; ``state`` says whether they are what was cited (current), the
    cited text at other lines (moved) or differ from it (changed); and the source's trust."""
    try:
        parsed = parse_locator(locator)
    except ValidationError as exc:
        raise HTTPException(422, str(exc)) from None
    try:
        found = await asyncio.to_thread(resolve, running.wiring.knowledge, locator)
    except ValidationError as exc:
        raise HTTPException(404, str(exc)) from None
    lines = found.text.split("\n")
    return Located(
        asked=locator,
        locator=found.locator,
        source=parsed.path.partition("/")[0],
        path=parsed.path,
        state=found.state,
        trust=found.trust,
        page=found.page,
        start=found.start,
        end=found.end,
        lines=[LocatedLine(n=n, text=line) for n, line in enumerate(lines, found.start)],
    )


@router.get(
    "/search",
    summary="Search the chunks a turn would see (`arena knowledge search`)",
    responses=errors(422),
)
async def search(
    running: Running,
    q: Annotated[str, Query(min_length=1, max_length=2000)],
    group: Annotated[str | None, Query(max_length=200)] = None,
    agent: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
) -> KnowledgeSearch:
    """With ``group`` and/or ``agent``: the sources that agent's turn in that group sees (the
    group's, the agent's, everyone's); with neither, every source. Best first."""
    try:
        valid_group = validate_group(group) if group else ""
    except ValidationError as exc:
        raise HTTPException(422, str(exc)) from None
    store = running.wiring.knowledge
    if not group and not agent:
        listed = await asyncio.to_thread(store.sources)
        scopes = sorted({(s.scope, s.scope_id) for s in listed})
    else:
        scopes = turn_scopes(valid_group, agent or "")
        scopes = [(scope, sid) for scope, sid in scopes if scope == "everyone" or sid]
    terms = query_terms(q)
    found = await asyncio.to_thread(running.wiring.knowledge_search, q, scopes, limit)
    return KnowledgeSearch(
        query=q,
        terms=terms,
        scopes=[scope if scope == "everyone" else f"{scope} {sid}" for scope, sid in scopes],
        hits=[
            KnowledgeHitOut(
                rank=n,
                locator=h.locator,
                source=h.source,
                path=h.path,
                start=h.start,
                end=h.end,
                heading=h.heading,
                trust=h.trust,
                tokens=h.tokens,
                score=h.score,
                why=why,
                text=h.text,
            )
            for n, (h, why) in enumerate(found, 1)
        ],
    )


def read_by(
    running: Console, group: str | None, agent: str | None, everyone: bool
) -> tuple[str, str]:
    """The scope and scope id of who reads it: exactly one of a group, an agent of the team
    or everyone (422 otherwise)."""
    chosen = [c for c in (bool(group), bool(agent), everyone) if c]
    if len(chosen) != 1:
        raise HTTPException(422, "say who may read it: one of group, agent or everyone")
    if group:
        try:
            return "group", validate_group(group)
        except ValidationError as exc:
            raise HTTPException(422, str(exc)) from None
    if agent:
        if agent not in {a.id for a in running.agents}:
            raise HTTPException(422, f"agent: no agent {agent[:64]!r} (see the agents page)")
        return "agent", agent
    return "everyone", ""


@router.post(
    "/uploads",
    status_code=201,
    summary="Upload documents as a knowledge source, indexed at once",
    responses=errors(409, 413, 422),
)
async def upload(
    running: Running,
    files: Annotated[
        list[UploadFile], File(description="One or more text files, PDFs or DOCX documents.")
    ],
    group: Annotated[str | None, Form(max_length=200)] = None,
    agent: Annotated[str | None, Form(max_length=64)] = None,
    everyone: Annotated[bool, Form()] = False,
    source: Annotated[str | None, Form(max_length=64)] = None,
    trust: Annotated[Trust | None, Form()] = None,
) -> Uploaded:
    """Saves the files under ``<data_dir>/knowledge/<source>/`` (``source`` defaults to
    ``uploads-<group>``, ``uploads-<agent>`` or ``uploads``), creating the source on the first
    upload (``trust`` default external), and indexes it. A file of a name uploaded before
    replaces it (``replaced``). Nothing is saved when any file is refused: a bad name (no
    path, no hidden name, a suffix the index reads), not UTF-8 text (a PDF or DOCX: not one,
    or the ``[documents]`` extra missing), over the size."""
    scope, scope_id = read_by(running, group, agent, everyone)
    name = source or default_source_name(scope, scope_id)
    try:
        validate_source_name(name)
    except ValidationError as exc:
        raise HTTPException(422, f"source: {exc.problem}") from None
    if len(files) > MAX_FILES:
        raise HTTPException(422, f"files: at most {MAX_FILES} in one upload, not {len(files)}")
    checked: list[Upload] = []
    try:
        for file in files:
            data = await file.read(max(MAX_FILE_BYTES, MAX_DOCUMENT_BYTES) + 1)
            checked.append(checked_file(file.filename, data))
    except Refused as exc:
        raise HTTPException(exc.status, exc.reason) from None
    names = [u.name for u in checked]
    if len(set(names)) != len(names):
        raise HTTPException(422, "files: the same file name twice in one upload")
    try:
        saved = await asyncio.to_thread(
            save_and_index,
            running.wiring,
            checked,
            source=name,
            scope=scope,
            scope_id=scope_id,
            trust=trust,
        )
    except Refused as exc:
        raise HTTPException(exc.status, exc.reason) from None
    replaced = [u.name for u, again in saved.files if again]
    note = f"{len(saved.files)} file{'s' if len(saved.files) != 1 else ''} saved to {name}"
    if saved.created:
        note += f" (a new source, {saved.source.trust}, read by {saved.source.owner})"
    if replaced:
        note += "; replaced: " + ", ".join(replaced)
    return Uploaded(
        source=source_out(saved.source),
        created=saved.created,
        files=[
            UploadedFile(name=u.name, bytes=u.size, replaced=again, path=f"{name}/{u.name}")
            for u, again in saved.files
        ],
        sync=_sync_out(saved.report),
        note=note + ".",
    )


@router.delete(
    "/sources/{name}",
    summary="Forget a source and its chunks; its files are kept (`arena knowledge remove`)",
    responses=errors(404, 422),
)
async def remove(name: str, running: Running) -> SourceRemoved:
    """The source and its chunks are forgotten; its files (uploads too) stay on disk."""
    found = await asyncio.to_thread(_known, running, name)
    if not await asyncio.to_thread(running.wiring.knowledge.remove, name):
        raise HTTPException(404, f"no knowledge source {name[:80]!r}")
    note = f"forgot {name} and its chunks; its files are kept on disk in {found.root}"
    return SourceRemoved(name=name, root=found.root, note=note)
