"""Prompt templates: a Jinja2 environment over ``prompts/`` that refuses undefined names.

A template edited while the daemon runs is used from the next turn on: the folder is looked at
(one ``stat`` per template) at most once a second, not at every render.

:meth:`Prompts.render_kept` gives the text rendered before from the same values again (the
system prompt's stable prefix is rendered twice a turn from values that change only when the
team or an identity does). The values are those of every name the template and what it
includes read; an object among them counts by identity, so only immutable ones (frozen
dataclasses) may be given to it; anything else is rendered afresh.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, cast

import jinja2
import jinja2.meta

from orchestrator.errors import TemplateError

__all__ = ["Prompts"]

_KEPT = 4096  # rendered texts kept by render_kept (a system prompt per agent and group)
_SCALARS = (str, int, float, bool, type(None))


class _Unkeyable(Exception):
    """A value render_kept cannot tell apart from another by a key."""


_FROZEN: dict[type, bool] = {}  # whether instances of a class are frozen dataclasses


def _freeze(value: Any, alive: list[Any]) -> Hashable:
    """A key standing for ``value`` as a template sees it (objects kept alive in ``alive``, so
    that their identity is not reused while the key is kept)."""
    kind = type(value)
    if kind is str:
        return cast(str, value)
    if isinstance(value, _SCALARS):
        return (kind, value)
    if kind is tuple or kind is list:
        return (tuple, tuple(_freeze(item, alive) for item in value))
    frozen = _FROZEN.get(kind)
    if frozen is None:
        params = getattr(kind, "__dataclass_params__", None)
        frozen = _FROZEN[kind] = dataclasses.is_dataclass(kind) and bool(params and params.frozen)
    if frozen:
        alive.append(value)
        return (object, id(value))
    raise _Unkeyable


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
        self._reads: dict[str, tuple[str, ...] | None] = {}  # names each template reads
        self._kept: OrderedDict[Hashable, tuple[str, list[Any]]] = OrderedDict()
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
            return self._env.get_template(name).render(**variables)
        except jinja2.TemplateError as exc:
            raise self._error(name, exc) from None

    def render_kept(self, name: str, **variables: Any) -> str:
        """:meth:`render`, or the text rendered before from the same values of every name the
        template reads (see the module docstring).

        Raises:
            TemplateError: as :meth:`render`.
        """
        self._look()
        alive: list[Any] = []
        try:
            key = self._key(name, variables, alive)
            with self._lock:
                kept = self._kept.get(key) if key is not None else None
                if kept is not None:
                    self._kept.move_to_end(key)
                    return kept[0]
            text = self._env.get_template(name).render(**variables)
        except jinja2.TemplateError as exc:
            raise self._error(name, exc) from None
        if key is not None:
            with self._lock:
                self._kept[key] = (text, alive)
                if len(self._kept) > _KEPT:
                    self._kept.popitem(last=False)
        return text

    def _key(self, name: str, variables: dict[str, Any], alive: list[Any]) -> Hashable | None:
        reads = self._names(name)
        if reads is None:
            return None
        try:
            return (name, *(_freeze(variables[n], alive) if n in variables else () for n in reads))
        except _Unkeyable:
            return None

    def _names(self, name: str) -> tuple[str, ...] | None:
        """The names ``name`` and the templates it includes read; None when it includes,
        imports or extends one named by a value."""
        if name not in self._reads:
            self._reads[name] = self._find_names(name, set())
        return self._reads[name]

    def _find_names(self, name: str, seen: set[str]) -> tuple[str, ...] | None:
        seen.add(name)
        loader = self._env.loader
        assert loader is not None  # made with one
        source = loader.get_source(self._env, name)[0]
        tree = self._env.parse(source)
        names = set(jinja2.meta.find_undeclared_variables(tree))
        for other in jinja2.meta.find_referenced_templates(tree):
            if other is None:
                return None
            if other not in seen:
                found = self._find_names(other, seen)
                if found is None:
                    return None
                names.update(found)
        return tuple(sorted(names))

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
            self._kept.clear()
