"""Plain values passed between the parts of Agent Arena.

Everything here is a frozen dataclass that validates itself, plus the one rule for reading a
stored time (:func:`assume_utc`); nothing here does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from orchestrator.core.quick_init import quick_init
from orchestrator.core.tools import TOOL_NAMES, ToolCall, ToolExchange
from orchestrator.errors import ValidationError

__all__ = [
    "AGENT_ID_RE",
    "GROUP_ID_RE",
    "NEVER_TOOLS",
    "PERMISSION_MODES",
    "PROFILES",
    "RUNTIMES",
    "SENDER_RE",
    "WEB_TOOLS",
    "AgentSpec",
    "ChatMessage",
    "CodeSpec",
    "Completion",
    "LLMRequest",
    "MessageKind",
    "RouteDecision",
    "RouteReason",
    "RoutingRule",
    "Usage",
    "assume_utc",
    "find_agent",
    "known_agent",
    "minute_text",
    "utc_from_text",
]

GROUP_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}\Z")
AGENT_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}\Z")
SENDER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.@-]{0,63}\Z")


def assume_utc(value: datetime) -> datetime:
    """``value`` with a time zone: a naive one is taken as UTC (everything we store is UTC,
    and SQLite hands datetimes back naive); an aware one is returned as it is."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def minute_text(moment: datetime) -> str:
    """``moment`` as ``YYYY-MM-DD HH:MM``, in its own zone: what a prompt shows (a quarter of
    the time ``strftime`` takes; a turn writes several)."""
    return moment.isoformat(" ", "minutes")[:16]


def utc_from_text(stored: str) -> datetime:
    """A time as SQLAlchemy stores it on SQLite (``YYYY-MM-DD HH:MM:SS[.ffffff]``, in UTC,
    without its zone), in UTC, as SQLAlchemy's type gives it back: read with its zone, in an
    eighth of the time replacing the zone takes (rows read at a group's first turn hold
    several). A time written with a zone of its own (a script's) is that moment, in UTC."""
    if len(stored) in (19, 26):
        return datetime.fromisoformat(stored + "+00:00")
    return assume_utc(datetime.fromisoformat(stored)).astimezone(UTC)


class MessageKind(StrEnum):
    """Who wrote a message in a group."""

    HUMAN = "human"
    AGENT = "agent"
    NOTICE = "notice"


class RouteReason(StrEnum):
    """Why a message went to the agents it went to."""

    MENTION = "mention"
    RULE = "rule"
    DEFAULT = "default"
    HANDOFF = "handoff"


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ChatMessage:
    """One message in a group: a person's post, an agent's reply or a system notice."""

    id: str
    group: str
    sender: str
    kind: MessageKind
    text: str
    created_at: datetime
    in_reply_to: str | None = None
    hop: int = 0

    def __post_init__(self) -> None:
        if not GROUP_ID_RE.match(self.group):
            raise ValueError(f"invalid group id {self.group!r}")
        if self.hop < 0:
            raise ValueError("hop must be >= 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutingRule:
    """A routing rule: every condition given must hold for the rule to match.

    ``keywords`` match case-insensitively (any one is enough), ``patterns`` are regular
    expressions (any one is enough), and the length bounds count characters, not bytes.
    """

    agents: tuple[str, ...]
    name: str = ""
    keywords: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    min_length: int | None = None
    max_length: int | None = None
    priority: int = 0

    def __post_init__(self) -> None:
        if not self.agents:
            raise ValueError("a rule needs at least one agent")
        if not (
            self.keywords
            or self.patterns
            or self.min_length is not None
            or self.max_length is not None
        ):
            raise ValueError("a rule needs keywords, patterns or a length bound")
        if (
            self.min_length is not None
            and self.max_length is not None
            and self.min_length > self.max_length
        ):
            raise ValueError("min_length is greater than max_length")


# Agents that act (``runtime: claude-code``): see orchestrator.core.coding.
RUNTIMES = ("messages", "claude-code")
PROFILES: Mapping[str, tuple[str, ...]] = {
    "reader": ("Read", "Glob", "Grep"),
    "editor": ("Read", "Glob", "Grep", "Write", "Edit", "Bash"),
    "tester": ("Read", "Glob", "Grep", "Bash"),
}
PERMISSION_MODES = ("dontAsk", "acceptEdits", "plan", "default")
WEB_TOOLS = ("WebFetch", "WebSearch")
NEVER_TOOLS = ("AskUserQuestion",)


@dataclass(frozen=True, slots=True, kw_only=True)
class CodeSpec:
    """What an agent's Claude Code runs may do: its YAML's ``code:``, defaults filled in (see
    :mod:`orchestrator.core.coding`)."""

    acts: str = "rules"
    rules: tuple[RoutingRule, ...] = ()
    profile: str = "reader"
    tools: tuple[str, ...] = PROFILES["reader"]
    # default: what is not plainly safe is asked of the person (approvals); dontAsk: refused.
    permission_mode: str = "default"
    # The commands run without asking (patterns ``word``, ``word *``); None: the profile's.
    commands: tuple[str, ...] | None = None
    max_turns: int = 30
    inactivity_s: float = 300.0
    wall_s: float = 1800.0

    def __post_init__(self) -> None:
        if self.acts not in ("always", "rules"):
            raise ValueError(f"acts must be always or rules, not {self.acts!r}")
        if self.profile not in PROFILES:
            raise ValueError(f"profile must be one of {', '.join(PROFILES)}")
        if self.permission_mode not in PERMISSION_MODES:
            raise ValueError(f"permission_mode must be one of {', '.join(PERMISSION_MODES)}")
        if set(self.tools) & set(NEVER_TOOLS):
            raise ValueError("AskUserQuestion is never given: nobody answers a terminal prompt")
        if self.max_turns < 1 or self.inactivity_s <= 0 or self.wall_s <= 0:
            raise ValueError("max_turns, inactivity_s and wall_s must be positive")

    @property
    def refused_tools(self) -> tuple[str, ...]:
        """The tools a run is refused outright: the web tools not listed, and the prompts."""
        return tuple(t for t in WEB_TOOLS if t not in self.tools) + NEVER_TOOLS

    @property
    def edits(self) -> bool:
        """Whether a run may change files (its changes are then committed)."""
        return bool({"Write", "Edit", "MultiEdit", "NotebookEdit", "Bash"} & set(self.tools))


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSpec:
    """A role agent: who it is, which model it uses and what it answers."""

    id: str
    name: str
    role: str
    model: str
    models: Mapping[str, str] = field(default_factory=dict)
    temperature: float = 0.7
    max_tokens: int = 1024
    max_concurrency: int = 4
    default: bool = False
    rules: tuple[RoutingRule, ...] = ()
    description: str = ""
    context: Mapping[str, int] = field(default_factory=dict)
    recall: Mapping[str, float | int | bool] = field(default_factory=dict)
    # This agent's own daily spending caps: ``tokens_per_day`` and ``usd_per_day``.
    caps: Mapping[str, float | int] = field(default_factory=dict)
    # The memory and knowledge tools this agent may call (core.tools.TOOL_NAMES); none: ().
    tools: tuple[str, ...] = TOOL_NAMES
    # How it answers: the Messages API, or Claude Code runs on the project (then ``code``).
    runtime: str = "messages"
    code: CodeSpec | None = None

    def __post_init__(self) -> None:
        if (self.runtime == "claude-code") != (self.code is not None):
            raise ValueError("code is given exactly when runtime is claude-code")
        if not AGENT_ID_RE.match(self.id):
            raise ValueError(f"invalid agent id {self.id!r}")
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")


def find_agent(agents: Sequence[AgentSpec], agent_id: str) -> AgentSpec | None:
    """The team's agent with the id ``agent_id``, or None (a past reply's author may have left
    the team)."""
    return next((agent for agent in agents if agent.id == agent_id), None)


def known_agent(agents: Sequence[AgentSpec], agent_id: str) -> AgentSpec:
    """The team's agent with the id ``agent_id``.

    Raises:
        ValidationError: no agent has that id (the message lists the ids there are).
    """
    found = find_agent(agents, agent_id)
    if found is not None:
        return found
    known = ", ".join(a.id for a in agents)
    raise ValidationError("agent", f"no agent {agent_id!r} (agents: {known})")


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class RouteDecision:
    """Who answers a message, and why."""

    agents: tuple[str, ...]
    reason: RouteReason
    rule: str | None = None
    keywords_hit: tuple[str, ...] = ()
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, stored with the message."""
        return {
            "agents": list(self.agents),
            "reason": self.reason.value,
            "rule": self.rule,
            "keywords_hit": list(self.keywords_hit),
            "detail": self.detail,
        }


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class LLMRequest:
    """One model call: the system prompt, the conversation turns and the parameters.

    ``system`` is the stable prefix (cached by the provider); ``system_tail`` the part that
    changes every turn. ``agent`` and ``trigger`` let a provider (the offline one) answer in
    role without parsing the prompt back.
    """

    agent: AgentSpec
    trigger: ChatMessage
    model: str
    system: str
    system_tail: str = ""
    messages: tuple[Mapping[str, str], ...]
    max_tokens: int
    temperature: float
    # The memory tools the model may call (their JSON schemas), the calls it made earlier in
    # this turn with our results, and whether it may call more (False at the last step).
    tools: tuple[Mapping[str, Any], ...] = ()
    exchanges: tuple[ToolExchange, ...] = ()
    may_call_tools: bool = True


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Tokens a model call consumed."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    """What the model answered."""

    text: str
    model: str
    provider: str
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
    latency_ms: float = 0.0
    # Why each earlier attempt of the call failed before this answer ("529 overloaded_error"),
    # oldest first; empty when the first attempt answered.
    failed_attempts: tuple[str, ...] = ()
    # The tools the model asked to call (stop reason "tool_use"), in its order.
    tool_calls: tuple[ToolCall, ...] = ()
