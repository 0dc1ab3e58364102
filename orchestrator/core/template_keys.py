"""What a template reads, and a key standing for those values: how
:meth:`orchestrator.core.prompts.Prompts.render_kept` knows it rendered the same text before.

A template reads the names it does not set itself, and the templates it includes read theirs.
Where it reads a name only as ``name.attribute``, only those attributes count (a message's
sender, not its text or id); where it uses the name any other way (whole, through a filter,
by index), the whole value counts. A value counts by what it holds when it is a string, a
number, ``None`` or a sequence of such; an object counts by identity (and is kept alive with
the key, so that its identity is not reused meanwhile), only when it is a frozen dataclass,
else nothing is kept: mutable objects are rendered afresh. Reading more than needed only costs
a kept text; reading less would give a stale one, so everything uncertain counts whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable, Iterator, Mapping
from typing import Any

import jinja2
import jinja2.meta
from jinja2 import nodes

from orchestrator.core.kept import Kept

__all__ = ["Keys", "Reads", "key_of", "reads_of"]

Reads = tuple[tuple[str, tuple[str, ...] | None], ...]
"""Each name read, with the attributes read of it (None: the whole value)."""

_SCALARS = (str, int, float, bool, type(None))


class _Unkeyable(Exception):
    """A value no key can stand for."""


def reads_of(env: jinja2.Environment, name: str) -> Reads | None:
    """What template ``name`` and the templates it includes read; None when it includes,
    imports or extends a template named by a value.

    Raises:
        jinja2.TemplateError: when a template is missing or malformed.
    """
    found: dict[str, set[str] | None] = {}
    if not _collect(env, name, set(), found):
        return None
    return tuple(
        (read, None if attrs is None else tuple(sorted(attrs)))
        for read, attrs in sorted(found.items())
    )


def _collect(
    env: jinja2.Environment, name: str, seen: set[str], found: dict[str, set[str] | None]
) -> bool:
    seen.add(name)
    loader = env.loader
    assert loader is not None  # Prompts makes its environment with one
    tree = env.parse(loader.get_source(env, name)[0])
    free = jinja2.meta.find_undeclared_variables(tree)
    for read, attr in _uses(tree, None):
        if read not in free:
            continue
        if attr is None:
            found[read] = None
        elif read not in found:
            found[read] = {attr}
        elif (attrs := found[read]) is not None:
            attrs.add(attr)
    for other in jinja2.meta.find_referenced_templates(tree):
        if other is None:
            return False
        if other not in seen and not _collect(env, other, seen, found):
            return False
    return True


def _uses(node: nodes.Node, parent: nodes.Node | None) -> Iterator[tuple[str, str | None]]:
    """Each name loaded under ``node``, with the attribute read of it (None: used whole)."""
    if isinstance(node, nodes.Name) and node.ctx == "load":
        if isinstance(parent, nodes.Getattr) and parent.node is node:
            yield node.name, parent.attr
        else:
            yield node.name, None
    for child in node.iter_child_nodes():
        yield from _uses(child, node)


def key_of(name: str, reads: Reads, values: Mapping[str, Any], alive: list[Any]) -> Hashable | None:
    """A key for rendering ``name`` with ``values``, or None when a value cannot be keyed."""
    return Keys().key_of(name, reads, values, alive)


# How a value counts, by its type (see the module docstring).
_SCALAR, _SEQUENCE, _FROZEN, _NONE = range(4)


def _how(kind: type) -> int:
    if issubclass(kind, _SCALARS):
        return _SCALAR
    if kind is tuple or kind is list:
        return _SEQUENCE
    if _is_frozen(kind):
        return _FROZEN
    return _NONE


def _is_frozen(kind: type) -> bool:
    params = getattr(kind, "__dataclass_params__", None)
    return params is not None and dataclasses.is_dataclass(kind) and bool(params.frozen)


_ABSENT = object()
_TUPLES_KEPT = 1024  # tuples' forms kept (a team's roster per team loaded)


class Keys:
    """Makes the keys of :func:`key_of`, remembering how a value of each type counts (a type
    is looked at once, not at every value of it) and the form of a tuple of values that cannot
    change (a team's roster: rendered into every system prompt, twice a turn, the very same
    tuple; walking it cost ~2 µs a key)."""

    def __init__(self) -> None:
        self._how: dict[type, int] = {}
        self._tuples: Kept[tuple[Any, ...], Hashable] = Kept(_TUPLES_KEPT)

    def key_of(
        self, name: str, reads: Reads, values: Mapping[str, Any], alive: list[Any]
    ) -> Hashable | None:
        """As :func:`key_of`."""
        parts: list[Hashable] = [name]
        append, how_of = parts.append, self._how.get
        try:
            for read, attrs in reads:
                value = values.get(read, _ABSENT)
                kind = type(value)
                if kind is str:
                    append(value)  # whole or by attribute (a string's method): the string
                elif value is _ABSENT:
                    append(())
                elif kind is tuple:
                    append(self._tuple(value, alive))  # by attribute too: a tuple's method
                elif attrs is not None and (how_of(kind) or self._kind(kind)) == _FROZEN:
                    append(self._attributes(value, attrs, alive))
                else:
                    append(self._freeze(value, alive))
            return tuple(parts)
        except _Unkeyable:
            return None

    def _kind(self, kind: type) -> int:
        how = self._how.get(kind)
        if how is None:
            how = self._how[kind] = _how(kind)
        return how

    def _attributes(self, value: Any, attrs: tuple[str, ...], alive: list[Any]) -> Hashable:
        """A frozen value's attributes read (as ``(attrs, each one frozen)``)."""
        try:
            got = [getattr(value, attr) for attr in attrs]
        except AttributeError:
            raise _Unkeyable from None
        for one in got:
            if type(one) is not str:
                return (attrs, self._each(got, alive))
        return (attrs, tuple(got))  # strings (a name, an id): themselves

    def _tuple(self, value: tuple[Any, ...], alive: list[Any]) -> Hashable:
        """A tuple's form, kept with the tuple when nothing in it can change (no sequence in
        it: each item a scalar, a string or a frozen value, which counts by identity and is
        kept alive by the tuple, held with its form and with the key)."""
        kept = self._tuples.find(value, None)
        if kept is not None:
            alive.append(value)
            return kept
        form = (tuple, self._each(value, alive))
        if all(self._kind(type(item)) != _SEQUENCE for item in value):
            self._tuples.keep(value, None, form)
        return form

    def _freeze(self, value: Any, alive: list[Any]) -> Hashable:
        return self._each((value,), alive)[0]

    def _each(self, values: Iterable[Any], alive: list[Any]) -> tuple[Hashable, ...]:
        """Each of ``values`` frozen, in order."""
        frozen: list[Hashable] = []
        append, how_of = frozen.append, self._how.get
        for value in values:
            kind = type(value)
            if kind is str:
                append(value)
                continue
            how = how_of(kind)
            if how is None:
                how = self._kind(kind)
            if how == _FROZEN:
                alive.append(value)
                append((object, id(value)))
            elif how == _SCALAR:
                append((kind, value))
            elif how == _SEQUENCE:
                append((tuple, self._each(value, alive)))
            else:
                raise _Unkeyable
        return tuple(frozen)
