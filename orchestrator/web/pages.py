"""The console's pages: HTML from Jinja2 templates, built on the HTTP API.

``router`` holds the pages; ``STATIC_DIR`` the stylesheet and scripts they load (served at
``/static``, no CDN, no build step).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter

__all__ = ["STATIC_DIR", "TEMPLATES_DIR", "router"]

STATIC_DIR = Path(__file__).parent / "static"
TEMPLATES_DIR = Path(__file__).parent / "templates"

router = APIRouter(include_in_schema=False)
