"""The console's pages: HTML from Jinja2 templates, built on the HTTP API.

``router`` holds the pages; ``STATIC_DIR`` the stylesheet and scripts they load (served at
``/static``, no CDN, no build step). The pages are shells: their scripts read the API and the
group's events, and put message text in the page as text (a message's Markdown comes rendered
and escaped by :mod:`orchestrator.web.render`).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from orchestrator.core.validation import validate_group
from orchestrator.errors import ValidationError
from orchestrator.memory.schema import MEMORY_TYPES

__all__ = ["STATIC_DIR", "TEMPLATES_DIR", "router", "templates"]

STATIC_DIR = Path(__file__).parent / "static"
TEMPLATES_DIR = Path(__file__).parent / "templates"

templates = Jinja2Templates(directory=TEMPLATES_DIR)
router = APIRouter(include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
def groups_page(request: Request) -> HTMLResponse:
    """Every group, with its message count and last activity."""
    return templates.TemplateResponse(request, "groups.html")


@router.get("/groups", response_class=RedirectResponse)
def open_group(request: Request, group: str = "") -> Response:
    """The groups page's "open" form without script: to the room of the group named."""
    try:
        return RedirectResponse(f"/groups/{validate_group(group)}", status_code=303)
    except ValidationError as exc:
        return _not_found(request, str(exc))


@router.get("/groups/{group}", response_class=HTMLResponse)
def room_page(request: Request, group: str) -> Response:
    """A group's room: its messages live, and the post box (a new group starts with its
    first message)."""
    try:
        valid = validate_group(group)
    except ValidationError as exc:
        return _not_found(request, str(exc))
    return templates.TemplateResponse(request, "room.html", {"group": valid})


@router.get("/agents", response_class=HTMLResponse)
def agents_page(request: Request) -> HTMLResponse:
    """The team, each agent linking to its page."""
    return templates.TemplateResponse(request, "agents.html")


@router.get("/agents/{agent}", response_class=HTMLResponse)
def agent_page(request: Request, agent: str) -> Response:
    """An agent: how its MEMORY.md grew, the file now (and its hand edit), its daily logs,
    its identity."""
    known = {spec.id for spec in request.app.state.console.agents}
    if agent not in known:
        return _not_found(request, f"no agent {agent[:80]!r} (see the agents page)")
    return templates.TemplateResponse(request, "agent.html", {"agent": agent})


@router.get("/memory", response_class=HTMLResponse)
def memory_page(request: Request) -> HTMLResponse:
    """The memory browser: search as recall does, why each memory is remembered, and
    corrections (edit, forget, restore, pin)."""
    return templates.TemplateResponse(request, "memory.html", {"types": MEMORY_TYPES})


@router.get("/knowledge", response_class=HTMLResponse)
def knowledge_page(request: Request) -> HTMLResponse:
    """The knowledge sources: their chunks, search, uploads, and a locator's lines now."""
    return templates.TemplateResponse(request, "knowledge.html")


@router.get("/context", response_class=HTMLResponse)
def context_page(request: Request) -> HTMLResponse:
    """The context inspector: an agent's next turn in a group, layer by layer."""
    return templates.TemplateResponse(request, "context.html")


@router.get("/status", response_class=HTMLResponse)
def status_page(request: Request) -> HTMLResponse:
    """What ``arena status`` shows, the dead letters and the routing dry run."""
    return templates.TemplateResponse(request, "status.html")


def _not_found(request: Request, problem: str) -> Response:
    return templates.TemplateResponse(request, "error.html", {"problem": problem}, status_code=404)
