"""What a run's request for approval asks, as people read it: one line (:func:`asked`), and
requests as JSON (:func:`approvals_json`) for ``arena approvals --json``, ``arena run show
--json`` and ``GET /api/runs/{id}``, which give them alike."""

from __future__ import annotations

from typing import Any

from orchestrator.core.approvals import ApprovalKind, Ask, describe_ask
from orchestrator.memory.approvals import ApprovalRecord

__all__ = ["approvals_json", "asked"]


def asked(record: ApprovalRecord) -> str:
    """What ``record`` asks, in one line: ``Bash: rm -rf build``, ``Write /etc/motd``."""
    kind: ApprovalKind = "cap" if record.kind == "cap" else "tool"
    ask = Ask(kind=kind, tool=record.tool, input=record.input, cwd=record.cwd, reason=record.reason)
    return describe_ask(ask)


def approvals_json(records: list[ApprovalRecord]) -> list[dict[str, Any]]:
    """Requests as ``--json`` gives them: as stored, with what each asks in one line."""
    return [{**r.as_dict(), "what": asked(r)} for r in records]
