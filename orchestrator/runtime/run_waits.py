"""A run that stops to wait for the person's decision, and goes on after it.

When the gate's wait runs out (:mod:`orchestrator.runtime.gate`), the CLI ends its turn and
the run becomes ``waiting``: its checkout and its CLI session stay, and the row keeps what a
resumption needs (:class:`Paused`: the session, the checkout, what was spent so far). The
decision (or the request's expiry) enqueues a job for the run again; that job claims it back
(``waiting`` → ``running``), tells the model the decisions it has not heard yet as the prompt
of the same CLI session, and the run goes on where it stopped. What each part spent is added
up: the run's reply shows the whole.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.adapters.checkouts import Checkout
from orchestrator.adapters.claude_code import RunOutcome
from orchestrator.core.approvals import Ask, decision_message
from orchestrator.core.models import Usage
from orchestrator.memory.approvals import ApprovalStore

__all__ = ["Paused", "cap_ask", "cap_verdict", "decisions_prompt", "merged"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Paused:
    """What a waiting run keeps for the job that resumes it."""

    session_id: str
    checkout: str
    base: str
    turns: int = 0
    duration_ms: int = 0
    cost_usd: float | None = None
    usage: dict[str, int] = dataclasses.field(default_factory=dict)
    cap: str | None = None  # the request to go past a daily cap it waits for (not started)

    @classmethod
    def of(cls, outcome: RunOutcome, checkout: Checkout, before: Paused | None) -> Paused:
        """The run paused after ``outcome`` (added to what it spent before, if it was woken)."""
        total = merged(outcome, before)
        usage = total.usage
        return cls(
            session_id=outcome.session_id or "",
            checkout=str(checkout.path),
            base=checkout.base,
            turns=total.turns,
            duration_ms=total.duration_ms,
            cost_usd=total.cost_usd,
            usage={
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cache_read_tokens": usage.cache_read_tokens,
                "cache_creation_tokens": usage.cache_creation_tokens,
            },
        )

    @classmethod
    def read(cls, saved: dict[str, Any]) -> Paused | None:
        """What a waiting run's row keeps; None when it is not that (an older row)."""
        paused = saved.get("paused")
        if not isinstance(paused, dict):
            return None
        try:
            return cls(**paused)
        except TypeError:
            return None

    def as_json(self) -> dict[str, Any]:
        """The row's form."""
        return {"paused": dataclasses.asdict(self)}

    def checkout_of(self, run_name: str) -> Checkout | None:
        """The run's checkout, if it is still there."""
        path = Path(self.checkout)
        if not self.checkout or not path.is_absolute() or not (path / ".git").exists():
            return None
        return Checkout(run_id=run_name, path=path, base=self.base)


def merged(outcome: RunOutcome, before: Paused | None) -> RunOutcome:
    """``outcome`` with what the run spent before it paused added in."""
    if before is None:
        return outcome
    spent = before.usage
    usage = outcome.usage
    cost = (
        None
        if outcome.cost_usd is None and before.cost_usd is None
        else (outcome.cost_usd or 0.0) + (before.cost_usd or 0.0)
    )
    return dataclasses.replace(
        outcome,
        turns=outcome.turns + before.turns,
        duration_ms=outcome.duration_ms + before.duration_ms,
        cost_usd=cost,
        usage=Usage(
            input_tokens=usage.input_tokens + spent.get("input_tokens", 0),
            output_tokens=usage.output_tokens + spent.get("output_tokens", 0),
            cache_read_tokens=usage.cache_read_tokens + spent.get("cache_read_tokens", 0),
            cache_creation_tokens=usage.cache_creation_tokens
            + spent.get("cache_creation_tokens", 0),
        ),
    )


def decisions_prompt(store: ApprovalStore, run_id: str) -> str:
    """The decisions the run has not heard yet, as the prompt that wakes it (each then marked
    heard); empty when there is none."""
    lines = []
    for record in store.untold(run_id):
        lines.append(decision_message(record.id, record.state, record.decided_by, record.note))
        store.mark_told(record.id)
    return "\n".join(lines)


def cap_ask(tokens: int, over: str, where: str) -> Ask:
    """The request to start a run past a daily cap: "continue today with +N tokens?"."""
    return Ask(
        kind="cap",
        tool="caps",
        input={"tokens": tokens, "cap": over},
        cwd=where,
        reason=f"continue today with +{tokens:,} tokens? ({over})",
    )


def cap_verdict(store: ApprovalStore, approval_id: str) -> str | None:
    """Why a run that waited to go past a cap may not start (None: it was approved); the
    decision is marked heard."""
    record = store.get(approval_id)
    if record is None:
        return f"its request {approval_id} is gone"
    store.mark_told(record.id)
    if record.state == "approved":
        return None
    who = f" by {record.decided_by}" if record.decided_by else ""
    note = f": {record.note}" if record.note else ""
    return f"going past the daily cap was {record.state}{who}{note}"
