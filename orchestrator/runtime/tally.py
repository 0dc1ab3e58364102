"""What handling one person's message came to: :class:`Tally`, counted reply by reply, and the
message's final record made from it (:func:`closing`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.core.models import ChatMessage, RouteDecision
from orchestrator.memory.conversation.meta import ReplyMeta
from orchestrator.memory.conversation.store import Closing, StoredMessage

__all__ = ["Tally", "closing"]


@dataclass(slots=True)
class Tally:
    """Replies, tokens, agents and failures of one message's hops so far."""

    replies: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    agents: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    memory_types: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    hop_limit_reached: list[str] = field(default_factory=list)
    closed: bool = False  # the message's final record is stored
    unsent: list[StoredMessage] = field(default_factory=list)  # stored, not yet published

    def add(self, message: ChatMessage, meta: ReplyMeta) -> None:
        """Count one reply or notice."""
        self.replies += 1
        self.agents.append(message.sender)
        usage = meta.usage
        self.tokens_in += usage.input_tokens
        self.tokens_out += usage.output_tokens
        self.texts.append(message.text)
        self.memory_types.extend(meta.saved_types())
        failure = meta.failure()
        if failure is not None:
            self.failures.append(failure)


def closing(opened: StoredMessage, tally: Tally, decision: RouteDecision) -> Closing:
    """The message's final record: done, or failed when an agent could not answer. Its meta
    is merged here with the stored one (nobody else writes a message while it is handled)."""
    meta: dict[str, Any] = {**opened.meta, "replies": tally.replies}
    if tally.hop_limit_reached:
        meta["hop_limit_reached"] = tally.hop_limit_reached
    if tally.failures:
        meta["failures"] = tally.failures
    return Closing(
        message_id=opened.message.id,
        status="failed" if tally.failures else "done",
        route=decision.as_dict(),
        meta=meta,
    )
