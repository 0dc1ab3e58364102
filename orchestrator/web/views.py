"""Messages as the console shows them: a stored row (or an outbound item not stored yet) as a
:class:`Msg`, with the agent who wrote it, *why* it answered, the memory it wrote, what the call
cost and the context it was given; a run's card and its reply with the run.

Why an agent answered is read from what the daemon recorded: a reply's meta names its
``agent`` and its ``trigger`` (the message it answers). A person's trigger carries the routing
decision (``route``: mention, rule or default agent; until the message is closed it is the
same dry run over the agents, routing being deterministic); an agent's trigger means a
hand-off from that agent.
"""

from __future__ import annotations

import colorsys
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from orchestrator.core.context.report import ContextReport
from orchestrator.core.models import AgentSpec, MessageKind, find_agent
from orchestrator.core.routing import route
from orchestrator.core.wire import Outbound
from orchestrator.memory.conversation.marker_entries import StoredMarker
from orchestrator.memory.conversation.meta import MarkerMeta, ReplyMeta
from orchestrator.memory.conversation.store import StoredMessage
from orchestrator.web.render import markdown_html

__all__ = ["Msg", "Why", "agent_colour", "agent_view", "from_outbound", "from_stored", "run"]


@lru_cache(maxsize=256)
def agent_colour(agent_id: str) -> str:
    """A colour for an agent, the same for the same id everywhere (``#rrggbb``)."""
    hue = int.from_bytes(hashlib.sha256(agent_id.encode()).digest()[:2], "big") / 65536
    red, green, blue = colorsys.hls_to_rgb(hue, 0.42, 0.6)
    return "#" + "".join(f"{round(c * 255):02x}" for c in (red, green, blue))


def agent_view(spec: AgentSpec) -> dict[str, Any]:
    """An agent as ``GET /api/agents`` and a message's ``agent`` show it."""
    return {"id": spec.id, "name": spec.name, "role": spec.role, "colour": agent_colour(spec.id)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Why:
    """Why an agent answered: routed to it (mention, rule, default) or handed the turn."""

    reason: str
    rule: str | None = None
    keywords: tuple[str, ...] = ()
    handed_by: str | None = None
    hop: int = 0
    hop_limit: int = 0

    @property
    def text(self) -> str:
        """One line a person reads."""
        if self.reason == "handoff":
            return f"hand-off from {self.handed_by}, hop {self.hop} of {self.hop_limit}"
        if self.reason == "mention":
            return f"mentioned by {self.handed_by}" if self.handed_by else "mentioned"
        if self.reason == "rule":
            hit = f" (keywords: {', '.join(self.keywords)})" if self.keywords else ""
            return f"rule {self.rule}{hit}"
        return "default agent"

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``from``: who mentioned the agent, or handed it the turn)."""
        return {
            "reason": self.reason,
            "rule": self.rule,
            "keywords": list(self.keywords),
            "from": self.handed_by,
            "hop": self.hop,
            "hop_limit": self.hop_limit,
            "text": self.text,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Msg:
    """One message of a room, with what the console shows beside it."""

    id: str
    seq: int
    group: str
    sender: str
    kind: str
    text: str
    created_at: str
    hop: int = 0
    in_reply_to: str | None = None
    agent: Mapping[str, Any] | None = None
    why: Why | None = None
    memory: tuple[Mapping[str, Any], ...] = ()
    usage: Mapping[str, Any] | None = None
    context: Mapping[str, Any] | None = None
    notice: str | None = None
    # The memory tools the reply called: one line each, ``memory_search("db") → 2 hits``.
    tools: tuple[Mapping[str, Any], ...] = ()
    # A run's card or reply: the run (``meta.run``) and the agent whose run it is.
    run: Mapping[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The API's ``Msg`` (``html``: the text as safe HTML)."""
        return {
            "id": self.id,
            "seq": self.seq,
            "group": self.group,
            "sender": self.sender,
            "kind": self.kind,
            "text": self.text,
            "html": _html(self.text),
            "created_at": self.created_at,
            "hop": self.hop,
            "in_reply_to": self.in_reply_to,
            "agent": dict(self.agent) if self.agent is not None else None,
            "why": self.why.as_dict() if self.why is not None else None,
            "memory": [dict(m) for m in self.memory],
            "usage": dict(self.usage) if self.usage is not None else None,
            "context": dict(self.context) if self.context is not None else None,
            "notice": self.notice,
            "tools": [dict(t) for t in self.tools],
            **({"run": dict(self.run)} if self.run is not None else {}),
        }


_CACHED_CHARS = 2048  # longer texts are rendered each time: the cache stays a few MB


def _html(text: str) -> str:
    return _cached_html(text) if len(text) <= _CACHED_CHARS else markdown_html(text)


@lru_cache(maxsize=4096)
def _cached_html(text: str) -> str:
    # A room's page is read again and again: the same texts are rendered once.
    return markdown_html(text)


def from_stored(
    stored: StoredMessage,
    *,
    trigger: StoredMessage | None,
    agents: Sequence[AgentSpec],
    hop_limit: int,
) -> Msg:
    """A stored message as the console shows it; ``trigger`` is the message its meta names."""
    m = stored.message
    meta = ReplyMeta.from_json(stored.meta)
    spec = find_agent(agents, meta.agent if meta.agent else m.sender)
    return Msg(
        id=m.id,
        seq=stored.seq,
        group=m.group,
        sender=m.sender,
        kind=m.kind.value,
        text=m.text,
        created_at=m.created_at.isoformat(),
        hop=m.hop,
        in_reply_to=m.in_reply_to,
        agent=agent_view(spec) if spec is not None and m.kind is MessageKind.AGENT else None,
        why=why(meta, trigger, agents, hop=m.hop, hop_limit=hop_limit),
        memory=memory(meta.markers),
        usage=usage(meta),
        context=context(meta.context),
        notice=meta.notice,
        tools=tuple(
            {"line": c.line, "is_error": c.is_error, "result_chars": c.result_chars}
            for c in (meta.tools.calls if meta.tools is not None else ())
        ),
        run=run(meta, agents),
    )


def from_outbound(item: Outbound, agents: Sequence[AgentSpec]) -> Msg:
    """A reply or notice not stored yet, from its outbound fields (nothing recorded about it)."""
    spec = find_agent(agents, item.sender)
    return Msg(
        id=item.id,
        seq=0,
        group=item.group,
        sender=item.sender,
        kind=item.kind or ("notice" if item.type == "notice" else "agent"),
        text=item.text,
        created_at=item.created_at,
        hop=item.hop,
        in_reply_to=item.in_reply_to or None,
        agent=agent_view(spec) if spec is not None and item.type == "reply" else None,
    )


def why(
    meta: ReplyMeta,
    trigger: StoredMessage | None,
    agents: Sequence[AgentSpec],
    *,
    hop: int,
    hop_limit: int,
) -> Why | None:
    """Why ``meta.agent`` answered ``trigger`` (None for a person's message, or when the
    trigger is no longer stored)."""
    if meta.agent is None or trigger is None:
        return None
    asked = trigger.message
    if asked.kind is not MessageKind.HUMAN:
        return Why(reason="handoff", handed_by=asked.sender, hop=hop, hop_limit=hop_limit)
    decision = trigger.route
    if decision is None:  # not closed yet: the decision it will record
        decision = route(asked.text, agents).as_dict() if agents else {}
    reason = str(decision.get("reason", "default"))
    return Why(
        reason=reason,
        rule=decision.get("rule"),
        keywords=tuple(str(k) for k in decision.get("keywords_hit") or ()),
        handed_by=asked.sender if reason == "mention" else None,
        hop=hop,
        hop_limit=hop_limit,
    )


def run(meta: ReplyMeta, agents: Sequence[AgentSpec]) -> dict[str, Any] | None:
    """The run a run's card or reply records, with the agent whose run it is (None: not a
    run's; the agent None when it left the team)."""
    if meta.run is None:
        return None
    spec = find_agent(agents, meta.agent) if meta.agent else None
    return {**meta.run.as_json(), "agent": agent_view(spec) if spec is not None else None}


def memory(markers: MarkerMeta | None) -> tuple[dict[str, Any], ...]:
    """What a reply wrote to memory: each entry saved, reinforced or rejected (with why)."""
    if markers is None:
        return ()
    contents = [_content(m) for m in markers.markers]
    entries: list[dict[str, Any]] = []
    for index, saved in enumerate(markers.saved or ()):
        entries.append(
            {
                "outcome": "reinforced" if saved.reinforced else "saved",
                # A row written without the entry's type shows its kind.
                "type": saved.type or saved.kind or "",
                "text": contents[index] if index < len(contents) else "",
                "reason": None,
            }
        )
    for rejected in markers.rejected:
        detail, reason = rejected.detail, rejected.reason
        entries.append(
            {
                "outcome": "rejected",
                "type": rejected.kind or "",
                "text": "",  # never kept: what was refused may be a secret
                "reason": f"{reason}: {detail}" if detail else reason,
            }
        )
    return tuple(entries)


def _content(marker: StoredMarker) -> str:
    content = marker.payload.get("content")
    return content if isinstance(content, str) else ""


def usage(meta: ReplyMeta) -> dict[str, Any] | None:
    """The tokens the answer took, its cache read share, latency and model (None: no call)."""
    turn = meta.turn
    if turn is None:
        return None
    u = turn.usage
    prompt = u.input_tokens + u.cache_read_tokens + u.cache_creation_tokens
    shown: dict[str, Any] = {
        "input": u.input_tokens,
        "output": u.output_tokens,
        "cache_read": u.cache_read_tokens,
        "cache_read_share": round(u.cache_read_tokens / prompt, 3) if prompt else 0.0,
        "latency_ms": turn.latency_ms,
        "model": turn.model or None,
    }
    if meta.tools is not None:  # the model calls the answer took, with its memory tools
        shown["calls"] = len(meta.tools.steps)
    return shown


def context(report: ContextReport | None) -> dict[str, Any] | None:
    """The context cost report: each layer's tokens and the total."""
    if report is None or not report.has("tokens"):
        return None
    return {"layers": report.tokens.layers(), "total": report.tokens.total}
