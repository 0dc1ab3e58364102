"""What ``arena budget`` and ``GET /api/budget`` show: spending against the daily caps per
agent, group and model, today and over the last days, made from the ledger's counters (the
console's API answers it as :class:`orchestrator.web.schemas_status.SpendReport`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from orchestrator.caps.limits import MICRO, CapLimits, Scope, Unit, next_midnight

__all__ = ["CapReport", "CapRow", "cap_report"]

_SCOPES = ("agent", "group", "model", "all")


@dataclass(frozen=True, slots=True, kw_only=True)
class CapRow:
    """One agent's, group's or model's spending (``all``: everyone's)."""

    scope: str
    name: str
    tokens: int
    micro_usd: int
    tokens_cap: int | None
    usd_cap_micro: int | None
    week_tokens: int
    week_micro_usd: int

    def as_json(self) -> dict[str, Any]:
        """JSON-ready, dollars as numbers."""
        return {
            "scope": self.scope,
            "name": self.name,
            "today": {
                "tokens": self.tokens,
                "usd": self.micro_usd / MICRO,
                "tokens_cap": self.tokens_cap,
                "usd_cap": None if self.usd_cap_micro is None else self.usd_cap_micro / MICRO,
            },
            "last_days": {"tokens": self.week_tokens, "usd": self.week_micro_usd / MICRO},
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class CapReport:
    """Today's rows (caps included), the totals of each day, and when today's caps reset."""

    day: date
    resets_at: datetime
    days: int
    rows: tuple[CapRow, ...]
    totals: tuple[tuple[date, int, int], ...]  # day, tokens, micro-dollars; today first
    caps_set: bool = False  # whether any cap is in force (an empty table cannot tell)
    caps_from: str = "settings"  # "daemon": as the running daemon enforces them

    def as_json(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "day": self.day.isoformat(),
            "resets_at": self.resets_at.isoformat(),
            "days": self.days,
            "caps_set": self.caps_set,
            "caps_from": self.caps_from,
            "rows": [r.as_json() for r in self.rows],
            "totals": [
                {"day": d.isoformat(), "tokens": t, "usd": u / MICRO} for d, t, u in self.totals
            ],
        }


def _cap(limits: CapLimits, scope: str, name: str, unit: Unit) -> int | None:
    if scope == "model":
        return None
    agent = name if scope == "agent" else "-"
    group = name if scope == "group" else "-"
    for cap in limits.for_call(agent, group):
        if cap.scope is Scope(scope) and cap.unit is unit:
            return cap.limit
    return None


def cap_report(
    counters: Sequence[tuple[date, Mapping[str, int]]],
    limits: CapLimits,
    now: datetime,
    *,
    enforced: bool = False,
) -> CapReport:
    """The report of ``counters`` (the ledger's, today first) against ``limits``.

    Args:
        counters: each day's counters, as ``read_days`` gives them.
        limits: the caps in force.
        now: the current time in the arena's time zone.
        enforced: whether ``limits`` are those the running daemon recorded (else this
            process's settings).
    """
    today = counters[0][1] if counters else {}
    week: dict[str, int] = {}
    for _day, values in counters:
        for key, value in values.items():
            week[key] = week.get(key, 0) + value
    spent = {tuple(k.split(":", 2)[1:]) for k in week if k.count(":") >= 2}
    # A cap is shown before anything is spent against it: an agent's own, and everyone's.
    capped = {("agent", agent) for agent, caps in (limits.agents or {}).items() if caps}
    if limits.all_tokens is not None or limits.all_usd is not None:
        capped.add(("all", "*"))
    names = sorted(
        spent | capped,
        key=lambda sn: (_SCOPES.index(sn[0]) if sn[0] in _SCOPES else 9, sn[1]),
    )
    rows = tuple(
        CapRow(
            scope=scope,
            name=name,
            tokens=today.get(f"tokens:{scope}:{name}", 0),
            micro_usd=today.get(f"usd:{scope}:{name}", 0),
            tokens_cap=_cap(limits, scope, name, Unit.TOKENS),
            usd_cap_micro=_cap(limits, scope, name, Unit.USD),
            week_tokens=week.get(f"tokens:{scope}:{name}", 0),
            week_micro_usd=week.get(f"usd:{scope}:{name}", 0),
        )
        for scope, name in names
        if scope in _SCOPES
    )
    totals = tuple(
        (day, values.get("tokens:all:*", 0), values.get("usd:all:*", 0)) for day, values in counters
    )
    return CapReport(
        day=now.date(),
        resets_at=next_midnight(now),
        days=len(counters),
        rows=rows,
        totals=totals,
        caps_set=limits.any,
        caps_from="daemon" if enforced else "settings",
    )
