"""The console's API of session memory (``/api/memories``, as ``arena memory``): a filtered
list, or search with the recall the agents use (each hit with its score, trust label and why
a turn would leave it out); one memory with the message it cites, its reinforcements, its
links and its history; and people's corrections (edit as supersede, forget, restore, pin,
unpin), recorded as made by ``"web"``. A group's rolling summary and its versions too.
"""

from __future__ import annotations

import difflib
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query
from pydantic import BaseModel, Field
from sqlalchemy.engine import Engine

from orchestrator.core.wire import validate_group
from orchestrator.errors import ValidationError
from orchestrator.memory.audit import pinned_ids
from orchestrator.memory.corrections import (
    Corrections,
    EditRefused,
    MemoryStateError,
    UnknownMemory,
)
from orchestrator.memory.summaries import read_summary
from orchestrator.web.bodies import BodyLimit
from orchestrator.web.memory_search import search_memories
from orchestrator.web.schemas import errors
from orchestrator.web.schemas_memory import (
    CitedMessage,
    MemoryDetail,
    MemoryEdited,
    MemoryEntry,
    MemoryList,
    MemorySearch,
    Summary,
    SummaryDiff,
    SummaryVersion,
)
from orchestrator.web.state import Console, console

__all__ = ["BODY_LIMITS", "WEB_ACTOR", "Running", "engine_of", "router"]

router = APIRouter(prefix="/api", tags=["memory"])

WEB_ACTOR = "web"
"""Who the audit says made a change from the console."""

MAX_PATCH_BYTES = 64 * 1024
BODY_LIMITS = (
    BodyLimit(
        method="PATCH",
        path=f"{router.prefix}/memories/{{entry_id}}",
        max_bytes=MAX_PATCH_BYTES,
        what="content",
    ),
)
Running = Annotated[Console, Depends(console)]
Status = Literal["active", "superseded", "archived", "any"]
WrittenBy = Literal["agent", "job", "import", "person"]


def engine_of(running: Console) -> Engine:
    """The console's database (the one its history reader uses)."""
    return running.rooms.history.engine


def _corrections(running: Console) -> Corrections:
    return running.wiring.corrections


class MemoryEdit(BaseModel):
    """A correction of a memory's content: it becomes a new entry, the old one superseded."""

    content: str = Field(description="The corrected text (through the memory gate).")


@router.get(
    "/memories",
    summary="List memories, or search them as recall does",
    responses=errors(422),
)
def memories(
    running: Running,
    q: Annotated[str | None, Query(max_length=2000)] = None,
    group: Annotated[str | None, Query(max_length=200)] = None,
    agent: Annotated[str | None, Query(max_length=64)] = None,
    type: Annotated[str | None, Query(max_length=32)] = None,
    status: Status = "active",
    written_by: WrittenBy | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> MemoryList | MemorySearch:
    """With ``q``: recall for ``agent`` (default: the team's default agent) in ``group`` (or
    every group), each hit with score, trust label and, when a turn would leave it out, why.
    Without: the newest memories matching the filters."""
    try:
        found = search_memories(
            running,
            engine_of(running),
            q=q,
            group=validate_group(group) if group else None,
            agent=agent,
            type=type,
            status=None if status == "any" else status,
            written_by=written_by,
            limit=limit,
        )
    except ValidationError as exc:
        raise HTTPException(422, str(exc)) from None
    return found


@router.get(
    "/memories/{entry_id}",
    summary="One memory, why it is remembered, its history",
    responses=errors(404, 422),
)
def memory(entry_id: int, running: Running) -> MemoryDetail:
    """The entry, the message it cites (id, group, sender, text, created_at), how often it
    was reinforced and last used, whether it is pinned, its links and every change to it."""
    corrections = _corrections(running)
    record = _known(corrections, entry_id)
    cited = None
    if record.citation and record.citation.ref:
        stored = running.rooms.history.get(record.citation.ref)
        if stored is not None:
            m = stored.message
            cited = CitedMessage(
                id=m.id,
                group=m.group,
                sender=m.sender,
                text=m.text,
                created_at=m.created_at.isoformat(),
            )
    with engine_of(running).connect() as conn:
        pinned = bool(pinned_ids(conn, [entry_id]))
    return MemoryDetail.model_validate(
        {
            **record.as_dict(),
            "pinned": pinned,
            "reinforced": record.count - 1,
            "cited_message": cited,
            "history": [c.as_dict() for c in corrections.audit.history(entry_id)],
        }
    )


def _known(corrections: Corrections, entry_id: int) -> Any:
    try:
        return corrections.get(entry_id)
    except UnknownMemory as exc:
        raise HTTPException(404, str(exc)) from None


@router.patch(
    "/memories/{entry_id}",
    summary="Correct a memory: a new entry supersedes it (`arena memory edit`)",
    responses=errors(404, 409, 413, 422),
)
def edit(entry_id: int, body: MemoryEdit, running: Running) -> MemoryEdited:
    """The old entry (now superseded) and the new one; 422 with the gate's reason."""
    try:
        edited = _corrections(running).edit(
            entry_id, body.content, by=WEB_ACTOR, now=datetime.now(UTC)
        )
    except UnknownMemory as exc:
        raise HTTPException(404, str(exc)) from None
    except MemoryStateError as exc:
        raise HTTPException(409, str(exc)) from None
    except EditRefused as exc:
        raise HTTPException(422, str(exc)) from None
    return MemoryEdited.model_validate({"old": edited.old.as_dict(), "new": edited.new.as_dict()})


@router.post(
    "/memories/{entry_id}/{action}",
    summary="Forget, restore, pin or unpin a memory (`arena memory forget|restore|pin|unpin`)",
    responses=errors(404, 409, 422),
)
def act(
    entry_id: int,
    action: Literal["forget", "restore", "pin", "unpin"],
    running: Running,
) -> MemoryEntry:
    """The entry after the change, and whether it is pinned."""
    corrections = _corrections(running)
    change = {
        "forget": corrections.forget,
        "restore": corrections.restore,
        "pin": corrections.pin,
        "unpin": corrections.unpin,
    }[action]
    try:
        record = change(entry_id, by=WEB_ACTOR, now=datetime.now(UTC))
    except UnknownMemory as exc:
        raise HTTPException(404, str(exc)) from None
    except MemoryStateError as exc:
        raise HTTPException(409, str(exc)) from None
    pinned = corrections.is_pinned(entry_id)
    return MemoryEntry.model_validate({**corrections.get(record.id).as_dict(), "pinned": pinned})


@router.get(
    "/groups/{group}/summary",
    summary="A group's rolling summary and its versions",
    responses=errors(404, 422),
)
def summary(
    group: str,
    running: Running,
    version: Annotated[
        int | None, Query(ge=1, description="Also this version's text and diff")
    ] = None,
) -> Summary:
    """The current summary, every version (oldest first), and with ``version`` that version's
    text and unified diff against the one before."""
    try:
        name = validate_group(group)
    except ValidationError:
        raise HTTPException(404, f"no group {group!r}") from None
    text = read_summary(running.settings.data_dir, name)
    versions = running.wiring.versions.history("summary", name)
    shown = None
    if version is not None:
        by_number = {v.version: v for v in versions}
        if version not in by_number:
            raise HTTPException(404, f"group {name!r} has no summary version {version}")
        old = by_number[version - 1].text if version - 1 in by_number else ""
        new = by_number[version].text
        diff = difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"{name} summary v{version - 1}",
            tofile=f"{name} summary v{version}",
        )
        shown = SummaryDiff(version=version, text=new, diff="".join(diff))
    return Summary(
        group=name,
        text=text,
        versions=[SummaryVersion.model_validate(v.as_dict()) for v in versions],
        version=shown,
    )
