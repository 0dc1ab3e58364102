"""What the pipeline hands its results to, as it sees them: the outbound stream, the summary
trigger, the dead letters, the metrics and MQTT (the daemon passes the adapters)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from orchestrator.adapters.bus import DeadLetter
from orchestrator.adapters.metrics import MessageSample
from orchestrator.core.wire import Outbound

__all__ = ["DeadLetters", "EventSink", "HandledMetrics", "Outbox", "SummaryHook"]


class Outbox(Protocol):
    """Where replies are appended (the group's outbound Redis stream)."""

    async def publish_all(self, items: Sequence[Outbound]) -> int:
        """Append ``items`` in order, each unless it was appended before; how many now."""
        ...


class SummaryHook(Protocol):
    """Told about every answered message, to start the group's summary when it is due."""

    async def after_message(
        self, group: str, stored: int, texts: Sequence[str], marker_types: Sequence[str]
    ) -> str | None:
        """Count the new messages; returns the trigger if a summary was started."""
        ...


class DeadLetters(Protocol):
    """Where messages that could not be answered are kept for ``arena retry``."""

    async def dead_letter(self, letter: DeadLetter) -> None:
        """Keep the message's fields with the reason."""
        ...


class HandledMetrics(Protocol):
    """Where each handled message's numbers are added up (``GET /metrics``); never raises."""

    async def message_handled(self, sample: MessageSample) -> None:
        """Count one message handled to the end."""
        ...


class EventSink(Protocol):
    """Where replies are announced (MQTT); must never block."""

    def publish(self, topic: str, payload: bytes) -> None:
        """Queue one event."""
        ...
