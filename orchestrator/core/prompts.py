"""Prompt templates: a Jinja2 environment over ``prompts/`` that refuses undefined names.

A template edited while the daemon runs is used from the next turn on: the folder is looked at
(one ``stat`` per template) at most once a second, not at every render.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2

from orchestrator.errors import TemplateError

__all__ = ["Prompts"]


class Prompts:
    """Renders the ``*.j2`` templates of one folder."""

    def __init__(self, folder: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.folder = folder
        self.clock = clock
        self._env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(folder)),
            undefined=jinja2.StrictUndefined,
            autoescape=False,  # prompts are plain text, never HTML
            keep_trailing_newline=True,
            trim_blocks=True,
            lstrip_blocks=True,
            auto_reload=False,  # looked at here, once a second (see the module docstring)
        )
        self._looked = float("-inf")
        self._seen: tuple[tuple[str, int], ...] = ()

    def names(self) -> list[str]:
        """Every template in the folder, sorted."""
        if not self.folder.is_dir():
            return []
        return sorted(p.name for p in self.folder.glob("*.j2"))

    def render(self, name: str, **variables: Any) -> str:
        """Render one template.

        Raises:
            TemplateError: when the template is missing, malformed or uses an undefined name.
        """
        self._look()
        try:
            return self._env.get_template(name).render(**variables)
        except jinja2.TemplateNotFound:
            raise TemplateError(name, f"not found in {self.folder}") from None
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(name, f"line {exc.lineno}: {exc.message}") from None
        except jinja2.UndefinedError as exc:
            raise TemplateError(name, f"undefined variable: {exc.message}") from None

    def _look(self) -> None:
        """Forget the compiled templates when a file of the folder changed (checked at most
        once a second)."""
        now = self.clock()
        if now - self._looked < 1.0:
            return
        self._looked = now
        try:
            seen = tuple(
                sorted((entry.name, entry.stat().st_mtime_ns) for entry in os.scandir(self.folder))
            )
        except OSError:
            seen = ()
        if seen != self._seen:
            self._seen = seen
            if self._env.cache is not None:
                self._env.cache.clear()
