"""Stopping a Claude Code run by hand (``arena run cancel``, ``POST /api/runs/{id}/cancel``):
what asking means for a run in each state, said the same way by both.

Asking only marks the run (:meth:`~orchestrator.memory.runs.RunStore.request_cancel`); the
run's job does the stopping. A queued run's job, when a worker takes it, ends it ``cancelled``
without starting it; a running run's job polls the mark every second and ends the CLI's
process group. A run that already ended has nothing to stop.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.memory.runs import RunRecord, RunStore

__all__ = ["Cancelling", "cancel_run"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancelling:
    """What asking a run to stop did.

    ``run`` is the run as it is after the ask; ``asked`` is False when it had already ended
    (nothing was changed); ``detail`` says it in one line.
    """

    run: RunRecord
    asked: bool
    detail: str


def cancel_run(runs: RunStore, run_id: str) -> Cancelling | None:
    """Ask run ``run_id`` to stop; what that did, or None when there is no such run."""
    found = runs.get(run_id)
    if found is None:
        return None
    if not found.ended:
        # It may end, or be claimed, between the read and the ask: say what it is now.
        found = runs.request_cancel(run_id) or found
    return Cancelling(run=found, asked=not found.ended, detail=_said(found))


def _said(run: RunRecord) -> str:
    if run.ended:
        return f"run {run.id} already ended ({run.status}): nothing to cancel"
    if run.status == "queued":
        return f"run {run.id} was queued: it will not start"
    return f"run {run.id} is running: it stops within seconds"
