"""Where a room's event stream is: the last outbound item and the last step it sent, written as
the events' ``id:`` so that a browser reconnecting with ``Last-Event-ID`` resumes both.

A room's events come from two streams, its outbound stream and its runs' steps stream, whose
entry ids can only be compared to the millisecond. An event id is therefore the position in
each: ``{outbox entry id}~{steps entry id}``. Until a step has been sent (a room without runs:
most rooms), it is the outbound entry id alone, as it was before rooms had steps; such an id
means "no step sent yet": the steps resume from its millisecond on, the earliest a step not
yet sent can have (Redis gives a later entry a later time). A step may then come twice (its
``run`` and ``n`` name it); none is missed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.core.coding import Step
from orchestrator.core.wire import Outbound

__all__ = ["EVENT_ID", "Cursor", "entry_key"]

_ENTRY = r"[0-9]{1,20}-[0-9]{1,20}"
EVENT_ID = re.compile(rf"{_ENTRY}(~{_ENTRY})?")  # what Last-Event-ID and ?after= accept
_MAX_SEQ = 2**64 - 1


def entry_key(entry_id: str) -> tuple[int, int]:
    """A stream entry id as a number pair, for ordering (``1700000000000-3``)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


@dataclass(frozen=True, slots=True)
class Cursor:
    """The last outbound item sent, and the last step (None: no step sent yet)."""

    outbox: str
    steps: str | None = None

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """An event id read back (checked against :data:`EVENT_ID` first)."""
        outbox, _, steps = text.partition("~")
        return cls(outbox, steps or None)

    def __str__(self) -> str:
        return self.outbox if self.steps is None else f"{self.outbox}~{self.steps}"

    @property
    def steps_after(self) -> str:
        """The steps stream entry id to read after."""
        if self.steps is not None:
            return self.steps
        ms = entry_key(self.outbox)[0]
        return f"{ms - 1}-{_MAX_SEQ}" if ms > 0 else "0-0"

    def sent(self, entry_id: str, item: Outbound | Step) -> bool:
        """Whether the item at ``entry_id`` (of its stream) was sent already."""
        if not isinstance(item, Step):
            return entry_key(entry_id) <= entry_key(self.outbox)
        return entry_key(entry_id) <= entry_key(self.steps_after)

    def past(self, entry_id: str, item: Outbound | Step) -> Cursor:
        """The cursor once the item at ``entry_id`` has been sent."""
        if isinstance(item, Step):
            return Cursor(self.outbox, entry_id)
        return Cursor(entry_id, self.steps)
