"""What a reply records of the Claude Code run it comes from (``meta.run``): the run, how it
ended, what it changed in the project and what it cost. A run's card (the notice posted when
it starts) records the run and why the turn became one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.memory.runs import RunRecord

__all__ = ["RunMeta", "reply_text", "run_meta"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunMeta:
    """A run as its card or its reply records it."""

    id: str
    status: str
    why: str = ""
    files: tuple[str, ...] = ()
    stat: str = ""  # ``git diff --stat`` of the run's commit
    commit: str | None = None
    merged: bool | None = None
    branch: str | None = None  # kept for review when not merged
    reason: str | None = None  # why it was not merged
    turns: int = 0
    duration_ms: int = 0
    cost_usd: float | None = None

    def as_json(self) -> dict[str, Any]:
        """The stored form."""
        return {
            "id": self.id,
            "status": self.status,
            "why": self.why,
            "files": list(self.files),
            "stat": self.stat,
            "commit": self.commit,
            "merged": self.merged,
            "branch": self.branch,
            "reason": self.reason,
            "turns": self.turns,
            "duration_ms": self.duration_ms,
            "cost_usd": self.cost_usd,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunMeta:
        """Read a stored run; what is missing or of the wrong type is left empty."""

        def text(key: str) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) else None

        files = data.get("files")
        cost = data.get("cost_usd")
        merged = data.get("merged")
        return cls(
            id=text("id") or "",
            status=text("status") or "",
            why=text("why") or "",
            files=tuple(f for f in files if isinstance(f, str)) if isinstance(files, list) else (),
            stat=text("stat") or "",
            commit=text("commit"),
            merged=merged if isinstance(merged, bool) else None,
            branch=text("branch"),
            reason=text("reason"),
            turns=data["turns"] if isinstance(data.get("turns"), int) else 0,
            duration_ms=data["duration_ms"] if isinstance(data.get("duration_ms"), int) else 0,
            cost_usd=float(cost) if isinstance(cost, (int, float)) else None,
        )


def run_meta(run: RunRecord) -> RunMeta:
    """What the reply records of its run."""
    out = run.outcome
    files = out.get("files")
    return RunMeta(
        id=run.id,
        status=run.status,
        why=run.why,
        files=tuple(f for f in files if isinstance(f, str)) if isinstance(files, list) else (),
        stat=str(out.get("stat") or ""),
        commit=out.get("commit") if isinstance(out.get("commit"), str) else None,
        merged=out.get("merged") if isinstance(out.get("merged"), bool) else None,
        branch=out.get("branch") if isinstance(out.get("branch"), str) else None,
        reason=out.get("reason") if isinstance(out.get("reason"), str) else None,
        turns=int(out.get("turns") or 0),
        duration_ms=int(out.get("duration_ms") or 0),
        cost_usd=float(out["cost_usd"]) if isinstance(out.get("cost_usd"), (int, float)) else None,
    )


def reply_text(visible: str, meta: RunMeta, problem: str | None) -> str:
    """The reply people read: what the agent said, then what the run changed and cost."""
    lines = [visible.strip()] if visible.strip() else []
    if meta.status != "done":
        ended = meta.status.replace("_", " ")
        lines.append(f"The run ended {ended}: {problem or 'no reason given'}")
    if meta.commit:
        where = "merged into the project" if meta.merged else f"kept on branch {meta.branch}"
        why = f" ({meta.reason})" if meta.reason else ""
        lines.append(f"Commit {meta.commit[:12]}, {where}{why}")
    if meta.stat:
        lines.append("```\n" + meta.stat.rstrip() + "\n```")
    elif meta.status == "done":
        lines.append("No file changed.")
    cost = f", ${meta.cost_usd:.4f}" if meta.cost_usd is not None else ""
    lines.append(f"({meta.turns} turns, {meta.duration_ms / 1000:.1f} s{cost}; run {meta.id})")
    return "\n\n".join(lines)
