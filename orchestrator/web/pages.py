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

__all__ = ["STATIC_DIR", "TEMPLATES_DIR", "router", "templates"]

STATIC_DIR = Path(__file__).parent / "static"
TEMPLATES_DIR = Path(__file__).parent / "templates"

templates = Jinja2Templates(directory=TEMPLATES_DIR)
router = APIRouter(include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
def groups_page(request: Request) -> HTMLResponse:
    """Every group, with its message count and last activity."""
    return templates.TemplateResponse(request, "groups.html")


@router.get("/groups", response_model=None)
def open_group(request: Request, group: str = "") -> Response:
    """The groups page's "open" form without script: to the room of the group named."""
    try:
        return RedirectResponse(f"/groups/{validate_group(group)}", status_code=303)
    except ValidationError as exc:
        return _not_found(request, exc)


@router.get("/groups/{group}", response_class=HTMLResponse)
def room_page(request: Request, group: str) -> Response:
    """A group's room: its messages live, and the post box (a new group starts with its
    first message)."""
    try:
        valid = validate_group(group)
    except ValidationError as exc:
        return _not_found(request, exc)
    return templates.TemplateResponse(request, "room.html", {"group": valid})


@router.get("/status", response_class=HTMLResponse)
def status_page(request: Request) -> HTMLResponse:
    """What ``arena status`` shows, the dead letters and the routing dry run."""
    return templates.TemplateResponse(request, "status.html")


def _not_found(request: Request, problem: ValidationError) -> Response:
    return templates.TemplateResponse(
        request, "error.html", {"problem": str(problem)}, status_code=404
    )
