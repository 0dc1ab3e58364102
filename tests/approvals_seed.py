"""Requests for approval written straight through ``ApprovalStore``, as a run writes them
when it asks, each in a run of its own (written through ``RunStore``, running)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy.engine import Engine

from orchestrator.core.approvals import Ask
from orchestrator.memory.approvals import ApprovalRecord, ApprovalStore
from orchestrator.memory.runs import RunStore

__all__ = ["ask"]


def ask(
    engine: Engine,
    group: str,
    command: str = "rm -rf build",
    *,
    agent: str = "ping",
    run_id: str | None = None,
    pattern: str | None = None,
    reason: str = "deletes files",
    why: str = "The build folder is stale; I will remove it.",
) -> ApprovalRecord:
    """A pending request of ``agent``'s run (``run_id``, made running unless it exists) to run
    ``command`` in Bash."""
    now = datetime.now(UTC)
    if run_id is None:
        run_id = f"{group}-{uuid.uuid4().hex[:8]}:1:{agent}"
    runs = RunStore(engine)
    _, made = runs.create(
        run_id=run_id, group=group, agent=agent, trigger_id=run_id.split(":")[0],
        root_id=run_id.split(":")[0], hop=1, why="code rule implement", now=now,
    )  # fmt: skip
    if made:
        runs.claim(run_id, now)
    asked = Ask(
        kind="tool", tool="Bash", input={"command": command, "description": "clean"},
        cwd="/work/project", reason=reason, pattern=pattern,
    )  # fmt: skip
    record, _ = ApprovalStore(engine).request(
        run_id=run_id, group=group, agent=agent, ask=asked, why=why, decider="user",
        now=now, expires_in=timedelta(minutes=30),
    )  # fmt: skip
    return record
