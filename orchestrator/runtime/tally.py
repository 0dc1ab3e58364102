"""What handling one person's message came to: :class:`Tally`, counted reply by reply, the
message's final record made from it (:func:`closing`) and its metrics (:meth:`Tally.sample`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.adapters.metrics import FailureReason, MessageSample, ReplySample
from orchestrator.core.models import ChatMessage, MessageKind, RouteDecision
from orchestrator.memory.conversation.meta import MarkerMeta, ReplyMeta
from orchestrator.memory.conversation.store import Closing, StoredMessage

__all__ = ["Tally", "closing", "reply_sample"]


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
    over_caps: list[str] = field(default_factory=list)  # failures that were daily caps
    closed: bool = False  # the message's final record is stored
    unsent: list[StoredMessage] = field(default_factory=list)  # stored, not yet published
    # Each reply's metrics. Replies an earlier attempt stored count here too: metrics are
    # recorded only once a message is closed, and a closed message is not handled again.
    samples: list[ReplySample] = field(default_factory=list)

    def add(self, message: ChatMessage, meta: ReplyMeta) -> None:
        """Count one reply or notice."""
        self.samples.append(reply_sample(message, meta))
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
            if meta.error is not None and meta.error.kind == "budget":
                self.over_caps.append(failure)

    def sample(self, duration_s: float, *, dead_lettered: bool) -> MessageSample:
        """The message's metrics: its replies, and whether an agent could not answer."""
        failed = bool(self.failures)
        # Only caps: no model was asked.
        reason: FailureReason = "budget" if self.over_caps == self.failures else "model"
        return MessageSample(
            duration_s=duration_s,
            replies=tuple(self.samples),
            failure=reason if failed else None,
            dead_letter=reason if failed and dead_lettered else None,
        )


def reply_sample(message: ChatMessage, meta: ReplyMeta) -> ReplySample:
    """One reply's metrics: its agent, model, latency, tokens, memory writes and recall hits."""
    usage, turn = meta.usage, meta.turn
    saved, reinforced, rejected = _memory_writes(meta.markers)
    return ReplySample(
        agent=meta.agent or message.sender,
        kind="notice" if message.kind is MessageKind.NOTICE else "reply",
        model=turn.model if turn is not None else None,
        latency_s=turn.latency_ms / 1000 if turn is not None else 0.0,
        tokens_in=usage.input_tokens,
        tokens_out=usage.output_tokens,
        cache_read=usage.cache_read_tokens,
        cache_write=usage.cache_creation_tokens,
        saved=saved,
        reinforced=reinforced,
        rejected=rejected,
        recall_hits=len(meta.recall.snippets) if meta.recall is not None else 0,
    )


def _memory_writes(markers: MarkerMeta | None) -> tuple[int, int, int]:
    """Saved (reinforcing ones apart), reinforced and rejected entries, those left out of the
    reply's record included (as saved or rejected)."""
    if markers is None:
        return 0, 0, 0
    amounts = markers.amounts()
    reinforced = sum(1 for s in markers.saved or () if s.reinforced)
    return amounts["memory_saved"] - reinforced, reinforced, amounts["memory_rejected"]


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
