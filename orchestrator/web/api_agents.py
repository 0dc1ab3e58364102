"""The console's API of an agent's memory files (``/api/agents/{agent}/...``): its identity
and current ``MEMORY.md`` with its tokens against the budget, the growth log (``arena
growth``), a version's text and diff, a hand edit of ``MEMORY.md`` (``arena memory-md set``)
and its daily logs (``arena logs``).

An agent id is looked up among the team's agents before any path is built from it: an unknown
id is a 404, never a file read.
"""

from __future__ import annotations

import difflib
import re
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from fastapi import Path as PathParam
from pydantic import BaseModel, Field

from orchestrator.core.agents import IDENTITY_FILES, workspace_dir
from orchestrator.core.models import AgentSpec, known_agent
from orchestrator.errors import ValidationError
from orchestrator.memory.versions.file import VersionedFile
from orchestrator.memory.versions.hand_edit import (
    MEMORY_FILE,
    HandEditConflict,
    HandEditRefused,
    memory_md_file,
    save_hand_edit,
)
from orchestrator.memory.versions.store import Version
from orchestrator.offline.distiller import entries
from orchestrator.web.api_memory import WEB_ACTOR, Running
from orchestrator.web.bodies import BodyLimit
from orchestrator.web.schemas import errors
from orchestrator.web.schemas_memory import (
    AgentDetail,
    AgentFiles,
    Attempt,
    DailyLog,
    Growth,
    LogLine,
    MemoryMdNow,
    VersionDiff,
    VersionRow,
)
from orchestrator.web.views import agent_view

__all__ = ["BODY_LIMITS", "MAX_EDIT_BYTES", "router"]

router = APIRouter(prefix="/api/agents", tags=["agents"])

MAX_EDIT_BYTES = 256 * 1024
"""A hand edit's request is refused (413) beyond this many bytes, before it is all read."""
BODY_LIMITS = (
    BodyLimit(
        method="PUT",
        path=f"{router.prefix}/{{agent_id}}/memory-md",
        max_bytes=MAX_EDIT_BYTES,
        what="text",
    ),
)

_SOURCE_RE = re.compile(r"\(source: ([^/()\s]+)/([^()\s]+)\)\s*$")
AgentId = Annotated[str, PathParam(max_length=64)]


class MemoryMdEdit(BaseModel):
    """A hand edit of ``MEMORY.md``: the new text and the version it was edited from."""

    text: str = Field(description="The whole new MEMORY.md.")
    base_version: int = Field(ge=0, description="The version the edit started from (0: none).")


def _agent(running: Running, agent_id: str) -> AgentSpec:
    try:
        return known_agent(running.agents, agent_id)
    except ValidationError as exc:
        raise HTTPException(404, exc.problem) from None


def _file(running: Running, agent: AgentSpec) -> VersionedFile:
    wiring = running.wiring
    return memory_md_file(
        wiring.versions, running.settings.workspaces_dir, agent.id, wiring.counter.count
    )


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


@router.get(
    "/{agent_id}",
    summary="An agent's identity and current MEMORY.md",
    responses=errors(404, 422),
)
def agent(agent_id: AgentId, running: Running) -> AgentFiles:
    """Its identity files, its ``MEMORY.md`` with tokens against the budget and its version
    (a change found on disk is recorded as a version first, so text and version agree)."""
    spec = _agent(running, agent_id)
    folder = workspace_dir(running.settings.workspaces_dir, spec.id)
    file = _file(running, spec)
    file.sync(datetime.now(UTC))
    latest = file.store.latest("memory_md", spec.id)
    text = file.read()
    return AgentFiles(
        agent=AgentDetail.model_validate(
            {**agent_view(spec), "description": spec.description, "model": spec.model}
        ),
        identity={name: _read(folder / name) for name in IDENTITY_FILES},
        memory_md=MemoryMdNow(
            text=text,
            tokens=running.wiring.counter.count(text),
            budget_tokens=running.settings.distill_budget_tokens,
            entries=len(entries(text)),
            version=latest.version if latest else 0,
        ),
    )


def _version_fields(v: Version) -> dict[str, Any]:
    """A version as :class:`VersionRow` shows it."""
    return {
        "version": v.version,
        "at": v.created_at.isoformat(),
        "trigger": v.trigger,
        "tokens": v.tokens,
        "entries": len(entries(v.text)),
        "lines_added": v.lines_added,
        "lines_removed": v.lines_removed,
        "source": v.source,
    }


@router.get(
    "/{agent_id}/growth",
    summary="How MEMORY.md grew (`arena growth --json`)",
    responses=errors(404, 422),
)
def growth(agent_id: AgentId, running: Running) -> Growth:
    """Every version (oldest first) and every attempt that wrote none, with its reason."""
    spec = _agent(running, agent_id)
    store = running.wiring.versions
    runs = [r for r in store.runs("memory_md", spec.id) if r.status != "written"]
    return Growth(
        agent=spec.id,
        budget_tokens=running.settings.distill_budget_tokens,
        versions=[VersionRow(**_version_fields(v)) for v in store.history("memory_md", spec.id)],
        attempts=[
            Attempt(
                at=r.created_at.isoformat(), trigger=r.trigger, status=r.status, reason=r.reason
            )
            for r in runs
        ],
    )


@router.get(
    "/{agent_id}/growth/{version}",
    summary="One version's text and its diff",
    responses=errors(404, 422),
)
def version(
    agent_id: AgentId, version: Annotated[int, PathParam(ge=1)], running: Running
) -> VersionDiff:
    """The text of ``version`` and a unified diff against the version before it."""
    spec = _agent(running, agent_id)
    store = running.wiring.versions
    found = store.get("memory_md", spec.id, version)
    if found is None:
        raise HTTPException(404, f"{spec.id} has no MEMORY.md version {version}")
    before = store.get("memory_md", spec.id, version - 1) if version > 1 else None
    diff = difflib.unified_diff(
        (before.text if before else "").splitlines(keepends=True),
        found.text.splitlines(keepends=True),
        fromfile=f"{spec.id}/{MEMORY_FILE} v{version - 1}",
        tofile=f"{spec.id}/{MEMORY_FILE} v{version}",
    )
    return VersionDiff(**_version_fields(found), text=found.text, diff="".join(diff))


@router.put(
    "/{agent_id}/memory-md",
    summary="Save a hand edit of MEMORY.md (`arena memory-md set`)",
    responses=errors(404, 409, 413, 422),
)
def set_memory_md(
    agent_id: AgentId,
    body: MemoryMdEdit,
    running: Running,
) -> VersionRow:
    """A new version, trigger "hand edit" by "web"; 409 when the file is no longer at
    ``base_version``, 422 with the reason when the text breaks a rule."""
    spec = _agent(running, agent_id)
    try:
        saved = save_hand_edit(
            _file(running, spec),
            body.text,
            base_version=body.base_version,
            by=WEB_ACTOR,
            now=datetime.now(UTC),
            budget_tokens=running.settings.distill_budget_tokens,
        )
    except HandEditConflict as exc:
        raise HTTPException(409, str(exc)) from None
    except HandEditRefused as exc:
        raise HTTPException(422, str(exc)) from None
    return VersionRow(**_version_fields(saved))


@router.get(
    "/{agent_id}/logs",
    summary="An agent's daily log (`arena logs`)",
    responses=errors(404, 422),
)
def logs(
    agent_id: AgentId,
    running: Running,
    day: Annotated[date | None, Query(alias="date", description="YYYY-MM-DD")] = None,
) -> DailyLog:
    """The day's lines (default: today), each with the group and message it came from, and
    the days that have a log."""
    spec = _agent(running, agent_id)
    personal = running.wiring.personal
    wanted = day or datetime.now(running.settings.zone).date()
    lines = []
    for line in personal.read(spec.id, wanted).splitlines():
        if not line.startswith("- "):
            continue
        source = _SOURCE_RE.search(line)
        lines.append(
            LogLine(
                text=line[2:],
                group=source.group(1) if source else None,
                message_id=source.group(2) if source else None,
            )
        )
    days = [d.isoformat() for d in personal.days(spec.id)]
    return DailyLog(agent=spec.id, date=wanted.isoformat(), lines=lines, days=days)
