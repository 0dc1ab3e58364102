"""Daily spending caps: the rule that says whether a model call may go ahead.

Caps are per agent, per group and overall, in tokens and in US dollars (kept as whole
micro-dollars so counters stay integers). A day runs from midnight to midnight in the
arena's time zone. Everything here is pure: the ledger that counts lives in
``orchestrator.caps.ledger``, and who is told lives in ``orchestrator.caps.guard``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo

from orchestrator.core.agents import MAX_TOKENS_PER_DAY, MAX_USD_PER_DAY
from orchestrator.core.context.tokens import TokenCounter
from orchestrator.core.models import LLMRequest, Usage
from orchestrator.errors import OrchestratorError

__all__ = [
    "WARN_SHARE",
    "Breach",
    "Cap",
    "CapLimits",
    "OverCap",
    "Price",
    "Scope",
    "Unit",
    "check",
    "cost_micro_usd",
    "day_of",
    "dollars",
    "near",
    "next_midnight",
    "prompt_tokens",
]

WARN_SHARE = 0.8  # a cap this full gets one warning a day
MICRO = 1_000_000


class Scope(StrEnum):
    """Whose spending a cap limits."""

    AGENT = "agent"
    GROUP = "group"
    ALL = "all"


class Unit(StrEnum):
    """What a cap counts: tokens, or micro-dollars."""

    TOKENS = "tokens"
    USD = "usd"


def dollars(micro: int, scale: int | None = None) -> str:
    """US dollars for people, to the cent when ``scale`` (micro-dollars; ``micro`` itself by
    default) is at least $1, else to a hundredth of a cent, so a small cap passed does not read
    as reached exactly ("$0.0060 of $0.0050", not "$0.01 of $0.01")."""
    amount = micro / MICRO
    if (scale if scale is not None else micro) >= MICRO:
        return f"${amount:,.2f}"
    return f"${amount:.4f}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Cap:
    """One daily cap: on ``name`` (an agent or group id; ``*`` for all) in ``unit``."""

    scope: Scope
    name: str
    unit: Unit
    limit: int  # tokens, or micro-dollars

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError("a cap's limit must be at least 1")

    @property
    def key(self) -> str:
        """The counter it limits, e.g. ``tokens:group:demo``."""
        return f"{self.unit.value}:{self.scope.value}:{self.name}"

    def describe(self, used: int) -> str:
        """``group demo: 2,140 of 2,000 tokens`` (dollars with cents)."""
        who = "all agents" if self.scope is Scope.ALL else f"{self.scope.value} {self.name}"
        if self.unit is Unit.USD:
            return f"{who}: {dollars(used, self.limit)} of {dollars(self.limit)}"
        return f"{who}: {used:,} of {self.limit:,} tokens"


@dataclass(frozen=True, slots=True, kw_only=True)
class CapLimits:
    """The configured daily caps (``None``: no cap); ``agents`` holds agents' own caps."""

    agent_tokens: int | None = None
    group_tokens: int | None = None
    all_tokens: int | None = None
    agent_usd: float | None = None
    group_usd: float | None = None
    all_usd: float | None = None
    agents: Mapping[str, Mapping[str, float | int]] | None = None

    def __post_init__(self) -> None:
        shared: dict[str, tuple[Unit, float | int | None]] = {
            "agent_tokens": (Unit.TOKENS, self.agent_tokens),
            "group_tokens": (Unit.TOKENS, self.group_tokens),
            "all_tokens": (Unit.TOKENS, self.all_tokens),
            "agent_usd": (Unit.USD, self.agent_usd),
            "group_usd": (Unit.USD, self.group_usd),
            "all_usd": (Unit.USD, self.all_usd),
        }
        for agent, own in (self.agents or {}).items():
            for name, amount in own.items():
                unit = Unit.USD if name == "usd_per_day" else Unit.TOKENS
                shared[f"{agent}.{name}"] = (unit, amount)
        for name, (unit, value) in shared.items():
            if value is not None and not _sane(unit, value):
                bound = f"{_MAX[unit]:,}"
                raise ValueError(f"{name}: {value!r} is not a daily cap (0 < cap <= {bound})")

    def as_json(self) -> str:
        """The caps as JSON, as a running daemon records the caps it enforces."""
        fields = {
            "agent_tokens": self.agent_tokens,
            "group_tokens": self.group_tokens,
            "all_tokens": self.all_tokens,
            "agent_usd": self.agent_usd,
            "group_usd": self.group_usd,
            "all_usd": self.all_usd,
            "agents": {a: dict(c) for a, c in (self.agents or {}).items()},
        }
        return json.dumps(fields, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> CapLimits:
        """Caps :meth:`as_json` wrote.

        Raises:
            ValueError: when ``text`` is not such caps.
        """
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError("caps: expected a JSON object")
        agents = raw.pop("agents", None) or {}
        if not isinstance(agents, dict) or not all(isinstance(c, dict) for c in agents.values()):
            raise ValueError("caps: agents must map agent ids to their caps")
        try:
            return cls(**raw, agents=agents)
        except TypeError as exc:
            raise ValueError(f"caps: {exc}") from None

    @property
    def any(self) -> bool:
        """Whether any cap is set."""
        shared = (self.agent_tokens, self.group_tokens, self.all_tokens)
        dollars = (self.agent_usd, self.group_usd, self.all_usd)
        return any(v is not None for v in (*shared, *dollars)) or any(
            bool(c) for c in (self.agents or {}).values()
        )

    def for_call(self, agent: str, group: str) -> tuple[Cap, ...]:
        """The caps a call by ``agent`` in ``group`` counts against; an agent's own cap wins
        over the shared per-agent one."""
        own = (self.agents or {}).get(agent, {})
        tokens = own.get("tokens_per_day", self.agent_tokens)
        usd = own.get("usd_per_day", self.agent_usd)
        wanted = (
            (Scope.AGENT, agent, Unit.TOKENS, tokens),
            (Scope.GROUP, group, Unit.TOKENS, self.group_tokens),
            (Scope.ALL, "*", Unit.TOKENS, self.all_tokens),
            (Scope.AGENT, agent, Unit.USD, usd),
            (Scope.GROUP, group, Unit.USD, self.group_usd),
            (Scope.ALL, "*", Unit.USD, self.all_usd),
        )
        return tuple(
            Cap(scope=scope, name=name, unit=unit, limit=_limit(unit, value))
            for scope, name, unit, value in wanted
            if value is not None
        )


_MAX = {Unit.TOKENS: MAX_TOKENS_PER_DAY, Unit.USD: MAX_USD_PER_DAY}


def _sane(unit: Unit, value: float) -> bool:
    """Finite, above nothing and at most the largest cap accepted (NaN fails every test)."""
    return isinstance(value, int | float) and 0 < value <= _MAX[unit]


def _limit(unit: Unit, value: float) -> int:
    return max(1, round(value * MICRO)) if unit is Unit.USD else int(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class Breach:
    """A call refused: the cap it would pass, what is used of it and when it resets."""

    cap: Cap
    used: int
    estimate: int
    resets_at: datetime

    def describe(self) -> str:
        """One line for the group: which budget, how much is used, when it resets; a cap not
        yet reached says the turn would pass it, and about how much the turn takes."""
        when = self.resets_at.strftime("%Y-%m-%d %H:%M %Z")
        spent = self.cap.describe(self.used)
        if self.used >= self.cap.limit:
            return f"daily budget reached ({spent}); resets {when}"
        if self.cap.unit is Unit.USD:
            turn = f"about {dollars(self.estimate, self.cap.limit)}"
        else:
            turn = f"about {self.estimate:,} tokens"
        return f"this turn ({turn}) would pass the daily budget ({spent} used); resets {when}"


class OverCap(OrchestratorError):
    """A model call was not made: it would pass a daily cap."""

    def __init__(self, breach: Breach) -> None:
        self.breach = breach
        super().__init__(breach.describe())


@dataclass(frozen=True, slots=True, kw_only=True)
class Price:
    """US dollars per million tokens of one model."""

    input: float
    output: float
    cache_read: float = 0.0
    cache_write: float = 0.0


def cost_micro_usd(price: Price, usage: Usage) -> int:
    """What ``usage`` cost, in micro-dollars (a price per million tokens is micro-dollars per
    token)."""
    return round(
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_tokens * price.cache_read
        + usage.cache_creation_tokens * price.cache_write
    )


def prompt_tokens(request: LLMRequest, counter: TokenCounter) -> int:
    """The input tokens a turn is estimated at before its first call: the system prompt, its
    tail and the messages (the offline provider reports its input the same way)."""
    texts = [request.system, request.system_tail, *(m["content"] for m in request.messages)]
    return sum(counter.count(t) for t in texts if t)


def check(
    caps: tuple[Cap, ...], used: Mapping[str, int], estimate: Mapping[Unit, int], now: datetime
) -> Breach | None:
    """The first cap a call estimated at ``estimate`` would pass, given today's ``used``
    counters (by :attr:`Cap.key`); ``None`` when the call may go ahead. A cap already
    reached refuses even a call estimated at nothing."""
    for cap in caps:
        spent = used.get(cap.key, 0)
        extra = estimate.get(cap.unit, 0)
        if spent >= cap.limit or spent + extra > cap.limit:
            return Breach(cap=cap, used=spent, estimate=extra, resets_at=next_midnight(now))
    return None


def near(caps: tuple[Cap, ...], used: Mapping[str, int]) -> tuple[Cap, ...]:
    """The caps at least :data:`WARN_SHARE` full."""
    return tuple(c for c in caps if used.get(c.key, 0) >= WARN_SHARE * c.limit)


def day_of(now: datetime, zone: ZoneInfo) -> date:
    """The day ``now`` falls on in ``zone``."""
    return now.astimezone(zone).date()


def next_midnight(now: datetime) -> datetime:
    """The next midnight after ``now``, in ``now``'s time zone (aware)."""
    tomorrow = now.date() + timedelta(days=1)
    return datetime.combine(tomorrow, time(0), tzinfo=now.tzinfo)
