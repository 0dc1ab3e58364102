"""What was made from an object, kept by the object's identity between turns.

A turn goes over its group's recent messages again and again, and the daemon's cache of them
hands back the very same objects each time: what is made from one (its labelled item, its
token count) is kept under ``id(object)`` beside the object itself, so that a lookup costs no
hashing of the object and can never answer for another object that took the id of one let go
(the entry holds its object, which keeps it alive).

Kept in two generations: when the young one is full it becomes the old one and the oldest
is let go; an entry found in the old one moves to the young. Whatever was used since the last
turnover survives it, so a working set smaller than ``size`` is never read again, and memory is
bounded by twice ``size`` entries.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["Bounded", "Kept"]

_O = TypeVar("_O")
_V = TypeVar("_V")
_K = TypeVar("_K", bound=Hashable)


class Kept(Generic[_O, _V]):
    """Values made from objects, by the object's identity and a small key."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self.size = size
        # By id(obj) alone when the key is None (most callers), else by (id(obj), key).
        self._young: dict[Hashable, tuple[_O, _V]] = {}
        self._old: dict[Hashable, tuple[_O, _V]] = {}

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    def find(self, obj: _O, key: Hashable) -> _V | None:
        """The value kept for ``obj`` under ``key``, if any."""
        at = id(obj) if key is None else (id(obj), key)
        entry = self._young.get(at)
        if entry is not None and entry[0] is obj:
            return entry[1]
        entry = self._old.get(at)
        if entry is None or entry[0] is not obj:
            return None
        self._put(at, entry)
        return entry[1]

    def keep(self, obj: _O, key: Hashable, value: _V) -> _V:
        """Keep ``value`` for ``obj`` under ``key``; returns it."""
        self._put(id(obj) if key is None else (id(obj), key), (obj, value))
        return value

    def _put(self, at: Hashable, entry: tuple[_O, _V]) -> None:
        if len(self._young) >= self.size:
            self._old, self._young = self._young, {}
        self._young[at] = entry


class Bounded(Generic[_K, _V]):
    """Values by key, at most ``size`` of them: when full, all are let go at once (what a
    daemon keeps between turns is a working set that the next turns make again). Not a cache
    of the database: what is kept must stay true, or carry when it was read."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self.size = size
        self._values: dict[_K, _V] = {}

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key: _K) -> _V | None:
        """The value kept for ``key``, if any."""
        return self._values.get(key)

    def put(self, key: _K, value: _V) -> _V:
        """Keep ``value`` for ``key``; returns it."""
        if len(self._values) >= self.size and key not in self._values:
            self._values.clear()
        self._values[key] = value
        return value
