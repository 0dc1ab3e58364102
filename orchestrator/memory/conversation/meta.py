"""What is recorded about a reply or notice: :class:`ReplyMeta`, stored as a message's ``meta``.

The pipeline writes it, and reads it back (its tally, after a crash) as the summary does (the
markers a reply carried). It is stored as JSON in the messages table: :meth:`ReplyMeta.as_json`
gives the stored form, keys in their stored order; :meth:`ReplyMeta.from_json` reads a stored
one, leniently (rows written by older versions or by an import lack most fields).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from orchestrator.core.context.report import ContextReport, RecallReport
from orchestrator.core.models import Usage
from orchestrator.core.quick_init import quick_init
from orchestrator.memory.conversation.marker_entries import (
    Rejected,
    Saved,
    StoredMarker,
    UnreadableMarker,
)
from orchestrator.memory.conversation.run_meta import RunMeta

__all__ = ["MarkerMeta", "ReplyError", "ReplyMeta", "ToolCallMeta", "ToolsMeta", "TurnMeta"]

_T = TypeVar("_T")


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class TurnMeta:
    """Which model answered, how fast, and how many calls it took (why earlier ones failed)."""

    provider: str
    model: str
    latency_ms: float
    stop_reason: str | None
    usage: Usage
    failed_attempts: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The stored form."""
        usage = self.usage
        return {
            "provider": self.provider,
            "model": self.model,
            "latency_ms": self.latency_ms,
            "stop_reason": self.stop_reason,
            "usage": _usage_json(usage),
            "attempts": {
                "count": len(self.failed_attempts) + 1,
                "failed": list(self.failed_attempts),
            },
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallMeta:
    """One memory tool call of a turn: which, how big its input and result, and the line the
    console shows (``memory_search("database") → 2 hits``)."""

    name: str
    input_chars: int
    result_chars: int
    is_error: bool
    line: str

    def as_json(self) -> dict[str, Any]:
        """The stored form."""
        return {
            "name": self.name,
            "input_chars": self.input_chars,
            "result_chars": self.result_chars,
            "is_error": self.is_error,
            "line": self.line,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolsMeta:
    """A turn's tool loop: every call, and every model call's tokens (``steps``, in order)."""

    calls: tuple[ToolCallMeta, ...] = ()
    steps: tuple[Usage, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The stored form."""
        return {
            "calls": [c.as_json() for c in self.calls],
            "steps": [_usage_json(u) for u in self.steps],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolsMeta:
        """Read a stored one, leniently."""
        calls = tuple(
            ToolCallMeta(
                name=str(c.get("name", "")),
                input_chars=int(c.get("input_chars", 0)),
                result_chars=int(c.get("result_chars", 0)),
                is_error=bool(c.get("is_error", False)),
                line=str(c.get("line", "")),
            )
            for c in _entries(data.get("calls"))
        )
        return cls(calls=calls, steps=tuple(_usage(s) for s in _entries(data.get("steps"))))


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class MarkerMeta:
    """What a reply keeps of its markers (``memory.writer.marker_meta`` bounds it): the stored
    markers with their payloads, the unreadable ones, what memory saved and rejected (None:
    nothing was written) and how many entries per list were left out."""

    markers: tuple[StoredMarker, ...] = ()
    invalid_markers: tuple[UnreadableMarker, ...] = ()
    saved: tuple[Saved, ...] | None = None
    rejected: tuple[Rejected, ...] = ()
    truncated: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MarkerMeta:
        """Read the marker part of a stored meta (entries that are not objects are skipped)."""
        memory = data.get("memory")
        truncated = data.get("truncated")
        return cls(
            markers=_each(StoredMarker.from_json, data.get("markers")),
            invalid_markers=_each(UnreadableMarker.from_json, data.get("invalid_markers")),
            saved=_each(Saved.from_json, memory.get("saved")) if isinstance(memory, dict) else None,
            rejected=_each(Rejected.from_json, memory.get("rejected"))
            if isinstance(memory, dict)
            else (),
            truncated=dict(truncated) if isinstance(truncated, dict) else {},
        )

    def as_json(self) -> dict[str, Any]:
        """The stored form."""
        data: dict[str, Any] = {
            "markers": [m.as_json() for m in self.markers],
            "invalid_markers": [m.as_json() for m in self.invalid_markers],
        }
        if self.saved is not None:
            data["memory"] = {
                "saved": [s.as_json() for s in self.saved],
                "rejected": [r.as_json() for r in self.rejected],
            }
        if self.truncated:
            data["truncated"] = dict(self.truncated)
        return data

    def amounts(self) -> dict[str, int]:
        """Invalid markers and memory entries saved and rejected, those left out included."""
        left_out = self.truncated
        return {
            "markers_invalid": len(self.invalid_markers) + left_out.get("invalid_markers", 0),
            "memory_saved": len(self.saved or ()) + left_out.get("saved", 0),
            "memory_rejected": len(self.rejected) + left_out.get("rejected", 0),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplyError:
    """Why an agent could not answer: the model failed (``llm``) or we did (``internal``)."""

    kind: str
    problem: str
    status: int | None = None
    retryable: bool = False

    def as_json(self) -> dict[str, Any]:
        """The stored form (the model's status and whether to retry only for ``llm``)."""
        data: dict[str, Any] = {"kind": self.kind, "problem": self.problem}
        if self.kind == "llm":
            data.update(status=self.status, retryable=self.retryable)
        return data


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ReplyMeta:
    """What is recorded about a reply (or a notice, with ``notice`` set).

    ``recall`` and ``context`` are reports kept as they were made, for people to read.
    """

    agent: str | None = None
    trigger: str | None = None
    notice: str | None = None
    recall: RecallReport | None = None
    context: ContextReport | None = None
    turn: TurnMeta | None = None
    markers: MarkerMeta | None = None
    error: ReplyError | None = None
    tools: ToolsMeta | None = None
    run: RunMeta | None = None  # a Claude Code run's card or reply

    @property
    def usage(self) -> Usage:
        """The tokens the answer took (none for a notice or a failure)."""
        return self.turn.usage if self.turn is not None else Usage()

    def saved_types(self) -> list[str]:
        """The type of each memory entry the reply saved."""
        saved = self.markers.saved if self.markers is not None else None
        return [s.type for s in saved or ()]

    def failure(self) -> str | None:
        """``agent: problem`` when the agent could not answer."""
        if self.error is None:
            return None
        return f"{self.agent}: {self.error.problem}"

    def notes(self) -> tuple[tuple[str, str], ...]:
        """The (type, content) of each stored marker that carries text content."""
        notes = []
        for marker in self.markers.markers if self.markers is not None else ():
            payload = marker.payload
            if isinstance(content := payload.get("content"), str):
                notes.append((str(payload.get("type", "")).lower(), content))
        return tuple(notes)

    def as_json(self) -> dict[str, Any]:
        """The stored form, keys in the order they have always been stored in."""
        data: dict[str, Any] = {} if self.notice is None else {"notice": self.notice}
        data.update(agent=self.agent, trigger=self.trigger)
        if self.recall is not None:
            data["recall"] = self.recall.as_json()
        if self.context is not None:
            data["context"] = self.context.as_json()
        if self.error is not None:
            data["error"] = self.error.as_json()
        if self.turn is not None:
            data.update(self.turn.as_json())
        if self.markers is not None:
            data.update(self.markers.as_json())
        if self.tools is not None:
            data["tools"] = self.tools.as_json()
        if self.run is not None:
            data["run"] = self.run.as_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> ReplyMeta:
        """Read a stored meta; what it lacks is left unset."""
        data = data or {}
        error = data.get("error")
        has_markers = "markers" in data or "invalid_markers" in data
        return cls(
            agent=_text(data.get("agent")),
            trigger=_text(data.get("trigger")),
            notice=_text(data.get("notice")),
            recall=RecallReport.from_json(recall)
            if isinstance(recall := data.get("recall"), dict)
            else None,
            context=ContextReport.from_json(context)
            if isinstance(context := data.get("context"), dict)
            else None,
            turn=_turn(data),
            markers=MarkerMeta.from_json(data) if has_markers else None,
            error=_error(error) if isinstance(error, dict) and error else None,
            tools=ToolsMeta.from_json(tools)
            if isinstance(tools := data.get("tools"), dict)
            else None,
            run=RunMeta.from_json(run) if isinstance(run := data.get("run"), dict) else None,
        )


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _entries(value: Any) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(value, Sequence) or isinstance(value, str):
        return ()
    return tuple(v for v in value if isinstance(v, dict))


def _each(read: Callable[[Mapping[str, Any]], _T], value: Any) -> tuple[_T, ...]:
    """Read each stored entry of a list (those that are not objects are skipped)."""
    return tuple(read(entry) for entry in _entries(value))


def _error(data: Mapping[str, Any]) -> ReplyError:
    status = data.get("status")
    return ReplyError(
        kind=str(data.get("kind", "")),
        problem=str(data.get("problem")),
        status=int(status) if isinstance(status, int) else None,
        retryable=bool(data.get("retryable", False)),
    )


def _turn(data: Mapping[str, Any]) -> TurnMeta | None:
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return None
    attempts = data.get("attempts")
    failed = attempts.get("failed") if isinstance(attempts, dict) else None
    return TurnMeta(
        provider=str(data.get("provider", "")),
        model=str(data.get("model", "")),
        latency_ms=float(data.get("latency_ms", 0.0)),
        stop_reason=_text(data.get("stop_reason")),
        usage=_usage(usage),
        failed_attempts=tuple(str(f) for f in failed or ()),
    )


def _usage(data: Mapping[str, Any]) -> Usage:
    return Usage(
        input_tokens=int(data.get("input_tokens", 0)),
        output_tokens=int(data.get("output_tokens", 0)),
        cache_read_tokens=int(data.get("cache_read_tokens", 0)),
        cache_creation_tokens=int(data.get("cache_creation_tokens", 0)),
    )


def _usage_json(usage: Usage) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_creation_tokens": usage.cache_creation_tokens,
    }
