"""The reports a turn keeps with its reply, for people to read: the context cost report
(:class:`ContextReport`: the window, each layer's tokens, the budget's decisions, what the
references cite and what recall left out) and the recall report (:class:`RecallReport`).

Each is built once, where it is made, and read by attribute; ``as_json`` gives the stored form
(the reply's meta, the API, ``--json``), keys in the order they have always had. ``from_json``
reads a stored one leniently: a row written by an older version may lack keys (one made before
recall said what it left out has no ``recall_dropped``), and each value remembers the keys it
was read with (``recorded``), so that it is written back, and shown, as it was stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from orchestrator.core.quick_init import quick_init

__all__ = [
    "CitedSource",
    "ContextReport",
    "LayerTokens",
    "LeftOutCandidate",
    "RecallReport",
    "RecalledSnippet",
]


_KEYS: dict[type, tuple[str, ...]] = {}


def _keys(cls: type) -> tuple[str, ...]:
    keys = _KEYS.get(cls)
    if keys is None:
        keys = _KEYS[cls] = tuple(f.name for f in fields(cls) if f.name != "recorded")
    return keys


def _stored(value: Any, recorded: tuple[str, ...] | None) -> dict[str, Any]:
    """The stored form of a dataclass: its recorded keys (None: all), in field order."""
    keys = _keys(type(value))
    if recorded is not None:
        keys = tuple(k for k in keys if k in recorded)
    return {k: _json(getattr(value, k)) for k in keys}


def _json(value: object) -> object:
    if type(value) is tuple:
        return [v.as_json() if type(v) in _PARTS else v for v in value]
    if type(value) in _PARTS:
        return value.as_json()  # type: ignore[attr-defined]
    return value


def _int(value: object, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _id(value: object) -> int | str:
    return value if isinstance(value, int | str) and not isinstance(value, bool) else str(value)


def _number(value: object, default: float) -> float:
    # An int stays an int, so that it is written back as it was stored.
    return value if isinstance(value, int | float) and not isinstance(value, bool) else default


def _strings(value: object) -> tuple[str, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str):
        return ()
    return tuple(str(v) for v in value)


def _list(value: object) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(value, Sequence) or isinstance(value, str):
        return ()
    return tuple(v for v in value if isinstance(v, Mapping))


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class LayerTokens:
    """Corrected token estimates per layer, with the fixed prompt text and the total."""

    identity: int = 0
    summary: int = 0
    memory_md: int = 0
    logs: int = 0
    recall: int = 0
    history: int = 0
    overhead: int = 0
    total: int = 0
    # The keys a stored one was read with (None: every key, as a new one has).
    recorded: tuple[str, ...] | None = field(default=None, compare=False)

    @classmethod
    def of(cls, tokens: Mapping[str, int]) -> LayerTokens:
        """The plan's estimates (every layer, the overhead and the total)."""
        return cls(
            identity=tokens["identity"],
            summary=tokens["summary"],
            memory_md=tokens["memory_md"],
            logs=tokens["logs"],
            recall=tokens["recall"],
            history=tokens["history"],
            overhead=tokens["overhead"],
            total=tokens["total"],
        )

    def layers(self) -> dict[str, int]:
        """The recorded layers' tokens (the overhead included, the total not), in order."""
        shown = _keys(LayerTokens)[:-1]
        return {k: getattr(self, k) for k in shown if self.recorded is None or k in self.recorded}

    def as_json(self) -> dict[str, Any]:
        """The stored form."""
        if self.recorded is not None:
            return _stored(self, self.recorded)
        return {
            "identity": self.identity,
            "summary": self.summary,
            "memory_md": self.memory_md,
            "logs": self.logs,
            "recall": self.recall,
            "history": self.history,
            "overhead": self.overhead,
            "total": self.total,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LayerTokens:
        """Read a stored one; a layer it lacks reads 0 and is not written back."""
        known = tuple(k for k in _keys(cls) if k in data and _int(data[k], -1) == data[k])
        values = {k: _int(data[k]) for k in known}
        # A report without its total (none was ever stored so) totals its layers.
        values.setdefault("total", sum(values.values()))
        return cls(**values, recorded=known)


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class CitedSource:
    """What a reference shown cites: a memory (its id, its source's ref, its trust label), a
    message (its id twice, and ``said by <sender>``) or a passage of knowledge (``chunk <id>``,
    its locator, ``knowledge, <trust>``, and ``why``: what found it)."""

    id: int | str
    ref: str | None
    trust: str
    why: str | None = None

    @property
    def is_message(self) -> bool:
        """A recalled message, not a memory."""
        return self.trust.startswith("said by")

    def as_json(self) -> dict[str, Any]:
        """The stored form."""
        stored = {"id": self.id, "ref": self.ref, "trust": self.trust}
        if self.why is not None:
            stored["why"] = self.why
        return stored

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CitedSource:
        """Read a stored one."""
        ref, why = data.get("ref"), data.get("why")
        return cls(
            id=_id(data.get("id")),
            ref=None if ref is None else str(ref),
            trust=str(data.get("trust", "")),
            why=None if why is None else str(why),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LeftOutCandidate:
    """A candidate recall left out: a memory's or a message's id, the layer, and why."""

    id: int | str
    layer: str
    reason: str

    def as_json(self) -> dict[str, Any]:
        """The stored form."""
        return {"id": self.id, "layer": self.layer, "reason": self.reason}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LeftOutCandidate:
        """Read a stored one."""
        return cls(
            id=_id(data.get("id")),
            layer=str(data.get("layer", "")),
            reason=str(data.get("reason", "")),
        )


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ContextReport:
    """The context cost report of one turn."""

    window: int = 0
    reserved_output: int = 0
    correction: float = 1.0
    available: int = 0
    tokens: LayerTokens = field(default_factory=LayerTokens)
    decisions: tuple[str, ...] = ()
    over_budget: bool = False
    recall: tuple[str, ...] = ()  # the ids of the references shown
    history_messages: int = 0
    citations: tuple[CitedSource, ...] = ()
    recall_dropped: tuple[LeftOutCandidate, ...] = ()
    recorded: tuple[str, ...] | None = field(default=None, compare=False)  # as LayerTokens'

    def has(self, key: str) -> bool:
        """Whether the report holds ``key`` (a stored one may lack it)."""
        return self.recorded is None or key in self.recorded

    def as_json(self) -> dict[str, Any]:
        """The stored form, as ``arena context --json`` and the API show it."""
        if self.recorded is not None:
            return _stored(self, self.recorded)
        return {
            "window": self.window,
            "reserved_output": self.reserved_output,
            "correction": self.correction,
            "available": self.available,
            "tokens": _json(self.tokens),
            "decisions": _json(self.decisions),
            "over_budget": self.over_budget,
            "recall": _json(self.recall),
            "history_messages": self.history_messages,
            "citations": _json(self.citations),
            "recall_dropped": _json(self.recall_dropped),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ContextReport:
        """Read a stored one: what it lacks reads empty and is not written back."""
        tokens = data.get("tokens")
        values: dict[str, Any] = {
            "window": _int(data.get("window")),
            "reserved_output": _int(data.get("reserved_output")),
            "correction": _number(data.get("correction"), 1.0),
            "available": _int(data.get("available")),
            "tokens": LayerTokens.from_json(tokens if isinstance(tokens, Mapping) else {}),
            "decisions": _strings(data.get("decisions")),
            "over_budget": bool(data.get("over_budget", False)),
            "recall": _strings(data.get("recall")),
            "history_messages": _int(data.get("history_messages")),
            "citations": tuple(CitedSource.from_json(c) for c in _list(data.get("citations"))),
            "recall_dropped": tuple(
                LeftOutCandidate.from_json(d) for d in _list(data.get("recall_dropped"))
            ),
        }
        return cls(**values, recorded=tuple(k for k in _keys(cls) if k in data))


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class RecalledSnippet:
    """A memory recall found for a turn: its id, score (3 decimals) and trust label."""

    id: int | str
    score: float
    trust: str

    def as_json(self) -> dict[str, Any]:
        """The stored form."""
        return {"id": self.id, "score": self.score, "trust": self.trust}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RecalledSnippet:
        """Read a stored one."""
        return cls(
            id=_id(data.get("id")),
            score=_number(data.get("score"), 0.0),
            trust=str(data.get("trust", "")),
        )


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class RecallReport:
    """What recall found for a turn (``snippets``) and what its layers left out."""

    snippets: tuple[RecalledSnippet, ...] = ()
    dropped: tuple[LeftOutCandidate, ...] = ()
    recorded: tuple[str, ...] | None = field(default=None, compare=False)  # as LayerTokens'

    def as_json(self) -> dict[str, Any]:
        """The stored form."""
        if self.recorded is not None:
            return _stored(self, self.recorded)
        return {"snippets": _json(self.snippets), "dropped": _json(self.dropped)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RecallReport:
        """Read a stored one."""
        return cls(
            snippets=tuple(RecalledSnippet.from_json(s) for s in _list(data.get("snippets"))),
            dropped=tuple(LeftOutCandidate.from_json(d) for d in _list(data.get("dropped"))),
            recorded=tuple(k for k in _keys(cls) if k in data),
        )


_PARTS = frozenset({LayerTokens, CitedSource, LeftOutCandidate, RecalledSnippet})
