"""The wire format: Redis stream names, entry fields, MQTT topics, and input validation.

Inbound (``arena:inbox``, one stream for every group, posted to with a plain ``XADD``), fields
are UTF-8 strings:

    group   the group id, ``^[a-z0-9][a-z0-9_-]{0,63}$``
    text    the message, non-empty, at most ``ARENA_MAX_MESSAGE_BYTES`` bytes of UTF-8, with
            no control character but tab, line feed and carriage return, and no bidirectional
            embedding, override or isolate (U+202A-U+202E, U+2066-U+2069; see
            :func:`character_problem`, which the memory gate applies too)
    sender  optional, who wrote it (default ``user``); never an agent's id or name nor a
            reserved name (``arena``, ``system``), in any case or spacing
            (:func:`validate_person`)

Outbound (``arena:group:{group}:outbox``, one stream per group) and MQTT
(``arena/groups/{group}/messages``, QoS 1, the same fields as a JSON object):

    type         ``reply`` (an agent answered), ``notice`` (an agent could not answer, or the hop
                 limit stopped a hand-off) or ``done``
                 (every reply to ``in_reply_to`` has been published)
    id           the reply's id, ``{message id}:{hop}:{agent}``
    group, sender, kind, text, hop, created_at (ISO 8601)
    in_reply_to  the id of the person's message this answers
    replies      (``done`` only) how many replies and notices were published

The daemon holding the ``router`` lease moves each inbound entry, keeping its id, to the
partition stream ``arena:inbox:p{n}`` with ``n = crc32(group) % 16``; each partition is handled
by the one daemon holding its lease (``arena:lease:p{n}``), so a group's messages are handled
one at a time, in the order they were posted, however many daemons share the work.

The checks of inbound text live in :mod:`orchestrator.core.validation` and are re-exported
here. Rejected inbound entries go to ``arena:deadletter`` with ``entry_id``, ``reason`` and the
original fields.

Each daemon records its team's ids and names in the set ``arena:team`` as it starts, so that
clients refuse a post under an agent's name before sending it; the daemon refuses it anyway.

A new version of an agent's ``MEMORY.md`` is announced on ``arena/agents/{agent}/growth``
(QoS 1, JSON): ``agent``, ``day``, ``trigger``, ``version``, ``tokens`` and ``at`` (ISO 8601).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from orchestrator.core.json_text import json_bytes
from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.core.quick_init import quick_init
from orchestrator.core.validation import (
    DEFAULT_SENDER,
    NOTICE_SENDER,
    RESERVED_SENDERS,
    Post,
    agent_names,
    character_problem,
    sender_key,
    validate_group,
    validate_person,
    validate_post,
    validate_sender,
    validate_text,
)
from orchestrator.errors import ValidationError

__all__ = [
    "CONSUMER_GROUP",
    "DEFAULT_SENDER",
    "INBOX",
    "NOTICE_SENDER",
    "PARTITIONS",
    "RESERVED_SENDERS",
    "Outbound",
    "Post",
    "agent_names",
    "budget_topic",
    "caps_key",
    "character_problem",
    "daemon_key",
    "daemons_key",
    "deadletter_stream",
    "decode_fields",
    "entry_time",
    "group_topic",
    "growth_topic",
    "inbox_stream",
    "job_guard_key",
    "lease_key",
    "metrics_key",
    "outbox_stream",
    "parse_inbound",
    "partition_of",
    "partition_stream",
    "published_key",
    "schedule_key",
    "sender_key",
    "spend_key",
    "stats_key",
    "summary_counter_key",
    "team_key",
    "validate_group",
    "validate_person",
    "validate_post",
    "validate_sender",
    "validate_text",
]

INBOX = "arena:inbox"
CONSUMER_GROUP = "arena"
# How many partition streams the inbox is split into: at most this many daemons share the work.
# Part of the wire format: changing it reorders groups between partitions.
PARTITIONS = 16


def inbox_stream() -> str:
    """The stream every group's messages are posted to."""
    return INBOX


def partition_of(group: str | bytes) -> int:
    """The partition a group's messages are handled in (the same in every process)."""
    raw = group.encode("utf-8", errors="surrogatepass") if isinstance(group, str) else group
    return zlib.crc32(raw) % PARTITIONS


def partition_stream(partition: int) -> str:
    """The stream the router moves a partition's inbound entries to."""
    if not 0 <= partition < PARTITIONS:
        raise ValueError(f"partition {partition} is not in 0..{PARTITIONS - 1}")
    return f"{INBOX}:p{partition}"


def lease_key(name: str) -> str:
    """The key a daemon holds (with a time limit) while it owns ``name``: ``router`` or ``pN``."""
    return f"arena:lease:{name}"


def daemons_key() -> str:
    """The sorted set of live daemons, scored by when their membership runs out (ms)."""
    return "arena:daemons"


def daemon_key(consumer: str) -> str:
    """The key that says which process runs under a consumer name (``host pid``)."""
    return f"arena:daemon:{consumer}"


def outbox_stream(group: str) -> str:
    """The stream a group's replies are appended to."""
    return f"arena:group:{group}:outbox"


def deadletter_stream() -> str:
    """The stream rejected inbound entries are moved to."""
    return "arena:deadletter"


def published_key(item_id: str) -> str:
    """The key that records an outbound item as published (so it is published once)."""
    return f"arena:published:{item_id}"


def summary_counter_key(group: str) -> str:
    """Messages a group has had since its rolling summary was last enqueued."""
    return f"arena:group:{group}:since_summary"


def stats_key() -> str:
    """The hash of running totals (messages, markers, memory writes) ``arena status`` shows."""
    return "arena:stats"


def metrics_key(family: str) -> str:
    """The hash of one metric family's counts, summed over every daemon and worker (field: its
    labels' values as a JSON list; a histogram's buckets add the bound, its sums are in
    ``{key}:sum``)."""
    return f"arena:metrics:{family}"


def group_topic(group: str) -> str:
    """The MQTT topic a group's replies are published on."""
    return f"arena/groups/{group}/messages"


def growth_topic(agent_id: str) -> str:
    """The MQTT topic a new version of an agent's ``MEMORY.md`` is announced on."""
    return f"arena/agents/{agent_id}/growth"


def spend_key(day: str) -> str:
    """The hash of one day's spending counters (field: ``{unit}:{scope}:{name}``; day in
    ``ARENA_TZ`` as ``YYYY-MM-DD``)."""
    return f"arena:spend:{day}"


def caps_key() -> str:
    """The daily caps the last daemon started enforces (``CapLimits`` as JSON), so commands
    run from another shell show those rather than their own environment's."""
    return "arena:caps"


def budget_topic() -> str:
    """The MQTT topic a cap nearly reached (80 %) or reached is announced on."""
    return "arena/budget"


def team_key() -> str:
    """The set of the ids and names of the agents the last daemon started answers as: no
    person may post under one (clients read it to refuse such a post before sending it)."""
    return "arena:team"


def schedule_key() -> str:
    """The hash of the daemon's next fire times (``arena jobs`` reads it from another process)."""
    return "arena:schedule"


def job_guard_key(job_id: str) -> str:
    """The short-lived key held while a finished or failed job is replaced by a new run."""
    return f"arena:jobs:guard:{job_id}"


def decode_fields(raw: Mapping[bytes, bytes] | Mapping[str, str]) -> dict[str, str]:
    """Decode a stream entry's fields as strict UTF-8.

    Raises:
        ValidationError: when a name or value is not valid UTF-8.
    """
    fields: dict[str, str] = {}
    for key, value in raw.items():
        try:
            name = key.decode("utf-8") if isinstance(key, bytes) else key
        except UnicodeDecodeError as exc:
            raise ValidationError(
                "fields", f"a field name is not valid UTF-8 ({exc.reason})"
            ) from None
        try:
            fields[name] = value.decode("utf-8") if isinstance(value, bytes) else value
        except UnicodeDecodeError as exc:
            raise ValidationError(name, f"not valid UTF-8 ({exc.reason})") from None
    return fields


def parse_inbound(
    entry_id: str,
    raw: Mapping[bytes, bytes] | Mapping[str, str],
    max_bytes: int,
    now: datetime,
    *,
    agents: Iterable[str] = (),
) -> ChatMessage:
    """Turn an inbound stream entry into a person's message.

    Args:
        entry_id: the entry's id, the message's id.
        raw: the entry's fields.
        max_bytes: the largest text accepted, in bytes of UTF-8.
        now: the message's time when the id holds none.
        agents: the team's agents' ids and names, which no person may post under.

    Raises:
        ValidationError: when the entry is missing a field or a field is not acceptable.
    """
    fields = decode_fields(raw)
    for name in ("group", "text"):
        if name not in fields:
            raise ValidationError(name, "missing field")
    sender = fields.get("sender") or DEFAULT_SENDER
    post = validate_post(fields["group"], fields["text"], sender, max_bytes, agents=agents)
    return ChatMessage(
        id=entry_id,
        group=post.group,
        sender=post.sender,
        kind=MessageKind.HUMAN,
        text=post.text,
        created_at=entry_time(entry_id) or now,
    )


def entry_time(entry_id: str) -> datetime | None:
    """When Redis added a stream entry: its id starts with the time in milliseconds.

    Using it (rather than the time the entry is read) keeps a message's time the same when
    it is handled again after a restart.
    """
    millis, _, _ = entry_id.partition("-")
    if not millis.isdigit():
        return None
    return datetime.fromtimestamp(int(millis) / 1000, UTC)


OutboundType = Literal["reply", "notice", "done"]


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Outbound:
    """One item on a group's outbound stream and MQTT topic."""

    type: OutboundType
    id: str
    group: str
    in_reply_to: str
    sender: str = ""
    kind: str = ""
    text: str = ""
    hop: int = 0
    created_at: str = ""
    replies: int = 0

    @classmethod
    def for_message(cls, message: ChatMessage) -> Outbound:
        """The outbound item for a reply or notice."""
        return cls(
            type="notice" if message.kind is MessageKind.NOTICE else "reply",
            id=message.id,
            group=message.group,
            in_reply_to=message.in_reply_to or "",
            sender=message.sender,
            kind=message.kind.value,
            text=message.text,
            hop=message.hop,
            created_at=message.created_at.isoformat(),
        )

    @classmethod
    def done(cls, message_id: str, group: str, replies: int) -> Outbound:
        """The item that closes a person's message."""
        return cls(
            type="done",
            id=f"{message_id}:done",
            group=group,
            in_reply_to=message_id,
            replies=replies,
        )

    def fields(self) -> dict[str, str]:
        """Stream entry fields (all strings)."""
        return {
            "type": self.type,
            "id": self.id,
            "group": self.group,
            "in_reply_to": self.in_reply_to,
            "sender": self.sender,
            "kind": self.kind,
            "text": self.text,
            "hop": str(self.hop),
            "created_at": self.created_at,
            "replies": str(self.replies),
        }

    def json(self) -> bytes:
        """MQTT payload."""
        data: dict[str, object] = dict(self.fields())
        data["hop"] = self.hop
        data["replies"] = self.replies
        return json_bytes(data)

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> Outbound:
        """Read an item back from stream fields."""
        kind = fields.get("type", "reply")
        if kind not in ("reply", "notice", "done"):
            kind = "reply"
        return cls(
            type=kind,  # type: ignore[arg-type]  # checked against the Literal above
            id=fields.get("id", ""),
            group=fields.get("group", ""),
            in_reply_to=fields.get("in_reply_to", ""),
            sender=fields.get("sender", ""),
            kind=fields.get("kind", ""),
            text=fields.get("text", ""),
            hop=int(fields.get("hop", "0") or 0),
            created_at=fields.get("created_at", ""),
            replies=int(fields.get("replies", "0") or 0),
        )
