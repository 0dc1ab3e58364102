"""Prompt templates: a Jinja2 environment over ``prompts/`` that refuses undefined names.

A template edited while the daemon runs is used from the next turn on: the folder is looked at
(one ``stat`` per template) at most once a second, not at every render.

:meth:`Prompts.render_kept` gives the text rendered before from the same values again (the
system prompt's stable prefix is rendered twice a turn from values that change only when the
team or an identity does): :mod:`orchestrator.core.template_keys` says which values count.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import jinja2

from orchestrator.core.template_keys import Keys, Reads, reads_of
from orchestrator.errors import TemplateError

__all__ = ["Prompts"]

_KEPT = 4096  # rendered texts kept by render_kept (a system prompt per agent and group)


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
        # Each compiled template with its globals gathered (see _render), until the folder
        # changes.
        self._compiled: dict[str, tuple[jinja2.Template, dict[str, Any]]] = {}
        self._looked = float("-inf")
        self._seen: tuple[tuple[str, int], ...] = ()
        self._reads: dict[str, Reads | None] = {}  # what each template reads
        self._keys = Keys()
        self._kept: OrderedDict[Hashable, _Kept] = OrderedDict()
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
        self._look()
        try:
            return self._render(name, variables)
        except jinja2.TemplateError as exc:
            raise self._error(name, exc) from None

    def render_kept(self, name: str, **variables: Any) -> str:
        """:meth:`render`, or the text rendered before from the same values of every name the
        template reads (see the module docstring).

        Raises:
            TemplateError: as :meth:`render`.
        """
        return self._rendered(name, variables).text

    def render_kept_stripped(self, name: str, **variables: Any) -> str:
        """:meth:`render_kept` without the whitespace at its ends: the same string again while
        the text is kept (a string keeps its hash, so looking it up again costs no hashing).

        Raises:
            TemplateError: as :meth:`render`.
        """
        kept = self._rendered(name, variables)
        stripped = kept.stripped
        if stripped is None:
            stripped = kept.stripped = kept.text.strip()
        return stripped

    def _rendered(self, name: str, variables: dict[str, Any]) -> _Kept:
        self._look()
        alive: list[Any] = []
        try:
            key = self._key(name, variables, alive)
            with self._lock:
                kept = self._kept.get(key) if key is not None else None
                if kept is not None:
                    self._kept.move_to_end(key)
                    return kept
            kept = _Kept(self._render(name, variables), alive)
        except jinja2.TemplateError as exc:
            raise self._error(name, exc) from None
        if key is not None:
            with self._lock:
                self._kept[key] = kept
                if len(self._kept) > _KEPT:
                    self._kept.popitem(last=False)
        return kept

    def _render(self, name: str, variables: dict[str, Any]) -> str:
        """What ``jinja2.Template.render`` gives, the template looked up and its globals (a
        chain of mappings there, gone over at every render) gathered once until the folder
        changes."""
        compiled = self._compiled.get(name)
        if compiled is None:
            template = self._env.get_template(name)
            compiled = self._compiled[name] = (template, dict(template.globals))
        template = compiled[0]
        context = template.new_context({**compiled[1], **variables}, shared=True)
        try:
            return "".join(template.root_render_func(context))
        except Exception:
            self._env.handle_exception()

    def _key(self, name: str, variables: dict[str, Any], alive: list[Any]) -> Hashable | None:
        if name not in self._reads:
            self._reads[name] = reads_of(self._env, name)
        reads = self._reads[name]
        return None if reads is None else self._keys.key_of(name, reads, variables, alive)

    def _error(self, name: str, exc: jinja2.TemplateError) -> TemplateError:
        if isinstance(exc, jinja2.TemplateNotFound):
            return TemplateError(name, f"not found in {self.folder}")
        if isinstance(exc, jinja2.TemplateSyntaxError):
            return TemplateError(name, f"line {exc.lineno}: {exc.message}")
        if isinstance(exc, jinja2.UndefinedError):
            return TemplateError(name, f"undefined variable: {exc.message}")
        raise exc

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
            self._reads.clear()
            self._compiled.clear()
            self._kept.clear()


class _Kept:
    """A kept text, the values its key stands for by identity (kept alive with it) and the
    text stripped, once asked for."""

    __slots__ = ("alive", "stripped", "text")

    def __init__(self, text: str, alive: list[Any]) -> None:
        self.text = text
        self.alive = alive
        self.stripped: str | None = None
