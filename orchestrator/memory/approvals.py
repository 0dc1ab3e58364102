"""Approvals as they are kept: the ``approvals`` table (one row per request, from pending to
its decision, with who asked, who decided, when and the note) and ``allow_rules`` (the
patterns a person allowed an agent "always").

A request's id is minted here (``ap-`` and 10 random hex digits). A pending request with the
same binding in the same run is the same request: asking again returns it, never a
duplicate. Every change of state is one ``UPDATE … WHERE state = 'pending'``, so the first
decision wins and a second finds it decided. An approval is used at most once
(:meth:`ApprovalStore.use`).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import JSON, Column, Text, delete, insert, select, update
from sqlalchemy.engine import Engine
from sqlmodel import Field, SQLModel

from orchestrator.core.approvals import DECIDED, Ask, binding
from orchestrator.core.models import assume_utc
from orchestrator.memory.transactions import writing

__all__ = ["AllowRule", "AllowRuleRow", "ApprovalRecord", "ApprovalRow", "ApprovalStore", "Decided"]


class ApprovalRow(SQLModel, table=True):
    """One row per request."""

    __tablename__ = "approvals"

    id: str = Field(primary_key=True, max_length=32)
    run_id: str = Field(index=True, max_length=200)
    group_id: str = Field(index=True, max_length=64)
    agent: str = Field(index=True, max_length=64)
    kind: str = Field(max_length=8)
    tool: str = Field(max_length=64)
    input: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    cwd: str = Field(sa_column=Column(Text, nullable=False))
    reason: str = Field(default="", sa_column=Column(Text, nullable=False))
    why: str = Field(default="", sa_column=Column(Text, nullable=False))
    preview: str = Field(default="", sa_column=Column(Text, nullable=False))
    pattern: str | None = Field(default=None, sa_column=Column(Text))
    binding: str = Field(index=True, max_length=64)
    decider: str = Field(max_length=128)
    state: str = Field(default="pending", index=True, max_length=16)
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None = None
    decided_by: str | None = Field(default=None, max_length=128)
    note: str | None = Field(default=None, sa_column=Column(Text))
    always: bool = False
    used: bool = False
    told: bool = False  # the run has been told the decision


class AllowRuleRow(SQLModel, table=True):
    """A pattern an agent may use without asking."""

    __tablename__ = "allow_rules"

    agent: str = Field(primary_key=True, max_length=64)
    pattern: str = Field(primary_key=True, max_length=2000)
    added_by: str = Field(max_length=128)
    added_at: datetime
    approval_id: str | None = Field(default=None, max_length=32)


_APPROVALS = ApprovalRow.__table__  # type: ignore[attr-defined]
_RULES = AllowRuleRow.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRecord:
    """A request as stored."""

    id: str
    run_id: str
    group: str
    agent: str
    kind: str
    tool: str
    input: dict[str, Any]
    cwd: str
    reason: str
    why: str
    preview: str
    pattern: str | None
    binding: str
    decider: str
    state: str
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None = None
    decided_by: str | None = None
    note: str | None = None
    always: bool = False
    used: bool = False
    told: bool = False

    @property
    def pending(self) -> bool:
        """Whether it still waits for a decision."""
        return self.state == "pending"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (``arena approvals --json``, the console)."""
        return {
            "id": self.id,
            "run": self.run_id,
            "group": self.group,
            "agent": self.agent,
            "kind": self.kind,
            "tool": self.tool,
            "input": self.input,
            "cwd": self.cwd,
            "reason": self.reason,
            "why": self.why,
            "preview": self.preview,
            "pattern": self.pattern,
            "decider": self.decider,
            "state": self.state,
            "created_at": self.created_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "decided_at": self.decided_at.isoformat() if self.decided_at else None,
            "decided_by": self.decided_by,
            "note": self.note,
            "always": self.always,
            "used": self.used,
        }


@dataclass(frozen=True, slots=True)
class Decided:
    """A decision's outcome: the request as it is now, and whether this call decided it."""

    record: ApprovalRecord
    now: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class AllowRule:
    """An allow-list entry."""

    agent: str
    pattern: str
    added_by: str
    added_at: datetime
    approval_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "agent": self.agent,
            "pattern": self.pattern,
            "added_by": self.added_by,
            "added_at": self.added_at.isoformat(),
            "approval": self.approval_id,
        }


class ApprovalStore:
    """The requests and the allow-lists."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def request(
        self, *, run_id: str, group: str, agent: str, ask: Ask, why: str, decider: str,
        now: datetime, expires_in: timedelta,
    ) -> tuple[ApprovalRecord, bool]:  # fmt: skip
        """The pending request for exactly ``ask`` in this run, made unless one waits; whether
        it was made now."""
        bound = binding(run_id, ask)
        with writing(self.engine) as conn:
            found = conn.execute(
                select(_APPROVALS).where(
                    _APPROVALS.c.run_id == run_id,
                    _APPROVALS.c.binding == bound,
                    _APPROVALS.c.state == "pending",
                )
            ).first()
            if found is not None:
                return _record(found), False
            approval_id = "ap-" + secrets.token_hex(5)
            conn.execute(
                insert(_APPROVALS).values(
                    id=approval_id, run_id=run_id, group_id=group, agent=agent, kind=ask.kind,
                    tool=ask.tool, input=dict(ask.input), cwd=ask.cwd, reason=ask.reason,
                    why=why, preview=ask.preview, pattern=ask.pattern, binding=bound,
                    decider=decider, state="pending", created_at=now.astimezone(UTC),
                    expires_at=(now + expires_in).astimezone(UTC), always=False, used=False,
                    told=False,
                )
            )  # fmt: skip
            made = conn.execute(select(_APPROVALS).where(_APPROVALS.c.id == approval_id)).one()
        return _record(made), True

    def get(self, approval_id: str) -> ApprovalRecord | None:
        """The request, or None."""
        with self.engine.connect() as conn:
            row = conn.execute(select(_APPROVALS).where(_APPROVALS.c.id == approval_id)).first()
        return _record(row) if row is not None else None

    def listed(
        self, *, group: str | None = None, run_id: str | None = None, state: str | None = None,
        limit: int = 100,
    ) -> list[ApprovalRecord]:  # fmt: skip
        """Requests, newest first (of a group, a run, in a state)."""
        query = select(_APPROVALS).order_by(_APPROVALS.c.created_at.desc()).limit(limit)
        if group is not None:
            query = query.where(_APPROVALS.c.group_id == group)
        if run_id is not None:
            query = query.where(_APPROVALS.c.run_id == run_id)
        if state is not None:
            query = query.where(_APPROVALS.c.state == state)
        with self.engine.connect() as conn:
            return [_record(row) for row in conn.execute(query)]

    def _change(self, approval_id: str, values: dict[str, Any]) -> Decided | None:
        with writing(self.engine) as conn:
            changed = conn.execute(
                update(_APPROVALS)
                .where(_APPROVALS.c.id == approval_id, _APPROVALS.c.state == "pending")
                .values(**values)
            ).rowcount
            row = conn.execute(select(_APPROVALS).where(_APPROVALS.c.id == approval_id)).first()
        return Decided(_record(row), bool(changed)) if row is not None else None

    def decide(
        self, approval_id: str, *, approve: bool, by: str, note: str | None, always: bool,
        now: datetime,
    ) -> Decided | None:  # fmt: skip
        """Approve or deny a pending request (the first decision wins); None: no such request.
        ``always`` with an approval stores its pattern in the agent's allow-list."""
        found = self.get(approval_id)
        if found is None:
            return None
        always = always and approve and found.pattern is not None
        decided = self._change(
            approval_id,
            {
                "state": "approved" if approve else "denied",
                "decided_by": by,
                "decided_at": now.astimezone(UTC),
                "note": note or None,
                "always": always,
            },
        )
        if decided is not None and decided.now and always and found.pattern is not None:
            self.allow(found.agent, found.pattern, by=by, now=now, approval_id=approval_id)
        return decided

    def close(self, approval_id: str, state: str, *, by: str, now: datetime) -> Decided | None:
        """End a pending request without a decision: ``expired``, ``cancelled`` (by its own
        agent) or ``orphaned`` (its run is gone)."""
        if state not in DECIDED or state in ("approved", "denied"):
            raise ValueError(f"not a closing state: {state!r}")
        values = {"state": state, "decided_by": by, "decided_at": now.astimezone(UTC)}
        return self._change(approval_id, values)

    def overdue(self, now: datetime) -> list[ApprovalRecord]:
        """Pending requests past their expiry."""
        query = select(_APPROVALS).where(
            _APPROVALS.c.state == "pending", _APPROVALS.c.expires_at < now.astimezone(UTC)
        )
        with self.engine.connect() as conn:
            return [_record(row) for row in conn.execute(query)]

    def pending(self) -> list[ApprovalRecord]:
        """Every pending request, oldest first."""
        query = (
            select(_APPROVALS)
            .where(_APPROVALS.c.state == "pending")
            .order_by(_APPROVALS.c.created_at)
        )
        with self.engine.connect() as conn:
            return [_record(row) for row in conn.execute(query)]

    def use(self, run_id: str, bound: str) -> ApprovalRecord | None:
        """Take the unused approval of exactly this request in this run (at most once)."""
        with writing(self.engine) as conn:
            row = conn.execute(
                select(_APPROVALS).where(
                    _APPROVALS.c.run_id == run_id,
                    _APPROVALS.c.binding == bound,
                    _APPROVALS.c.state == "approved",
                    _APPROVALS.c.used.is_(False),
                )
            ).first()
            if row is None:
                return None
            conn.execute(update(_APPROVALS).where(_APPROVALS.c.id == row.id).values(used=True))
        return _record(row)

    def untold(self, run_id: str) -> list[ApprovalRecord]:
        """The run's requests that ended (decided, expired) and the run was not told of yet,
        oldest first."""
        query = (
            select(_APPROVALS)
            .where(
                _APPROVALS.c.run_id == run_id,
                _APPROVALS.c.state.in_(("approved", "denied", "expired")),
                _APPROVALS.c.told.is_(False),
            )
            .order_by(_APPROVALS.c.created_at)
        )
        with self.engine.connect() as conn:
            return [_record(row) for row in conn.execute(query)]

    def mark_told(self, approval_id: str) -> None:
        """The run has been told this request's end."""
        with writing(self.engine) as conn:
            conn.execute(update(_APPROVALS).where(_APPROVALS.c.id == approval_id).values(told=True))

    def allow(
        self, agent: str, pattern: str, *, by: str, now: datetime, approval_id: str | None = None
    ) -> bool:
        """Add ``pattern`` to ``agent``'s allow-list; False when it was there."""
        with writing(self.engine) as conn:
            found = conn.execute(
                select(_RULES.c.pattern).where(_RULES.c.agent == agent, _RULES.c.pattern == pattern)
            ).first()
            if found is not None:
                return False
            conn.execute(
                insert(_RULES).values(
                    agent=agent, pattern=pattern, added_by=by, added_at=now.astimezone(UTC),
                    approval_id=approval_id,
                )
            )  # fmt: skip
        return True

    def disallow(self, agent: str, pattern: str) -> bool:
        """Remove ``pattern`` from ``agent``'s allow-list; False when it was not there."""
        with writing(self.engine) as conn:
            removed = conn.execute(
                delete(_RULES).where(_RULES.c.agent == agent, _RULES.c.pattern == pattern)
            ).rowcount
        return bool(removed)

    def allowed(self, agent: str | None = None) -> list[AllowRule]:
        """The allow-list (of ``agent``), oldest first."""
        query = select(_RULES).order_by(_RULES.c.agent, _RULES.c.added_at)
        if agent is not None:
            query = query.where(_RULES.c.agent == agent)
        with self.engine.connect() as conn:
            return [
                AllowRule(
                    agent=row.agent,
                    pattern=row.pattern,
                    added_by=row.added_by,
                    added_at=assume_utc(row.added_at),
                    approval_id=row.approval_id,
                )
                for row in conn.execute(query)
            ]


def _record(row: Any) -> ApprovalRecord:
    return ApprovalRecord(
        id=row.id,
        run_id=row.run_id,
        group=row.group_id,
        agent=row.agent,
        kind=row.kind,
        tool=row.tool,
        input=dict(row.input or {}),
        cwd=row.cwd,
        reason=row.reason or "",
        why=row.why or "",
        preview=row.preview or "",
        pattern=row.pattern,
        binding=row.binding,
        decider=row.decider,
        state=row.state,
        created_at=assume_utc(row.created_at),
        expires_at=assume_utc(row.expires_at),
        decided_at=assume_utc(row.decided_at) if row.decided_at else None,
        decided_by=row.decided_by,
        note=row.note,
        always=bool(row.always),
        used=bool(row.used),
        told=bool(row.told),
    )
