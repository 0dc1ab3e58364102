"""Prompt templates: a Jinja2 environment over ``prompts/`` that refuses undefined names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

from orchestrator.errors import TemplateError

__all__ = ["Prompts"]


class Prompts:
    """Renders the ``*.j2`` templates of one folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(folder)),
            undefined=jinja2.StrictUndefined,
            autoescape=False,  # prompts are plain text, never HTML
            keep_trailing_newline=True,
            trim_blocks=True,
            lstrip_blocks=True,
        )

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
        try:
            return self._env.get_template(name).render(**variables)
        except jinja2.TemplateNotFound:
            raise TemplateError(name, f"not found in {self.folder}") from None
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(name, f"line {exc.lineno}: {exc.message}") from None
        except jinja2.UndefinedError as exc:
            raise TemplateError(name, f"undefined variable: {exc.message}") from None
