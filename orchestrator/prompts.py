"""Prompt templates: a Jinja2 environment over ``prompts/`` that refuses undefined names."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import jinja2

from orchestrator.errors import TemplateError

__all__ = ["Prompts"]

_RENDERED_KEPT = 512  # rendered texts kept for reuse (render_keyed)


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
        self._rendered: OrderedDict[tuple[Any, Hashable], str] = OrderedDict()
        self._lock = threading.Lock()

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
        return self.render_keyed(name, None, **variables)

    def render_keyed(self, name: str, key: Hashable, **variables: Any) -> str:
        """Render one template, reusing the text rendered before for the same ``key`` (when
        not None) as long as the template file is unchanged. The caller's ``key`` must stand
        for everything in ``variables`` the template uses.

        Raises:
            TemplateError: when the template is missing, malformed or uses an undefined name.
        """
        try:
            template = self._env.get_template(name)  # a new object once the file changed
            if key is None:
                return template.render(**variables)
            with self._lock:
                text = self._rendered.get((template, key))
                if text is not None:
                    self._rendered.move_to_end((template, key))
                    return text
            text = template.render(**variables)
            with self._lock:
                self._rendered[(template, key)] = text
                while len(self._rendered) > _RENDERED_KEPT:
                    self._rendered.popitem(last=False)
            return text
        except jinja2.TemplateNotFound:
            raise TemplateError(name, f"not found in {self.folder}") from None
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(name, f"line {exc.lineno}: {exc.message}") from None
        except jinja2.UndefinedError as exc:
            raise TemplateError(name, f"undefined variable: {exc.message}") from None
