"""Claude Code runs as they are kept: the ``runs`` table (one row per run, from queued to its
end) and ``run_steps`` (what it did, one line per step).

A run's id is the id its reply takes (``{message id}:{hop}:{agent}``), so handling a message
again finds the run it started instead of starting another. A run is claimed once
(:meth:`RunStore.claim` moves it from ``queued`` to ``running`` in one statement): a job that
runs again after its worker died finds it ``running`` and reports it ``lost``, never runs it
twice. The end states: ``done``, ``failed``, ``cancelled``, ``stalled``, ``timed_out``,
``crashed``, ``lost``. Between: ``queued``, ``running``, and ``waiting`` (its process ended
cleanly while a request waits for the person's decision; the decision resumes it, claimed
again the same way).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Column, Text, insert, select, update
from sqlalchemy.engine import Engine
from sqlmodel import Field, SQLModel

from orchestrator.core.coding import Step
from orchestrator.core.models import assume_utc
from orchestrator.memory.transactions import writing

__all__ = ["ENDED", "RunRecord", "RunRow", "RunStepRow", "RunStore", "StoredStep"]

ENDED = ("done", "failed", "cancelled", "stalled", "timed_out", "crashed", "lost")


class RunRow(SQLModel, table=True):
    """One row per run."""

    __tablename__ = "runs"

    id: str = Field(primary_key=True, max_length=200)
    group_id: str = Field(index=True, max_length=64)
    agent: str = Field(index=True, max_length=64)
    trigger_id: str = Field(max_length=200)
    root_id: str = Field(max_length=200)
    hop: int = 1
    status: str = Field(default="queued", max_length=16, index=True)
    why: str = Field(default="", sa_column=Column(Text, nullable=False))
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    cancel_requested: bool = False
    # Who runs it: "host:pid:start" of the process that claimed it (a dead one means lost).
    owner: str | None = Field(default=None, max_length=300)
    text: str = Field(default="", sa_column=Column(Text, nullable=False))
    problem: str | None = Field(default=None, sa_column=Column(Text))
    outcome: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))


class RunStepRow(SQLModel, table=True):
    """One line per step of a run."""

    __tablename__ = "run_steps"

    run_id: str = Field(primary_key=True, max_length=200)
    n: int = Field(primary_key=True)
    at: datetime
    kind: str = Field(max_length=16)
    line: str = Field(sa_column=Column(Text, nullable=False))
    tool: str | None = Field(default=None, max_length=64)
    is_error: bool = False
    approval: str | None = Field(default=None, max_length=32)


_RUNS = RunRow.__table__  # type: ignore[attr-defined]
_STEPS = RunStepRow.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """A run as stored."""

    id: str
    group: str
    agent: str
    trigger_id: str
    root_id: str
    hop: int
    status: str
    why: str
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    cancel_requested: bool = False
    text: str = ""
    problem: str | None = None
    outcome: dict[str, Any] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        """Whether the run is over, whatever way it ended."""
        return self.status in ENDED

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (``arena runs --json``, the console)."""
        return {
            "id": self.id,
            "group": self.group,
            "agent": self.agent,
            "trigger_id": self.trigger_id,
            "root_id": self.root_id,
            "hop": self.hop,
            "status": self.status,
            "why": self.why,
            "created_at": self.created_at.isoformat(),
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "cancel_requested": self.cancel_requested,
            "text": self.text,
            "problem": self.problem,
            "outcome": self.outcome,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredStep:
    """One step of a run as stored."""

    n: int
    at: datetime
    kind: str
    line: str
    tool: str | None = None
    is_error: bool = False
    approval: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "n": self.n,
            "at": self.at.isoformat(),
            "kind": self.kind,
            "line": self.line,
            "tool": self.tool,
            "is_error": self.is_error,
            "approval": self.approval,
        }

    def as_step(self, run_id: str) -> Step:
        """The step as it is published (for run ``run_id``)."""
        return Step(
            run=run_id,
            n=self.n,
            at=self.at.isoformat(),
            kind=self.kind,
            line=self.line,
            tool=self.tool,
            is_error=self.is_error,
            approval=self.approval,
        )


class RunStore:
    """The runs and their steps."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(
        self, *, run_id: str, group: str, agent: str, trigger_id: str, root_id: str, hop: int,
        why: str, now: datetime,
    ) -> tuple[RunRecord, bool]:  # fmt: skip
        """The run with this id, made ``queued`` unless it exists; whether it was made now."""
        with writing(self.engine) as conn:
            found = conn.execute(select(_RUNS).where(_RUNS.c.id == run_id)).first()
            if found is not None:
                return _record(found), False
            conn.execute(
                insert(_RUNS).values(
                    id=run_id, group_id=group, agent=agent, trigger_id=trigger_id,
                    root_id=root_id, hop=hop, status="queued", why=why,
                    created_at=now.astimezone(UTC), cancel_requested=False, text="",
                )
            )  # fmt: skip
            made = conn.execute(select(_RUNS).where(_RUNS.c.id == run_id)).one()
        return _record(made), True

    def get(self, run_id: str) -> RunRecord | None:
        """The run, or None."""
        with self.engine.connect() as conn:
            row = conn.execute(select(_RUNS).where(_RUNS.c.id == run_id)).first()
        return _record(row) if row is not None else None

    def recent(self, group: str | None = None, limit: int = 50) -> list[RunRecord]:
        """The newest runs (of ``group``), newest first."""
        query = select(_RUNS).order_by(_RUNS.c.created_at.desc(), _RUNS.c.id.desc()).limit(limit)
        if group is not None:
            query = query.where(_RUNS.c.group_id == group)
        with self.engine.connect() as conn:
            return [_record(row) for row in conn.execute(query)]

    def claim(self, run_id: str, now: datetime, owner: str | None = None) -> bool:
        """Move a queued run to ``running`` for ``owner``; False when it was not queued (it
        ran, or runs)."""
        with writing(self.engine) as conn:
            changed = conn.execute(
                update(_RUNS)
                .where(_RUNS.c.id == run_id, _RUNS.c.status == "queued")
                .values(status="running", started_at=now.astimezone(UTC), owner=owner)
            ).rowcount
        return bool(changed)

    def wait(self, run_id: str, outcome: dict[str, Any]) -> bool:
        """A running run waits for a decision (its process ended; ``outcome`` holds what a
        resumption needs: the CLI's session, the usage so far); False when it was not running."""
        with writing(self.engine) as conn:
            changed = conn.execute(
                update(_RUNS)
                .where(_RUNS.c.id == run_id, _RUNS.c.status == "running")
                .values(status="waiting", owner=None, outcome=outcome)
            ).rowcount
        return bool(changed)

    def resume(self, run_id: str, owner: str | None = None) -> bool:
        """Move a waiting run back to ``running`` for ``owner``; False when it was not
        waiting (another job resumed it, or it ended)."""
        with writing(self.engine) as conn:
            changed = conn.execute(
                update(_RUNS)
                .where(_RUNS.c.id == run_id, _RUNS.c.status == "waiting")
                .values(status="running", owner=owner)
            ).rowcount
        return bool(changed)

    def waiting(self) -> list[RunRecord]:
        """The runs waiting for a decision."""
        query = select(_RUNS).where(_RUNS.c.status == "waiting")
        with self.engine.connect() as conn:
            return [_record(row) for row in conn.execute(query)]

    def running(self) -> list[tuple[RunRecord, str | None]]:
        """The runs running now, each with its owner."""
        query = select(_RUNS).where(_RUNS.c.status == "running")
        with self.engine.connect() as conn:
            return [(_record(row), row.owner) for row in conn.execute(query)]

    def request_cancel(self, run_id: str) -> RunRecord | None:
        """Ask a run to stop (a queued one then never starts); the run as it is now."""
        with writing(self.engine) as conn:
            conn.execute(
                update(_RUNS)
                .where(_RUNS.c.id == run_id, _RUNS.c.status.in_(("queued", "running", "waiting")))
                .values(cancel_requested=True)
            )
        return self.get(run_id)

    def add_step(self, run_id: str, step: StoredStep) -> None:
        """Keep one step (again is a no-op: a step is keyed by its number)."""
        with writing(self.engine) as conn:
            exists = conn.execute(
                select(_STEPS.c.n).where(_STEPS.c.run_id == run_id, _STEPS.c.n == step.n)
            ).first()
            if exists is None:
                conn.execute(
                    insert(_STEPS).values(
                        run_id=run_id, n=step.n, at=step.at.astimezone(UTC), kind=step.kind,
                        line=step.line, tool=step.tool, is_error=step.is_error,
                        approval=step.approval,
                    )
                )  # fmt: skip

    def steps(self, run_id: str) -> list[StoredStep]:
        """The run's steps, in order."""
        query = select(_STEPS).where(_STEPS.c.run_id == run_id).order_by(_STEPS.c.n)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [_step(row) for row in rows]

    def finish(
        self, run_id: str, *, status: str, text: str, problem: str | None,
        outcome: dict[str, Any], now: datetime,
    ) -> RunRecord | None:  # fmt: skip
        """Record how a run ended (once: a run already ended keeps its first end)."""
        if status not in ENDED:
            raise ValueError(f"not an end state: {status!r}")
        with writing(self.engine) as conn:
            conn.execute(
                update(_RUNS)
                .where(_RUNS.c.id == run_id, _RUNS.c.status.not_in(ENDED))
                .values(
                    status=status, text=text, problem=problem, outcome=outcome,
                    finished_at=now.astimezone(UTC),
                )
            )  # fmt: skip
        return self.get(run_id)


def _step(row: Any) -> StoredStep:
    return StoredStep(
        n=row.n,
        at=assume_utc(row.at),
        kind=row.kind,
        line=row.line,
        tool=row.tool,
        is_error=bool(row.is_error),
        approval=row.approval,
    )


def _record(row: Any) -> RunRecord:
    return RunRecord(
        id=row.id,
        group=row.group_id,
        agent=row.agent,
        trigger_id=row.trigger_id,
        root_id=row.root_id,
        hop=row.hop,
        status=row.status,
        why=row.why,
        created_at=assume_utc(row.created_at),
        started_at=assume_utc(row.started_at) if row.started_at else None,
        finished_at=assume_utc(row.finished_at) if row.finished_at else None,
        cancel_requested=bool(row.cancel_requested),
        text=row.text or "",
        problem=row.problem,
        outcome=row.outcome or {},
    )
