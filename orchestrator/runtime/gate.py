"""The approvals gate of one run: each edit and command the CLI asks to make is let through,
or asked of the person (a request in the group, :mod:`orchestrator.memory.approvals`), or
denied with the decision.

A call runs unasked when :func:`orchestrator.core.approvals.ask_reason` finds nothing to ask;
a call the person approved before in this run (the same binding, unused) runs once. Else a
request is made (or the pending one for exactly this call found) and shown on the run's card,
and the gate waits up to ``wait_s`` for the decision, looking every half second: approved, the
call runs; denied, expired or withdrawn, the model is told so (with the note) as the tool's
result and goes on. No answer in time: the model is told the run awaits the request, the gate
remembers it (``awaiting``) and every later call is refused at once, so the run ends cleanly
and waits (``waiting``); the decision wakes it later (:mod:`orchestrator.runtime.run_job`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.adapters.claude_paths import PathGuard
from orchestrator.adapters.claude_permits import Emit, Permit
from orchestrator.core.approvals import (
    COMMANDS,
    EDIT_TOOLS,
    Ask,
    allowed_by,
    always_pattern,
    ask_reason,
    awaiting_message,
    binding,
    command_risk,
    decision_message,
    describe_ask,
    normalise,
)
from orchestrator.memory.approvals import ApprovalRecord, ApprovalStore
from orchestrator.memory.runs import RunRecord

if TYPE_CHECKING:
    from orchestrator.core.models import AgentSpec
    from orchestrator.runtime.wiring import Wiring
    from orchestrator.settings import Settings

__all__ = ["POLL_S", "RunGate", "gate_for"]

logger = logging.getLogger(__name__)

POLL_S = 0.5
_PREVIEW_CHARS = 4000


class RunGate:
    """Decides the edits and commands of ``run`` (see the module docstring)."""

    def __init__(
        self,
        *,
        store: ApprovalStore,
        run: RunRecord,
        roots: Sequence[Path],
        cwd: Path,
        commands: Sequence[str],
        decider: str,
        wait_s: float,
        expiry_s: float,
        clock: Callable[[], datetime],
    ) -> None:
        self.store = store
        self.run = run
        self.paths = PathGuard(roots, cwd)
        self.project = roots[1]  # the run's checkout (the workspace is first)
        self.cwd = cwd
        self.commands = tuple(commands)
        self.decider = decider
        self.wait_s = wait_s
        self.expiry = timedelta(seconds=expiry_s)
        self.clock = clock
        self.awaiting: str | None = None
        self.last_words = ""  # what the agent said last: why it asks

    def heard(self, text: str) -> None:
        """The agent's latest words (shown on a request as its reason)."""
        if text.strip():
            self.last_words = text.strip()[:1000]

    async def __call__(self, tool: str, data: dict[str, Any], emit: Emit) -> Permit:
        """Whether ``tool`` may run with ``data`` (see the module docstring)."""
        if self.awaiting is not None:
            return Permit(False, awaiting_message(self.awaiting))
        if tool not in (*EDIT_TOOLS, "Bash"):
            return Permit(True)
        outside = (
            self.paths.outside_command(str(data.get("command", "")))
            if tool == "Bash"
            else self.paths.outside(data)
        )
        normal = normalise(tool, data, str(self.project))
        allowed = [r.pattern for r in await asyncio.to_thread(self.store.allowed, self.run.agent)]
        if outside is not None:  # a path outside is allowed only by exactly this call
            allowed = [pattern for pattern in allowed if not pattern.endswith(" *)")]
        if allowed_by(allowed, tool, normal) is not None:
            return Permit(True)
        reason = ask_reason(tool, data, commands=self.commands, allowed=(), outside=outside)
        if reason is None:
            return Permit(True)
        command = str(data.get("command", ""))
        risky = outside is not None or (tool == "Bash" and command_risk(command) is not None)
        ask = Ask(
            kind="tool",
            tool=tool,
            input=data,
            cwd=str(self.cwd),
            reason=reason,
            preview=_preview(tool, data),
            pattern=always_pattern(tool, normal, risky=risky),
        )
        granted = await asyncio.to_thread(self.store.use, self.run.id, binding(self.run.id, ask))
        if granted is not None:
            await emit("approval", f"runs as approved in {granted.id}", tool, granted.id)
            return Permit(True)
        record, made = await asyncio.to_thread(
            self.store.request,
            run_id=self.run.id,
            group=self.run.group,
            agent=self.run.agent,
            ask=ask,
            why=self.last_words,
            decider=self.decider,
            now=self.clock(),
            expires_in=self.expiry,
        )
        if made:
            logger.info(
                "run %s asks %s: %s (%s)", self.run.id, record.id, describe_ask(ask), reason
            )
        await emit("approval", f"asks {record.id}: {describe_ask(ask)} ({reason})", tool, record.id)
        decided = await self._wait(record)
        if decided is None:
            self.awaiting = record.id
            await emit("approval", f"waits for {record.id}; the run stops until it is decided",
                       tool, record.id)  # fmt: skip
            return Permit(False, awaiting_message(record.id))
        await asyncio.to_thread(self.store.mark_told, decided.id)
        who = f" by {decided.decided_by}" if decided.decided_by else ""
        note = f": {decided.note}" if decided.note else ""
        await emit("approval", f"{decided.id} {decided.state}{who}{note}", tool, decided.id)
        if decided.state == "approved":
            await asyncio.to_thread(self.store.use, self.run.id, decided.binding)
            return Permit(True)
        return Permit(False, decision_message(decided.id, decided.state, decided.decided_by,
                                              decided.note))  # fmt: skip

    async def _wait(self, record: ApprovalRecord) -> ApprovalRecord | None:
        """The request once it is no longer pending, or None after ``wait_s``."""
        deadline = time.monotonic() + self.wait_s
        while True:
            now = await asyncio.to_thread(self.store.get, record.id)
            if now is not None and not now.pending:
                return now
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))


def _preview(tool: str, data: dict[str, Any]) -> str:
    """What an edit would write: the new text (or the replacement), cut to a few KB."""
    if tool == "Write":
        text = str(data.get("content", ""))
    elif tool == "Edit":
        text = f"- {data.get('old_string', '')}\n+ {data.get('new_string', '')}"
    else:
        return ""
    return text if len(text) <= _PREVIEW_CHARS else text[:_PREVIEW_CHARS] + "\n…"


def gate_for(
    settings: Settings, wiring: Wiring, agent: AgentSpec, run: RunRecord,
    folders: tuple[Path, Path, Path],
) -> RunGate | None:  # fmt: skip
    """The run's approvals gate (``folders``: the agent's workspace, the run's checkout, its
    CLI configuration folder), unless the agent's mode never asks (``dontAsk`` and the others:
    its tools are then allowed outright, as before approvals)."""
    workspace, project, config = folders
    code = agent.code
    if code is None or code.permission_mode != "default":
        return None
    return RunGate(
        store=wiring.approvals,
        run=run,
        roots=(workspace, project, config / "tmp"),
        cwd=workspace,
        commands=code.commands if code.commands is not None else COMMANDS[code.profile],
        decider=settings.owner,
        wait_s=settings.approval_wait_s,
        expiry_s=settings.approval_expiry_s,
        clock=lambda: datetime.now(UTC),
    )
