"""What a run leaves when it ends: its changes committed (and brought into the project), the
line the agent's daily log keeps, and what the run's row keeps of how it ended."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from orchestrator.adapters.checkouts import Checkout, Finished
from orchestrator.adapters.claude_code import RunOutcome
from orchestrator.adapters.project import Project
from orchestrator.caps.guard import CapGuard
from orchestrator.caps.limits import MICRO, Unit
from orchestrator.core.models import AgentSpec
from orchestrator.errors import OrchestratorError
from orchestrator.memory.runs import RunRecord

__all__ = ["commit", "dollars_left", "log_line", "outcome_json"]

logger = logging.getLogger(__name__)


def outcome_json(outcome: RunOutcome, project: dict[str, Any]) -> dict[str, Any]:
    """What a run's row keeps of how it ended."""
    usage = outcome.usage
    return {
        "turns": outcome.turns,
        "duration_ms": outcome.duration_ms,
        "cost_usd": outcome.cost_usd,
        "usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cache_read_tokens,
            "cache_creation_tokens": usage.cache_creation_tokens,
        },
        "denials": list(outcome.denials),
        "session_id": outcome.session_id,
        **project,
    }


def commit(
    project: Project, checkout: Checkout, agent: AgentSpec, run: RunRecord, outcome: RunOutcome
) -> dict[str, Any]:
    """What the run changed, committed by the agent and brought into the project (a run that
    did not end well is kept on its branch for review, never merged)."""
    subject = _first_line(outcome.text) or f"{agent.name}: run {run.id}"
    try:
        finished = project.finish(
            checkout,
            agent.name,
            f"{agent.id}@agents.arena",
            subject,
            group=run.group,
            message_id=run.trigger_id,
            merge=outcome.status == "done",
        )
    except OrchestratorError as exc:
        logger.warning("run %s: its changes could not be committed: %s", run.id, exc)
        with contextlib.suppress(OrchestratorError):
            project.cancel(checkout)
        return {"reason": str(exc)}
    files = [change.path for change in finished.stat.files]
    return {
        "files": files,
        "stat": _stat_text(finished),
        "commit": finished.commit,
        "merged_as": finished.merged_as,
        "merged": finished.merged if finished.changed else None,
        "branch": None if finished.merged else finished.branch,
        "reason": finished.reason or None,
    }


def _stat_text(finished: Finished) -> str:
    files = finished.stat.files
    if not files:
        return ""
    width = max(len(f.path) for f in files)
    lines = [f" {f.path.ljust(width)} | +{f.insertions} -{f.deletions}" for f in files]
    stat = finished.stat
    lines.append(
        f" {len(files)} file{'s' if len(files) != 1 else ''} changed, "
        f"{stat.insertions} insertions(+), {stat.deletions} deletions(-)"
    )
    return "\n".join(lines)


def log_line(name: str, outcome: RunOutcome, project: dict[str, Any]) -> str:
    """The line the agent's daily log keeps of a run."""
    files = project.get("files") or []
    did = _first_line(outcome.text).rstrip(". ") or "no summary"
    changed = f"; changed {', '.join(files[:8])}" if files else "; changed no file"
    kept = "" if project.get("merged") in (True, None) else f" (kept on {project.get('branch')})"
    return f"[run {outcome.status}] {did}{changed}{kept}"


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")[:200]


async def dollars_left(guard: CapGuard, agent: str, group: str) -> float | None:
    """What the tightest daily dollar cap on a run by ``agent`` in ``group`` leaves today
    (what was reserved for the run counted as used): the CLI's own budget for the run. None
    when no dollar cap applies."""
    caps = [cap for cap in guard.limits.for_call(agent, group) if cap.unit is Unit.USD]
    if not caps:
        return None
    ((_, used),) = await guard.ledger.read_days(guard.clock(), 1)
    left = min(cap.limit - used.get(cap.key, 0) for cap in caps)
    return max(left, 0) / MICRO
